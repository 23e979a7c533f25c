// make_memory: the kind of memory each layer description gets, and one K/V configuration for
// every kind (the same rotation rule in a plain, sliding-window and hybrid cache).

#include "memory/make_memory.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "memory/hybrid_memory.h"
#include "memory/kv_cache.h"
#include "memory/recurrent_memory.h"
#include "memory/swa_kv_cache.h"

namespace mnemo {
namespace {

constexpr uint32_t kLayers = 4;

// Four attention layers of 2 heads x 32, 64 cells per stream, 2 sequences, q8_0 K/V.
MemoryParams attention_params() {
  MemoryParams p;
  p.kv.n_embd_k_gqa.assign(kLayers, 64);
  p.kv.n_embd_v_gqa.assign(kLayers, 64);
  p.head_dim = 32;
  p.kv.n_ctx = 64;
  p.kv.n_seq_max = 2;
  p.kv.k_type = GgmlType::Q8_0;
  p.kv.v_type = GgmlType::Q8_0;
  p.n_ubatch = 16;
  return p;
}

// Layers 0, 2, 3 recurrent (12 + 20 floats per state), layer 1 attention.
MemoryParams hybrid_params() {
  MemoryParams p = attention_params();
  p.recurrent_layer = {1, 0, 1, 1};
  p.n_embd_r.assign(kLayers, 12);
  p.n_embd_s.assign(kLayers, 20);
  p.checkpoint_interval = 8;
  p.n_checkpoints = 2;
  return p;
}

std::unique_ptr<Memory> make(const MemoryParams& p) {
  auto m = make_memory(p);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

TEST(MakeMemoryTest, AttentionLayersGetAKvCache) {
  auto m = make(attention_params());
  auto* kv = dynamic_cast<KvCache*>(m.get());
  ASSERT_NE(kv, nullptr);
  EXPECT_EQ(kv->n_stream(), 2u);
  EXPECT_EQ(kv->n_ctx(), 64u);
  EXPECT_EQ(kv->config().rotation_dim, 32u);
  MemoryParams p = attention_params();
  p.kv.unified = true;
  p.kv_rotation = false;
  auto u = make(p);
  EXPECT_EQ(dynamic_cast<KvCache&>(*u).n_stream(), 1u);
  EXPECT_EQ(dynamic_cast<KvCache&>(*u).config().rotation_dim, 0u);
  p.kv_rotation = true;
  p.head_dim = 24;  // not a power of two: no rotation
  EXPECT_EQ(dynamic_cast<KvCache&>(*make(p)).config().rotation_dim, 0u);
}

TEST(MakeMemoryTest, AWindowGetsASlidingWindowCache) {
  MemoryParams p = attention_params();
  p.swa_type = SwaType::kStandard;
  p.n_swa = 8;
  p.swa_layer = {1, 1, 1, 0};
  auto m = make(p);
  auto* swa = dynamic_cast<SwaKvCache*>(m.get());
  ASSERT_NE(swa, nullptr);
  EXPECT_TRUE(swa->swa().holds_layer(0));
  EXPECT_FALSE(swa->swa().holds_layer(3));
  EXPECT_TRUE(swa->base().holds_layer(3));
  EXPECT_EQ(swa->swa().config().n_swa, 8u);
  EXPECT_EQ(swa->base().config().swa_type, SwaType::kNone);
  EXPECT_EQ(swa->swa().n_ctx(), 32u);  // n_swa + n_ubatch, rounded up to n_pad (32)
  EXPECT_EQ(swa->base().config().rotation_dim, 32u);
  EXPECT_EQ(swa->swa().config().rotation_dim, 32u);
  p.swa_full = true;
  EXPECT_EQ(dynamic_cast<SwaKvCache&>(*make(p)).swa().n_ctx(), 64u);
}

TEST(MakeMemoryTest, RecurrentLayersGetARecurrentOrHybridMemory) {
  MemoryParams p = hybrid_params();
  p.recurrent_layer.assign(kLayers, 1);
  auto m = make(p);
  auto* rs = dynamic_cast<RecurrentMemory*>(m.get());
  ASSERT_NE(rs, nullptr);
  EXPECT_EQ(rs->config().checkpoint_interval, 8u);
  EXPECT_EQ(rs->config().n_checkpoints, 2u);
  p.n_checkpoints = 0;  // either 0: no checkpoints
  EXPECT_EQ(dynamic_cast<RecurrentMemory&>(*make(p)).config().checkpoint_interval, 0u);

  auto h = make(hybrid_params());
  auto* hm = dynamic_cast<HybridMemory*>(h.get());
  ASSERT_NE(hm, nullptr);
  EXPECT_TRUE(hm->kv().holds_layer(1));
  EXPECT_FALSE(hm->kv().holds_layer(0));
  EXPECT_TRUE(hm->rs().holds_layer(0));
  EXPECT_FALSE(hm->rs().holds_layer(1));
  // The attention layers of a hybrid rotate quantized K/V like every other cache.
  EXPECT_EQ(hm->kv().config().rotation_dim, 32u);
}

TEST(MakeMemoryTest, RefusesWhatNoChildCanHold) {
  MemoryParams p = hybrid_params();
  p.swa_type = SwaType::kStandard;
  p.n_swa = 8;
  p.swa_layer = {0, 1, 0, 0};
  EXPECT_EQ(make_memory(p).status().code(), StatusCode::kNotSupported);
  p = hybrid_params();
  p.recurrent_layer.assign(kLayers, 0);  // a recurrent part with no recurrent layer
  EXPECT_EQ(make_memory(p).status().code(), StatusCode::kInvalidArgument);
  p = attention_params();
  p.kv.n_ctx = 0;
  EXPECT_EQ(make_memory(p).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mnemo
