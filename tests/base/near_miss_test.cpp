// tests/base/near_miss_test.cpp: the edit distance and the "did you mean" suggestion every list of
// known names uses (base/near_miss.h).
#include <gtest/gtest.h>

#include "base/near_miss.h"

namespace {

using ablate::base::did_you_mean;
using ablate::base::edit_distance;

TEST(NearMiss, EditDistanceCountsInsertionsDeletionsAndSubstitutions) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("loss", "loss"), 0u);
  EXPECT_EQ(edit_distance("los", "loss"), 1u);    // an insertion
  EXPECT_EQ(edit_distance("losss", "loss"), 1u);  // a deletion
  EXPECT_EQ(edit_distance("lass", "loss"), 1u);   // a substitution
  EXPECT_EQ(edit_distance("trian", "train"), 2u);
  EXPECT_EQ(edit_distance("", "rope"), 4u);
}

TEST(NearMiss, SuggestsTheNearestNameWithinTwoEdits) {
  const std::vector<std::string> seams = {"attention", "rope", "loss", "optimizer"};
  EXPECT_EQ(did_you_mean("los", seams), " (did you mean 'loss'?)");
  EXPECT_EQ(did_you_mean("atention", seams), " (did you mean 'attention'?)");
  EXPECT_EQ(did_you_mean("ropee", seams), " (did you mean 'rope'?)");
  EXPECT_EQ(did_you_mean("optimise", seams), " (did you mean 'optimizer'?)");  // two edits
  EXPECT_EQ(did_you_mean("optim", seams), "") << "four edits away: no guess";
  EXPECT_EQ(did_you_mean("xyz", seams), "");
  EXPECT_EQ(did_you_mean("x", {}), "");
  // A tie goes to the first listed.
  EXPECT_EQ(did_you_mean("ab", {"aa", "bb"}), " (did you mean 'aa'?)");
}

}  // namespace
