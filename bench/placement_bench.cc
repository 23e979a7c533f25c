// Placement cost of KvCache::init_batch + apply (validation, split, find_slot planning, journaled
// commit), per placed token, at several n_ctx. Cost per token must not grow with n_ctx.
//
//   BM_DecodeStep/n_ctx   8 sequences in split mode (8 streams of n_ctx cells), each step one
//                         batch of 8 rows: one new token per sequence.
//   BM_Prompt/n_ctx       the same cache, each step one 512-token prompt for one sequence
//                         (round robin), n_ubatch 512.
//   BM_SwaDecodeStep      the decode step on a Gemma-3-like SwaKvCache (n_swa 512), whose SWA
//                         child reuses cells outside the window (and journals their K/V rows).
//   BM_SeqRm/n_ctx        seq_rm(-1, -1, -1) of 8 full streams, per cell removed.
// A stream that fills up is emptied with seq_rm (timer paused: BM_SeqRm measures that cost).
// Results: docs/benchmarks.md, "Memory placement".

#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "memory/kv_cache.h"
#include "memory/swa_kv_cache.h"

namespace mnemo {
namespace {

constexpr uint32_t kSeqs = 8;

std::unique_ptr<KvCache> make_cache(uint32_t n_ctx) {
  KvCacheConfig c;
  c.n_ctx = n_ctx;
  c.n_seq_max = kSeqs;
  c.unified = false;
  c.n_embd_k_gqa = {128};  // one layer: placement does not touch K/V unless it reuses cells
  c.n_embd_v_gqa = {128};
  auto r = KvCache::create(std::move(c));
  CHECK(r.ok()) << r.status().to_string();
  return std::move(r).value();
}

void run_batch(Memory& m, const Batch& b, uint32_t n_ubatch) {
  auto ctx = m.init_batch(b, n_ubatch);
  CHECK(ctx->ok()) << ctx->message();
  do {
    CHECK(ctx->apply().ok());
  } while (ctx->next());
  benchmark::DoNotOptimize(ctx.get());
}

void per_token(benchmark::State& state, double tokens_per_iter) {
  // Shown as seconds per token with an SI prefix ("502n" = 502 ns).
  state.counters["per_token"] = benchmark::Counter(
      tokens_per_iter, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * tokens_per_iter));
}

// Empties sequence s (all when s < 0) outside the timed region.
void refill(benchmark::State& state, Memory& m, SeqId s) {
  state.PauseTiming();
  CHECK(m.seq_rm(s, -1, -1).ok());
  state.ResumeTiming();
}

void BM_DecodeStep(benchmark::State& state) {
  const uint32_t n_ctx = static_cast<uint32_t>(state.range(0));
  auto kv = make_cache(n_ctx);
  Batch b;
  for (auto _ : state) {
    if (kv->seq_pos_max(0) + 1 == static_cast<Pos>(n_ctx)) refill(state, *kv, -1);
    b.clear();
    for (SeqId s = 0; s < static_cast<SeqId>(kSeqs); ++s) b.add_auto(1, {s}, true);
    run_batch(*kv, b, 512);
  }
  per_token(state, kSeqs);
}

void BM_Prompt(benchmark::State& state) {
  const uint32_t n_ctx = static_cast<uint32_t>(state.range(0));
  constexpr uint32_t kPrompt = 512;
  auto kv = make_cache(n_ctx);
  Batch b;
  SeqId s = 0;
  for (auto _ : state) {
    if (kv->seq_pos_max(s) + 1 + kPrompt > n_ctx) refill(state, *kv, s);
    b.clear();
    for (uint32_t i = 0; i < kPrompt; ++i) b.add_auto(1, {s}, i + 1 == kPrompt);
    run_batch(*kv, b, kPrompt);
    s = (s + 1) % kSeqs;
  }
  per_token(state, kPrompt);
}

void BM_SwaDecodeStep(benchmark::State& state) {
  const uint32_t n_ctx = static_cast<uint32_t>(state.range(0));
  SwaKvCacheConfig c;
  c.kv.n_ctx = n_ctx;
  c.kv.n_seq_max = kSeqs;
  c.kv.n_embd_k_gqa.assign(6, 128);
  c.kv.n_embd_v_gqa.assign(6, 128);
  c.is_swa_layer = [](uint32_t il) { return il % 6 != 5; };
  c.kv.swa_type = SwaType::kStandard;
  c.kv.n_swa = 512;
  c.n_ubatch = 512;
  auto r = SwaKvCache::create(std::move(c));
  CHECK(r.ok()) << r.status().to_string();
  auto m = std::move(r).value();
  Batch b;
  for (auto _ : state) {
    if (m->seq_pos_max(0) + 1 == static_cast<Pos>(n_ctx)) refill(state, *m, -1);
    b.clear();
    for (SeqId s = 0; s < static_cast<SeqId>(kSeqs); ++s) b.add_auto(1, {s}, true);
    run_batch(*m, b, 512);
  }
  per_token(state, kSeqs);
}

void BM_SeqRm(benchmark::State& state) {
  const uint32_t n_ctx = static_cast<uint32_t>(state.range(0));
  auto kv = make_cache(n_ctx);
  Batch b;
  for (auto _ : state) {
    state.PauseTiming();
    for (SeqId s = 0; s < static_cast<SeqId>(kSeqs); ++s) {
      b.clear();
      for (uint32_t i = 0; i < n_ctx; ++i) b.add_auto(1, {s}, false);
      run_batch(*kv, b, n_ctx);
    }
    state.ResumeTiming();
    CHECK(kv->seq_rm(-1, -1, -1).ok());
  }
  per_token(state, double{kSeqs} * n_ctx);
}

BENCHMARK(BM_DecodeStep)->Arg(4096)->Arg(32768);
BENCHMARK(BM_Prompt)->Arg(4096)->Arg(32768);
BENCHMARK(BM_SwaDecodeStep)->Arg(4096)->Arg(32768);
BENCHMARK(BM_SeqRm)->Arg(4096)->Arg(32768)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace mnemo

BENCHMARK_MAIN();
