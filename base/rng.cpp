// base/rng.cpp: splitmix64, the bounded draw and Fisher-Yates (see rng.h).
// Tested in tests/base/rng_test.cpp (RngTest.*, ShuffleTest.*).
#include "base/rng.h"

#include <cmath>
#include <numbers>
#include <numeric>
#include <utility>

namespace ablate::base {

namespace {
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
}

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::next() {
  state_ += kGolden;
  return mix64(state_);
}

uint64_t SplitMix64::below(uint64_t n) {
  // The high word of x*n is uniform in [0, n) once the low words that would bias it are rejected.
  unsigned __int128 m = static_cast<unsigned __int128>(next()) * n;
  auto low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;  // 2^64 mod n
    while (low < threshold) {
      m = static_cast<unsigned __int128>(next()) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

double SplitMix64::unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

double SplitMix64::normal() {
  const double u1 = 1.0 - unit();  // (0, 1]: log(0) never happens
  const double u2 = unit();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

uint64_t derive_seed(uint64_t seed, uint64_t domain, uint64_t index) {
  return mix64(mix64(mix64(seed) ^ (domain * kGolden)) + index);
}

std::vector<uint64_t> shuffled_order(uint64_t n, uint64_t seed, uint64_t epoch) {
  std::vector<uint64_t> order(n);
  std::iota(order.begin(), order.end(), uint64_t{0});
  SplitMix64 rng(derive_seed(seed, kShuffleDomain, epoch));
  for (uint64_t i = n; i > 1; --i) {
    const uint64_t j = rng.below(i);
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

}  // namespace ablate::base
