// SwaKvCache: sizing, the fit guarantee of an n_swa + n_ubatch SWA cache, one transaction over
// both children, seq_pos_min semantics, swa_full, and checked-before-changed sequence ops.

#include "memory/swa_kv_cache.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "support/memory_testing.h"

namespace mnemo {
namespace {

constexpr uint32_t kLayers = 12;  // Gemma 3 pattern: layers 5 and 11 global, the rest local

SwaKvCacheConfig gemma_like(uint32_t n_ctx, uint32_t n_seq_max, bool unified) {
  SwaKvCacheConfig c;
  c.kv.n_ctx = n_ctx;
  c.kv.n_seq_max = n_seq_max;
  c.kv.unified = unified;
  c.kv.n_embd_k_gqa.assign(kLayers, 32);
  c.kv.n_embd_v_gqa.assign(kLayers, 32);
  c.is_swa_layer = [](uint32_t il) { return il % 6 != 5; };
  c.kv.swa_type = SwaType::kStandard;
  c.kv.n_swa = 16;
  c.n_ubatch = 8;
  c.kv.n_pad = 8;
  return c;
}

std::unique_ptr<SwaKvCache> make(SwaKvCacheConfig c) {
  return testing::create_or_die<SwaKvCache>(std::move(c));
}

Batch tokens(SeqId s, Pos p0, int n) {
  Batch b;
  for (int i = 0; i < n; ++i) b.add(1, p0 + i, {s}, i + 1 == n);
  return b;
}

MemoryStatus decode(Memory& m, const Batch& b, uint32_t n_ubatch, uint64_t gen = 1) {
  auto ctx = m.init_batch(b, n_ubatch);
  if (!ctx->ok()) {
    ADD_FAILURE() << ctx->message();
    return ctx->status();
  }
  do {
    EXPECT_TRUE(ctx->apply().ok());
    testing::write_fake_kv(*ctx, kLayers, gen);
  } while (ctx->next());
  return MemoryStatus::kSuccess;
}

TEST(SwaKvCacheTest, Sizing) {
  auto split = make(gemma_like(256, 3, false));
  EXPECT_EQ(split->base().n_ctx(), 256u);
  EXPECT_EQ(split->swa().n_ctx(), 24u);  // 16 + 8, already a multiple of 8
  EXPECT_EQ(split->base().storage().n_layer(), 2u);
  EXPECT_EQ(split->swa().storage().n_layer(), 10u);
  EXPECT_TRUE(split->base().holds_layer(5) && split->base().holds_layer(11));
  EXPECT_FALSE(split->swa().holds_layer(5));

  auto uni = make(gemma_like(256, 3, true));
  EXPECT_EQ(uni->swa().n_ctx(), 56u);  // 16 * 3 + 8

  SwaKvCacheConfig c = gemma_like(256, 3, false);
  c.n_ubatch = 10;
  EXPECT_EQ(make(c)->swa().n_ctx(), 32u);  // 26 rounded up to 8
  c.swa_full = true;
  EXPECT_EQ(make(c)->swa().n_ctx(), 256u);
  c = gemma_like(20, 1, false);
  EXPECT_EQ(make(c)->swa().n_ctx(), 20u);  // never more than n_ctx

  const MemoryBreakdown b = split->breakdown();
  size_t base_bytes = 0, swa_bytes = 0;
  for (const auto& t : b.tensors) (t.part == "kv_base" ? base_bytes : swa_bytes) += t.bytes;
  EXPECT_EQ(base_bytes, 2u * 3 * 2 * 256 * 64);  // 2 layers x 3 streams x K,V x cells x row
  EXPECT_EQ(swa_bytes, 10u * 3 * 2 * 24 * 64);
  EXPECT_EQ(b.tensor_bytes, base_bytes + swa_bytes);

  c = gemma_like(64, 1, false);
  c.is_swa_layer = nullptr;
  EXPECT_FALSE(SwaKvCache::create(c).ok());
  c = gemma_like(64, 1, false);
  c.kv.n_swa = 0;
  EXPECT_FALSE(SwaKvCache::create(c).ok());
  // A window wider than any position (int32) is refused: its arithmetic would overflow.
  c = gemma_like(64, 1, false);
  c.kv.n_swa = 0x80000000u;
  EXPECT_FALSE(SwaKvCache::create(c).ok());
  c.kv.n_swa = 0x7FFFFFFEu;  // the largest position: a window that hides nothing
  EXPECT_TRUE(SwaKvCache::create(c).ok());
}

// seq_info: the base child's stream, types and cells (it bounds what a sequence holds), bytes
// of both children, against row arithmetic and breakdown() totals.
TEST(SwaKvCacheTest, SeqInfoCountsBothChildren) {
  auto split = make(gemma_like(256, 3, false));
  ASSERT_EQ(decode(*split, tokens(1, 0, 40), 8), MemoryStatus::kSuccess);
  size_t sum = 0;
  for (SeqId s = 0; s < 3; ++s) {
    auto info = split->seq_info(s);
    ASSERT_TRUE(info.ok()) << info.status().to_string();
    EXPECT_TRUE(info->has_kv);
    EXPECT_EQ(info->stream, uint32_t(s));
    EXPECT_EQ(info->k_type, GgmlType::F16);
    EXPECT_EQ(info->v_type, GgmlType::F16);
    EXPECT_EQ(info->cells, s == 1 ? 40u : 0u);
    EXPECT_EQ(info->free_cells, s == 1 ? 216u : 256u);
    // 2 global layers x K,V x 256 cells + 10 local layers x K,V x 24 cells, 32 f16 each.
    EXPECT_EQ(info->bytes, (2u * 2 * 256 + 10u * 2 * 24) * row_size(GgmlType::F16, 32));
    sum += info->bytes;
  }
  EXPECT_EQ(sum, split->breakdown().tensor_bytes);
  EXPECT_EQ(split->seq_info(3).status().code(), StatusCode::kInvalidArgument);

  auto uni = make(gemma_like(256, 3, true));
  ASSERT_EQ(decode(*uni, tokens(0, 0, 60), 8), MemoryStatus::kSuccess);
  ASSERT_EQ(decode(*uni, tokens(2, 0, 20), 8), MemoryStatus::kSuccess);
  const MemoryBreakdown b = uni->breakdown();
  size_t base_bytes = 0, swa_bytes = 0;
  for (const auto& t : b.tensors) (t.part == "kv_base" ? base_bytes : swa_bytes) += t.bytes;
  for (SeqId s : {0, 2}) {
    auto info = uni->seq_info(s);
    ASSERT_TRUE(info.ok());
    const uint32_t n = s == 0 ? 60 : 20;
    // The window child holds a gap-free range of the sequence's last positions.
    const uint32_t n_swa_held = uni->swa().seq_pos_max(s) - uni->swa().seq_pos_min(s) + 1;
    if (s == 0) {
      EXPECT_LT(n_swa_held, n);  // 80 positions in 56 SWA cells: some were reused
    }
    EXPECT_EQ(info->stream, 0u);
    EXPECT_EQ(info->cells, n);
    EXPECT_EQ(info->free_cells, 256u - 80u);
    EXPECT_EQ(info->bytes, base_bytes * n / 256 + swa_bytes * n_swa_held / 56) << "seq " << s;
  }
}

// The point of n_swa + n_ubatch: sequences that only append never run out of SWA cells, while
// the base (full) cache has room, whatever the ubatch sizes.
TEST(SwaKvCacheTest, AppendingNeverRunsOutOfSwaCells) {
  for (bool unified : {false, true}) {
    // The base never evicts: room for every position of every sequence.
    auto m = make(gemma_like(unified ? 3 * 1800 : 1800, 3, unified));
    std::mt19937 rng(unified ? 7 : 3);
    std::vector<Pos> next(3, 0);
    uint64_t gen = 0;
    for (int step = 0; step < 1500; ++step) {
      Batch b;
      for (SeqId s = 0; s < 3; ++s) {
        const int n = static_cast<int>(rng() % 4);  // 0..3 rows per sequence
        for (int i = 0; i < n && next[s] < 1800; ++i) b.add(1, next[s]++, {s}, false);
      }
      if (b.empty()) continue;
      const uint32_t n_ubatch = 1 + rng() % 8;
      ASSERT_EQ(decode(*m, b, n_ubatch, ++gen), MemoryStatus::kSuccess)
          << (unified ? "unified" : "split") << " step " << step;
    }
    for (SeqId s = 0; s < 3; ++s) {
      ASSERT_GT(next[s], 1000);
      EXPECT_EQ(m->seq_pos_max(s), next[s] - 1);
      EXPECT_EQ(m->base().seq_pos_min(s), 0);
      // The SWA child keeps the whole window of the next position, (next - 16, next), and
      // evicted older positions oldest first.
      EXPECT_GE(m->swa().seq_pos_min(s), next[s] - static_cast<Pos>(m->swa().n_ctx()));
      EXPECT_LE(m->swa().seq_pos_min(s), next[s] - 15);
      EXPECT_EQ(m->swa().cells(m->swa().stream_of(s)).seq_n_cells(s),
                static_cast<uint32_t>(next[s] - m->swa().seq_pos_min(s)));  // no holes
      EXPECT_EQ(m->seq_pos_min(s), m->swa().seq_pos_min(s));
    }
  }
}

TEST(SwaKvCacheTest, PlansBothChildrenBeforeChangingEither) {
  auto m = make(gemma_like(64, 1, false));
  ASSERT_EQ(decode(*m, tokens(0, 0, 24), 8), MemoryStatus::kSuccess);  // SWA child now full
  // Collapse every position to 0: nothing lies outside the window of the next position (1), so
  // the SWA child has no usable cell while the base has 40 free cells.
  ASSERT_TRUE(m->seq_div(0, -1, -1, 1000).ok());
  EXPECT_EQ(m->seq_pos_max(0), 0);
  const std::string before = testing::snapshot(*m);
  auto ctx = m->init_batch(tokens(0, 1, 1), 8);
  EXPECT_EQ(ctx->status(), MemoryStatus::kFailedPrepare);
  EXPECT_NE(ctx->message().find("sliding-window layers"), std::string::npos) << ctx->message();
  EXPECT_EQ(testing::snapshot(*m), before);

  auto big = m->init_batch(tokens(0, 1, 9), 9);
  EXPECT_EQ(big->status(), MemoryStatus::kInvalidBatch);
  EXPECT_NE(big->message().find("sized for"), std::string::npos);
}

TEST(SwaKvCacheTest, ContextAppliesAndRollsBackBoth) {
  auto m = make(gemma_like(64, 2, false));
  ASSERT_EQ(decode(*m, tokens(0, 0, 30), 8), MemoryStatus::kSuccess);
  const std::string before = testing::snapshot(*m);
  auto ctx = m->init_batch(tokens(0, 30, 12), 4);
  ASSERT_TRUE(ctx->ok());
  const auto& sc = static_cast<const SwaKvCacheContext&>(*ctx);
  EXPECT_EQ(ctx->kv_for_layer(5), &sc.base());
  EXPECT_EQ(ctx->kv_for_layer(0), &sc.swa());
  EXPECT_EQ(ctx->kv_for_layer(kLayers), nullptr);
  ASSERT_TRUE(ctx->apply().ok());
  testing::write_fake_kv(*ctx, kLayers, 2);
  ASSERT_TRUE(ctx->next());
  ASSERT_TRUE(ctx->apply().ok());
  testing::scribble_kv(*ctx, kLayers);
  EXPECT_EQ(m->base().seq_pos_max(0), 37);
  EXPECT_EQ(m->swa().seq_pos_max(0), 37);
  ctx->rollback();
  EXPECT_EQ(testing::snapshot(*m), before);
}

TEST(SwaKvCacheTest, SwaFullKeepsEveryPosition) {
  SwaKvCacheConfig c = gemma_like(64, 1, false);
  c.swa_full = true;
  auto m = make(c);
  ASSERT_EQ(decode(*m, tokens(0, 0, 50), 8), MemoryStatus::kSuccess);
  EXPECT_EQ(m->swa().seq_pos_min(0), 0);
  EXPECT_EQ(m->seq_pos_min(0), 0);
  EXPECT_EQ(m->swa().cells(0).used(), 50u);
  // Masks still apply the window.
  auto ctx = m->init_batch(tokens(0, 50, 1), 8);
  ASSERT_TRUE(ctx->ok());
  ASSERT_TRUE(ctx->apply().ok());
  std::vector<float> mask;
  ctx->kv_for_layer(0)->build_mask(0, &mask);
  int visible = 0;
  for (float x : mask) visible += x == 0.0f;
  EXPECT_EQ(visible, 16);  // positions 35..50
  ctx->kv_for_layer(5)->build_mask(0, &mask);
  visible = 0;
  for (float x : mask) visible += x == 0.0f;
  EXPECT_EQ(visible, 51);
}

TEST(SwaKvCacheTest, PlanTruncateKeepsOnlyWhereTheWholeWindowIsHeld) {
  auto m = make(gemma_like(256, 1, false));
  ASSERT_EQ(decode(*m, tokens(0, 0, 100), 8), MemoryStatus::kSuccess);
  const Pos swa_min = m->swa().seq_pos_min(0);
  ASSERT_GT(swa_min, 0);  // the window slid: early positions were evicted from the local layers
  for (Pos p = 0; p <= 120; ++p) {
    auto plan = m->plan_truncate(0, p);
    ASSERT_TRUE(plan.ok());
    const Pos end = std::min<Pos>(p, 100);
    // A token at `end` attends (end - 16, end] in the local layers: [end - 15, end) must be held.
    const bool window_held = end == 0 || std::max<Pos>(0, end - 15) >= swa_min;
    EXPECT_EQ(plan->keep, window_held ? end : 0) << "p " << p;
    EXPECT_EQ(plan->n_redo, static_cast<uint32_t>(p - plan->keep)) << "p " << p;
  }
  // swa_full never evicts: every prefix can be kept.
  SwaKvCacheConfig c = gemma_like(256, 1, false);
  c.swa_full = true;
  auto full = make(c);
  ASSERT_EQ(decode(*full, tokens(0, 0, 100), 8), MemoryStatus::kSuccess);
  EXPECT_EQ(full->plan_truncate(0, 20)->keep, 20);
  EXPECT_FALSE(m->plan_truncate(3, 5).ok());
}

TEST(SwaKvCacheTest, SequenceOpsAreCheckedOnBothFirst) {
  auto m = make(gemma_like(64, 2, false));
  ASSERT_EQ(decode(*m, tokens(0, 0, 40), 8), MemoryStatus::kSuccess);
  ASSERT_EQ(decode(*m, tokens(1, 0, 10), 8), MemoryStatus::kSuccess);
  // The base stream of seq 1 has 54 free cells (enough for 40); its SWA stream has 14, fewer
  // than the 24 cells seq 0 holds there.
  const std::string before = testing::snapshot(*m);
  const Status st = m->seq_cp(0, 1, -1, -1);
  EXPECT_EQ(st.code(), StatusCode::kNoSpace);
  EXPECT_NE(st.message().find("sliding-window"), std::string::npos) << st.message();
  EXPECT_EQ(testing::snapshot(*m), before);
  EXPECT_EQ(m->seq_add(2, -1, -1, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(testing::snapshot(*m), before);

  ASSERT_TRUE(m->seq_rm(1, -1, -1).ok());
  ASSERT_TRUE(m->seq_cp(0, 1, 30, -1).ok());  // a partial copy into both children
  EXPECT_EQ(m->seq_pos_min(1), 30);
  EXPECT_EQ(m->seq_pos_max(1), 39);
  ASSERT_TRUE(m->seq_add(1, -1, -1, -30).ok());
  auto upd = m->init_update();
  ASSERT_EQ(upd->status(), MemoryStatus::kSuccess);
  EXPECT_EQ(upd->kv_for_layer(5)->shifts().size(), 1u);
  EXPECT_EQ(upd->kv_for_layer(0)->shifts().size(), 1u);
  EXPECT_EQ(upd->kv_for_layer(0)->shifts()[0].stream, 1u);
  ASSERT_TRUE(upd->apply().ok());
  EXPECT_EQ(m->init_update()->status(), MemoryStatus::kNoUpdate);
  ASSERT_EQ(decode(*m, tokens(1, 10, 3), 8), MemoryStatus::kSuccess);
  ASSERT_TRUE(m->seq_keep(1).ok());
  EXPECT_EQ(m->seq_pos_max(0), -1);
  m->clear();
  EXPECT_EQ(m->seq_pos_max(1), -1);
  Result<std::unique_ptr<SwaKvCache>> copy = m->copy();
  ASSERT_TRUE(copy.ok());
  EXPECT_EQ(testing::snapshot(**copy), testing::snapshot(*m));
}

}  // namespace
}  // namespace mnemo
