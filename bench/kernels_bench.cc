// Micro-benchmarks of the kernels at the shapes of the real models.
//   matmul: GFLOP/s (2 * n_out * n_in * n_tokens per call) per weight type, at decoding
//           (1 token) and prompt (512 tokens) shapes of SmolLM2-135M (d_model 576, FFN 1536),
//           1 and 2 threads, on GGUF rows (packed:0) and on a PackedMatrix (packed:1).
//           K-quants need n_in % 256 == 0, so they run the FFN-down shape.
//   matmul, whole model: one decoding step's 210 matmuls of a SmolLM2-shaped model, every
//           matrix in its own memory (weights stream from L3 / DRAM as in a real forward).
//   matmul, streaming: one decoding matmul of a 1.5B model's shapes (Qwen2.5 1.5B: K/V
//           projection 256, Q / O 1536, FFN 8960 rows of 1536; stacked q | k | v 2048 and
//           gate | up 17920) in q4_K and q6_K, weights from DRAM: the share of the read
//           bandwidth one call of that size reaches (GB/s).
//   attention: one decoding step at depth 2048 (SmolLM2: 9 heads / 3 KV heads x 64; Gemma 3
//           270M: 4 / 1 x 256) with f16 and q8_0 K/V, 1 and 2 threads; a 512-token prompt
//           at depth 0 and 2048.
// On a shared machine read the "CPU" column for one thread (the real time includes waiting
// for a core); two-thread results need a quiet machine.
//   ThreadPool: the cost of one empty parallel_for.
// Run: build-kern/src/kernels/kernels_bench [--benchmark_filter=...]
//      (MNEMO_BENCH_TARGET=AVX2 to measure another compiled target)
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/buffer.h"
#include "hwy/targets.h"
#include "kernels/kernels.h"
#include "mnemo/quant.h"
#include "mnemo/thread_pool.h"

namespace mnemo::kernels {
namespace {

ThreadPool* pool_for(int n_threads) {
  static std::map<int, std::unique_ptr<ThreadPool>> pools;
  if (n_threads <= 1) return nullptr;
  auto& p = pools[n_threads];
  if (!p) p = std::make_unique<ThreadPool>(n_threads);
  return p.get();
}

std::vector<float> normal(int64_t n, float sigma, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

/// n_rows rows of `type`: quantized from floats, or random blocks with sane scales (K-quants).
std::vector<uint8_t> make_rows(GgmlType type, int64_t n_rows, int64_t n) {
  const size_t rb = row_size(type, n);
  std::vector<uint8_t> data(rb * n_rows);
  if (traits(type).can_quantize) {
    const std::vector<float> f = normal(n_rows * n, 0.05f, 1);
    for (int64_t r = 0; r < n_rows; ++r) {
      (void)quantize_row(type, f.data() + r * n, data.data() + r * rb, n);
    }
    return data;
  }
  std::mt19937 rng(2);
  for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
  const uint16_t h = fp32_to_fp16(0.002f);
  for (size_t off = 0; off < data.size(); off += type_size(type)) {
    if (type == GgmlType::Q6_K) {
      std::memcpy(data.data() + off + 208, &h, 2);
    } else {
      std::memcpy(data.data() + off, &h, 2);
      std::memcpy(data.data() + off + 2, &h, 2);
    }
  }
  return data;
}

// Args: type id, n_out, n_in, n_tokens, n_threads, packed (PackedMatrix: 1).
void BM_Matmul(benchmark::State& state) {
  const GgmlType type = static_cast<GgmlType>(state.range(0));
  const int64_t n_out = state.range(1), n_in = state.range(2), n_tokens = state.range(3);
  ThreadPool* pool = pool_for(static_cast<int>(state.range(4)));
  const bool use_packed = state.range(5) != 0;
  const std::vector<uint8_t> w = make_rows(type, n_out, n_in);
  const WeightMatrix wm{type, w.data(), n_out, n_in};
  const PackedMatrix pm = use_packed ? pack_matrix(wm, pool) : PackedMatrix();
  if (use_packed && !pm.is_packed()) {
    state.SkipWithError("not packed for this type / CPU");
    return;
  }
  const std::vector<float> x = normal(n_tokens * n_in, 1.0f, 3);
  std::vector<float> y(n_tokens * n_out);
  for (auto _ : state) {
    if (use_packed) {
      matmul(pm, x.data(), n_in, n_tokens, y.data(), n_out, pool);
    } else {
      matmul(wm, x.data(), n_tokens, y.data(), pool);
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2e-9 * n_out * n_in * n_tokens,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(type_name(type)) + " " + simd_target());
}

void MatmulArgs(benchmark::internal::Benchmark* b) {
  const GgmlType legacy[] = {GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_0,
                             GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL,
                             GgmlType::F16,  GgmlType::BF16, GgmlType::F32};
  const GgmlType kquants[] = {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};
  for (int64_t tokens : {1, 512}) {
    for (int threads : {1, 2}) {
      for (int packed : {0, 1}) {
        for (GgmlType t : legacy) {
          if (packed && (t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::F32 ||
                         t == GgmlType::IQ4_NL)) {
            continue;
          }
          b->Args({static_cast<int64_t>(t), 1536, 576, tokens, threads, packed});  // FFN up
          b->Args({static_cast<int64_t>(t), 576, 1536, tokens, threads, packed});  // FFN down
        }
        for (GgmlType t : kquants) {
          b->Args({static_cast<int64_t>(t), 576, 1536, tokens, threads, packed});
        }
      }
    }
  }
  // The output projection (tied embedding, q8_0): the largest single matmul of a decode step.
  for (int threads : {1, 2}) {
    for (int packed : {0, 1}) {
      b->Args({static_cast<int64_t>(GgmlType::Q8_0), 49152, 576, 1, threads, packed});
    }
  }
}
BENCHMARK(BM_Matmul)
    ->Apply(MatmulArgs)
    ->ArgNames({"type", "n_out", "n_in", "tokens", "threads", "packed"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// One decoding step's matmuls of a whole SmolLM2-135M-shaped model (30 layers of q, k, v, o,
// gate, up, down; 106 M weights, ~66 MB in q4_1), each matrix in its own memory: unlike the
// single-matrix cases above, the weights stream from L3 / DRAM as in a real forward pass.
// Args: type id, n_threads.
void BM_MatmulModelDecode(benchmark::State& state) {
  const GgmlType type = static_cast<GgmlType>(state.range(0));
  ThreadPool* pool = pool_for(static_cast<int>(state.range(1)));
  const bool use_packed = state.range(2) != 0;
  struct Shape {
    int64_t n_out, n_in;
  };
  const Shape layer[] = {{576, 576},  {192, 576},  {192, 576}, {576, 576},
                         {1536, 576}, {1536, 576}, {576, 1536}};
  std::vector<std::vector<uint8_t>> weights;
  std::vector<WeightMatrix> mats;
  std::vector<PackedMatrix> packed;
  for (int l = 0; l < 30; ++l) {
    for (const Shape& sh : layer) {
      weights.push_back(make_rows(type, sh.n_out, sh.n_in));
      mats.push_back({type, weights.back().data(), sh.n_out, sh.n_in});
      if (use_packed) packed.push_back(pack_matrix(mats.back(), pool));
    }
  }
  const std::vector<float> x = normal(1536, 1.0f, 3);
  std::vector<float> y(1536);
  double flops = 0;
  for (const WeightMatrix& m : mats) flops += 2.0 * m.n_out * m.n_in;
  for (auto _ : state) {
    if (use_packed) {
      for (const PackedMatrix& m : packed) {
        matmul(m, x.data(), m.source().n_in, 1, y.data(), m.source().n_out, pool);
      }
    } else {
      for (const WeightMatrix& m : mats) matmul(m, x.data(), 1, y.data(), pool);
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(1e-9 * flops, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(type_name(type)) + " " + simd_target());
}
BENCHMARK(BM_MatmulModelDecode)
    ->ArgsProduct({{static_cast<int64_t>(GgmlType::Q4_1), static_cast<int64_t>(GgmlType::Q8_0)},
                   {1, 2},
                   {0, 1}})
    ->ArgNames({"type", "threads", "packed"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// One decoding step's matmul of one n_out x n_in matrix whose weights come from DRAM: copies of
// the packed matrix totalling at least 512 MB, one after another in one huge-page mapping (as the
// model keeps its packed weights), taken in turn. Reports the weight bytes read per second
// (`GB/s`), to set against `mnemo bench --bandwidth`'s read bandwidth: how much of it one call
// of that size reaches. Args: type id, n_out, n_in, n_threads.
void BM_MatmulStream(benchmark::State& state) {
  const GgmlType type = static_cast<GgmlType>(state.range(0));
  const int64_t n_out = state.range(1), n_in = state.range(2);
  ThreadPool* pool = pool_for(static_cast<int>(state.range(3)));
  const std::vector<uint8_t> rows = make_rows(type, n_out, n_in);
  const WeightMatrix w{type, rows.data(), n_out, n_in};
  const size_t stride = (packed_size(w) + 63) / 64 * 64;
  if (stride == 0) {
    state.SkipWithError("not packed under this target");
    return;
  }
  const double bytes = double(packed_size(w));
  const int64_t n_copies = std::max<int64_t>(2, int64_t(512e6 / bytes));
  Result<AlignedBuffer> arena = AlignedBuffer::allocate(stride * size_t(n_copies));
  if (!arena.ok()) {
    state.SkipWithError("cannot map the copies");
    return;
  }
  std::vector<PackedMatrix> packed;
  for (int64_t i = 0; i < n_copies; ++i) {
    packed.push_back(pack_matrix_into(w, arena->data() + stride * size_t(i), pool));
  }
  const std::vector<float> x = normal(n_in, 1.0f, 3);
  std::vector<float> y(n_out);
  int64_t i = 0;
  for (auto _ : state) {
    const PackedMatrix& m = packed[size_t(i++ % n_copies)];
    matmul(m, x.data(), n_in, 1, y.data(), n_out, pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GB/s"] =
      benchmark::Counter(1e-9 * bytes, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(type_name(type)) + " " + simd_target());
}
BENCHMARK(BM_MatmulStream)
    ->ArgsProduct({{static_cast<int64_t>(GgmlType::Q4_K), static_cast<int64_t>(GgmlType::Q6_K)},
                   {256, 1536, 2048, 8960, 17920},
                   {1536},
                   {1, 2}})
    ->ArgNames({"type", "n_out", "n_in", "threads"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Args: cache type id, n_head, n_head_kv, head_dim, depth, n_threads, n_tokens, V planes (1: V
// per head as the cache keeps it, 0: as rows). n_tokens > 1 is a speculative verify step: the new
// tokens attend causally to the depth cells and to each other.
void BM_AttentionDecode(benchmark::State& state) {
  const GgmlType type = static_cast<GgmlType>(state.range(0));
  const int64_t n_head = state.range(1), n_head_kv = state.range(2), hd = state.range(3);
  const int64_t depth = state.range(4);
  ThreadPool* pool = pool_for(static_cast<int>(state.range(5)));
  const int64_t n_tokens = state.range(6);
  const int64_t n_kv = depth + n_tokens;
  const int64_t n = n_head_kv * hd;
  // Layers of K/V visited in turn, as a model's are between two visits of one layer the whole
  // model is read: when the caches are deep, at least 1 GiB of K/V in all, past any last-level
  // cache (some server CPUs report hundreds of MiB), so that the rows come from memory.
  const int64_t layer_bytes = 2 * n_kv * static_cast<int64_t>(row_size(type, n));
  const int64_t n_layers =
      n_kv >= 4096 ? std::max<int64_t>(28, ((int64_t{1} << 30) + layer_bytes - 1) / layer_bytes)
                   : 1;
  // In AlignedBuffers (transparent huge pages from 2 MiB on), as the model's K/V tensors are;
  // every layer a copy of the same random rows.
  std::vector<AlignedBuffer> k, v;
  std::vector<KvView> kvs;
  const std::vector<uint8_t> rows = make_rows(type, n_kv, n);
  const auto mapped_rows = [&](std::vector<AlignedBuffer>* bufs) {
    Result<AlignedBuffer> buf = AlignedBuffer::allocate(rows.size());
    if (!buf.ok()) return false;
    std::memcpy(buf->data(), rows.data(), rows.size());
    bufs->push_back(std::move(*buf));
    return true;
  };
  // V per head (the cache's V planes, kv_storage.h) or as rows.
  const bool planes = state.range(7) != 0 && n_head_kv > 1;
  const size_t hb = row_size(type, hd);
  for (int64_t i = 0; i < n_layers; ++i) {
    if (!mapped_rows(&k) || !mapped_rows(&v)) {
      state.SkipWithError("no memory for the K/V rows");
      return;
    }
    if (planes) {
      uint8_t* d = v.back().data();
      for (int64_t g = 0; g < n_head_kv; ++g) {
        for (int64_t c = 0; c < n_kv; ++c) {
          std::memcpy(d + (g * n_kv + c) * hb, rows.data() + c * row_size(type, n) + g * hb, hb);
        }
      }
    }
    kvs.push_back(KvView{type, k.back().data(), row_size(type, n), type, v.back().data(),
                         planes ? hb : row_size(type, n), n_kv});
    if (planes) kvs.back().v_head_stride = n_kv * hb;
  }
  const AttentionParams p{n_tokens, n_head, n_head_kv, hd, 1.0f / std::sqrt(static_cast<float>(hd)),
                          0.0f};
  const std::vector<float> q = normal(n_tokens * n_head * hd, 1.0f, 4);
  std::vector<float> mask(n_tokens * n_kv, 0.0f), out(n_tokens * n_head * hd);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t c = depth + t + 1; c < n_kv; ++c) mask[t * n_kv + c] = -INFINITY;
  }
  int64_t layer = 0;
  for (auto _ : state) {
    attention(p, q.data(), kvs[layer], mask.data(), n_kv, out.data(), pool);
    benchmark::DoNotOptimize(out.data());
    layer = (layer + 1) % n_layers;
  }
  // Bytes of K and V read per step, as a rate.
  state.counters["KV_GB/s"] = benchmark::Counter(1e-9 * n_kv * 2.0 * row_size(type, n),
                                                 benchmark::Counter::kIsIterationInvariantRate);
  // Multiply-adds per second (q . k and p * v, every query row over every cell it sees): the
  // arithmetic roof when the call is compute-bound (many query rows per K / V row).
  double macs = 0;
  for (int64_t t = 0; t < n_tokens; ++t) macs += 2.0 * n_head * hd * (depth + t + 1);
  state.counters["GMAC/s"] =
      benchmark::Counter(1e-9 * macs, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(type_name(type)) + " " + simd_target());
}
BENCHMARK(BM_AttentionDecode)
    ->ArgsProduct({{static_cast<int64_t>(GgmlType::F16), static_cast<int64_t>(GgmlType::Q8_0)},
                   {9},
                   {3},
                   {64},
                   {2048},
                   {1, 2},
                   {1},
                   {1}})
    ->ArgsProduct({{static_cast<int64_t>(GgmlType::F16), static_cast<int64_t>(GgmlType::Q8_0)},
                   {4},
                   {1},
                   {256},
                   {2048},
                   {1, 2},
                   {1},
                   {1}})
    // Qwen2.5 1.5B's layer shape (12 heads over 2 K/V heads of 128), decoding and verifying a
    // 16-token draft at depth 4096.
    ->ArgsProduct({{static_cast<int64_t>(GgmlType::F16), static_cast<int64_t>(GgmlType::Q8_0)},
                   {12},
                   {2},
                   {128},
                   {4096},
                   {2},
                   {1, 17},
                   {0, 1}})
    // Qwen2.5 0.5B's (14 heads over 2 K/V heads of 64), drafting for the 1.5B.
    ->Args({static_cast<int64_t>(GgmlType::F16), 14, 2, 64, 4096, 2, 1, 1})
    // The 1.5B's decoding on one thread, and at depth 1024 (one layer of K/V, 1 MiB, stays in the
    // caches): the same GMAC/s from the caches as from memory means the kernels, not the reads,
    // bound the call.
    ->Args({static_cast<int64_t>(GgmlType::F16), 12, 2, 128, 4096, 1, 1, 1})
    ->Args({static_cast<int64_t>(GgmlType::F16), 12, 2, 128, 1024, 2, 1, 1})
    ->Args({static_cast<int64_t>(GgmlType::F16), 12, 2, 128, 1024, 1, 1, 1})
    ->ArgNames({"type", "heads", "kv_heads", "head_dim", "depth", "threads", "tokens", "planes"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Prompt attention: 512 new tokens attending causally to depth + 512 cells.
void BM_AttentionPrompt(benchmark::State& state) {
  const GgmlType type = static_cast<GgmlType>(state.range(0));
  const int64_t n_head = 9, n_head_kv = 3, hd = 64, n_tokens = 512;
  const int64_t n_kv = state.range(1) + n_tokens;
  ThreadPool* pool = pool_for(static_cast<int>(state.range(2)));
  const int64_t n = n_head_kv * hd;
  const std::vector<uint8_t> k = make_rows(type, n_kv, n), v = make_rows(type, n_kv, n);
  const KvView kv{type, k.data(), row_size(type, n), type, v.data(), row_size(type, n), n_kv};
  const AttentionParams p{n_tokens, n_head, n_head_kv, hd, 0.125f, 0.0f};
  const std::vector<float> q = normal(n_tokens * n_head * hd, 1.0f, 5);
  std::vector<float> mask(n_tokens * n_kv, 0.0f), out(n_tokens * n_head * hd);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t c = n_kv - n_tokens + t + 1; c < n_kv; ++c) mask[t * n_kv + c] = -INFINITY;
  }
  for (auto _ : state) {
    attention(p, q.data(), kv, mask.data(), n_kv, out.data(), pool);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(std::string(type_name(type)) + " " + simd_target());
}
BENCHMARK(BM_AttentionPrompt)
    ->ArgsProduct({{static_cast<int64_t>(GgmlType::F16), static_cast<int64_t>(GgmlType::Q8_0)},
                   {0, 2048},
                   {1, 2}})
    ->ArgNames({"type", "depth", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_ThreadPoolEmptyCall(benchmark::State& state) {
  ThreadPool* pool = pool_for(static_cast<int>(state.range(0)));
  for (auto _ : state) pool->parallel_for(8, [](int64_t, int) {});
}
BENCHMARK(BM_ThreadPoolEmptyCall)->Arg(2)->UseRealTime();

}  // namespace
}  // namespace mnemo::kernels

// MNEMO_BENCH_TARGET=AVX2 (or SSE4, AVX3, ...) forces dispatch to that Highway target.
int main(int argc, char** argv) {
  if (const char* want = std::getenv("MNEMO_BENCH_TARGET")) {
    bool found = false;
    for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
      if (std::string(hwy::TargetName(t)) == want) {
        hwy::SetSupportedTargetsForTest(t);
        found = true;
      }
    }
    if (!found) {
      std::fprintf(stderr, "target %s is not compiled in or not supported here\n", want);
      return 1;
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
