// Prompt lookup and the adaptive draft length against hand-worked cases.
#include <gtest/gtest.h>

#include <vector>

#include "mnemo/speculative.h"

namespace mnemo {
namespace {

using V = std::vector<TokenId>;

TEST(NgramDraft, LongestKeyMostRecentOccurrence) {
  // Key "1 2 3" occurs at 0 (followed by 7 8) and at 5 (followed by 9 4): the most recent wins.
  const V h = {1, 2, 3, 7, 8, 1, 2, 3, 9, 4, 6, 1, 2, 3};
  EXPECT_EQ(ngram_draft(h, 3, 4), (V{9, 4, 6, 1}));
  EXPECT_EQ(ngram_draft(h, 3, 2), (V{9, 4}));
}

TEST(NgramDraft, FallsBackToShorterKeys) {
  // "5 6 3" and "6 3" never occurred; "3" did (followed by 4 9).
  const V h = {3, 4, 9, 5, 6, 3};
  EXPECT_EQ(ngram_draft(h, 3, 8), (V{4, 9, 5, 6, 3}));
  EXPECT_EQ(ngram_draft(h, 1, 1), (V{4}));
}

TEST(NgramDraft, NothingToDraft) {
  EXPECT_TRUE(ngram_draft(V{1, 2, 3, 4}, 3, 8).empty());
  EXPECT_TRUE(ngram_draft(V{1}, 3, 8).empty());
  EXPECT_TRUE(ngram_draft(V{}, 3, 8).empty());
  EXPECT_TRUE(ngram_draft(V{1, 1}, 3, 0).empty());
  // A repeat of the last token: the draft is what followed its earlier occurrence.
  EXPECT_EQ(ngram_draft(V{1, 1}, 3, 8), (V{1}));
}

TEST(DraftLength, AdaptsAndPauses) {
  DraftLength d(16);
  EXPECT_EQ(d.next(), 16u);
  d.update(16, 3);  // partly accepted: accepted + 1
  EXPECT_EQ(d.next(), 4u);
  d.update(4, 4);  // fully accepted: doubles
  EXPECT_EQ(d.next(), 8u);
  d.update(8, 8);
  d.update(16, 16);
  EXPECT_EQ(d.next(), 16u);  // capped at draft_max
  // Three misses in a row pause speculation for 4 steps, then 8.
  d.update(16, 0);
  d.update(1, 0);
  d.update(1, 0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(d.next(), 0u);
  EXPECT_EQ(d.next(), 4u);
  d.update(4, 0);
  d.update(1, 0);
  d.update(1, 0);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(d.next(), 0u);
  EXPECT_GT(d.next(), 0u);
  d.update(0, 0);  // nothing drafted: no change
}

TEST(SpecParams, Validate) {
  SpecParams p;
  EXPECT_TRUE(p.validate().ok());
  p.draft_max = 0;
  EXPECT_NE(p.validate().message().find("--draft-max"), std::string::npos);
  p = SpecParams{};
  p.draft_min = 17;
  EXPECT_NE(p.validate().message().find("--draft-min"), std::string::npos);
  p = SpecParams{};
  p.draft_p_min = 1.5f;
  EXPECT_FALSE(p.validate().ok());
}

}  // namespace
}  // namespace mnemo
