// State save / restore of RecurrentMemory and HybridMemory at the memory level (no model): a
// sequence restored into another seq_id of another memory continues exactly like the original
// (checkpoints included, so it can still be cut back), whole-memory round trips, fewer
// checkpoint cells at the destination, layer mismatches, and damaged states (every flipped byte
// and every truncation) that must change nothing.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "memory/hybrid_memory.h"
#include "memory/recurrent_memory.h"
#include "memory/recurrent_memory_format.h"
#include "mnemo/state.h"
#include "support/memory_testing.h"
#include "support/recurrent_testing.h"
#include "support/state_test_util.h"

namespace mnemo {
namespace {

using testing::ref_rs_state;
using testing::snapshot;

constexpr uint32_t kLayers = 3;

ModelFingerprint fingerprint() {
  ModelFingerprint fp;
  fp.arch = "test-recurrent";
  fp.n_embd_k_gqa = {0, 32, 0};
  fp.n_embd_v_gqa = {0, 32, 0};
  fp.hparams_hash = 0x5eed;
  return fp;
}

RecurrentMemoryConfig rs_config(uint32_t n_seq, uint32_t n_ckpt = 3, uint32_t n_embd_s = 16) {
  RecurrentMemoryConfig c;
  c.n_seq_max = n_seq;
  c.n_embd_r = {6, 0, 9};
  c.n_embd_s = {n_embd_s, 0, 8};
  c.layer_filter = [](uint32_t il) { return il != 1; };
  c.checkpoint_interval = n_ckpt > 0 ? 4 : 0;
  c.n_checkpoints = n_ckpt;
  return c;
}

std::unique_ptr<RecurrentMemory> make_rs(RecurrentMemoryConfig c) {
  return testing::create_or_die<RecurrentMemory>(std::move(c));
}

std::unique_ptr<HybridMemory> make_hybrid(uint32_t n_seq, bool unified) {
  HybridMemoryConfig c;
  c.kv.n_ctx = 64;
  c.kv.n_seq_max = n_seq;
  c.kv.unified = unified;
  c.kv.n_embd_k_gqa.assign(kLayers, 32);
  c.kv.n_embd_v_gqa.assign(kLayers, 32);
  c.kv.n_pad = 8;
  c.rs = rs_config(n_seq);
  return testing::create_or_die<HybridMemory>(std::move(c));
}

void decode(Memory& m, SeqId s, const std::vector<int32_t>& toks, int from, int to,
            uint64_t gen = 1) {
  Batch b;
  for (int i = from; i < to; ++i) b.add(toks[i], i, {s}, false);
  const Status st = testing::decode_fake(m, b, 3, kLayers, gen);
  ASSERT_TRUE(st.ok()) << st.to_string();
}

std::vector<uint8_t> save_seq(const Memory& m, SeqId s) {
  return testing::save_seq(m, s, fingerprint());
}

std::vector<uint8_t> save_whole(const Memory& m) { return testing::save_whole(m, fingerprint()); }

bool same_floats(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

std::vector<int32_t> random_tokens(uint32_t seed, int n) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % 1000);
  return t;
}

TEST(RecurrentMemoryIoTest, SequenceIntoAnotherSeqIdContinuesAndCanBeCutBack) {
  const auto t = random_tokens(1, 40), other = random_tokens(2, 40);
  auto src = make_rs(rs_config(3));
  decode(*src, 0, other, 0, 7);
  decode(*src, 1, t, 0, 23);  // checkpoints 11, 15, 19
  const std::vector<uint8_t> state = save_seq(*src, 1);
  EXPECT_EQ(state.size(), *state_seq_get_size(*src, fingerprint(), 1));

  auto dst = make_rs(rs_config(4));
  decode(*dst, 3, other, 0, 30);  // replaced by the restore
  decode(*dst, 0, other, 0, 5);   // untouched
  const std::vector<float> seq0(dst->cell(0).begin(), dst->cell(0).end());
  ASSERT_TRUE(state_seq_set_data(*dst, fingerprint(), state, 3).ok());
  EXPECT_TRUE(same_floats(dst->cell(3), src->cell(1)));
  EXPECT_EQ(dst->seq_pos_max(3), 22);
  EXPECT_EQ(dst->seq_pos_min(3), 0);
  EXPECT_EQ(dst->checkpoints(3), src->checkpoints(1));
  for (Pos c : dst->checkpoints(3))
    EXPECT_TRUE(same_floats(dst->checkpoint(3, c), src->checkpoint(1, c)));
  EXPECT_TRUE(same_floats(dst->cell(0), seq0));
  EXPECT_EQ(dst->seq_pos_max(0), 4);

  // Both continue identically, and the restored one can be cut back to its checkpoints.
  decode(*src, 1, t, 23, 30);
  decode(*dst, 3, t, 23, 30);
  EXPECT_TRUE(same_floats(dst->cell(3), src->cell(1)));
  EXPECT_EQ(dst->checkpoints(3), (std::vector<Pos>{19, 23, 27}));
  ASSERT_TRUE(dst->seq_rm(3, 22, -1).ok());
  EXPECT_EQ(dst->seq_pos_max(3), 19);
  EXPECT_TRUE(same_floats(dst->cell(3), ref_rs_state(*dst, {t.begin(), t.begin() + 20}, kLayers)));

  // An empty sequence saves as a valid state of no blocks; restoring it empties the destination.
  const std::vector<uint8_t> empty = save_seq(*src, 2);
  ASSERT_TRUE(state_seq_set_data(*dst, fingerprint(), empty, 3).ok());
  EXPECT_EQ(dst->seq_pos_max(3), -1);
}

TEST(RecurrentMemoryIoTest, WholeMemoryRoundTripAndFewerCheckpointCells) {
  const auto t = random_tokens(3, 40), u = random_tokens(33, 40);
  auto src = make_rs(rs_config(3));
  decode(*src, 0, t, 0, 9);
  decode(*src, 2, u, 0, 28);  // checkpoints 15, 19, 23
  const std::vector<uint8_t> state = save_whole(*src);
  auto dst = make_rs(rs_config(3));
  decode(*dst, 1, t, 0, 4);  // the whole memory is replaced: seq 1 becomes empty
  ASSERT_TRUE(state_set_data(*dst, fingerprint(), state).ok());
  EXPECT_EQ(snapshot(*dst), snapshot(*src));

  // One checkpoint cell per sequence: the newest checkpoint survives.
  auto small = make_rs(rs_config(3, 1));
  ASSERT_TRUE(state_set_data(*small, fingerprint(), state).ok());
  EXPECT_EQ(small->checkpoints(2), std::vector<Pos>{23});
  EXPECT_TRUE(same_floats(small->checkpoint(2, 23), src->checkpoint(2, 23)));
  EXPECT_TRUE(same_floats(small->cell(2), src->cell(2)));
}

TEST(RecurrentMemoryIoTest, MismatchesAndDamageChangeNothing) {
  const auto t = random_tokens(4, 40);
  auto src = make_rs(rs_config(3));
  decode(*src, 1, t, 0, 13);
  const std::vector<uint8_t> state = save_seq(*src, 1);

  auto dst = make_rs(rs_config(3));
  decode(*dst, 0, t, 0, 6);
  decode(*dst, 2, t, 0, 9);
  const std::string before = snapshot(*dst);

  // Other state sizes: the recurrent part names the layer.
  auto other = make_rs(rs_config(3, 3, 24));
  Status st = state_seq_set_data(*other, fingerprint(), state, 0);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("layer"), std::string::npos) << st.message();
  // A whole-memory state holding seq_id 2 into a memory of 2 sequences.
  auto two = make_rs(rs_config(2));
  EXPECT_EQ(state_set_data(*two, fingerprint(), save_whole(*dst)).code(),
            StatusCode::kInvalidArgument);

  // Every single flipped byte and every truncation is refused and changes nothing.
  int refused = 0;
  for (size_t i = 0; i < state.size(); ++i) {
    std::vector<uint8_t> bad = state;
    bad[i] ^= 0x20;
    st = state_seq_set_data(*dst, fingerprint(), bad, 2);
    refused += !st.ok();
    ASSERT_EQ(snapshot(*dst), before) << "flipped byte " << i << ": " << st.to_string();
  }
  EXPECT_EQ(refused, int(state.size()));
  for (size_t n = 0; n < state.size(); n += 7) {
    st = state_seq_set_data(*dst, fingerprint(), std::span(state.data(), n), 2);
    ASSERT_FALSE(st.ok()) << "truncated to " << n;
    ASSERT_EQ(snapshot(*dst), before);
  }
}

TEST(RecurrentMemoryIoTest, HybridSequenceRoundTripAndDamage) {
  for (bool unified : {false, true}) {
    const auto t = random_tokens(5, 40);
    auto src = make_hybrid(2, unified);
    decode(*src, 0, t, 0, 18, 7);
    const std::vector<uint8_t> state = save_seq(*src, 0);

    auto dst = make_hybrid(2, false);
    decode(*dst, 1, t, 0, 3, 9);
    const std::string before = snapshot(*dst);
    for (size_t i = 0; i < state.size(); i += 13) {
      std::vector<uint8_t> bad = state;
      bad[i] ^= 0x01;
      ASSERT_FALSE(state_seq_set_data(*dst, fingerprint(), bad, 0).ok()) << "byte " << i;
      ASSERT_EQ(snapshot(*dst), before);
    }
    ASSERT_TRUE(state_seq_set_data(*dst, fingerprint(), state, 0).ok());
    EXPECT_EQ(dst->kv().seq_pos_max(0), 17);
    EXPECT_EQ(dst->rs().seq_pos_max(0), 17);
    EXPECT_EQ(dst->kv().seq_pos_min(0), 0);
    EXPECT_TRUE(same_floats(dst->rs().cell(0), src->rs().cell(0)));
    EXPECT_EQ(dst->rs().checkpoints(0), src->rs().checkpoints(0));
    EXPECT_EQ(dst->seq_pos_max(1), 2);
    // The restored sequence continues and cuts back like the original.
    decode(*src, 0, t, 18, 25, 11);
    decode(*dst, 0, t, 18, 25, 11);
    EXPECT_TRUE(src->rs().checkpoints(0) == dst->rs().checkpoints(0));
    EXPECT_TRUE(same_floats(dst->rs().cell(0), src->rs().cell(0)));
    ASSERT_TRUE(dst->seq_rm(0, 18, -1).ok());  // checkpoints 15, 19, 23: back to 15
    EXPECT_EQ(dst->kv().seq_pos_max(0), 15);
    EXPECT_EQ(dst->rs().seq_pos_max(0), 15);
    // Requantization converts the attention layers only; a recurrent state has no K/V.
    ASSERT_TRUE(dst->requantize(GgmlType::Q8_0, GgmlType::Q8_0).ok());
    EXPECT_EQ(dst->kv().storage().k_type(0), GgmlType::Q8_0);
    EXPECT_EQ(dst->rs().requantize(GgmlType::Q8_0, GgmlType::Q8_0).code(),
              StatusCode::kNotSupported);
    EXPECT_EQ(dst->rs().seq_pos_max(0), 15);
  }
}

}  // namespace
}  // namespace mnemo
