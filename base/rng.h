// base/rng.h: the project's deterministic random numbers (the data order, synthetic ids, the model's
// initial weights). std::shuffle and the
// std distributions differ between standard libraries, so the row order and synthetic ids come from
// our own splitmix64 generator, our own bounded draw and our own Fisher-Yates: the same seed gives
// the same data order on every machine. Tested (hand-computed values) in tests/base/rng_test.cpp.
#pragma once
#include <cstdint>
#include <vector>

namespace ablate::base {

// The splitmix64 output function (Steele, Lea, Flood 2014): a bijective 64-bit mixer.
uint64_t mix64(uint64_t z);

// splitmix64: state advances by the golden-ratio increment, output is mix64(state).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next();
  // Uniform in [0, n) for n > 0 without modulo bias (Lemire's multiply-shift with rejection).
  uint64_t below(uint64_t n);
  // Uniform double in [0, 1) from the top 53 bits.
  double unit();
  // Standard normal by Box-Muller (one of the pair; two draws a call): synthetic step times in tests
  // and benchmarks.
  double normal();

 private:
  uint64_t state_;
};

// Independent seeds for independent purposes: `domain` separates users (row shuffle, synthetic
// rows), `index` the instances (an epoch, a row).
inline constexpr uint64_t kShuffleDomain = 1;
inline constexpr uint64_t kSyntheticDomain = 2;
inline constexpr uint64_t kModelInitDomain = 3;  // the model's initial weights (model/blocks.h SeededInit)
inline constexpr uint64_t kValidationDomain = 4;  // synthetic validation rows (data/source.h)
uint64_t derive_seed(uint64_t seed, uint64_t domain, uint64_t index);

// Fisher-Yates over 0..n-1, from the back: for i = n-1 .. 1 swap a[i] with a[below(i+1)], the
// generator seeded with derive_seed(seed, kShuffleDomain, epoch).
std::vector<uint64_t> shuffled_order(uint64_t n, uint64_t seed, uint64_t epoch);

}  // namespace ablate::base
