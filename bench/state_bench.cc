// Save / restore throughput of one sequence's state against a plain memcpy of the same bytes,
// and requantization throughput (docs/benchmarks.md, "State save / restore and requantization").
//
// The cache has SmolLM2-135M's geometry: 30 layers, K and V rows of 192 elements (3 KV heads of
// 64), f16: 23,040 bytes per cell; the sequence holds 4096 cells (90 MiB of K/V). V is kept as
// a model's cache keeps it (3 planes of 64, kv_storage.h) unless a benchmark says rows.
//
//   build-state/src/memory/state_bench --benchmark_min_time=1
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "memory/kv_cache.h"
#include "mnemo/state.h"

namespace mnemo {
namespace {

constexpr uint32_t kLayers = 30;
constexpr uint32_t kWidth = 192;
constexpr uint32_t kCells = 4096;

ModelFingerprint bench_fingerprint() {
  ModelFingerprint fp;
  fp.arch = "llama";
  fp.n_embd_k_gqa.assign(kLayers, kWidth);
  fp.n_embd_v_gqa.assign(kLayers, kWidth);
  fp.hparams_hash = 1;
  return fp;
}

std::unique_ptr<KvCache> make(GgmlType t, uint32_t n_seq = 1, bool v_planes = true) {
  KvCacheConfig c;
  c.n_ctx = kCells;
  c.n_seq_max = n_seq;
  c.k_type = c.v_type = t;
  c.n_embd_k_gqa.assign(kLayers, kWidth);
  c.n_embd_v_gqa.assign(kLayers, kWidth);
  c.rotation_dim = 64;
  c.head_dim_v = v_planes ? 64 : 0;
  auto r = KvCache::create(c);
  CHECK(r.ok()) << r.status().to_string();
  return std::move(r).value();
}

// Fills sequence 0 with kCells cells of plausible f16 values (every row written).
void fill(KvCache& c) {
  Batch b;
  for (uint32_t i = 0; i < kCells; ++i) b.add(1, Pos(i), {0}, false);
  auto ctx = c.init_batch(b, 512);
  CHECK(ctx->ok());
  std::vector<float> row(kWidth);
  std::vector<uint8_t> bytes;
  do {
    CHECK(ctx->apply().ok());
    const auto& kv = static_cast<const KvCacheContext&>(*ctx);
    for (uint32_t il = 0; il < kLayers; ++il) {
      for (const StreamSlots& sl : kv.placement()) {
        for (uint32_t cell : sl.cells) {
          for (uint32_t e = 0; e < kWidth; ++e) row[e] = float((cell * 31 + e * 7 + il) % 97) / 50;
          for (const KvRows& view : {kv.k_view(il, 0), kv.v_view(il, 0)}) {
            bytes.resize(view.row_bytes);
            CHECK(quantize_row(view.type, row.data(), bytes.data(), kWidth).ok());
            view.set_rows(cell, 1, bytes.data());
          }
        }
      }
    }
  } while (ctx->next());
}

void BM_Memcpy(benchmark::State& st) {
  auto c = make(GgmlType::F16);
  fill(*c);
  const size_t n = *state_seq_get_size(*c, bench_fingerprint(), 0);
  std::vector<uint8_t> a(n, 1), b(n, 2);
  for (auto _ : st) {
    std::memcpy(b.data(), a.data(), n);
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(n));
}
BENCHMARK(BM_Memcpy)->Unit(benchmark::kMillisecond);

// Arg: V planes (1, as a model's cache) or V rows (0).
void BM_SaveSeq(benchmark::State& st) {
  auto c = make(GgmlType::F16, 1, st.range(0) != 0);
  fill(*c);
  const size_t n = *state_seq_get_size(*c, bench_fingerprint(), 0);
  std::vector<uint8_t> buf(n);
  for (auto _ : st) {
    CHECK(state_seq_get_data(*c, bench_fingerprint(), 0, buf).ok());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(n));
  st.SetLabel(st.range(0) != 0 ? "V planes" : "V rows");
}
BENCHMARK(BM_SaveSeq)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond);

// Restore into a cache of type `arg` 0 (0: f16, the same type: a copy; 1: q8_0, converted), V
// planes (arg 1 = 1) or rows (0) in both caches.
void BM_RestoreSeq(benchmark::State& st) {
  const bool planes = st.range(1) != 0;
  auto c = make(GgmlType::F16, 1, planes);
  fill(*c);
  const size_t n = *state_seq_get_size(*c, bench_fingerprint(), 0);
  std::vector<uint8_t> buf(n);
  CHECK(state_seq_get_data(*c, bench_fingerprint(), 0, buf).ok());
  auto dst = make(st.range(0) == 0 ? GgmlType::F16 : GgmlType::Q8_0, 1, planes);
  for (auto _ : st) {
    Status s = state_seq_set_data(*dst, bench_fingerprint(), buf, 0);
    CHECK(s.ok()) << s.to_string();
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(n));
  st.SetLabel(std::string(st.range(0) == 0 ? "f16 -> f16" : "f16 -> q8_0") +
              (planes ? ", V planes" : ", V rows"));
}
BENCHMARK(BM_RestoreSeq)
    ->Args({0, 1})
    ->Args({0, 0})
    ->Args({1, 1})
    ->Args({1, 0})
    ->Unit(benchmark::kMillisecond);

void BM_SaveLoadFile(benchmark::State& st) {
  auto c = make(GgmlType::F16);
  fill(*c);
  const size_t n = *state_seq_get_size(*c, bench_fingerprint(), 0);
  const std::string path = "/tmp/mnemo_state_bench_" + std::to_string(::getpid()) + ".mnst";
  auto dst = make(GgmlType::F16);
  for (auto _ : st) {
    CHECK(state_seq_save_file(*c, bench_fingerprint(), path, 0, {}).ok());
    CHECK(state_seq_load_file(*dst, bench_fingerprint(), path, 0).ok());
  }
  std::remove(path.c_str());
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(n));
  st.SetLabel("save (fsync) + load, page cache");
}
BENCHMARK(BM_SaveLoadFile)->Unit(benchmark::kMillisecond)->Iterations(3);

// Requantizing the 4096-cell sequence f16 -> q8_0 (each iteration converts a fresh copy).
void BM_RequantizeSeq(benchmark::State& st) {
  auto c = make(GgmlType::F16);
  fill(*c);
  const size_t bytes = c->breakdown().tensor_bytes;
  for (auto _ : st) {
    st.PauseTiming();
    auto copy = std::move(c->copy()).value();
    st.ResumeTiming();
    CHECK(copy->requantize_seq(0, GgmlType::Q8_0, GgmlType::Q8_0).ok());
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(bytes));
  st.SetLabel("f16 -> q8_0, rotated");
}
BENCHMARK(BM_RequantizeSeq)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace mnemo

BENCHMARK_MAIN();
