// Speculative decoding on a recurrent / hybrid model: what rolling a rejected draft back costs,
// and whether speculation then wins. Results in docs/benchmarks.md, "Speculative decoding".
//
//   build/bench/speculative_bench            (writes Qwen3.5-0.8B's shapes, qwen35-bench, to /tmp)
//   MNEMO_MODEL=FILE build/bench/speculative_bench
//
// Rollback: after a verify batch of 1 + 8 rows (a draft of 8) of which 3 drafted tokens are
// accepted, the sequence must end after the last accepted row.
//   BM_Rollback/copy      mnemo: seq_rm copies the state kept after that row (rs_n_spec).
//   BM_Rollback/redecode  the way without kept states (llama.cpp's for recurrent models): copy
//                         the sequence aside before the verify (seq_cp to a spare sequence: the
//                         recurrent state is copied, the unified K/V cells shared), copy it back,
//                         and decode the accepted tokens again (1 + 3 rows).
// Both run on a unified KV cache with two sequences, so only the rollback differs.
// Generation: 64 greedy tokens after a 64-token prompt, the drafts from an oracle (the plain run's
// tokens), right until the `bad`-th drafted token, so acceptance is set by the argument:
//   BM_Generate/plain, BM_Generate/spec_copy/<accept %>, BM_Generate/spec_redecode/<accept %>.
// Times are wall-clock over the pool's threads (-t as MNEMO_THREADS, default 2).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "memory/hybrid_memory.h"
#include "memory/recurrent_memory.h"
#include "mnemo/context.h"
#include "mnemo/model.h"
#include "support/tiny_model.h"

namespace mnemo {
namespace {

constexpr int kPrompt = 64;
constexpr int kGen = 64;
constexpr int kDraft = 8;

const Model& model() {
  static std::unique_ptr<Model> m = [] {
    std::string path;
    if (const char* p = std::getenv("MNEMO_MODEL")) {
      path = p;
    } else {
      path = (std::filesystem::temp_directory_path() / "mnemo_speculative_bench.gguf").string();
      const Status st = testing::write_tiny_model("qwen35-bench", path, {.seed = 3});
      CHECK(st.ok()) << st.to_string();
    }
    auto r = Model::load(path);
    CHECK(r.ok()) << r.status().to_string();
    return std::move(r).value();
  }();
  return *m;
}

std::unique_ptr<Context> make_ctx(uint32_t n_spec) {
  ContextParams p;
  p.n_ctx = 1024;
  p.n_seq_max = 2;  // 1: the spare sequence of the re-decoding way
  p.kv_unified = true;
  p.n_batch = 512;
  p.n_ubatch = 512;
  const char* t = std::getenv("MNEMO_THREADS");
  p.n_threads = t ? std::atoi(t) : 2;
  p.rs_n_spec = n_spec;
  auto c = Context::create(model(), p);
  CHECK(c.ok()) << c.status().to_string();
  return std::move(c).value();
}

std::vector<int32_t> prompt() {
  std::vector<int32_t> v;
  const int32_t n_vocab = int32_t(model().hparams().n_vocab);
  for (int i = 0; i < kPrompt; ++i) v.push_back((i * 7919 + 17) % (n_vocab - 20) + 10);
  return v;
}

int32_t argmax(std::span<const float> l) {
  return int32_t(std::max_element(l.begin(), l.end()) - l.begin());
}

void decode(Context& ctx, const std::vector<int32_t>& toks, Pos p0, bool all_out) {
  Batch b;
  for (size_t i = 0; i < toks.size(); ++i) {
    b.add(toks[i], p0 + Pos(i), {0}, all_out || i + 1 == toks.size());
  }
  const Status st = ctx.decode(b);
  CHECK(st.ok()) << st.to_string();
}

// The recurrent part of the memory (the whole memory, or a hybrid's child).
const RecurrentMemory& rs_of(const Memory& m) {
  if (auto* h = dynamic_cast<const HybridMemory*>(&m)) return h->rs();
  return dynamic_cast<const RecurrentMemory&>(m);
}

// The re-decoding way: sequence 0 set aside into sequence 1 before a verify ...
void set_aside(Memory& m) {
  CHECK(m.seq_rm(1, -1, -1).ok());
  CHECK(m.seq_cp(0, 1, -1, -1).ok());
}
// ... and put back after it (then the accepted rows are decoded again).
void put_back(Memory& m) {
  CHECK(m.seq_rm(0, -1, -1).ok());
  CHECK(m.seq_cp(1, 0, -1, -1).ok());
}

void BM_Rollback(benchmark::State& state) {
  const bool copy = state.range(0) == 1;
  auto ctx = make_ctx(copy ? kDraft : 0);
  const std::vector<int32_t> p = prompt();
  decode(*ctx, p, 0, false);
  const Pos pos = kPrompt;  // the verify batch starts here
  std::vector<int32_t> verify(1 + kDraft);
  for (int i = 0; i <= kDraft; ++i) verify[i] = p[i];
  const int accepted = 3;
  Memory& mem = ctx->memory();
  // The prompt's state, to start each round from (in the spare sequence's place when copying).
  CHECK(mem.seq_cp(0, 1, -1, -1).ok());
  for (auto _ : state) {
    state.PauseTiming();
    put_back(mem);  // sequence 0 = the prompt
    if (copy) {
      decode(*ctx, verify, pos, true);
      state.ResumeTiming();
      CHECK(mem.seq_rm(0, pos + accepted + 1, -1).ok());
    } else {
      state.ResumeTiming();
      set_aside(mem);
      state.PauseTiming();
      decode(*ctx, verify, pos, true);
      state.ResumeTiming();
      put_back(mem);
      decode(*ctx, std::vector<int32_t>(verify.begin(), verify.begin() + accepted + 1), pos,
             false);
    }
    state.PauseTiming();
    CHECK(mem.seq_pos_max(0) == pos + accepted);
    state.ResumeTiming();
  }
  state.counters["state_MB"] = double(rs_of(mem).n_floats_per_seq()) * 4 / 1e6;
}

void BM_Generate(benchmark::State& state) {
  const int mode = int(state.range(0));  // 0 plain, 1 spec with kept states, 2 spec re-decoding
  const int accept_pct = int(state.range(1));
  const std::vector<int32_t> p = prompt();
  // The oracle: the plain run's tokens.
  static std::vector<int32_t> oracle;
  if (oracle.empty()) {
    auto ctx = make_ctx(0);
    decode(*ctx, p, 0, false);
    for (int k = 0; k < kGen + kDraft + 1; ++k) {
      oracle.push_back(argmax(ctx->logits(0)));
      decode(*ctx, {oracle.back()}, Pos(kPrompt + k), true);
    }
  }
  uint64_t drafted = 0, accepted_total = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto ctx = make_ctx(mode == 1 ? kDraft : 0);
    decode(*ctx, p, 0, false);
    Memory& mem = ctx->memory();
    state.ResumeTiming();
    std::vector<int32_t> got = {argmax(ctx->logits(0))};
    Pos pos = kPrompt;
    int step = 0;
    while (int(got.size()) < kGen) {
      if (mode == 0) {
        decode(*ctx, {got.back()}, pos++, true);
        got.push_back(argmax(ctx->logits(0)));
        continue;
      }
      // Right drafted tokens: accept_pct % of kDraft, the next one wrong.
      const int good = kDraft * accept_pct / 100;
      std::vector<int32_t> v = {got.back()};
      for (int i = 0; i < kDraft; ++i) {
        const int32_t t = oracle[got.size() + i];
        v.push_back(i == good ? (t + 1) % 200 : t);
      }
      if (mode == 2) set_aside(mem);
      decode(*ctx, v, pos, true);
      int acc = 0;
      for (int i = 0; i <= kDraft; ++i) {
        got.push_back(argmax(ctx->logits(i)));
        if (i == kDraft || got.back() != v[i + 1]) break;
        ++acc;
      }
      drafted += kDraft;
      accepted_total += acc;
      if (acc < kDraft) {
        if (mode == 1) {
          CHECK(mem.seq_rm(0, pos + acc + 1, -1).ok());
        } else {
          put_back(mem);
          decode(*ctx, std::vector<int32_t>(v.begin(), v.begin() + acc + 1), pos, false);
        }
      }
      pos += acc + 1;
      ++step;
    }
    got.resize(kGen);
    CHECK(std::equal(got.begin(), got.end(), oracle.begin())) << "speculation changed the output";
  }
  state.counters["tok/s"] =
      benchmark::Counter(double(kGen) * state.iterations(), benchmark::Counter::kIsRate);
  if (drafted) state.counters["accepted"] = double(accepted_total) / double(drafted);
}

BENCHMARK(BM_Rollback)->ArgName("copy")->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Generate)
    ->ArgNames({"mode", "accept"})
    ->Args({0, 0})
    ->Args({1, 100})
    ->Args({2, 100})
    ->Args({1, 50})
    ->Args({2, 50})
    ->Args({1, 0})
    ->Args({2, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(2);

}  // namespace
}  // namespace mnemo

BENCHMARK_MAIN();
