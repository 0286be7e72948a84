// base/near_miss.cpp: edit distance and the "did you mean" suggestion (base/near_miss.h).
#include "base/near_miss.h"

#include <fmt/format.h>

#include <algorithm>

namespace ablate::base {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& known) {
  const std::string* best = nullptr;
  std::size_t best_distance = 3;  // at most two edits away
  for (const auto& k : known) {
    const std::size_t d = edit_distance(word, k);
    if (d < best_distance) best_distance = d, best = &k;
  }
  return best ? fmt::format(" (did you mean '{}'?)", *best) : "";
}

}  // namespace ablate::base
