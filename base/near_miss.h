// base/near_miss.h: " (did you mean 'x'?)" for a misspelt name, so every list of known names (spec keys,
// sections, seams, gate arguments) suggests the same way.
// Tests: tests/base/near_miss_test.cpp (base_tests).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ablate::base {

// Levenshtein distance (insertions, deletions, substitutions).
std::size_t edit_distance(const std::string& a, const std::string& b);

// " (did you mean 'name'?)" naming the known name at most two edits from `word` (the nearest, the first
// listed on a tie), else "".
std::string did_you_mean(const std::string& word, const std::vector<std::string>& known);

}  // namespace ablate::base
