// Requantization while the model stays loaded: values kept (with rotation changes), only the
// asked stream converted, errors change nothing, resident memory really drops, and the peak stays
// within the old size plus one new stream.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "support/state_test_util.h"

namespace mnemo {
namespace {

using namespace testing;  // NOLINT(build/namespaces): support/state_test_util.h's helpers

void expect_values(const KvCache& c, SeqId s, uint64_t gen, int n, double tol) {
  const auto vals = testing::seq_values(c, s);
  ASSERT_EQ(vals.size(), size_t(n));
  for (int i = 0; i < n; ++i) {
    EXPECT_LE(
        testing::rel_rms(vals[i], testing::ref_cell_values(testing::make_tag(gen, uint32_t(i)))),
        tol)
        << "seq " << s << " cell " << i;
  }
}

TEST(RequantizeTest, WholeCacheKeepsValuesAndShrinks) {
  auto c = make_cache(state_config(32, 2, false, GgmlType::F16, GgmlType::F16, 32));
  fill(*c, 0, 10, 1);
  fill(*c, 1, 7, 2);
  const size_t f16_bytes = c->breakdown().tensor_bytes;
  ASSERT_TRUE(c->requantize(GgmlType::Q8_0, GgmlType::Q8_0).ok());
  for (uint32_t s = 0; s < 2; ++s) {
    EXPECT_EQ(c->storage().k_type(s), GgmlType::Q8_0);
    EXPECT_EQ(c->storage().rotation(s), 32u);  // quantized streams are rotated
  }
  EXPECT_EQ(c->breakdown().tensor_bytes, f16_bytes / 64 * 34);
  expect_values(*c, 0, 1, 10, 0.011);
  expect_values(*c, 1, 2, 7, 0.011);
  // Back to f16: rows are un-rotated again.
  ASSERT_TRUE(c->requantize(GgmlType::F16, GgmlType::F16).ok());
  EXPECT_EQ(c->storage().rotation(0), 0u);
  expect_values(*c, 0, 1, 10, 0.012);
  // And decoding goes on.
  fill(*c, 0, 3, 3);
  EXPECT_EQ(c->seq_pos_max(0), 12);
}

TEST(RequantizeTest, SequenceConvertsOnlyItsStream) {
  auto c = make_cache(state_config(32, 3, false, GgmlType::F16, GgmlType::F16, 32));
  for (SeqId s = 0; s < 3; ++s) fill(*c, s, 5 + s, 10 + s);
  const auto s0 = seq_bytes(*c, 0);
  const auto s2 = seq_bytes(*c, 2);
  ASSERT_TRUE(c->requantize_seq(1, GgmlType::Q4_0, GgmlType::Q5_1).ok());
  EXPECT_EQ(c->storage().k_type(1), GgmlType::Q4_0);
  EXPECT_EQ(c->storage().v_type(1), GgmlType::Q5_1);
  EXPECT_EQ(c->storage().k_type(0), GgmlType::F16);
  EXPECT_EQ(seq_bytes(*c, 0), s0);
  EXPECT_EQ(seq_bytes(*c, 2), s2);
  expect_values(*c, 1, 11, 6, 0.11);
  const MemoryBreakdown b = c->breakdown();
  EXPECT_EQ(b.streams[1].k_type, GgmlType::Q4_0);
  EXPECT_EQ(b.streams[1].rotation, 32u);
  EXPECT_LT(b.streams[1].tensor_bytes, b.streams[0].tensor_bytes / 3);
  // One ubatch spanning streams of different types.
  Batch batch;
  for (SeqId s = 0; s < 3; ++s) batch.add(1, c->seq_pos_max(s) + 1, {s}, false);
  auto ctx = c->init_batch(batch, 8);
  ASSERT_TRUE(ctx->ok());
  ASSERT_TRUE(ctx->apply().ok());
  EXPECT_EQ(static_cast<const KvCacheContext&>(*ctx).placement().size(), 3u);
}

TEST(RequantizeTest, ErrorsChangeNothing) {
  auto uni = make_cache(state_config(32, 2, true));
  fill(*uni, 0, 5, 1);
  const std::string before = full_snapshot(*uni);
  Status st = uni->requantize_seq(0, GgmlType::Q8_0, GgmlType::Q8_0);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("unified"), std::string::npos) << st.message();
  EXPECT_EQ(uni->requantize(GgmlType::Q4_K, GgmlType::F16).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(uni->requantize_seq(7, GgmlType::F16, GgmlType::F16).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(full_snapshot(*uni), before);
  // Unified: requantize() converts the single stream for every sequence.
  ASSERT_TRUE(uni->requantize(GgmlType::Q8_0, GgmlType::F16).ok());
  EXPECT_EQ(uni->storage().k_type(0), GgmlType::Q8_0);
}

TEST(RequantizeTest, SlidingWindowCacheConvertsBothChildren) {
  auto m = create_or_die<SwaKvCache>(swa_state_config(64, 2, false));
  fill(*m, 0, 12, 1);
  fill(*m, 1, 12, 2);
  const auto base1 = seq_bytes(m->base(), 1);
  ASSERT_TRUE(m->requantize_seq(0, GgmlType::Q8_0, GgmlType::Q8_0).ok());
  EXPECT_EQ(m->base().storage().k_type(0), GgmlType::Q8_0);
  EXPECT_EQ(m->swa().storage().k_type(0), GgmlType::Q8_0);
  EXPECT_EQ(seq_bytes(m->base(), 1), base1);
  ASSERT_TRUE(m->requantize(GgmlType::Q4_1, GgmlType::Q4_1).ok());
  EXPECT_EQ(m->swa().storage().v_type(1), GgmlType::Q4_1);
}

// --- resident memory ---------------------------------------------------------------------------

size_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  size_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * size_t(::sysconf(_SC_PAGESIZE));
}

// Peak resident memory since the last reset_peak() (VmHWM), or 0 when the kernel does not let
// this process reset it.
bool reset_peak() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return f.good();
}
size_t peak_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoul(line.substr(6)) * 1024;
  }
  return 0;
}

// Two 32 MiB f32 streams, every cell written; requantizing to q4_0 must return the difference to
// the OS (RSS from /proc/self/statm, not counters), and converting stream by stream must keep the
// peak within the old size plus one new stream.
// A stream large enough to be converted on the pool's threads comes out byte for byte as the
// calling thread alone converts it.
TEST(RequantizeTest, PoolGivesTheSameBytes) {
  ThreadPool pool(3);
  KvCacheConfig cfg = state_config(4096, 2, false, GgmlType::F16, GgmlType::F16, 32);
  auto alone = make_cache(cfg);
  cfg.pool = &pool;
  auto pooled = make_cache(cfg);
  for (KvCache* c : {alone.get(), pooled.get()}) {
    fill(*c, 0, 4096, 1);
    fill(*c, 1, 100, 2);
  }
  ASSERT_EQ(full_snapshot(*alone), full_snapshot(*pooled));
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::F16}) {
    ASSERT_TRUE(alone->requantize(t, GgmlType::Q5_1).ok());
    ASSERT_TRUE(pooled->requantize(t, GgmlType::Q5_1).ok());
    EXPECT_EQ(full_snapshot(*alone), full_snapshot(*pooled)) << type_name(t);
  }
}

// Virtual memory of this process now, in bytes (/proc/self/statm, first field in pages).
size_t vm_bytes() {
  std::ifstream f("/proc/self/statm");
  size_t pages = 0;
  f >> pages;
  return pages * size_t(sysconf(_SC_PAGESIZE));
}

TEST(RequantizeTest, OutOfMemoryOnALaterStreamChangesNothing) {
  // Two 16 MiB f16 streams to f32 (32 MiB each), with room for one new stream only: the whole
  // cache must come back as it was, bytes and types, not with its first stream converted.
  KvCacheConfig cfg = state_config(4096, 2, false, GgmlType::F16, GgmlType::F16, 32);
  cfg.n_embd_k_gqa.assign(4, 256);
  cfg.n_embd_v_gqa.assign(4, 256);
  auto c = make_cache(cfg);
  fill(*c, 0, 300, 1);
  fill(*c, 1, 200, 2);
  const std::string before = full_snapshot(*c);
  rlimit old_limit{};
  ASSERT_EQ(getrlimit(RLIMIT_AS, &old_limit), 0);
  rlimit tight = old_limit;
  tight.rlim_cur = vm_bytes() + (size_t(40) << 20);
  ASSERT_EQ(setrlimit(RLIMIT_AS, &tight), 0);
  const Status st = c->requantize(GgmlType::F32, GgmlType::F32);
  ASSERT_EQ(setrlimit(RLIMIT_AS, &old_limit), 0);
  EXPECT_EQ(st.code(), StatusCode::kNoSpace) << st.to_string();
  for (uint32_t s = 0; s < 2; ++s) EXPECT_EQ(c->storage().k_type(s), GgmlType::F16) << s;
  EXPECT_EQ(full_snapshot(*c), before);
  // With room, the same call converts both.
  ASSERT_TRUE(c->requantize(GgmlType::F32, GgmlType::F32).ok());
  for (uint32_t s = 0; s < 2; ++s) EXPECT_EQ(c->storage().k_type(s), GgmlType::F32) << s;
}

TEST(RequantizeTest, ResidentMemoryDropsAndPeakIsBounded) {
  KvCacheConfig cfg;
  cfg.n_ctx = 4096;
  cfg.n_seq_max = 2;
  cfg.k_type = cfg.v_type = GgmlType::F32;
  cfg.n_embd_k_gqa.assign(4, 256);
  cfg.n_embd_v_gqa.assign(4, 256);
  auto c = make_cache(cfg);
  for (SeqId s = 0; s < 2; ++s) {
    Batch b;
    for (int i = 0; i < 4096; ++i) b.add(1, i, {s}, false);
    auto ctx = c->init_batch(b, 512);
    ASSERT_TRUE(ctx->ok());
    do {
      ASSERT_TRUE(ctx->apply().ok());
      testing::write_fake_kv(*ctx, 4, 1);
    } while (ctx->next());
  }
  const size_t old_bytes = c->breakdown().tensor_bytes;  // 64 MiB
  ASSERT_EQ(old_bytes, size_t(64) << 20);
  const size_t before = rss_bytes();
  const bool peak_ok = reset_peak();
  ASSERT_TRUE(c->requantize(GgmlType::Q4_0, GgmlType::Q4_0).ok());
  const size_t after = rss_bytes();
  const size_t new_bytes = c->breakdown().tensor_bytes;  // 9 MiB
  EXPECT_EQ(new_bytes, old_bytes / 32 / 4 * 18);
  EXPECT_GT(before, after + (old_bytes - new_bytes) * 9 / 10)
      << "RSS before " << before << " after " << after;
  if (peak_ok && peak_bytes() > 0) {
    const size_t one_new_stream = new_bytes / 2;
    EXPECT_LE(peak_bytes(), before + one_new_stream + (size_t(4) << 20))
        << "peak " << peak_bytes() << " before " << before;
  }
}

}  // namespace
}  // namespace mnemo
