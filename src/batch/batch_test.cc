// Batch validation: every rule of include/mnemo/batch.h, with the message naming the cause.

#include "mnemo/batch.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace mnemo {
namespace {

// A stand-in for the memory: the last position of each sequence.
struct Ends {
  std::map<SeqId, Pos> max;
  SeqPosMaxFn fn() const {
    return [this](SeqId s) {
      auto it = max.find(s);
      return it == max.end() ? -1 : it->second;
    };
  }
};

BatchLimits limits(uint32_t n_seq_max = 4) {
  BatchLimits l;
  l.n_seq_max = n_seq_max;
  return l;
}

std::string error_of(const Batch& b, const BatchLimits& l, const Ends& e = {}) {
  Result<PreparedBatch> r = prepare_batch(b, l, e.fn());
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

TEST(BatchTest, AcceptsContinuingPositions) {
  Ends e;
  e.max[1] = 9;
  Batch b;
  b.add(5, 0, {0});
  b.add(6, 10, {1}, true);
  b.add(7, 1, {0});
  b.add(8, 11, {1});
  Result<PreparedBatch> r = prepare_batch(b, limits(), e.fn());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->pos, (std::vector<Pos>{0, 10, 1, 11}));
  EXPECT_FALSE(r->multi_seq_rows);
  EXPECT_TRUE(b.output(1));
  EXPECT_FALSE(b.output(0));
}

TEST(BatchTest, AutoPositionsContinueEachSequence) {
  Ends e;
  e.max[2] = 41;
  Batch b;
  b.add_auto(1, {2});
  b.add_auto(1, {0});
  b.add_auto(1, {2});
  b.add_auto(1, {0, 3});  // seq 0 at 1 and seq 3 at 0 differ
  Result<PreparedBatch> r = prepare_batch(b, limits(), e.fn());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("different positions"), std::string::npos)
      << r.status().message();

  Batch ok;
  ok.add_auto(1, {2});
  ok.add_auto(1, {0, 3});
  ok.add_auto(1, {2});
  ok.add_auto(1, {3});
  r = prepare_batch(ok, limits(), e.fn());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->pos, (std::vector<Pos>{42, 0, 43, 1}));
  EXPECT_TRUE(r->multi_seq_rows);
}

TEST(BatchTest, RejectsEmptyAndOversized) {
  Batch b;
  EXPECT_NE(error_of(b, limits()).find("empty"), std::string::npos);
  for (int i = 0; i < 5; ++i) b.add(0, i, {0});
  BatchLimits l = limits();
  l.n_batch = 4;
  EXPECT_NE(error_of(b, l).find("more than n_batch = 4"), std::string::npos);
  l.n_batch = 5;
  EXPECT_TRUE(prepare_batch(b, l, Ends().fn()).ok());
}

TEST(BatchTest, RejectsBadTokenIds) {
  BatchLimits l = limits();
  l.n_vocab = 100;
  Batch b;
  b.add(99, 0, {0});
  b.add(100, 1, {0});
  const std::string m = error_of(b, l);
  EXPECT_NE(m.find("batch row 1"), std::string::npos) << m;
  EXPECT_NE(m.find("token id 100"), std::string::npos) << m;
  Batch neg;
  neg.add(-1, 0, {0});
  EXPECT_NE(error_of(neg, l).find("token id -1"), std::string::npos);
}

TEST(BatchTest, RejectsBadSeqIds) {
  Batch none;
  none.add(0, 0, std::span<const SeqId>(), false);
  EXPECT_NE(error_of(none, limits()).find("has no seq_id"), std::string::npos);

  Batch out;
  out.add(0, 0, {4});
  EXPECT_NE(error_of(out, limits(4)).find("seq_id 4 is outside [0, n_seq_max = 4)"),
            std::string::npos);
  Batch neg;
  neg.add(0, 0, {-1});
  EXPECT_NE(error_of(neg, limits()).find("seq_id -1"), std::string::npos);

  Batch dup;
  dup.add(0, 0, {1, 1});
  EXPECT_NE(error_of(dup, limits()).find("twice"), std::string::npos);
}

TEST(BatchTest, SplitModeRejectsSharedRows) {
  BatchLimits l = limits();
  l.allow_multi_seq_rows = false;
  Batch b;
  b.add(0, 0, {0});
  b.add(0, 0, {1, 2});
  const std::string m = error_of(b, l);
  EXPECT_NE(m.find("batch row 1 belongs to 2 sequences"), std::string::npos) << m;
  EXPECT_NE(m.find("seq_cp"), std::string::npos) << m;
}

TEST(BatchTest, RejectsPositionsThatDoNotContinue) {
  Ends e;
  e.max[0] = 7;
  Batch gap;
  gap.add(0, 9, {0});
  std::string m = error_of(gap, limits(), e);
  EXPECT_NE(m.find("position 9, expected 8"), std::string::npos) << m;
  EXPECT_NE(m.find("up to position 7"), std::string::npos) << m;

  Batch overlap;  // re-decoding a held position without seq_rm first
  overlap.add(0, 7, {0});
  EXPECT_NE(error_of(overlap, limits(), e).find("expected 8"), std::string::npos);

  Batch fresh;
  fresh.add(0, 1, {1});
  m = error_of(fresh, limits(), e);
  EXPECT_NE(m.find("holds no position of this sequence"), std::string::npos) << m;

  Batch in_batch;
  in_batch.add(0, 8, {0});
  in_batch.add(0, 10, {0});
  m = error_of(in_batch, limits(), e);
  EXPECT_NE(m.find("batch row 1"), std::string::npos) << m;
  EXPECT_NE(m.find("previous row of this sequence in the batch has position 8"), std::string::npos)
      << m;

  Batch negative;
  negative.add(0, -3, {2});
  EXPECT_NE(error_of(negative, limits()).find("position -3, expected 0"), std::string::npos);

  Batch shared;  // a shared row must continue every one of its sequences
  shared.add(0, 8, {0, 1});
  EXPECT_NE(error_of(shared, limits(), e).find("seq_id 1 has position 8, expected 0"),
            std::string::npos);
}

TEST(BatchTest, RejectsMixedAutoAndExplicit) {
  Batch b;
  b.add(0, 0, {0});
  b.add_auto(0, {0});
  EXPECT_NE(error_of(b, limits()).find("not both"), std::string::npos);
  Batch c;
  c.add_auto(0, {0});
  c.add(0, 1, {0});
  EXPECT_NE(error_of(c, limits()).find("not both"), std::string::npos);
}

TEST(BatchTest, EmbeddingRows) {
  const std::vector<float> e4 = {1, 2, 3, 4};
  const std::vector<float> e3 = {1, 2, 3};
  const std::vector<SeqId> s0 = {0};
  Batch b;
  b.add_embd(e4, 0, s0, true);
  b.add_embd(e4, 1, s0, false);
  EXPECT_TRUE(b.is_embd());
  EXPECT_EQ(b.n_embd(), 4u);
  EXPECT_EQ(b.embd(1)[3], 4.0f);
  BatchLimits l = limits();
  l.n_embd = 4;
  EXPECT_TRUE(prepare_batch(b, l, Ends().fn()).ok());
  l.n_embd = 8;
  EXPECT_NE(error_of(b, l).find("n_embd = 8"), std::string::npos);

  Batch widths;
  widths.add_embd(e4, 0, s0, false);
  widths.add_embd(e3, 1, s0, false);
  EXPECT_NE(error_of(widths, limits()).find("width 3"), std::string::npos);

  Batch mixed;
  mixed.add(1, 0, {0});
  mixed.add_embd(e4, 1, s0, false);
  EXPECT_NE(error_of(mixed, limits()).find("cannot be mixed"), std::string::npos);
  Batch mixed2;
  mixed2.add_embd(e4, 0, s0, false);
  mixed2.add(1, 1, {0});
  EXPECT_NE(error_of(mixed2, limits()).find("cannot be mixed"), std::string::npos);
}

TEST(BatchTest, ClearResets) {
  Batch b;
  b.add(1, 0, {0, 1}, true);
  b.clear();
  EXPECT_TRUE(b.empty());
  b.add(2, 0, {3});
  ASSERT_EQ(b.n_tokens(), 1u);
  EXPECT_EQ(b.seq_ids(0).size(), 1u);
  EXPECT_EQ(b.seq_ids(0)[0], 3);
}

}  // namespace
}  // namespace mnemo
