// RecurrentMemory: configuration errors, exact accounting, per-sequence isolation of interleaved
// batches, checkpoints (placement, bound, content), seq_rm / seq_cp through checkpoints,
// plan_truncate, byte-equal rollback, and a randomized run against a reference model.
//
// The fake recurrent model: every token folds into every word of a layer's conv and ssm state
// with a hash that depends on the word index, the layer and the token (words hold uint32 bit
// patterns). The reference recomputes a state from a sequence's token list alone, so a state
// that mixed two sequences, lost a token or saw one twice differs.

#include "memory/recurrent_memory.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "support/memory_testing.h"
#include "support/recurrent_testing.h"

namespace mnemo {
namespace {

using testing::fake_rs_forward;
using testing::ref_rs_state;
using testing::snapshot;

constexpr uint32_t kLayers = 3;  // layers 0 and 2 recurrent, layer 1 not held

RecurrentMemoryConfig config(uint32_t n_seq_max, uint32_t interval = 0, uint32_t n_ckpt = 0) {
  RecurrentMemoryConfig c;
  c.n_seq_max = n_seq_max;
  c.n_embd_r = {6, 0, 9};
  c.n_embd_s = {16, 0, 8};
  c.layer_filter = [](uint32_t il) { return il != 1; };
  c.checkpoint_interval = interval;
  c.n_checkpoints = n_ckpt;
  return c;
}

std::unique_ptr<RecurrentMemory> make(RecurrentMemoryConfig c) {
  return testing::create_or_die<RecurrentMemory>(std::move(c));
}

// Decodes `b`, running the fake forward pass after each apply().
void decode(RecurrentMemory& m, const Batch& b, uint32_t n_ubatch) {
  const Status st = testing::decode_fake(m, b, n_ubatch, kLayers, /*generation=*/1);
  ASSERT_TRUE(st.ok()) << st.to_string();
}

// Appends tokens[from, to) of sequence s at positions from.. to b.
void add_rows(Batch* b, SeqId s, const std::vector<int32_t>& toks, int from, int to) {
  for (int i = from; i < to; ++i) b->add(toks[i], i, {s}, i + 1 == to);
}

std::vector<int32_t> random_tokens(std::mt19937& rng, int n) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % 1000);
  return t;
}

// The reference state of `toks[0, n)` as the memory stores it.
std::vector<float> ref(const RecurrentMemory& m, const std::vector<int32_t>& toks, int n) {
  return ref_rs_state(m, std::vector<int32_t>(toks.begin(), toks.begin() + n), kLayers);
}

bool cell_is(const RecurrentMemory& m, SeqId s, const std::vector<float>& want) {
  auto got = m.cell(s);
  return got.size() == want.size() &&
         std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0;
}

TEST(RecurrentMemoryTest, ConfigErrorsAndAccounting) {
  RecurrentMemoryConfig c = config(0);
  EXPECT_EQ(RecurrentMemory::create(c).status().code(), StatusCode::kInvalidArgument);
  c = config(2);
  c.n_embd_s.pop_back();
  EXPECT_FALSE(RecurrentMemory::create(c).ok());
  c = config(2);
  c.layer_filter = nullptr;  // layer 1 would be held with no state
  EXPECT_NE(RecurrentMemory::create(c).status().message().find("layer 1"), std::string::npos);
  c = config(2, 4, 0);
  EXPECT_FALSE(RecurrentMemory::create(c).ok());
  c = config(2);
  c.layer_filter = [](uint32_t) { return false; };
  EXPECT_FALSE(RecurrentMemory::create(c).ok());

  auto m = make(config(3, 8, 2));
  EXPECT_TRUE(m->holds_layer(0) && m->holds_layer(2));
  EXPECT_FALSE(m->holds_layer(1) || m->holds_layer(3));
  EXPECT_EQ(m->n_floats_per_seq(), 6u + 16 + 9 + 8);
  const MemoryBreakdown b = m->breakdown();
  ASSERT_EQ(b.streams.size(), 2u);
  EXPECT_EQ(b.streams[0].part, "rs");
  EXPECT_EQ(b.streams[0].n_cells, 3u);
  EXPECT_EQ(b.streams[1].n_cells, 6u);
  ASSERT_EQ(b.tensors.size(), 8u);  // 2 layers x {R, S} x {cells, checkpoints}
  EXPECT_EQ(b.tensor_bytes, (3u + 6u) * 39 * sizeof(float));
  EXPECT_EQ(b.tensors[0].kind, 'R');
  EXPECT_EQ(b.tensors[0].n_embd, 6u);
  EXPECT_EQ(b.tensors[3].layer, 2u);
  EXPECT_GE(b.mapped_bytes, b.tensor_bytes);
  // Nothing to shift or reserve.
  EXPECT_EQ(m->init_update()->status(), MemoryStatus::kNoUpdate);
  auto full = m->init_full();
  EXPECT_TRUE(full->ok());
  EXPECT_TRUE(full->apply().ok());
}

// seq_info: no K/V cells, and each sequence's own preallocated cell and checkpoints, the
// same for every sequence whatever it holds.
TEST(RecurrentMemoryTest, SeqInfoIsTheSequencesCellAndCheckpoints) {
  auto m = make(config(3, 4, 2));
  Batch b;
  add_rows(&b, 1, std::vector<int32_t>(11, 7), 0, 11);
  decode(*m, b, 8);
  ASSERT_EQ(m->checkpoints(1).size(), 2u);
  const MemoryBreakdown bd = m->breakdown();
  size_t sum = 0;
  for (SeqId s = 0; s < 3; ++s) {
    auto info = m->seq_info(s);
    ASSERT_TRUE(info.ok()) << info.status().to_string();
    EXPECT_EQ(info->seq_id, s);
    EXPECT_FALSE(info->has_kv);
    EXPECT_EQ(info->cells, 0u);
    EXPECT_EQ(info->free_cells, SeqMemoryInfo::kUnbounded);
    // (1 cell + 2 checkpoints) x (6 + 16 + 9 + 8) floats.
    EXPECT_EQ(info->bytes, 3u * 39 * sizeof(float)) << "seq " << s;
    sum += info->bytes;
  }
  EXPECT_EQ(sum, bd.tensor_bytes);
  EXPECT_EQ(m->seq_info(3).status().code(), StatusCode::kInvalidArgument);
}

// The multi-user bug of seed 001: sequences interleaved in one batch must each see only their
// own tokens, whatever the ubatch size.
TEST(RecurrentMemoryTest, InterleavedSequencesStayIsolated) {
  std::mt19937 rng(5);
  for (uint32_t n_ubatch : {1u, 3u, 64u}) {
    auto m = make(config(4, 5, 2));
    std::vector<std::vector<int32_t>> toks(4);
    for (auto& t : toks) t = random_tokens(rng, 23);
    std::vector<int> done(4, 0);
    while (done[0] < 23 || done[3] < 23) {
      Batch b;  // rows of the sequences interleaved: s0, s1, s2, s3, s0, ...
      for (int k = 0; k < 3; ++k) {
        for (SeqId s = 0; s < 4; ++s) {
          if (done[s] < 23) {
            b.add(toks[s][done[s]], done[s], {s}, true);
            ++done[s];
          }
        }
      }
      decode(*m, b, n_ubatch);
    }
    for (SeqId s = 0; s < 4; ++s) {
      EXPECT_EQ(m->seq_pos_min(s), 0);
      EXPECT_EQ(m->seq_pos_max(s), 22);
      EXPECT_TRUE(cell_is(*m, s, ref(*m, toks[s], 23))) << "seq " << s << " ub " << n_ubatch;
      EXPECT_EQ(m->checkpoints(s), (std::vector<Pos>{14, 19}));
    }
  }
}

TEST(RecurrentMemoryTest, UbatchesAreCutAtCheckpointBoundaries) {
  auto m = make(config(2, 4, 8));
  Batch b;
  std::vector<int32_t> t(11, 7);
  add_rows(&b, 1, t, 0, 11);
  auto ctx = m->init_batch(b, 16);
  ASSERT_TRUE(ctx->ok());
  std::vector<uint32_t> sizes;
  for (const Ubatch& u : ctx->ubatches()) {
    sizes.push_back(u.n_tokens());
    EXPECT_EQ(u.strategy, SplitStrategy::kSeq);
    EXPECT_EQ(u.seqs, std::vector<SeqId>{1});
  }
  EXPECT_EQ(sizes, (std::vector<uint32_t>{4, 4, 3}));
  // Outputs still map to the caller's order.
  EXPECT_EQ(output_order(ctx->ubatches()), std::vector<uint32_t>{0});

  Batch shared;
  shared.add(1, 0, {0, 1}, true);
  EXPECT_EQ(m->init_batch(shared, 4)->status(), MemoryStatus::kInvalidBatch);
}

TEST(RecurrentMemoryTest, CheckpointsAreBoundedAndHoldTheStateAfterTheirPosition) {
  std::mt19937 rng(9);
  auto m = make(config(2, 4, 3));
  const std::vector<int32_t> t = random_tokens(rng, 40);
  int done = 0;
  for (int n : {3, 5, 1, 9, 2, 6}) {  // 26 tokens in uneven batches
    Batch b;
    add_rows(&b, 0, t, done, done + n);
    decode(*m, b, 7);
    done += n;
  }
  EXPECT_EQ(m->checkpoints(0), (std::vector<Pos>{15, 19, 23}));  // 3, 7, 11 were dropped
  for (Pos c : m->checkpoints(0)) {
    auto got = m->checkpoint(0, c);
    const auto want = ref(*m, t, c + 1);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << "checkpoint " << c;
  }
  EXPECT_TRUE(m->checkpoint(0, 11).empty());
  EXPECT_EQ(m->breakdown().streams[1].used, 3u);
}

TEST(RecurrentMemoryTest, TailRemovalRestoresACheckpointOrFailsWithoutChange) {
  std::mt19937 rng(11);
  auto m = make(config(3, 4, 3));
  const std::vector<int32_t> t = random_tokens(rng, 30);
  Batch b;
  add_rows(&b, 0, t, 0, 26);
  decode(*m, b, 5);  // checkpoints 15, 19, 23
  ASSERT_EQ(m->checkpoints(0), (std::vector<Pos>{15, 19, 23}));

  // Nothing held past p: nothing to redo.
  auto plan = m->plan_truncate(0, 26);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->keep, 26);
  EXPECT_EQ(plan->n_redo, 0u);
  EXPECT_EQ(m->plan_truncate(0, 40)->keep, 26);
  EXPECT_EQ(m->plan_truncate(1, 5)->keep, 0);  // empty sequence
  EXPECT_FALSE(m->plan_truncate(3, 5).ok());
  EXPECT_FALSE(m->plan_truncate(0, -1).ok());

  // Keep [0, 22): the newest checkpoint at or before 21 is 19.
  plan = m->plan_truncate(0, 22);
  EXPECT_EQ(plan->keep, 20);
  EXPECT_EQ(plan->n_redo, 2u);
  // Keep [0, 10): no checkpoint at or before 9 survives.
  EXPECT_EQ(m->plan_truncate(0, 10)->keep, 0);
  EXPECT_EQ(m->plan_truncate(0, 10)->n_redo, 10u);

  const std::string before = snapshot(*m);
  Status st = m->seq_rm(0, 10, -1);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("no checkpoint"), std::string::npos) << st.message();
  EXPECT_EQ(snapshot(*m), before);
  // A head or middle range cannot be forgotten.
  EXPECT_EQ(m->seq_rm(0, 0, 5).code(), StatusCode::kNotSupported);
  EXPECT_EQ(m->seq_rm(0, 5, 10).code(), StatusCode::kNotSupported);
  EXPECT_EQ(m->seq_rm(-1, 10, -1).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(snapshot(*m), before);
  // Ranges past the end or before the start change nothing.
  EXPECT_TRUE(m->seq_rm(0, 26, -1).ok());
  EXPECT_TRUE(m->seq_rm(1, 3, -1).ok());
  EXPECT_EQ(snapshot(*m), before);

  // Cut back to 19, then re-decode [20, 22) and on: the same as a fresh run of the tokens.
  ASSERT_TRUE(m->seq_rm(0, 22, -1).ok());
  EXPECT_EQ(m->seq_pos_max(0), 19);
  EXPECT_EQ(m->checkpoints(0), (std::vector<Pos>{15, 19}));
  EXPECT_TRUE(cell_is(*m, 0, ref(*m, t, 20)));
  std::vector<int32_t> t2 = t;
  t2[22] = 999;  // a different continuation after the kept prefix
  Batch redo;
  add_rows(&redo, 0, t2, 20, 30);
  decode(*m, redo, 3);
  EXPECT_TRUE(cell_is(*m, 0, ref(*m, t2, 30)));
  EXPECT_EQ(m->checkpoints(0), (std::vector<Pos>{19, 23, 27}));

  // Removing the whole sequence always works.
  ASSERT_TRUE(m->seq_rm(0, 0, -1).ok());
  EXPECT_EQ(m->seq_pos_max(0), -1);
  EXPECT_TRUE(m->checkpoints(0).empty());
}

TEST(RecurrentMemoryTest, CopyKeepAddDiv) {
  std::mt19937 rng(13);
  auto m = make(config(4, 4, 4));
  const std::vector<int32_t> t = random_tokens(rng, 20);
  Batch b;
  add_rows(&b, 0, t, 0, 18);
  decode(*m, b, 4);  // checkpoints 3, 7, 11, 15

  ASSERT_TRUE(m->seq_cp(0, 1, -1, -1).ok());
  EXPECT_TRUE(cell_is(*m, 1, ref(*m, t, 18)));
  EXPECT_EQ(m->checkpoints(1), m->checkpoints(0));
  // A prefix ending inside the sequence copies a checkpoint: [0, 10) -> the state after 7.
  ASSERT_TRUE(m->seq_cp(0, 2, 0, 10).ok());
  EXPECT_EQ(m->seq_pos_max(2), 7);
  EXPECT_TRUE(cell_is(*m, 2, ref(*m, t, 8)));
  EXPECT_EQ(m->checkpoints(2), (std::vector<Pos>{3, 7}));
  EXPECT_EQ(m->seq_cp(0, 3, 0, 2).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(m->seq_cp(0, 3, 5, -1).code(), StatusCode::kNotSupported);
  EXPECT_EQ(m->seq_cp(0, 4, -1, -1).code(), StatusCode::kInvalidArgument);
  // The copies evolve independently.
  Batch more;
  add_rows(&more, 1, t, 18, 20);
  decode(*m, more, 4);
  EXPECT_TRUE(cell_is(*m, 1, ref(*m, t, 20)));
  EXPECT_TRUE(cell_is(*m, 0, ref(*m, t, 18)));

  // Positions move only as a whole.
  EXPECT_EQ(m->seq_add(0, 5, -1, 3).code(), StatusCode::kNotSupported);
  EXPECT_EQ(m->seq_add(0, -1, -1, -1).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(m->seq_add(0, -1, -1, 10).ok());
  EXPECT_EQ(m->seq_pos_min(0), 10);
  EXPECT_EQ(m->seq_pos_max(0), 27);
  EXPECT_EQ(m->checkpoints(0), (std::vector<Pos>{13, 17, 21, 25}));
  ASSERT_TRUE(m->seq_div(0, -1, -1, 2).ok());
  EXPECT_EQ(m->seq_pos_max(0), 13);
  EXPECT_EQ(m->checkpoints(0), (std::vector<Pos>{6, 8, 10, 12}));
  EXPECT_TRUE(cell_is(*m, 0, ref(*m, t, 18)));  // the state itself is untouched

  ASSERT_TRUE(m->seq_keep(1).ok());
  for (SeqId s : {0, 2, 3}) EXPECT_EQ(m->seq_pos_max(s), -1);
  EXPECT_EQ(m->seq_pos_max(1), 19);
  m->clear();
  EXPECT_EQ(m->seq_pos_max(1), -1);
}

TEST(RecurrentMemoryTest, RollbackRestoresCellsCheckpointsAndMetadata) {
  std::mt19937 rng(17);
  auto m = make(config(3, 4, 2));
  const std::vector<int32_t> t = random_tokens(rng, 60);
  Batch b;
  add_rows(&b, 0, t, 0, 13);  // checkpoints 7, 11
  add_rows(&b, 1, t, 0, 5);
  decode(*m, b, 4);
  const std::string before = snapshot(*m);
  const auto copy = m->copy();
  ASSERT_TRUE(copy.ok());
  EXPECT_EQ(snapshot(**copy), before);

  // A long batch that creates checkpoints (evicting both old ones), touches a new sequence, and
  // is rolled back after every ubatch but the last, and once after all of them.
  Batch big;
  add_rows(&big, 0, t, 13, 40);
  add_rows(&big, 2, t, 0, 9);
  add_rows(&big, 1, t, 5, 6);
  for (int stop = 0; stop <= 12; stop += 3) {
    auto ctx = m->init_batch(big, 5);
    ASSERT_TRUE(ctx->ok());
    int applied = 0;
    do {
      ASSERT_TRUE(ctx->apply().ok());
      fake_rs_forward(*ctx, kLayers);
      ++applied;
    } while (applied < stop && ctx->next());
    ctx->rollback();
    EXPECT_EQ(snapshot(*m), before) << "rolled back after " << applied << " ubatches";
    ctx->rollback();  // a second rollback does nothing
    EXPECT_EQ(snapshot(*m), before);
  }
  // The copy was never touched, and the original still decodes correctly.
  decode(*m, big, 5);
  EXPECT_TRUE(cell_is(*m, 0, ref(*m, t, 40)));
  EXPECT_TRUE(cell_is(*m, 2, ref(*m, t, 9)));
  EXPECT_TRUE(cell_is(*m, 1, ref(*m, t, 6)));
  EXPECT_EQ(snapshot(**copy), before);
  // A failed context changes nothing and refuses to apply.
  Batch gap;
  gap.add(1, 50, {0}, true);
  auto bad = m->init_batch(gap, 4);
  EXPECT_EQ(bad->status(), MemoryStatus::kInvalidBatch);
  EXPECT_FALSE(bad->apply().ok());
}

// Random decodes (some rolled back), tail removals, copies, keeps and clears against a reference
// that keeps each sequence's token list and checkpoint positions by the documented policy.
TEST(RecurrentMemoryTest, RandomOperationsMatchReference) {
  constexpr uint32_t kSeqs = 4, kInterval = 3, kCkpt = 3;
  struct RefSeq {
    std::vector<int32_t> toks;
    std::vector<Pos> ckpts;
  };
  std::mt19937 rng(23);
  auto m = make(config(kSeqs, kInterval, kCkpt));
  std::vector<RefSeq> ref_seqs(kSeqs);
  auto append = [&](RefSeq& r, int32_t tok) {
    const Pos p = static_cast<Pos>(r.toks.size());
    if (p > 0 && p % kInterval == 0 && (r.ckpts.empty() || r.ckpts.back() != p - 1)) {
      r.ckpts.push_back(p - 1);
      if (r.ckpts.size() > kCkpt) r.ckpts.erase(r.ckpts.begin());
    }
    r.toks.push_back(tok);
  };
  for (int step = 0; step < 600; ++step) {
    const uint32_t op = rng() % 10;
    const SeqId s = static_cast<SeqId>(rng() % kSeqs);
    RefSeq& r = ref_seqs[s];
    const Pos end = static_cast<Pos>(r.toks.size());
    if (op < 5) {  // decode a batch over a few sequences, rolled back one time in four
      Batch b;
      std::vector<RefSeq> next = ref_seqs;
      std::vector<int> n(kSeqs);
      for (SeqId q = 0; q < static_cast<SeqId>(kSeqs); ++q) n[q] = static_cast<int>(rng() % 6);
      for (int k = 0; k < 6; ++k) {
        for (SeqId q = 0; q < static_cast<SeqId>(kSeqs); ++q) {
          if (k >= n[q]) continue;
          const int32_t tok = static_cast<int32_t>(rng() % 1000);
          b.add(tok, static_cast<Pos>(next[q].toks.size()), {q}, false);
          append(next[q], tok);
        }
      }
      if (b.empty()) continue;
      auto ctx = m->init_batch(b, 1 + rng() % 5);
      ASSERT_TRUE(ctx->ok()) << ctx->message();
      const bool abort = rng() % 4 == 0;
      do {
        ASSERT_TRUE(ctx->apply().ok());
        fake_rs_forward(*ctx, kLayers);
      } while (ctx->next());
      if (abort) {
        ctx->rollback();
      } else {
        ref_seqs = std::move(next);
      }
    } else if (op < 7) {  // cut back a tail
      const Pos p = end == 0 ? 0 : static_cast<Pos>(rng() % (end + 1));
      Pos c = -1;
      for (Pos k : r.ckpts) {
        if (k <= p - 1) c = k;
      }
      auto plan = m->plan_truncate(s, p);
      ASSERT_TRUE(plan.ok());
      const Status st = m->seq_rm(s, p, -1);
      if (p == 0 || p == end) {
        ASSERT_TRUE(st.ok()) << st.to_string();
        ASSERT_EQ(plan->keep, p);
        if (p == 0) r = RefSeq{};
      } else if (c < 0) {
        ASSERT_EQ(st.code(), StatusCode::kOutOfRange) << "step " << step;
        ASSERT_EQ(plan->keep, 0);
      } else {
        ASSERT_TRUE(st.ok()) << st.to_string();
        ASSERT_EQ(plan->keep, c + 1);
        ASSERT_EQ(plan->n_redo, static_cast<uint32_t>(p - c - 1));
        r.toks.resize(c + 1);
        while (!r.ckpts.empty() && r.ckpts.back() > c) r.ckpts.pop_back();
      }
    } else if (op < 9) {  // copy s into another sequence
      const SeqId d = static_cast<SeqId>(rng() % kSeqs);
      const Status st = m->seq_cp(s, d, -1, -1);
      ASSERT_TRUE(st.ok());
      if (d != s && end > 0) ref_seqs[d] = r;
    } else if (rng() % 4 == 0) {
      ASSERT_TRUE(m->seq_keep(s).ok());
      for (SeqId q = 0; q < static_cast<SeqId>(kSeqs); ++q) {
        if (q != s) ref_seqs[q] = RefSeq{};
      }
    }
    for (SeqId q = 0; q < static_cast<SeqId>(kSeqs); ++q) {
      const RefSeq& rq = ref_seqs[q];
      const Pos n_toks = static_cast<Pos>(rq.toks.size());
      ASSERT_EQ(m->seq_pos_max(q), n_toks - 1) << "step " << step << " seq " << q;
      ASSERT_EQ(m->seq_pos_min(q), n_toks > 0 ? 0 : -1);
      ASSERT_EQ(m->checkpoints(q), rq.ckpts) << "step " << step << " seq " << q;
      if (n_toks > 0) {
        ASSERT_TRUE(cell_is(*m, q, ref_rs_state(*m, rq.toks, kLayers))) << "step " << step;
      }
      for (Pos c : rq.ckpts) {
        const auto want = ref_rs_state(
            *m, std::vector<int32_t>(rq.toks.begin(), rq.toks.begin() + c + 1), kLayers);
        ASSERT_EQ(std::memcmp(m->checkpoint(q, c).data(), want.data(), want.size() * 4), 0);
      }
    }
  }
}

}  // namespace
}  // namespace mnemo
