// tests/model/bf16_autocast.h: a scope with CUDA bf16 autocast on, as the model trains (model_tests).
#pragma once
#include <ATen/autocast_mode.h>

namespace ablate::testing {

// While alive, CUDA autocast to bf16 is on; restores the previous state.
class Bf16Autocast {
 public:
  Bf16Autocast()
      : was_enabled_(at::autocast::is_autocast_enabled(at::kCUDA)),
        was_dtype_(at::autocast::get_autocast_dtype(at::kCUDA)) {
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
  }
  ~Bf16Autocast() {
    at::autocast::set_autocast_enabled(at::kCUDA, was_enabled_);
    at::autocast::set_autocast_dtype(at::kCUDA, was_dtype_);
    at::autocast::clear_cache();
  }
  Bf16Autocast(const Bf16Autocast&) = delete;
  Bf16Autocast& operator=(const Bf16Autocast&) = delete;

 private:
  bool was_enabled_;
  at::ScalarType was_dtype_;
};

}  // namespace ablate::testing
