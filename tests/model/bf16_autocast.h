// tests/model/bf16_autocast.h: a scope with bf16 autocast on, as the model trains (model_tests, kernels_tests).
#pragma once
#include <ATen/autocast_mode.h>

namespace ablate::testing {

// While alive, autocast to bf16 is on for `device` (CUDA by default); restores the previous state.
class Bf16Autocast {
 public:
  explicit Bf16Autocast(at::DeviceType device = at::kCUDA)
      : device_(device),
        was_enabled_(at::autocast::is_autocast_enabled(device)),
        was_dtype_(at::autocast::get_autocast_dtype(device)) {
    at::autocast::set_autocast_dtype(device_, at::kBFloat16);
    at::autocast::set_autocast_enabled(device_, true);
  }
  ~Bf16Autocast() {
    at::autocast::set_autocast_enabled(device_, was_enabled_);
    at::autocast::set_autocast_dtype(device_, was_dtype_);
    at::autocast::clear_cache();
  }
  Bf16Autocast(const Bf16Autocast&) = delete;
  Bf16Autocast& operator=(const Bf16Autocast&) = delete;

 private:
  at::DeviceType device_;
  bool was_enabled_;
  at::ScalarType was_dtype_;
};

}  // namespace ablate::testing
