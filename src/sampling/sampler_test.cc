#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "mnemo/sampling.h"

namespace mnemo {
namespace {

std::vector<TokenCandidate> make(std::vector<float> logits) {
  std::vector<TokenCandidate> c;
  for (size_t i = 0; i < logits.size(); ++i) c.push_back({int32_t(i), logits[i], 0.0f});
  return c;
}

// Sampling from the softmax at temperature `temp` alone (top-k, top-p and min-p off).
SamplingParams temperature_only(float temp, uint64_t seed) {
  SamplingParams p;
  p.temp = temp;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

TEST(SamplingTest, GreedyIsArgmaxWithLowestIndexOnTies) {
  SamplingParams p;
  p.temp = 0.0f;
  Sampler s(p);
  std::vector<float> logits = {0.1f, 3.0f, -2.0f, 3.0f};
  EXPECT_EQ(s.sample(logits), 1);
}

// Greedy with set_greedy_candidates(n): the same pick; last_distribution() holds the n best
// (bias applied), best first, with p the softmax over those n (computed here in double).
TEST(SamplingTest, GreedyCandidatesAreTheBestNWithTheirSoftmax) {
  const std::vector<float> logits = {0.1f, 3.0f, -2.0f, 2.5f, 1.0f};
  for (bool biased : {false, true}) {
    SamplingParams p;
    p.temp = 0.0f;
    if (biased) p.logit_bias = {{0, 2.0f}};  // token 0: 2.1, third best
    Sampler s(p);
    s.set_greedy_candidates(3);
    EXPECT_EQ(s.sample(logits), 1);
    auto d = s.last_distribution();
    ASSERT_EQ(d.size(), 3u);
    const std::vector<int32_t> ids = biased ? std::vector<int32_t>{1, 3, 0}
                                            : std::vector<int32_t>{1, 3, 4};
    const std::vector<double> l = {3.0, 2.5, biased ? 2.1 : 1.0};
    const double z = std::exp(l[0]) + std::exp(l[1]) + std::exp(l[2]);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(d[i].id, ids[i]);
      EXPECT_NEAR(d[i].p, std::exp(l[i]) / z, 1e-6);
    }
    s.set_greedy_candidates(0);
    s.sample(logits);
    EXPECT_EQ(s.last_distribution().size(), 1u);
  }
}

// A bias is added to the logit before anything else: it can change the greedy choice, and -inf
// bans a token from greedy and sampled choices alike; the draws then follow the softmax of the
// biased logits (top-k / top-p / min-p off).
TEST(SamplingTest, LogitBiasShiftsAndBans) {
  std::vector<float> logits = {0.1f, 3.0f, -2.0f, 2.5f};
  SamplingParams p;
  p.temp = 0.0f;
  p.logit_bias = {{3, 1.0f}};
  EXPECT_EQ(Sampler(p).sample(logits), 3);
  p.logit_bias = {{1, -INFINITY}, {3, -INFINITY}};
  EXPECT_EQ(Sampler(p).sample(logits), 0);
  p = temperature_only(1.0f, 3);
  p.logit_bias = {{1, -INFINITY}, {2, 2.1f}, {99, 5.0f}};  // 99: outside the vocabulary, ignored
  Sampler s(p);
  std::map<int32_t, int> n;
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) ++n[s.sample(logits)];
  EXPECT_EQ(n.count(1), 0u);
  const double z = std::exp(0.1) + std::exp(0.1) + std::exp(2.5);  // biased: 0.1, 0.1, 2.5
  EXPECT_NEAR(n[3] / double(draws), std::exp(2.5) / z, 0.015);
  EXPECT_NEAR(n[2] / double(draws), std::exp(0.1) / z, 0.015);
}

TEST(SamplingTest, PenaltiesFollowTheirFormulas) {
  auto c = make({2.0f, -2.0f, 1.0f});
  std::vector<int32_t> recent = {0, 1, 1};
  sampling::apply_penalties(c, recent, 2.0f, 0.5f, 0.25f);
  // token 0: 2/2 - 1*0.5 - 0.25; token 1: -2*2 - 2*0.5 - 0.25; token 2 untouched.
  EXPECT_FLOAT_EQ(c[0].logit, 1.0f - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(c[1].logit, -4.0f - 1.0f - 0.25f);
  EXPECT_FLOAT_EQ(c[2].logit, 1.0f);
}

TEST(SamplingTest, RepetitionPenaltyChangesGreedyChoice) {
  SamplingParams p;
  p.temp = 0.0f;
  p.repeat_penalty = 4.0f;
  Sampler s(p);
  std::vector<float> logits = {1.0f, 2.0f};
  EXPECT_EQ(s.sample(logits), 1);
  s.accept(1);
  EXPECT_EQ(s.sample(logits), 0);  // 2/4 = 0.5 < 1
}

TEST(SamplingTest, TopKTopPMinPKeepTheRightSets) {
  auto c = make({1.0f, 4.0f, 3.0f, 2.0f});
  sampling::top_k(c, 2);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].id, 1);
  EXPECT_EQ(c[1].id, 2);

  auto d = make({std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)});
  sampling::top_k(d, 0);
  sampling::softmax(d);
  EXPECT_NEAR(d[0].p, 0.5f, 1e-6);
  auto e = d;
  sampling::top_p(e, 0.75f);
  EXPECT_EQ(e.size(), 2u);  // 0.5 + 0.3 >= 0.75
  auto f = d;
  sampling::min_p(f, 0.25f);  // threshold 0.125: keeps 0.5, 0.3, 0.15
  EXPECT_EQ(f.size(), 3u);
}

TEST(SamplingTest, SameSeedSameDrawsAndFrequenciesMatchProbabilities) {
  const SamplingParams p = temperature_only(1.0f, 1234);
  std::vector<float> logits = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  Sampler a(p), b(p);
  std::map<int, int> counts;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    int32_t x = a.sample(logits);
    EXPECT_EQ(x, b.sample(logits));
    counts[x]++;
  }
  // Binomial standard deviation for p=0.6, n=20000 is ~0.0035: 0.02 is > 5 sigma.
  EXPECT_NEAR(counts[0] / double(n), 0.6, 0.02);
  EXPECT_NEAR(counts[1] / double(n), 0.3, 0.02);
  EXPECT_NEAR(counts[2] / double(n), 0.1, 0.02);
}

TEST(SamplingTest, LowTemperatureConcentratesOnTheBest) {
  Sampler s(temperature_only(0.05f, 7));
  std::vector<float> logits = {1.0f, 1.5f, 0.5f};
  for (int i = 0; i < 200; ++i) EXPECT_EQ(s.sample(logits), 1);
}

TEST(SamplingTest, ValidateRejectsOutOfRange) {
  SamplingParams p;
  p.top_p = 1.5f;
  EXPECT_EQ(p.validate().code(), StatusCode::kInvalidArgument);
  p = SamplingParams();
  p.repeat_penalty = 0.0f;
  EXPECT_FALSE(p.validate().ok());
  EXPECT_TRUE(SamplingParams().validate().ok());
}

// A lazy grammar (tool_choice "auto") leaves the text before its trigger alone, then holds the
// text from the trigger's first character to the grammar, also when the trigger arrived split
// over two tokens; a token that would leave the grammar after the trigger is never picked.
TEST(SamplingTest, LazyGrammarAppliesFromItsTrigger) {
  // Tokens: 0 "hi", 1 " <to", 2 "ol>", 3 "{", 4 "}", 5 "x", 6 eog.
  const std::vector<std::string> pieces = {"hi", " <to", "ol>", "{", "}", "x", ""};
  auto vocab = std::make_shared<const grammar::Vocab>(pieces, std::vector<int32_t>{6});
  auto g = grammar::Grammar::parse(R"(root ::= "<tool>{}")");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  SamplingParams p;
  p.temp = 0.0f;
  Sampler s(p);
  s.set_lazy_grammar(*g, vocab, {"<tool>"});
  // Before the trigger: "x" (the best logit) is free to come.
  std::vector<float> prefer_x = {0, 0, 0, 0, 0, 5, 0};
  EXPECT_EQ(s.sample(prefer_x), 5);
  EXPECT_EQ(s.grammar_state(), nullptr);
  for (int32_t t : {0, 1, 2}) s.accept_generated(t);  // "hi <tool>": the trigger, split
  ASSERT_NE(s.grammar_state(), nullptr);
  EXPECT_EQ(s.sample(prefer_x), 3);  // only "{" may follow "<tool>"
  s.accept_generated(3);
  EXPECT_EQ(s.sample(prefer_x), 4);
  s.accept_generated(4);
  EXPECT_TRUE(s.grammar_state()->can_end());
  EXPECT_EQ(s.sample(prefer_x), 6);  // done: end of generation
}

// Text that never contains the trigger stays unconstrained, however long it runs, and a trigger
// whose own token already leaves the grammar drops it instead of constraining nonsense.
TEST(SamplingTest, LazyGrammarWithoutItsTriggerOrBrokenStaysFree) {
  const std::vector<std::string> pieces = {"a", "<tool>x", "<tool>", "{", ""};
  auto vocab = std::make_shared<const grammar::Vocab>(pieces, std::vector<int32_t>{4});
  auto g = grammar::Grammar::parse(R"(root ::= "<tool>{")");
  ASSERT_TRUE(g.ok());
  SamplingParams p;
  p.temp = 0.0f;
  Sampler s(p);
  s.set_lazy_grammar(*g, vocab, {"<tool>"});
  for (int i = 0; i < 1000; ++i) s.accept_generated(0);
  EXPECT_EQ(s.grammar_state(), nullptr);
  s.accept_generated(1);  // "<tool>x": the grammar wants "{" after the trigger
  EXPECT_EQ(s.grammar_state(), nullptr);
  std::vector<float> prefer_a = {5, 0, 0, 0, 0};
  EXPECT_EQ(s.sample(prefer_a), 0);
}

}  // namespace
}  // namespace mnemo
