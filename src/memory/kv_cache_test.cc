// KvCache unit tests: configuration errors, accounting, placement (contiguous, scattered,
// causal and SWA reuse), full-cache errors, seq_cp across streams, shifts, masks, init_full.

#include "memory/kv_cache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "support/memory_testing.h"

namespace mnemo {
namespace {

KvCacheConfig small(uint32_t n_ctx, uint32_t n_seq_max, bool unified) {
  KvCacheConfig c;
  c.n_ctx = n_ctx;
  c.n_seq_max = n_seq_max;
  c.unified = unified;
  c.n_embd_k_gqa = {32, 64};
  c.n_embd_v_gqa = {32, 32};
  c.head_dim_v = 16;  // f16 V as 2 planes; q8_0 V (blocks of 32) as rows
  c.n_pad = 4;
  return c;
}

// Cell `cell`'s row of a K or V view (rows or planes).
std::vector<uint8_t> row_of(const KvRows& view, uint32_t cell) {
  std::vector<uint8_t> row(view.row_bytes);
  view.get_rows(cell, 1, row.data());
  return row;
}

std::unique_ptr<KvCache> make(KvCacheConfig c) {
  return testing::create_or_die<KvCache>(std::move(c));
}

// Runs every ubatch of `b` with the fake model; returns the placements (cells of the first
// placement entry of each ubatch, concatenated).
std::vector<uint32_t> decode(Memory& m, const Batch& b, uint32_t n_ubatch = 64, uint64_t gen = 1) {
  auto ctx = m.init_batch(b, n_ubatch);
  EXPECT_TRUE(ctx->ok()) << ctx->message();
  std::vector<uint32_t> cells;
  if (!ctx->ok()) return cells;
  do {
    EXPECT_TRUE(ctx->apply().ok());
    testing::write_fake_kv(*ctx, 2, gen);
    for (const StreamSlots& sl : ctx->kv_for_layer(0)->placement()) {
      cells.insert(cells.end(), sl.cells.begin(), sl.cells.end());
    }
  } while (ctx->next());
  return cells;
}

Batch tokens(SeqId s, Pos p0, int n) {
  Batch b;
  for (int i = 0; i < n; ++i) b.add(1, p0 + i, {s}, i + 1 == n);
  return b;
}

std::string create_error(KvCacheConfig c) {
  Result<std::unique_ptr<KvCache>> r = KvCache::create(std::move(c));
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.status().message();
}

TEST(KvCacheTest, ConfigErrors) {
  KvCacheConfig c = small(0, 1, true);
  EXPECT_NE(create_error(c).find("n_ctx"), std::string::npos);
  c = small(8, 257, false);
  EXPECT_NE(create_error(c).find("n_seq_max = 257"), std::string::npos);
  c = small(8, 0, false);
  EXPECT_NE(create_error(c).find("n_seq_max = 0"), std::string::npos);
  c = small(8, 1, true);
  c.n_embd_v_gqa.push_back(32);
  EXPECT_NE(create_error(c).find("n_embd_v_gqa"), std::string::npos);
  c = small(8, 1, true);
  c.k_type = GgmlType::Q4_0;
  c.n_embd_k_gqa = {32, 48};
  std::string m = create_error(c);
  EXPECT_NE(m.find("q4_0"), std::string::npos) << m;
  EXPECT_NE(m.find("layer 1 has n_embd_k_gqa = 48"), std::string::npos) << m;
  c = small(8, 1, true);
  c.v_type = GgmlType::Q4_K;
  EXPECT_NE(create_error(c).find("not a KV cache type"), std::string::npos);
  c = small(8, 1, true);
  c.swa_type = SwaType::kStandard;
  EXPECT_NE(create_error(c).find("n_swa"), std::string::npos);
  c = small(8, 2, false);
  c.stream_types = {{GgmlType::F16, GgmlType::F16}};
  EXPECT_NE(create_error(c).find("stream_types has 1"), std::string::npos);
}

// Three split streams of 100 cells with their own K/V types (f16 / f16, q8_0 / q4_0,
// f32 / iq4_nl) over two layers of widths K 64 / V 64 and K 128 / V 32.
KvCacheConfig mixed_streams() {
  KvCacheConfig c = small(100, 3, false);
  c.n_embd_k_gqa = {64, 128};
  c.n_embd_v_gqa = {64, 32};
  c.stream_types = {{GgmlType::F16, GgmlType::F16},
                    {GgmlType::Q8_0, GgmlType::Q4_0},
                    {GgmlType::F32, GgmlType::IQ4_NL}};
  return c;
}

TEST(KvCacheTest, BreakdownIsExact) {
  const KvCacheConfig c = mixed_streams();
  auto kv = make(c);
  decode(*kv, tokens(1, 0, 7));
  const MemoryBreakdown b = kv->breakdown();
  ASSERT_EQ(b.tensors.size(), 12u);  // 2 layers x 3 streams x K/V
  ASSERT_EQ(b.streams.size(), 3u);
  // Bytes per row by hand: f16 2/elem; q8_0 34 per 32; q4_0 18 per 32; f32 4; iq4_nl 18 per 32.
  const size_t want[3][2][2] = {
      {{64 * 2, 64 * 2}, {128 * 2, 32 * 2}},
      {{2 * 34, 2 * 18}, {4 * 34, 1 * 18}},
      {{64 * 4, 2 * 18}, {128 * 4, 1 * 18}},
  };
  size_t total = 0;
  for (const auto& t : b.tensors) {
    const size_t row = want[t.stream][t.layer][t.kind == 'K' ? 0 : 1];
    EXPECT_EQ(t.bytes, row * 100) << "layer " << t.layer << " stream " << t.stream << t.kind;
    EXPECT_EQ(t.n_cells, 100u);
    total += t.bytes;
  }
  EXPECT_EQ(b.tensor_bytes, total);
  EXPECT_EQ(b.streams[1].used, 7u);
  EXPECT_EQ(b.streams[1].free, 93u);
  EXPECT_EQ(b.streams[0].used, 0u);
  EXPECT_EQ(b.streams[1].k_type, GgmlType::Q8_0);
  for (const auto& s : b.streams) {
    EXPECT_GE(s.mapped_bytes, s.tensor_bytes);
    EXPECT_EQ(s.mapped_bytes % 4096, 0u);
  }
  EXPECT_NE(b.to_string().find("q8_0"), std::string::npos);

  // Replacing a stream with smaller types really maps fewer bytes.
  const size_t before = kv->storage().mapped_bytes(2);
  ASSERT_TRUE(kv->storage().replace_stream(2, {GgmlType::Q4_0, GgmlType::Q4_0}).ok());
  EXPECT_LT(kv->storage().mapped_bytes(2), before);
  EXPECT_EQ(kv->breakdown().streams[2].k_type, GgmlType::Q4_0);
}

// seq_info against row_size arithmetic done here and against breakdown() totals.
TEST(KvCacheTest, SeqInfoSplitIsTheSequencesStream) {
  const KvCacheConfig c = mixed_streams();
  auto kv = make(c);
  decode(*kv, tokens(1, 0, 7));
  decode(*kv, tokens(2, 0, 3));
  size_t sum = 0;
  for (SeqId s = 0; s < 3; ++s) {
    auto info = kv->seq_info(s);
    ASSERT_TRUE(info.ok()) << info.status().to_string();
    const KvStorage::StreamTypes t = c.stream_types[s];
    const size_t want = 100 * (row_size(t.k_type, 64) + row_size(t.v_type, 64) +
                               row_size(t.k_type, 128) + row_size(t.v_type, 32));
    EXPECT_EQ(info->seq_id, s);
    EXPECT_TRUE(info->has_kv);
    EXPECT_EQ(info->stream, uint32_t(s));
    EXPECT_EQ(info->k_type, t.k_type);
    EXPECT_EQ(info->v_type, t.v_type);
    const uint32_t held = s == 1 ? 7 : s == 2 ? 3 : 0;
    EXPECT_EQ(info->cells, held);
    EXPECT_EQ(info->free_cells, 100 - held);
    EXPECT_EQ(info->bytes, want) << "seq " << s;
    sum += info->bytes;
  }
  EXPECT_EQ(sum, kv->breakdown().tensor_bytes);
  EXPECT_EQ(kv->seq_info(3).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kv->seq_info(-1).status().code(), StatusCode::kInvalidArgument);

  // A requantized stream reports its new types and bytes.
  ASSERT_TRUE(kv->requantize_seq(1, GgmlType::Q4_0, GgmlType::Q4_0).ok());
  auto info = kv->seq_info(1);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->k_type, GgmlType::Q4_0);
  EXPECT_EQ(info->bytes, 100 * (row_size(GgmlType::Q4_0, 64) * 2 + row_size(GgmlType::Q4_0, 128) +
                                row_size(GgmlType::Q4_0, 32)));
  EXPECT_EQ(info->cells, 7u);
}

TEST(KvCacheTest, SeqInfoUnifiedChargesASharePerCellHeld) {
  auto kv = make(small(64, 3, true));
  decode(*kv, tokens(0, 0, 10));
  ASSERT_TRUE(kv->seq_cp(0, 1, 0, 4).ok());  // seq 1 shares 4 of seq 0's cells
  decode(*kv, tokens(1, 4, 5));
  const size_t total = kv->breakdown().tensor_bytes;
  EXPECT_EQ(total, 64 * (row_size(GgmlType::F16, 32) * 3 + row_size(GgmlType::F16, 64)));
  const uint32_t want_cells[3] = {10, 9, 0};
  for (SeqId s = 0; s < 3; ++s) {
    auto info = kv->seq_info(s);
    ASSERT_TRUE(info.ok());
    EXPECT_TRUE(info->has_kv);
    EXPECT_EQ(info->stream, 0u);
    EXPECT_EQ(info->cells, want_cells[s]) << "seq " << s;
    EXPECT_EQ(info->free_cells, 64u - 15u);  // 10 + 5 cells used, shared by all
    EXPECT_EQ(info->bytes, total * want_cells[s] / 64) << "seq " << s;
  }
}

TEST(KvCacheTest, ViewsFollowTheLayerFilter) {
  KvCacheConfig c = small(16, 1, true);
  c.n_embd_k_gqa = {32, 64, 96};
  c.n_embd_v_gqa = {32, 64, 96};
  c.layer_filter = [](uint32_t il) { return il != 1; };
  auto kv = make(c);
  EXPECT_TRUE(kv->holds_layer(0));
  EXPECT_FALSE(kv->holds_layer(1));
  EXPECT_TRUE(kv->holds_layer(2));
  EXPECT_FALSE(kv->holds_layer(3));
  const KvRows k2 = kv->k_view(2, 0);
  EXPECT_EQ(k2.n_embd, 96u);
  EXPECT_EQ(k2.row_bytes, row_size(GgmlType::F16, 96));
  EXPECT_EQ(k2.n_cells, 16u);
  EXPECT_EQ(kv->breakdown().tensors.size(), 4u);
  auto ctx = kv->init_batch(tokens(0, 0, 1), 8);
  ASSERT_TRUE(ctx->ok());
  EXPECT_EQ(ctx->kv_for_layer(1), nullptr);
  EXPECT_NE(ctx->kv_for_layer(2), nullptr);
}

TEST(KvCacheTest, ContiguousThenScatteredPlacement) {
  auto kv = make(small(8, 2, true));
  EXPECT_EQ(decode(*kv, tokens(0, 0, 5)), (std::vector<uint32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(kv->cells(0).head(), 5u);
  EXPECT_EQ(decode(*kv, tokens(0, 5, 1)), (std::vector<uint32_t>{5}));
  // Free positions 1 and 3: head moves back to the first hole.
  ASSERT_TRUE(kv->seq_rm(0, 1, 2).ok());
  ASSERT_TRUE(kv->seq_rm(0, 3, 4).ok());
  EXPECT_EQ(kv->cells(0).head(), 1u);
  auto ctx = kv->init_batch(tokens(1, 0, 3), 8);
  ASSERT_TRUE(ctx->ok());
  const StreamSlots& sl = static_cast<const KvCacheContext&>(*ctx).placement()[0];
  EXPECT_EQ(sl.cells, (std::vector<uint32_t>{1, 3, 6}));
  EXPECT_FALSE(sl.contiguous);
  // Nothing changed before apply().
  EXPECT_TRUE(kv->cells(0).is_empty(1));
  ASSERT_TRUE(ctx->apply().ok());
  EXPECT_EQ(kv->cells(0).pos(3), 1);
  EXPECT_TRUE(kv->cells(0).seq_has(6, 1));
  EXPECT_EQ(kv->cells(0).head(), 7u);
}

TEST(KvCacheTest, FullCacheFailsWithNothingChanged) {
  auto kv = make(small(8, 2, true));
  decode(*kv, tokens(0, 0, 6));
  const std::string before = testing::snapshot(*kv);
  // 3 rows in ubatches of 2: the first fits, the second does not; nothing may change.
  auto ctx = kv->init_batch(tokens(0, 6, 3), 2);
  EXPECT_EQ(ctx->status(), MemoryStatus::kFailedPrepare);
  EXPECT_NE(ctx->message().find("ubatch 1 of 2"), std::string::npos) << ctx->message();
  EXPECT_NE(ctx->message().find("no room"), std::string::npos) << ctx->message();
  EXPECT_FALSE(ctx->apply().ok());
  EXPECT_FALSE(ctx->next());
  EXPECT_EQ(testing::snapshot(*kv), before);
  // A ubatch larger than the stream.
  auto big = kv->init_batch(tokens(1, 0, 9), 16);
  EXPECT_EQ(big->status(), MemoryStatus::kFailedPrepare);
  EXPECT_EQ(testing::snapshot(*kv), before);
  // Two rows still fit.
  decode(*kv, tokens(0, 6, 2));
  EXPECT_EQ(kv->cells(0).used(), 8u);

  // Split mode: one full stream fails the whole batch, the other stream alone fits.
  auto split = make(small(4, 2, false));
  decode(*split, tokens(1, 0, 4));
  Batch both;
  both.add(1, 0, {0});
  both.add(1, 4, {1});
  const std::string s_before = testing::snapshot(*split);
  EXPECT_EQ(split->init_batch(both, 8)->status(), MemoryStatus::kFailedPrepare);
  EXPECT_EQ(testing::snapshot(*split), s_before);
  decode(*split, tokens(0, 0, 4));
}

TEST(KvCacheTest, InvalidBatchesChangeNothing) {
  auto split = make(small(8, 2, false));
  Batch shared;
  shared.add(1, 0, {0, 1});
  auto ctx = split->init_batch(shared, 8);
  EXPECT_EQ(ctx->status(), MemoryStatus::kInvalidBatch);
  EXPECT_NE(ctx->message().find("seq_cp"), std::string::npos);
  EXPECT_EQ(split->init_batch(tokens(2, 0, 1), 8)->status(), MemoryStatus::kInvalidBatch);
  EXPECT_EQ(split->init_batch(tokens(0, 1, 1), 8)->status(), MemoryStatus::kInvalidBatch);
  EXPECT_EQ(split->init_batch(tokens(0, 0, 1), 0)->status(), MemoryStatus::kInvalidBatch);
  BatchLimits l;
  l.n_vocab = 1;
  EXPECT_EQ(split->init_batch(tokens(0, 0, 1), 8, l)->status(), MemoryStatus::kInvalidBatch);
  EXPECT_EQ(split->cells(0).used() + split->cells(1).used(), 0u);
  // The unified cache accepts the shared row: one cell, both sequences.
  auto uni = make(small(8, 2, true));
  decode(*uni, shared);
  EXPECT_EQ(uni->cells(0).used(), 1u);
  EXPECT_EQ(uni->cells(0).seqs(0).count(), 2u);
}

// A hand-built ubatch (prepare() takes already validated ubatches) re-decoding an old position.
std::shared_ptr<const std::vector<Ubatch>> one_row(SeqId s, Pos p) {
  Batch b;
  b.add(1, 0, {s});  // validated as a fresh sequence, then moved to p by hand
  BatchLimits l;
  l.n_seq_max = 2;
  Result<PreparedBatch> pb = prepare_batch(b, l, [](SeqId) { return Pos{-1}; });
  CHECK(pb.ok());
  pb->pos[0] = p;
  auto u = split_batch(*pb, SplitStrategy::kSimple, 1);
  CHECK(u.ok());
  return std::make_shared<const std::vector<Ubatch>>(std::move(u).value());
}

TEST(KvCacheTest, FindSlotReusesCausallyOverwrittenCells) {
  auto kv = make(small(4, 2, true));
  decode(*kv, tokens(0, 0, 4));  // full: pos 0..3 in cells 0..3, head 0
  // A row of seq 0 at pos 2: cells with pos >= 2 of seq 0 are hidden from it, so reusable.
  auto ctx = kv->prepare(one_row(0, 2));
  ASSERT_TRUE(ctx->ok()) << ctx->message();
  EXPECT_EQ(ctx->placement()[0].cells, (std::vector<uint32_t>{2}));
  // Another sequence's row may not take seq 0's cells.
  EXPECT_EQ(kv->prepare(one_row(1, 2))->status(), MemoryStatus::kFailedPrepare);
  // A cell shared with seq 1 is not masked for seq 1: not reusable.
  ASSERT_TRUE(kv->seq_cp(0, 1, 2, 4).ok());
  EXPECT_EQ(kv->prepare(one_row(0, 2))->status(), MemoryStatus::kFailedPrepare);
  // Without a causal mask nothing is hidden.
  KvCacheConfig nc = small(4, 2, true);
  nc.causal = false;
  auto kv2 = make(nc);
  decode(*kv2, tokens(0, 0, 4));
  EXPECT_EQ(kv2->prepare(one_row(0, 2))->status(), MemoryStatus::kFailedPrepare);
}

TEST(KvCacheTest, FindSlotReusesCellsOutsideTheWindowOldestFirst) {
  KvCacheConfig c = small(6, 2, true);
  c.swa_type = SwaType::kStandard;
  c.n_swa = 4;
  auto kv = make(c);
  decode(*kv, tokens(0, 0, 6));  // pos 0..5 in cells 0..5
  // Next position 6 sees (2, 6]: positions 0..2 are hidden; the oldest (cell 0) goes first.
  EXPECT_EQ(decode(*kv, tokens(0, 6, 1), 8, 2), (std::vector<uint32_t>{0}));
  EXPECT_EQ(kv->seq_pos_min(0), 1);
  // Next 7 sees (3, 7]: 1..3 hidden, exactly 3 cells for 3 rows.
  EXPECT_EQ(decode(*kv, tokens(0, 7, 3), 8, 3), (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_EQ(kv->seq_pos_min(0), 4);
  // The window is judged before the ubatch: pos_max 9 -> 10 sees (6, 10]: 4, 5, 6 may go.
  EXPECT_EQ(decode(*kv, tokens(0, 10, 3), 8, 4), (std::vector<uint32_t>{4, 5, 0}));
  // pos_max 12 -> 13 sees (9, 13]: only 7, 8, 9 are hidden; 4 rows do not fit.
  const std::string before = testing::snapshot(*kv);
  EXPECT_EQ(kv->init_batch(tokens(0, 13, 4), 8)->status(), MemoryStatus::kFailedPrepare);
  EXPECT_EQ(testing::snapshot(*kv), before);
  // Another sequence's cells are judged by that sequence's own window.
  Batch other;
  other.add(1, 0, {1});
  auto ctx = kv->init_batch(other, 8);
  ASSERT_TRUE(ctx->ok()) << ctx->message();
  EXPECT_EQ(static_cast<const KvCacheContext&>(*ctx).placement()[0].cells,
            (std::vector<uint32_t>{1}));  // seq 0's pos 7 (cell 1) is outside seq 0's window
}

TEST(KvCacheTest, FindSlotEvictsOldestFirstOutOfRingOrder) {
  KvCacheConfig c = small(4, 1, true);
  c.swa_type = SwaType::kStandard;
  c.n_swa = 1;  // a token sees only itself: everything already held is outside the window
  auto kv = make(c);
  decode(*kv, tokens(0, 0, 4));               // cells 0..3 hold 0..3, head 0
  ASSERT_TRUE(kv->seq_add(0, 0, 1, 2).ok());  // cell 0 now holds 2: positions 2, 1, 2, 3
  // The sweep from head meets cell 0 (2) before the oldest (cell 1: 1), so it takes cells 1 and
  // 2, passes 3 (2 is still held by cell 0); evicting oldest first then takes cells 0 and 3.
  auto ctx = kv->init_batch(tokens(0, 4, 4), 4);
  ASSERT_TRUE(ctx->ok()) << ctx->message();
  EXPECT_EQ(static_cast<const KvCacheContext&>(*ctx).placement()[0].cells,
            (std::vector<uint32_t>{1, 2, 0, 3}));
}

TEST(KvCacheTest, RollbackRestoresReusedRows) {
  KvCacheConfig c = small(4, 1, true);
  c.swa_type = SwaType::kStandard;
  c.n_swa = 2;
  auto kv = make(c);
  decode(*kv, tokens(0, 0, 4));
  const std::string before = testing::snapshot(*kv);
  auto ctx = kv->init_batch(tokens(0, 4, 2), 1);  // 2 ubatches, each evicts the oldest cell
  ASSERT_TRUE(ctx->ok());
  ASSERT_TRUE(ctx->apply().ok());
  testing::write_fake_kv(*ctx, 2, 9);
  ASSERT_TRUE(ctx->next());
  ASSERT_TRUE(ctx->apply().ok());
  testing::scribble_kv(*ctx, 2);
  EXPECT_NE(testing::snapshot(*kv), before);
  ctx->rollback();
  EXPECT_EQ(testing::snapshot(*kv), before);
  ctx->rollback();  // a second rollback is a no-op
  EXPECT_EQ(testing::snapshot(*kv), before);

  // Each cell reused twice in one transaction: the first reuse saved the original rows.
  KvCacheConfig c2 = small(2, 1, true);
  c2.swa_type = SwaType::kStandard;
  c2.n_swa = 1;
  auto kv2 = make(c2);
  decode(*kv2, tokens(0, 0, 2));
  const std::string before2 = testing::snapshot(*kv2);
  auto ctx2 = kv2->init_batch(tokens(0, 2, 4), 1);
  ASSERT_TRUE(ctx2->ok()) << ctx2->message();
  std::vector<uint32_t> cells;
  do {
    ASSERT_TRUE(ctx2->apply().ok());
    testing::write_fake_kv(*ctx2, 2, 10 + ctx2->ubatch_index());
    cells.push_back(ctx2->kv_for_layer(0)->placement()[0].cells[0]);
  } while (ctx2->next());
  EXPECT_EQ(cells, (std::vector<uint32_t>{0, 1, 0, 1}));
  ctx2->rollback();
  EXPECT_EQ(testing::snapshot(*kv2), before2);
}

TEST(KvCacheDeathTest, ApplyAfterAnotherMutationIsABug) {
  auto kv = make(small(8, 1, true));
  auto ctx = kv->init_batch(tokens(0, 0, 2), 8);
  ASSERT_TRUE(ctx->ok());
  ASSERT_TRUE(kv->seq_rm(-1, -1, -1).ok());
  EXPECT_DEATH((void)ctx->apply(), "changed since init_batch");
}

TEST(KvCacheTest, SeqCpAcrossStreamsCopiesAnyRangeAndConvertsTypes) {
  KvCacheConfig c = small(16, 3, false);
  c.stream_types = {{GgmlType::F16, GgmlType::F16},
                    {GgmlType::Q8_0, GgmlType::Q8_0},
                    {GgmlType::F16, GgmlType::F16}};
  auto kv = make(c);
  // The "model" writes real values: element i of layer il at pos p.
  auto value = [](uint32_t il, char kind, Pos p, uint32_t i) {
    return std::sin(0.1f * (i + 1) * (p + 1) + il + (kind == 'V' ? 0.5f : 0.f));
  };
  auto ctx = kv->init_batch(tokens(0, 0, 10), 16);
  ASSERT_TRUE(ctx->ok());
  ASSERT_TRUE(ctx->apply().ok());
  const auto* kctx = ctx->kv_for_layer(0);
  for (uint32_t il = 0; il < 2; ++il) {
    for (char kind : {'K', 'V'}) {
      const KvRows v = kind == 'K' ? kctx->k_view(il, 0) : kctx->v_view(il, 0);
      std::vector<float> row(v.n_embd);
      const StreamSlots& sl = kctx->placement()[0];
      for (size_t j = 0; j < sl.cells.size(); ++j) {
        for (uint32_t i = 0; i < v.n_embd; ++i)
          row[i] = value(il, kind, ctx->ubatch().pos[sl.rows[j]], i);
        std::vector<uint8_t> bytes(v.row_bytes);
        ASSERT_TRUE(quantize_row(v.type, row.data(), bytes.data(), v.n_embd).ok());
        v.set_rows(sl.cells[j], 1, bytes.data());
      }
    }
  }
  ASSERT_TRUE(kv->seq_add(0, 8, -1, 2).ok());  // positions 8, 9 -> 10, 11 with a pending shift

  // Partial range, same type: byte copies.
  ASSERT_TRUE(kv->seq_cp(0, 2, 3, 7).ok());
  EXPECT_EQ(kv->seq_pos_min(2), 3);
  EXPECT_EQ(kv->seq_pos_max(2), 6);
  EXPECT_EQ(kv->cells(2).used(), 4u);
  const KvCells& c0 = kv->cells(0);
  const KvCells& c2 = kv->cells(2);
  for (uint32_t d = 0; d < c2.size(); ++d) {
    if (c2.is_empty(d)) continue;
    EXPECT_TRUE(c2.seqs(d) == SeqSet::of(2));
    const uint32_t s = static_cast<uint32_t>(c2.pos(d));  // stream 0 holds pos p in cell p
    ASSERT_EQ(c0.pos(s), c2.pos(d));
    for (uint32_t il = 0; il < 2; ++il) {
      EXPECT_EQ(row_of(kv->k_view(il, 2), d), row_of(kv->k_view(il, 0), s));
      EXPECT_EQ(row_of(kv->v_view(il, 2), d), row_of(kv->v_view(il, 0), s));
    }
  }

  // Open range into a q8_0 stream: converted, close to the values, pending shifts kept.
  ASSERT_TRUE(kv->seq_cp(0, 1, 5, -1).ok());
  const KvCells& c1 = kv->cells(1);
  EXPECT_EQ(c1.used(), 5u);  // 5, 6, 7, 10, 11
  EXPECT_EQ(kv->seq_pos_max(1), 11);
  uint32_t n_shifted = 0;
  for (uint32_t d = 0; d < c1.size(); ++d) {
    if (c1.is_empty(d)) continue;
    n_shifted += c1.shift(d) == 2;
    const Pos written = c1.pos(d) - c1.shift(d);  // the position K/V were computed at
    for (uint32_t il = 0; il < 2; ++il) {
      // K rows, and V from f16 planes into q8_0 rows.
      for (char kind : {'K', 'V'}) {
        const KvRows view = kind == 'K' ? kv->k_view(il, 1) : kv->v_view(il, 1);
        std::vector<float> got(view.n_embd);
        ASSERT_TRUE(
            dequantize_row(view.type, row_of(view, d).data(), got.data(), view.n_embd).ok());
        for (uint32_t i = 0; i < view.n_embd; ++i) {
          // f16 then q8_0 of values in [-1, 1]: within one q8_0 step (max / 127) plus f16 error.
          EXPECT_NEAR(got[i], value(il, kind, written, i), 1.0f / 127 + 1e-3f);
        }
      }
    }
  }
  EXPECT_EQ(n_shifted, 2u);

  // No room: stream 2 has 12 free cells, seq 0 holds 10 -> fits once, not after filling.
  decode(*kv, tokens(2, 7, 9), 16, 5);
  const std::string before = testing::snapshot(*kv);
  const Status st = kv->seq_cp(0, 2, -1, -1);
  EXPECT_EQ(st.code(), StatusCode::kNoSpace) << st.to_string();
  EXPECT_EQ(testing::snapshot(*kv), before);
  // Out-of-range ids.
  EXPECT_EQ(kv->seq_cp(0, 3, -1, -1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kv->seq_cp(-1, 1, -1, -1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(testing::snapshot(*kv), before);
}

TEST(KvCacheTest, SeqCpInOneStreamSharesCells) {
  auto kv = make(small(8, 3, true));
  decode(*kv, tokens(0, 0, 4));
  ASSERT_TRUE(kv->seq_cp(0, 2, 1, 3).ok());
  EXPECT_EQ(kv->cells(0).used(), 4u);  // no new cells
  EXPECT_EQ(kv->seq_pos_min(2), 1);
  EXPECT_EQ(kv->seq_pos_max(2), 2);
  EXPECT_TRUE(kv->cells(0).seq_has(1, 2) && kv->cells(0).seq_has(2, 2));
  // seq 2 continues from its own end.
  decode(*kv, tokens(2, 3, 1));
  EXPECT_EQ(kv->seq_pos_max(0), 3);
  EXPECT_EQ(kv->seq_pos_max(2), 3);
  ASSERT_TRUE(kv->seq_keep(2).ok());
  EXPECT_EQ(kv->seq_pos_max(0), -1);
  EXPECT_EQ(kv->cells(0).used(), 3u);
}

TEST(KvCacheTest, ShiftsAreRecordedListedAndCleared) {
  auto kv = make(small(16, 2, true));
  decode(*kv, tokens(0, 0, 10));
  EXPECT_EQ(kv->init_update()->status(), MemoryStatus::kNoUpdate);
  // Context shift: drop [2, 5) and move the rest back by 3.
  ASSERT_TRUE(kv->seq_rm(0, 2, 5).ok());
  ASSERT_TRUE(kv->seq_add(0, 5, -1, -3).ok());
  EXPECT_EQ(kv->seq_pos_min(0), 0);
  EXPECT_EQ(kv->seq_pos_max(0), 6);
  auto upd = kv->init_update();
  ASSERT_EQ(upd->status(), MemoryStatus::kSuccess);
  const auto& sh = upd->kv_for_layer(0)->shifts();
  ASSERT_EQ(sh.size(), 1u);
  EXPECT_EQ(sh[0].cells, (std::vector<uint32_t>{5, 6, 7, 8, 9}));
  EXPECT_EQ(sh[0].deltas, (std::vector<int32_t>(5, -3)));
  const std::string before = testing::snapshot(*kv);
  ASSERT_TRUE(upd->apply().ok());
  EXPECT_EQ(kv->cells(0).n_shifted(), 0u);
  upd->rollback();
  EXPECT_EQ(testing::snapshot(*kv), before);  // shifts back
  upd = kv->init_update();
  ASSERT_TRUE(upd->apply().ok());
  EXPECT_EQ(kv->init_update()->status(), MemoryStatus::kNoUpdate);

  // seq_div halves positions and records new - old; shifts accumulate.
  ASSERT_TRUE(kv->seq_div(0, 4, -1, 2).ok());  // 4, 5, 6 -> 2, 2, 3
  ASSERT_TRUE(kv->seq_add(0, 3, 4, 10).ok());  // the 3 -> 13
  EXPECT_EQ(kv->cells(0).pos(9), 13);
  EXPECT_EQ(kv->cells(0).shift(9), (3 - 6) + 10);
  EXPECT_EQ(kv->cells(0).shift(7), 2 - 4);
  EXPECT_EQ(kv->seq_div(0, 0, -1, 0).code(), StatusCode::kInvalidArgument);

  // A position moved below 0 empties the cell.
  ASSERT_TRUE(kv->seq_add(0, 0, 2, -1).ok());  // 0 -> gone, 1 -> 0
  EXPECT_EQ(kv->cells(0).used(), 6u);
  EXPECT_EQ(kv->seq_pos_min(0), 0);
  EXPECT_EQ(kv->seq_add(0, 0, -1, INT32_MAX).code(), StatusCode::kOutOfRange);
}

TEST(KvCacheTest, SharedCellsMoveForEverySequence) {
  auto kv = make(small(8, 2, true));
  Batch b;
  b.add(1, 0, {0, 1});
  b.add(1, 1, {0, 1});
  decode(*kv, b);
  ASSERT_TRUE(kv->seq_add(0, 1, 2, 5).ok());
  EXPECT_EQ(kv->seq_pos_max(1), 6);  // documented: a shared cell has one position
}

TEST(KvCacheTest, MasksByHand) {
  // Unified, two sequences in one ubatch: rows s0@0, s1@0, s0@1, s1@1, s0@2 -> cells 0..4.
  KvCacheConfig c = small(8, 2, true);
  auto kv = make(c);
  Batch b;
  b.add(1, 0, {0});
  b.add(1, 0, {1});
  b.add(1, 1, {0});
  b.add(1, 1, {1});
  b.add(1, 2, {0});
  auto ctx = kv->init_batch(b, 8);
  ASSERT_TRUE(ctx->ok());
  ASSERT_TRUE(ctx->apply().ok());
  const KvCacheContext& kc = *ctx->kv_for_layer(0);
  EXPECT_EQ(kc.n_kv(0), 8u);  // used_max 5 padded to 4 -> 8
  std::vector<float> m;
  kc.build_mask(0, &m);
  ASSERT_EQ(m.size(), 5u * 8);
  const char* want[5] = {"x.......", ".x......", "x.x.....", ".x.x....", "x.x.x..."};
  for (int r = 0; r < 5; ++r) {
    for (int cell = 0; cell < 8; ++cell) {
      EXPECT_EQ(m[r * 8 + cell] == 0.0f, want[r][cell] == 'x') << "row " << r << " cell " << cell;
      if (want[r][cell] != 'x') {
        EXPECT_TRUE(std::isinf(m[r * 8 + cell]) && m[r * 8 + cell] < 0);
      }
    }
  }

  // Standard window of 2 and chunked window of 2, one sequence at 0..4.
  for (SwaType t : {SwaType::kStandard, SwaType::kChunked}) {
    KvCacheConfig w = small(8, 1, true);
    w.swa_type = t;
    w.n_swa = 2;
    w.swa_reuse = false;
    auto kw = make(w);
    auto cw = kw->init_batch(tokens(0, 0, 5), 8);
    ASSERT_TRUE(cw->ok());
    ASSERT_TRUE(cw->apply().ok());
    std::vector<float> mw;
    cw->kv_for_layer(0)->build_mask(0, &mw);
    const char* std_want[5] = {"x.......", "xx......", ".xx.....", "..xx....", "...xx..."};
    const char* chk_want[5] = {"x.......", "xx......", "..x.....", "..xx....", "....x..."};
    const char** wt = t == SwaType::kStandard ? std_want : chk_want;
    for (int r = 0; r < 5; ++r) {
      for (int cell = 0; cell < 8; ++cell) {
        EXPECT_EQ(mw[r * 8 + cell] == 0.0f, wt[r][cell] == 'x')
            << swa_type_name(t) << " row " << r << " cell " << cell;
      }
    }
  }
}

TEST(KvCacheTest, InitFullReportsEveryCell) {
  auto kv = make(small(12, 3, false));
  decode(*kv, tokens(1, 0, 3));
  const std::string before = testing::snapshot(*kv);
  auto full = kv->init_full();
  ASSERT_TRUE(full->ok());
  EXPECT_TRUE(full->ubatches().empty());
  EXPECT_FALSE(full->next());
  const KvCacheContext* kc = full->kv_for_layer(1);
  ASSERT_NE(kc, nullptr);
  for (uint32_t s = 0; s < 3; ++s) EXPECT_EQ(kc->n_kv(s), 12u);
  EXPECT_EQ(kc->k_view(1, 2).n_cells, 12u);
  EXPECT_TRUE(full->apply().ok());
  EXPECT_EQ(testing::snapshot(*kv), before);
}

TEST(KvCacheTest, SplitModeUbatchesAndOutputOrder) {
  auto kv = make(small(8, 4, false));
  Batch b;  // seq 2 x3, seq 1 x1, seq 3 x2, interleaved; outputs on every row
  const SeqId seqs[] = {2, 1, 2, 3, 2, 3};
  Pos next[4] = {0, 0, 0, 0};
  for (SeqId s : seqs) {
    b.add(10 * s + next[s], next[s], {s}, true);
    ++next[s];
  }
  auto ctx = kv->init_batch(b, 8);
  ASSERT_TRUE(ctx->ok());
  // split_equal: seqs 1, 2, 3 one row each, then 2, 3, then 2.
  ASSERT_EQ(ctx->ubatches().size(), 3u);
  EXPECT_EQ(ctx->ubatches()[0].seqs, (std::vector<SeqId>{1, 2, 3}));
  const auto& pl = static_cast<const KvCacheContext&>(*ctx).placement();
  ASSERT_EQ(pl.size(), 3u);
  EXPECT_EQ(pl[0].stream, 1u);
  EXPECT_EQ(pl[2].stream, 3u);
  const std::vector<uint32_t> order = output_order(ctx->ubatches());
  std::vector<int32_t> got(order.size());
  size_t k = 0;
  for (const Ubatch& u : ctx->ubatches()) {
    for (uint32_t i = 0; i < u.n_tokens(); ++i) got[order[k++]] = u.token[i];
  }
  EXPECT_EQ(got, (std::vector<int32_t>{20, 10, 21, 30, 22, 31}));
}

TEST(KvCacheTest, CopyIsDeep) {
  auto kv = make(small(8, 1, true));
  decode(*kv, tokens(0, 0, 3));
  Result<std::unique_ptr<KvCache>> c = kv->copy();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(testing::snapshot(**c), testing::snapshot(*kv));
  ASSERT_TRUE((*c)->seq_rm(0, -1, -1).ok());
  EXPECT_EQ(kv->seq_pos_max(0), 2);
}

TEST(MemoryTest, StatusNames) {
  EXPECT_EQ(memory_status_name(MemoryStatus::kFailedPrepare), "failed_prepare");
  EXPECT_EQ(memory_status_name(MemoryStatus::kNoUpdate), "no_update");
  EXPECT_EQ(swa_type_name(SwaType::kChunked), "chunked");
}

}  // namespace
}  // namespace mnemo
