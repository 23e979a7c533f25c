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
  // Free drafts (prompt lookup) that miss: the average gain (here about 5.5) has to fall below
  // 0. Gains of a 16-token miss are 16 * -kRowCost = -2.4; the average moves a quarter of the
  // way to it each time: 0.75^n * (5.53 + 2.4) < 2.4 from n = 5.
  int steps = 0;
  while (d.next() > 0 && steps < 100) {
    d.update(16, 0);
    ++steps;
  }
  EXPECT_EQ(steps, 5);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(d.next(), 0u);  // 4 steps paused in all
  EXPECT_EQ(d.next(), 4u);
  // Paused again after the next run of misses: 8 steps now (the average restarts at 1).
  steps = 0;
  while (d.next() > 0 && steps < 100) {
    d.update(1, 0);
    ++steps;
  }
  for (int i = 0; i < 7; ++i) EXPECT_EQ(d.next(), 0u);
  EXPECT_GT(d.next(), 0u);
  d.update(0, 0);  // nothing drafted: no change
}

TEST(DraftLength, CostlyDraftsPauseWhenTheyDoNotPay) {
  // A draft model costing a third of a target step per decode, 4 decodes per draft: 1 accepted
  // out of 4 loses (1 - 4 / 3 - 4 * 0.15 < 0); 3 out of 4 pays (3 - 4 / 3 - 4 * 0.15 > 0).
  DraftLength paying(4);
  for (int i = 0; i < 50; ++i) {
    ASSERT_GT(paying.next(), 0u) << i;
    paying.update(4, 3, 4.0f / 3);
  }
  DraftLength losing(4);
  int steps = 0;
  while (losing.next() > 0 && steps < 100) {
    losing.update(4, 1, 4.0f / 3);
    ++steps;
  }
  EXPECT_LT(steps, 10);
  EXPECT_EQ(losing.next(), 0u);
  // A draft model that is never sure enough drafts nothing, but each try costs.
  DraftLength unsure(4);
  steps = 0;
  while (unsure.next() > 0 && steps < 100) {
    unsure.update(0, 0, 1.0f / 3);
    ++steps;
  }
  EXPECT_LT(steps, 10);
  DraftLength lookup(4);  // prompt lookup finding nothing: free, never pauses
  for (int i = 0; i < 50; ++i) {
    ASSERT_GT(lookup.next(), 0u);
    lookup.update(0, 0, 0.0f);
  }
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
