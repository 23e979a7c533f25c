// HybridMemory: layer routing, one transaction over the KV cache and the recurrent state (a
// failure of either changes neither; rollback restores both byte-equal), sequence operations
// checked on both first, and tail removal through a checkpoint cutting both children alike.

#include "memory/hybrid_memory.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "support/memory_testing.h"
#include "support/recurrent_testing.h"

namespace mnemo {
namespace {

using testing::fake_rs_forward;
using testing::snapshot;

constexpr uint32_t kLayers = 4;  // Granite-4.0-H-like: layer 1 attention, the others recurrent

HybridMemoryConfig config(uint32_t n_ctx, uint32_t n_seq_max, bool unified) {
  HybridMemoryConfig c;
  c.kv.n_ctx = n_ctx;
  c.kv.n_seq_max = n_seq_max;
  c.kv.unified = unified;
  c.kv.n_embd_k_gqa.assign(kLayers, 32);
  c.kv.n_embd_v_gqa.assign(kLayers, 32);
  c.kv.n_pad = 8;
  c.rs.n_seq_max = n_seq_max;
  c.rs.n_embd_r.assign(kLayers, 12);
  c.rs.n_embd_s.assign(kLayers, 20);
  c.rs.layer_filter = [](uint32_t il) { return il != 1; };
  c.rs.checkpoint_interval = 4;
  c.rs.n_checkpoints = 3;
  return c;
}

std::unique_ptr<HybridMemory> make(HybridMemoryConfig c) {
  return testing::create_or_die<HybridMemory>(std::move(c));
}

Batch tokens(SeqId s, Pos p0, int n, int32_t tok0 = 1) {
  Batch b;
  for (int i = 0; i < n; ++i) b.add(tok0 + i, p0 + i, {s}, i + 1 == n);
  return b;
}

void decode(HybridMemory& m, const Batch& b, uint32_t n_ubatch, uint64_t gen = 1) {
  const Status st = testing::decode_fake(m, b, n_ubatch, kLayers, gen);
  ASSERT_TRUE(st.ok()) << st.to_string();
}

void expect_consistent(const HybridMemory& m) {
  for (SeqId s = 0; s < static_cast<SeqId>(m.n_seq_max()); ++s) {
    EXPECT_EQ(m.kv().seq_pos_max(s), m.rs().seq_pos_max(s)) << "seq " << s;
    EXPECT_EQ(m.kv().seq_pos_min(s), m.rs().seq_pos_min(s)) << "seq " << s;
  }
}

TEST(HybridMemoryTest, ConfigAndRouting) {
  HybridMemoryConfig c = config(64, 2, false);
  c.rs.layer_filter = nullptr;
  EXPECT_FALSE(HybridMemory::create(c).ok());
  c = config(64, 2, false);
  c.kv.n_seq_max = 3;
  EXPECT_FALSE(HybridMemory::create(c).ok());
  c = config(64, 2, false);
  c.kv.layer_filter = [](uint32_t il) { return il < 2; };  // layer 0 claimed twice
  EXPECT_NE(HybridMemory::create(c).status().message().find("layer 0"), std::string::npos);

  auto m = make(config(64, 2, false));
  EXPECT_TRUE(m->kv().holds_layer(1));
  EXPECT_FALSE(m->kv().holds_layer(0));
  EXPECT_TRUE(m->rs().holds_layer(3));
  auto ctx = m->init_batch(tokens(0, 0, 6), 4);
  ASSERT_TRUE(ctx->ok());
  const auto& hc = static_cast<const HybridMemoryContext&>(*ctx);
  EXPECT_EQ(ctx->kv_for_layer(1), &hc.kv());
  EXPECT_EQ(ctx->kv_for_layer(0), nullptr);
  EXPECT_EQ(ctx->rs_for_layer(0), &hc.rs());
  EXPECT_EQ(ctx->rs_for_layer(1), nullptr);
  EXPECT_EQ(ctx->ubatches().size(), 2u);  // cut at position 4

  const MemoryBreakdown b = m->breakdown();
  std::vector<std::string> parts;
  for (const auto& s : b.streams) parts.push_back(s.part);
  EXPECT_EQ(parts, (std::vector<std::string>{"kv", "kv", "rs", "rs_ckpt"}));
  EXPECT_EQ(b.tensor_bytes, m->kv().breakdown().tensor_bytes + m->rs().breakdown().tensor_bytes);
}

TEST(HybridMemoryTest, ContextAppliesAndRollsBackBoth) {
  for (bool unified : {false, true}) {
    auto m = make(config(64, 3, unified));
    decode(*m, tokens(0, 0, 10), 4);
    decode(*m, tokens(1, 0, 5), 4);
    expect_consistent(*m);
    const std::string before = snapshot(*m);
    Batch b = tokens(0, 10, 14, 50);
    for (int i = 0; i < 6; ++i) b.add(70 + i, i, {2}, i == 5);
    auto ctx = m->init_batch(b, 3);
    ASSERT_TRUE(ctx->ok());
    for (int k = 0; k < 5; ++k) {
      ASSERT_TRUE(ctx->apply().ok());
      testing::scribble_kv(*ctx, kLayers);
      fake_rs_forward(*ctx, kLayers);
      ASSERT_TRUE(ctx->next());
    }
    EXPECT_NE(snapshot(*m), before);
    ctx->rollback();
    EXPECT_EQ(snapshot(*m), before) << (unified ? "unified" : "split");
  }
}

// seq_info: the KV child's stream, types and cells; bytes of the sequence's K/V (its stream, or
// its share of the unified one) plus its own recurrent cell and checkpoints.
TEST(HybridMemoryTest, SeqInfoCountsBothChildren) {
  // Layer 1: 32-wide f16 K and V per cell. Layers 0, 2, 3: 12 + 20 floats per state, one cell
  // and 3 checkpoints per sequence.
  const size_t kv_per_cell = 2 * row_size(GgmlType::F16, 32);
  const size_t rs_per_seq = (1 + 3) * 3 * (12 + 20) * sizeof(float);
  for (bool unified : {false, true}) {
    auto m = make(config(64, 3, unified));
    decode(*m, tokens(0, 0, 10), 4);
    decode(*m, tokens(2, 0, 5), 4);
    size_t sum = 0;
    for (SeqId s = 0; s < 3; ++s) {
      auto info = m->seq_info(s);
      ASSERT_TRUE(info.ok()) << info.status().to_string();
      const uint32_t held = s == 0 ? 10 : s == 2 ? 5 : 0;
      EXPECT_TRUE(info->has_kv);
      EXPECT_EQ(info->stream, unified ? 0u : uint32_t(s));
      EXPECT_EQ(info->k_type, GgmlType::F16);
      EXPECT_EQ(info->cells, held);
      EXPECT_EQ(info->free_cells, unified ? 64u - 15u : 64u - held);
      const size_t kv_bytes = unified ? 64 * kv_per_cell * held / 64 : 64 * kv_per_cell;
      EXPECT_EQ(info->bytes, kv_bytes + rs_per_seq) << (unified ? "unified" : "split") << s;
      sum += info->bytes;
    }
    if (!unified) {
      EXPECT_EQ(sum, m->breakdown().tensor_bytes);
    }
    EXPECT_EQ(m->seq_info(3).status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(HybridMemoryTest, AFailureOfEitherChildChangesNeither) {
  auto m = make(config(16, 2, false));  // 16 KV cells per sequence
  decode(*m, tokens(0, 0, 12), 4);
  const std::string before = snapshot(*m);
  auto ctx = m->init_batch(tokens(0, 12, 8), 4);  // the KV child cannot place 20 positions
  EXPECT_EQ(ctx->status(), MemoryStatus::kFailedPrepare);
  EXPECT_NE(ctx->message().find("attention layers"), std::string::npos) << ctx->message();
  EXPECT_EQ(snapshot(*m), before);
  Batch shared;
  shared.add(1, 12, {0, 1}, true);
  EXPECT_EQ(m->init_batch(shared, 4)->status(), MemoryStatus::kInvalidBatch);
  // A middle removal the recurrent child refuses leaves the KV child untouched too.
  EXPECT_EQ(m->seq_rm(0, 2, 5).code(), StatusCode::kNotSupported);
  EXPECT_EQ(m->seq_add(0, 6, -1, 2).code(), StatusCode::kNotSupported);
  EXPECT_EQ(snapshot(*m), before);
}

TEST(HybridMemoryTest, TailRemovalCutsBothChildrenAtTheCheckpoint) {
  for (bool unified : {false, true}) {
    auto m = make(config(64, 2, unified));
    decode(*m, tokens(0, 0, 22), 5);  // checkpoints 11, 15, 19
    ASSERT_EQ(m->rs().checkpoints(0), (std::vector<Pos>{11, 15, 19}));
    auto plan = m->plan_truncate(0, 18);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->keep, 16);
    EXPECT_EQ(plan->n_redo, 2u);
    const std::string before = snapshot(*m);
    EXPECT_EQ(m->seq_rm(0, 6, -1).code(), StatusCode::kOutOfRange);
    EXPECT_EQ(snapshot(*m), before);

    ASSERT_TRUE(m->seq_rm(0, 18, -1).ok());
    EXPECT_EQ(m->seq_pos_max(0), 15);
    EXPECT_EQ(m->kv().seq_pos_max(0), 15);
    expect_consistent(*m);
    decode(*m, tokens(0, 16, 4, 9), 5);
    EXPECT_EQ(m->seq_pos_max(0), 19);
    expect_consistent(*m);

    // A copy through a checkpoint gives dst the same positions in both children.
    ASSERT_TRUE(m->seq_cp(0, 1, -1, 14).ok());
    EXPECT_EQ(m->seq_pos_max(1), 11);
    expect_consistent(*m);
    ASSERT_TRUE(m->seq_cp(0, 1, -1, -1).ok());  // overwrites dst again
    EXPECT_EQ(m->seq_pos_max(1), 19);
    expect_consistent(*m);
    ASSERT_TRUE(m->seq_rm(-1, -1, -1).ok());
    EXPECT_EQ(m->seq_pos_max(0), -1);
    expect_consistent(*m);
  }
}

TEST(HybridMemoryTest, UpdateContextCoversTheKvShifts) {
  auto m = make(config(64, 1, false));
  decode(*m, tokens(0, 0, 8), 8);
  EXPECT_EQ(m->init_update()->status(), MemoryStatus::kNoUpdate);
  ASSERT_TRUE(m->seq_add(0, -1, -1, 3).ok());
  expect_consistent(*m);
  EXPECT_EQ(m->seq_pos_max(0), 10);
  auto upd = m->init_update();
  ASSERT_EQ(upd->status(), MemoryStatus::kSuccess);
  ASSERT_NE(upd->kv_for_layer(1), nullptr);
  EXPECT_EQ(upd->kv_for_layer(1)->shifts().size(), 1u);
  ASSERT_TRUE(upd->apply().ok());
  EXPECT_EQ(m->init_update()->status(), MemoryStatus::kNoUpdate);
}

}  // namespace
}  // namespace mnemo
