// Requantizing a long sequence in place against re-processing its prompt (the alternative
// without requantization: reload with another -ctk/-ctv and decode the prompt again). Results in
// docs/benchmarks.md, "State save / restore and requantization".
//
//   MNEMO_MODEL=models/SmolLM2-135M-Instruct-Q4_1.gguf MNEMO_BENCH_TOKENS=16384
//     build-state/src/context/requantize_bench   (one command line)
//
// Times are wall-clock (manual timing): both sides use every thread of the machine (the
// conversion splits layers over threads, the forward pass its matmuls and attention).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "mnemo/context.h"
#include "mnemo/model.h"
#include "mnemo/state.h"

namespace mnemo {
namespace {

uint32_t n_tokens() {
  const char* s = std::getenv("MNEMO_BENCH_TOKENS");
  return s ? uint32_t(std::atoi(s)) : 16384;
}

struct Setup {
  std::unique_ptr<Model> model;
  std::unique_ptr<Context> ctx;
  std::vector<int32_t> prompt;
  std::vector<uint8_t> f16_state;  // the decoded prompt, to restore before each requantization
};

Setup& setup() {
  static Setup s = [] {
    Setup s;
    const char* path = std::getenv("MNEMO_MODEL");
    auto m = Model::load(path ? path : "models/SmolLM2-135M-Instruct-Q4_1.gguf");
    CHECK(m.ok()) << m.status().to_string();
    s.model = std::move(m).value();
    ContextParams p;
    p.n_ctx = n_tokens() + 64;
    p.n_batch = 512;
    p.n_ubatch = 512;
    p.type_k = p.type_v = GgmlType::F16;
    auto c = Context::create(*s.model, p);
    CHECK(c.ok()) << c.status().to_string();
    s.ctx = std::move(c).value();
    for (uint32_t i = 0; i < n_tokens(); ++i) {
      s.prompt.push_back(int32_t((i * 7919 + 17) % (s.model->hparams().n_vocab - 20) + 10));
    }
    return s;
  }();
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Decoding the whole prompt again (what a restart with new cache types costs).
void BM_ReprocessPrompt(benchmark::State& st) {
  Setup& s = setup();
  for (auto _ : st) {
    s.ctx->memory().clear();
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < s.prompt.size(); i += 512) {
      Batch b;
      for (size_t j = i; j < std::min(s.prompt.size(), i + 512); ++j) {
        b.add(s.prompt[j], Pos(j), {0}, j + 1 == s.prompt.size());
      }
      Status r = s.ctx->decode(b);
      CHECK(r.ok()) << r.to_string();
    }
    st.SetIterationTime(seconds_since(t0));
  }
  if (s.f16_state.empty()) {
    s.f16_state.resize(*state_seq_get_size(s.ctx->memory(), s.ctx->fingerprint(), 0));
    CHECK(state_seq_get_data(s.ctx->memory(), s.ctx->fingerprint(), 0, s.f16_state).ok());
  }
  st.counters["tokens"] = double(s.prompt.size());
  st.SetLabel("SmolLM2-135M f16 K/V, " + std::to_string(s.prompt.size()) + " tokens");
}
BENCHMARK(BM_ReprocessPrompt)->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);

// requantize_seq of the decoded prompt, f16 -> arg (0: q8_0, 1: q4_0), rotation on.
void BM_RequantizeSeq(benchmark::State& st) {
  Setup& s = setup();
  CHECK(!s.f16_state.empty()) << "BM_ReprocessPrompt runs first";
  const GgmlType t = st.range(0) == 0 ? GgmlType::Q8_0 : GgmlType::Q4_0;
  size_t before = 0, after = 0;
  for (auto _ : st) {
    CHECK(s.ctx->memory().requantize(GgmlType::F16, GgmlType::F16).ok());
    CHECK(state_seq_set_data(s.ctx->memory(), s.ctx->fingerprint(), s.f16_state, 0).ok());
    before = s.ctx->memory().breakdown().tensor_bytes;
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(s.ctx->memory().requantize_seq(0, t, t).ok());
    st.SetIterationTime(seconds_since(t0));
    after = s.ctx->memory().breakdown().tensor_bytes;
  }
  st.counters["MiB_before"] = double(before) / (1 << 20);
  st.counters["MiB_after"] = double(after) / (1 << 20);
  st.SetLabel("f16 -> " + std::string(type_name(t)) + ", " + std::to_string(s.prompt.size()) +
              " tokens, " + std::to_string(std::thread::hardware_concurrency()) + " threads");
}
BENCHMARK(BM_RequantizeSeq)
    ->Arg(0)
    ->Arg(1)
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace mnemo

BENCHMARK_MAIN();
