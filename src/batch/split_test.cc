// Splitters: hand-computed cases for each strategy, then randomized batches checked against the
// strategy's definition, and output order restored to the caller's order for every split.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "mnemo/ubatch.h"

namespace mnemo {
namespace {

PreparedBatch prepare(const Batch& b, uint32_t n_seq_max) {
  BatchLimits l;
  l.n_seq_max = n_seq_max;
  Result<PreparedBatch> r = prepare_batch(b, l, [](SeqId) { return Pos{-1}; });
  CHECK(r.ok()) << r.status().to_string();
  return std::move(r).value();
}

std::vector<Ubatch> split(const PreparedBatch& pb, SplitStrategy s, uint32_t n_ubatch) {
  Result<std::vector<Ubatch>> r = split_batch(pb, s, n_ubatch);
  CHECK(r.ok()) << r.status().to_string();
  return std::move(r).value();
}

// Rows: seq 0 x5, seq 1 x3, seq 2 x3, seq 4 x2, interleaved; token = 100 * seq + pos.
Batch interleaved() {
  Batch b;
  const std::vector<SeqId> order = {0, 1, 0, 2, 4, 1, 0, 2, 0, 4, 1, 2, 0};
  std::map<SeqId, Pos> next;
  for (size_t i = 0; i < order.size(); ++i) {
    const SeqId s = order[i];
    const Pos p = next[s]++;
    b.add(100 * s + p, p, {s}, i % 3 == 0);
  }
  return b;
}

std::vector<int32_t> tokens(const Ubatch& u) { return u.token; }

TEST(SplitTest, SimpleKeepsCallerOrder) {
  const Batch b = interleaved();
  const PreparedBatch pb = prepare(b, 5);
  const std::vector<Ubatch> u = split(pb, SplitStrategy::kSimple, 5);
  ASSERT_EQ(u.size(), 3u);
  EXPECT_EQ(u[0].n_tokens(), 5u);
  EXPECT_EQ(u[2].n_tokens(), 3u);
  EXPECT_EQ(tokens(u[0]), (std::vector<int32_t>{0, 100, 1, 200, 400}));
  EXPECT_EQ(u[0].batch_row, (std::vector<uint32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(u[0].seqs, (std::vector<SeqId>{0, 1, 2, 4}));
  EXPECT_EQ(u[1].batch_row.front(), 5u);
  EXPECT_EQ(u[0].n_seq_tokens, 0u);
}

TEST(SplitTest, EqualTakesTheSameCountFromConsecutiveSequences) {
  const Batch b = interleaved();
  const PreparedBatch pb = prepare(b, 5);
  const std::vector<Ubatch> u = split(pb, SplitStrategy::kEqual, 8);
  // Seqs 0,1,2 are consecutive (4 is not next to 2): min(3 rows, 8 / 3) = 2 rows each.
  ASSERT_GE(u.size(), 1u);
  EXPECT_EQ(u[0].seqs, (std::vector<SeqId>{0, 1, 2}));
  EXPECT_EQ(u[0].n_seq_tokens, 2u);
  EXPECT_EQ(tokens(u[0]), (std::vector<int32_t>{0, 1, 100, 101, 200, 201}));
  // Then 0,1,2 again with one row each (seq 1 and 2 have one left).
  EXPECT_EQ(u[1].seqs, (std::vector<SeqId>{0, 1, 2}));
  EXPECT_EQ(tokens(u[1]), (std::vector<int32_t>{2, 102, 202}));
  // Then seq 0 alone (2 rows left), then seq 4.
  EXPECT_EQ(tokens(u[2]), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(tokens(u[3]), (std::vector<int32_t>{400, 401}));
  EXPECT_EQ(u.size(), 4u);

  // n_ubatch smaller than the run of sequences: at most n_ubatch sequences, one row each.
  const std::vector<Ubatch> v = split(pb, SplitStrategy::kEqual, 2);
  EXPECT_EQ(v[0].seqs, (std::vector<SeqId>{0, 1}));
  EXPECT_EQ(tokens(v[0]), (std::vector<int32_t>{0, 100}));
}

TEST(SplitTest, SeqTakesOneSequencePerUbatch) {
  const Batch b = interleaved();
  const PreparedBatch pb = prepare(b, 5);
  const std::vector<Ubatch> u = split(pb, SplitStrategy::kSeq, 3);
  // In the order sequences first appear: 0 (5 rows: 3 + 2), 1, 2, 4.
  ASSERT_EQ(u.size(), 5u);
  EXPECT_EQ(tokens(u[0]), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(tokens(u[1]), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(tokens(u[2]), (std::vector<int32_t>{100, 101, 102}));
  EXPECT_EQ(tokens(u[3]), (std::vector<int32_t>{200, 201, 202}));
  EXPECT_EQ(tokens(u[4]), (std::vector<int32_t>{400, 401}));
  for (const Ubatch& x : u) {
    EXPECT_EQ(x.seqs.size(), 1u);
    EXPECT_EQ(x.n_seq_tokens, x.n_tokens());
  }
}

TEST(SplitTest, Errors) {
  Batch b;
  b.add(0, 0, {0, 1});
  const PreparedBatch pb = prepare(b, 2);
  EXPECT_TRUE(split_batch(pb, SplitStrategy::kSimple, 4).ok());
  EXPECT_FALSE(split_batch(pb, SplitStrategy::kEqual, 4).ok());
  EXPECT_FALSE(split_batch(pb, SplitStrategy::kSeq, 4).ok());
  EXPECT_FALSE(split_batch(pb, SplitStrategy::kSimple, 0).ok());
}

TEST(SplitTest, EmbeddingsFollowTheirRows) {
  Batch b;
  const std::vector<SeqId> s0 = {0}, s1 = {1};
  for (int i = 0; i < 4; ++i) {
    const std::vector<float> e = {float(i), float(i) + 0.5f};
    b.add_embd(e, i / 2, (i % 2) ? s1 : s0, false);
  }
  const PreparedBatch pb = prepare(b, 2);
  const std::vector<Ubatch> u = split(pb, SplitStrategy::kEqual, 4);
  ASSERT_EQ(u.size(), 1u);
  EXPECT_TRUE(u[0].token.empty());
  EXPECT_EQ(u[0].n_embd, 2u);
  // Grouped by sequence: rows 0, 2 (seq 0) then 1, 3 (seq 1).
  EXPECT_EQ(u[0].embd, (std::vector<float>{0, 0.5f, 2, 2.5f, 1, 1.5f, 3, 3.5f}));
}

// Randomized: every strategy's definition, and output order.
TEST(SplitTest, RandomBatchesKeepEveryRowOnceAndRestoreOutputOrder) {
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    std::mt19937 rng(seed);
    const uint32_t n_seq_max = 1 + rng() % 8;
    const uint32_t n = 1 + rng() % 40;
    Batch b;
    std::vector<Pos> next(n_seq_max, 0);
    for (uint32_t i = 0; i < n; ++i) {
      const SeqId s = rng() % n_seq_max;
      b.add(static_cast<int32_t>(i), next[s]++, {s}, rng() % 2 == 0);
    }
    const PreparedBatch pb = prepare(b, n_seq_max);
    for (SplitStrategy st : {SplitStrategy::kSimple, SplitStrategy::kEqual, SplitStrategy::kSeq}) {
      const uint32_t n_ubatch = 1 + rng() % 9;
      const std::vector<Ubatch> u = split(pb, st, n_ubatch);
      std::vector<int> seen(n, 0);
      std::map<SeqId, Pos> last;
      for (const Ubatch& x : u) {
        ASSERT_GE(x.n_tokens(), 1u);
        ASSERT_LE(x.n_tokens(), n_ubatch);
        for (uint32_t i = 0; i < x.n_tokens(); ++i) {
          const uint32_t r = x.batch_row[i];
          ++seen[r];
          EXPECT_EQ(x.token[i], b.token(r));  // row data travels with the row
          EXPECT_EQ(x.pos[i], pb.pos[r]);
          EXPECT_EQ(x.output[i] != 0, b.output(r));
          // Within a sequence, positions keep increasing across ubatches.
          auto it = last.find(x.seq_id(i));
          if (it != last.end()) {
            EXPECT_GT(x.pos[i], it->second);
          }
          last[x.seq_id(i)] = x.pos[i];
        }
        if (st == SplitStrategy::kEqual) {
          ASSERT_EQ(x.n_tokens(), x.seqs.size() * x.n_seq_tokens);
          for (size_t k = 0; k < x.seqs.size(); ++k) {
            if (k > 0) {
              EXPECT_EQ(x.seqs[k], x.seqs[k - 1] + 1);
            }
            for (uint32_t j = 0; j < x.n_seq_tokens; ++j) {
              EXPECT_EQ(x.seq_id(k * x.n_seq_tokens + j), x.seqs[k]);
            }
          }
        }
        if (st == SplitStrategy::kSeq) {
          EXPECT_EQ(x.seqs.size(), 1u);
        }
        if (st == SplitStrategy::kSimple) {
          for (uint32_t i = 1; i < x.n_tokens(); ++i) {
            EXPECT_EQ(x.batch_row[i], x.batch_row[i - 1] + 1);
          }
        }
      }
      for (uint32_t r = 0; r < n; ++r) ASSERT_EQ(seen[r], 1) << "row " << r;

      // The "model" emits, per output row in processing order, its token id; the mapping must
      // put them in the caller's order.
      const std::vector<uint32_t> order = output_order(u);
      std::vector<int32_t> expected;
      for (uint32_t r = 0; r < n; ++r) {
        if (b.output(r)) expected.push_back(b.token(r));
      }
      ASSERT_EQ(order.size(), expected.size());
      std::vector<int32_t> got(order.size(), -1);
      size_t k = 0;
      for (const Ubatch& x : u) {
        for (uint32_t i = 0; i < x.n_tokens(); ++i) {
          if (x.output[i]) got[order[k++]] = x.token[i];
        }
      }
      EXPECT_EQ(got, expected) << "seed " << seed << " strategy " << split_strategy_name(st);
    }
  }
}

}  // namespace
}  // namespace mnemo
