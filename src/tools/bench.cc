// `mnemo bench`: prompt-processing (pp) and generation (tg) throughput, in llama-bench's table
// shape and JSON fields so one script can compare the two side by side.
//
// As llama-bench does: each test starts from an empty memory; with -d DEPTH the context is first
// filled with DEPTH tokens (not timed); pp times decoding n_prompt tokens in n_batch chunks, tg
// times n_gen single-token decodes; each test runs -r times after one warm-up, and reports the
// mean and standard deviation of tokens/s over the repetitions.
//
// --bandwidth also measures how close generation comes to the machine's memory bandwidth: the
// bytes one generated token reads (the weights of every matmul, repacked copies where there are
// some, plus the K/V rows attention reads at that depth) times tokens/s, next to the read
// bandwidth of the same number of threads streaming a buffer far larger than the caches. The
// yardstick is read between the generated tokens: after each run of tokens of about 0.2 s (and
// a pause that lets the engine's idle workers go to sleep) one pass over the buffer, so that
// tokens and passes take turns through the same seconds and a shared host's drift moves both
// alike. A test's share is
// its bytes over its tokens' time against the passes' bytes over their time; the best single
// pass is reported beside it. The passes are not part of the timed tokens. It also splits each
// generated token's time into its matmul calls (the weight streams, with the weights' bytes over
// that time beside the yardstick) and the rest (attention, norms, the threads' waits between
// calls), so that a share below the yardstick shows which part holds it back.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/buffer.h"
#include "kernels/kernels.h"
#include "tools/commands.h"
#include "tools/common.h"

namespace mnemo::tools {
namespace {

struct BenchFlags {
  ModelFlags model;
  std::vector<int> n_prompt{512};
  std::vector<int> n_gen{128};
  std::vector<int> n_depth{0};
  int reps = 5;
  std::string output = "md";
  bool bandwidth = false;
};

struct TestResult {
  int n_prompt = 0, n_gen = 0, n_depth = 0;
  std::vector<double> samples_ns;
  std::vector<double> samples_ts;
  double avg_ns = 0, stddev_ns = 0, avg_ts = 0, stddev_ts = 0;
  // --bandwidth, generation tests: the read bandwidth (bytes / s) of each yardstick pass read
  // between the tokens, the passes' bytes over their time (the yardstick of this test) and the
  // best pass.
  std::vector<double> read_bw_samples;
  double read_bw = 0, read_bw_best = 0;
  // --bandwidth, generation tests: ns per generated token spent inside matmul calls
  // (kernels::set_matmul_timing), over all repetitions; 0 when not measured.
  double matmul_ns_per_token = 0;
};

// The yardstick of --bandwidth: n_threads threads each sum their slice of a 1 GiB buffer (far
// past any cache; in transparent huge pages, as the packed weights and the K/V are).
class ReadProbe {
 public:
  /// Maps and fills the buffer; ok() is false when it cannot be mapped.
  explicit ReadProbe(int n_threads) : n_threads_(n_threads) {
    Result<AlignedBuffer> mapped = AlignedBuffer::allocate(kBytes);
    if (!mapped.ok()) return;
    buf_ = std::move(*mapped);
    uint64_t* w = words();
    for (size_t i = 0; i < kBytes / sizeof(uint64_t); ++i) w[i] = i;
  }
  bool ok() const { return buf_.data() != nullptr; }
  static constexpr size_t kBytes = size_t(1) << 30;

  /// One pass over the whole buffer: returns its duration in ns (bytes read: kBytes).
  double pass() {
    const size_t n_words = kBytes / sizeof(uint64_t);
    const uint64_t* buf = words();
    std::vector<uint64_t> sums(static_cast<size_t>(n_threads_), 0);
    const double t0 = now_ms();
    std::vector<std::thread> threads;
    for (int t = 0; t < n_threads_; ++t) {
      threads.emplace_back([&, t] {
        const size_t b = n_words * size_t(t) / size_t(n_threads_);
        const size_t e = n_words * size_t(t + 1) / size_t(n_threads_);
        uint64_t a[8] = {};
        size_t i = b;
        for (; i + 8 <= e; i += 8) {
          for (int j = 0; j < 8; ++j) a[j] += buf[i + size_t(j)];
        }
        for (; i < e; ++i) a[0] += buf[i];
        uint64_t s = 0;
        for (uint64_t v : a) s += v;
        sums[size_t(t)] = s;
      });
    }
    for (std::thread& th : threads) th.join();
    const double ns = (now_ms() - t0) * 1e6;
    uint64_t total = 0;
    for (uint64_t v : sums) total += v;
    if (total == 1) fmt::print(stderr, " ");  // keeps the sums alive
    return ns;
  }

 private:
  uint64_t* words() { return reinterpret_cast<uint64_t*>(buf_.data()); }
  int n_threads_;
  AlignedBuffer buf_;
};

// Passes of a ReadProbe read between the tokens of one test: their count, bytes / s of each,
// total time, best.
struct ProbeLog {
  std::vector<double> bw;
  double ns = 0;
  double best = 0;
  double matmul_ns = 0;  // ns inside matmul calls during the timed tokens
};

void mean_std(const std::vector<double>& v, double* mean, double* sd) {
  double s = 0;
  for (double x : v) s += x;
  *mean = v.empty() ? 0 : s / v.size();
  double q = 0;
  for (double x : v) q += (x - *mean) * (x - *mean);
  *sd = v.size() > 1 ? std::sqrt(q / (v.size() - 1)) : 0;
}

// Decodes n random tokens of sequence 0 from position *pos in n_batch chunks.
Status decode_tokens(Context& ctx, std::mt19937& rng, int n, Pos* pos) {
  const uint32_t n_vocab = ctx.model().hparams().n_vocab;
  std::uniform_int_distribution<int32_t> tok(0, int32_t(n_vocab) - 1);
  Batch batch;
  for (int i = 0; i < n; i += int(ctx.params().n_batch)) {
    const int end = std::min(n, i + int(ctx.params().n_batch));
    batch.clear();
    for (int j = i; j < end; ++j) batch.add(tok(rng), (*pos)++, {0}, j + 1 == end);
    MNEMO_RETURN_IF_ERROR(ctx.decode(batch));
  }
  return Status();
}

// One timed repetition: returns nanoseconds of the timed part. With a probe (generation tests
// under --bandwidth), the generated tokens go in runs of at least kProbeEveryMs of decoding
// (and the last token ends one), each run followed by a pause of kProbePauseMs and one probe
// pass, logged in *log; only the tokens are timed. Runs rather than single tokens, so that the
// pass's disturbance (caches evicted, the pool's workers asleep) falls on one token in several
// even for a small model.
constexpr double kProbeEveryMs = 200;
constexpr int kProbePauseMs = 3;  // past the thread pool's default spin (1 ms) before it sleeps
Result<double> run_once(Context& ctx, std::mt19937& rng, int n_prompt, int n_gen, int n_depth,
                        ReadProbe* probe = nullptr, ProbeLog* log = nullptr) {
  ctx.memory().clear();
  Pos pos = 0;
  MNEMO_RETURN_IF_ERROR(decode_tokens(ctx, rng, n_depth, &pos));
  double ns = 0;
  // The passes call no matmul: the difference over the loop is the tokens' matmul time.
  const int64_t matmul0 = kernels::matmul_time_ns();
  double t0 = now_ms();
  if (n_prompt > 0) MNEMO_RETURN_IF_ERROR(decode_tokens(ctx, rng, n_prompt, &pos));
  for (int i = 0; i < n_gen; ++i) {
    MNEMO_RETURN_IF_ERROR(decode_tokens(ctx, rng, 1, &pos));
    if (probe == nullptr) continue;
    const double run_ms = now_ms() - t0;
    if (run_ms < kProbeEveryMs && i + 1 < n_gen) continue;
    ns += run_ms * 1e6;
    std::this_thread::sleep_for(std::chrono::milliseconds(kProbePauseMs));
    const double pass_ns = probe->pass();
    const double bw = double(ReadProbe::kBytes) / (pass_ns * 1e-9);
    log->bw.push_back(bw);
    log->ns += pass_ns;
    log->best = std::max(log->best, bw);
    t0 = now_ms();
  }
  if (log != nullptr) log->matmul_ns += double(kernels::matmul_time_ns() - matmul0);
  return probe == nullptr ? (now_ms() - t0) * 1e6 : ns;
}

// Read bandwidth of n_threads threads, in bytes/s: the best of 3 passes of a ReadProbe. 0 when
// its buffer cannot be mapped.
double measure_read_bandwidth(int n_threads) {
  ReadProbe probe(n_threads);
  if (!probe.ok()) return 0;
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) {
    best = std::max(best, double(ReadProbe::kBytes) / (probe.pass() * 1e-9));
  }
  return best;
}

// Bytes of K and V one generated token reads at `depth` cells: every attention layer's rows of
// the cells it attends to (a sliding-window layer at most its window).
double kv_bytes_per_token(const Model& model, const ContextParams& cp, double depth) {
  const HParams& hp = model.hparams();
  double n = 0;
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    if (hp.is_recurrent_layer(il)) continue;
    const double cells = hp.is_swa_layer(il) ? std::min<double>(depth, hp.n_swa) : depth;
    n += cells *
         double(row_size(cp.type_k, hp.n_embd_k_gqa()) + row_size(cp.type_v, hp.n_embd_v_gqa()));
  }
  return n;
}

std::string test_name(const TestResult& r) {
  std::string s = r.n_prompt > 0 ? fmt::format("pp{}", r.n_prompt) : fmt::format("tg{}", r.n_gen);
  if (r.n_depth > 0) s += fmt::format(" @ d{}", r.n_depth);
  return s;
}

// Prints the results as llama-bench's JSON fields or its markdown table; with --bandwidth also
// the bytes read per generated token next to `read_bw` (bytes / s).
void print_results(const BenchFlags& f, const Model& model, const ContextParams& cp, int n_threads,
                   const std::vector<TestResult>& results, double read_bw) {
  auto token_bytes = [&](const TestResult& r) {
    // Token i of a tg test attends to depth + i cells (+1 for itself): the mean over the test.
    return double(model.n_decode_bytes()) +
           kv_bytes_per_token(model, cp, r.n_depth + (r.n_gen + 1) / 2.0);
  };

  const std::string model_type = model.describe();
  const std::string ctk(type_name(cp.type_k)), ctv(type_name(cp.type_v));
  if (f.output == "json") {
    nlohmann::json out = nlohmann::json::array();
    char when[32];
    std::time_t now = std::time(nullptr);
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    for (const TestResult& r : results) {
      out.push_back({{"build_commit", "mnemo"},
                     {"build_number", 0},
                     {"cpu_info", kernels::simd_target()},
                     {"gpu_info", ""},
                     {"backends", "CPU"},
                     {"model_filename", f.model.model_path},
                     {"model_type", model_type},
                     {"model_size", model.n_bytes()},
                     {"model_n_params", model.n_params()},
                     {"n_batch", cp.n_batch},
                     {"n_ubatch", cp.n_ubatch},
                     {"n_threads", n_threads},
                     {"type_k", ctk},
                     {"type_v", ctv},
                     {"n_gpu_layers", 0},
                     {"flash_attn", true},
                     {"use_mmap", true},
                     {"embeddings", false},
                     {"n_prompt", r.n_prompt},
                     {"n_gen", r.n_gen},
                     {"n_depth", r.n_depth},
                     {"test_time", when},
                     {"avg_ns", uint64_t(r.avg_ns)},
                     {"stddev_ns", uint64_t(r.stddev_ns)},
                     {"avg_ts", r.avg_ts},
                     {"stddev_ts", r.stddev_ts},
                     {"samples_ns", r.samples_ns},
                     {"samples_ts", r.samples_ts}});
      if (f.bandwidth && r.n_gen > 0 && r.n_prompt == 0) {
        out.back()["bytes_per_token"] = token_bytes(r);
        out.back()["read_bytes_per_s"] = token_bytes(r) * r.avg_ts;
        out.back()["bandwidth_bytes_per_s"] = r.read_bw;
        out.back()["bandwidth_best_bytes_per_s"] = r.read_bw_best;
        out.back()["bandwidth_samples"] = r.read_bw_samples;
        if (r.matmul_ns_per_token > 0) {
          out.back()["matmul_ns_per_token"] = r.matmul_ns_per_token;
          out.back()["weights_read_bytes_per_s"] =
              double(model.n_decode_bytes()) / (r.matmul_ns_per_token * 1e-9);
        }
      }
    }
    fmt::print("{}\n", out.dump(2));
  } else {
    fmt::print(
        "| model                          |       size |     params | backend    | threads "
        "| type_k | type_v |            test |                  t/s |\n");
    fmt::print(
        "| ------------------------------ | ---------: | ---------: | ---------- | ------: "
        "| -----: | -----: | --------------: | -------------------: |\n");
    for (const TestResult& r : results) {
      fmt::print(
          "| {:<30} | {:>6.2f} MiB | {:>8.2f} M | {:<10} | {:>7} | {:>6} | {:>6} | {:>15} | "
          "{:>20} |\n",
          model_type.substr(0, 30), model.n_bytes() / 1048576.0, model.n_params() / 1e6, "CPU",
          n_threads, ctk, ctv, test_name(r), fmt::format("{:.2f} ± {:.2f}", r.avg_ts, r.stddev_ts));
    }
    if (f.bandwidth && read_bw <= 0) {
      fmt::print("\nread bandwidth: not measured (no memory for its 1 GiB buffer)\n");
    } else if (f.bandwidth) {
      const bool between = std::any_of(results.begin(), results.end(),
                                       [](const TestResult& r) { return r.read_bw > 0; });
      fmt::print("\nread bandwidth, {} threads: {:.2f} GB/s ({})\n", n_threads, read_bw / 1e9,
                 between ? "one pass of the yardstick after each 0.2 s of generated tokens"
                         : "the best of 3 passes of the yardstick");
      for (const TestResult& r : results) {
        if (r.n_gen == 0 || r.n_prompt > 0 || r.read_bw <= 0) continue;
        const double b = token_bytes(r);
        fmt::print(
            "{}: {:.1f} MB per token (weights {:.1f}, K/V {:.1f}) x {:.2f} t/s = {:.2f} "
            "GB/s, {:.0f}% of the read bandwidth between its tokens ({:.2f} GB/s over {} pass{}; "
            "{:.0f}% of the best pass, {:.2f} GB/s)\n",
            test_name(r), b / 1e6, model.n_decode_bytes() / 1e6,
            (b - double(model.n_decode_bytes())) / 1e6, r.avg_ts, b * r.avg_ts / 1e9,
            100.0 * b * r.avg_ts / r.read_bw, r.read_bw / 1e9, r.read_bw_samples.size(),
            r.read_bw_samples.size() == 1 ? "" : "es", 100.0 * b * r.avg_ts / r.read_bw_best,
            r.read_bw_best / 1e9);
        // Where the token's time goes: the weight streams (matmul calls) and the rest.
        if (r.matmul_ns_per_token <= 0) continue;
        const double token_ms = r.avg_ns / r.n_gen * 1e-6, matmul_ms = r.matmul_ns_per_token * 1e-6;
        const double weights_bw = double(model.n_decode_bytes()) / (matmul_ms * 1e-3);
        fmt::print(
            "{}: matmuls {:.2f} of {:.2f} ms per token ({:.0f}%), their weights at {:.2f} GB/s "
            "({:.0f}% of the read bandwidth between its tokens); the rest (attention, norms, "
            "the threads' waits between calls) {:.2f} ms\n",
            test_name(r), matmul_ms, token_ms, 100.0 * matmul_ms / token_ms, weights_bw / 1e9,
            100.0 * weights_bw / r.read_bw, token_ms - matmul_ms);
      }
    }
  }
}

int bench_main(BenchFlags& f) {
  if (Status st = f.model.resolve(); !st.ok()) return fail("mnemo bench", st.message(), 2);
  if (f.reps < 1 || (f.output != "md" && f.output != "json")) {
    return fail("mnemo bench", "-r must be >= 1 and -o md or json", 2);
  }
  auto lm = load_model(f.model);
  if (!lm.ok()) return fail("mnemo bench", lm.status().to_string(), 1);
  const Model& model = *lm->model;

  // Each test needs room for depth + prompt + generation.
  int max_tokens = 0;
  for (int d : f.n_depth) {
    for (int p : f.n_prompt) max_tokens = std::max(max_tokens, d + p);
    for (int g : f.n_gen) max_tokens = std::max(max_tokens, d + g);
  }
  ContextParams cp = f.model.ctx;
  cp.n_seq_max = 1;
  cp.n_ctx = std::max<uint32_t>(cp.n_ctx, uint32_t(max_tokens) + 1);
  auto ctx_r = Context::create(model, cp);
  if (!ctx_r.ok()) return fail("mnemo bench", ctx_r.status().to_string(), 1);
  Context& ctx = **ctx_r;
  std::mt19937 rng(1234);

  std::vector<TestResult> results;
  for (int d : f.n_depth) {
    for (int p : f.n_prompt) {
      if (p > 0) {
        results.emplace_back();
        results.back().n_prompt = p;
        results.back().n_depth = d;
      }
    }
    for (int g : f.n_gen) {
      if (g > 0) {
        results.emplace_back();
        results.back().n_gen = g;
        results.back().n_depth = d;
      }
    }
  }
  // --bandwidth: the yardstick's buffer, mapped once (none: "not measured").
  std::unique_ptr<ReadProbe> probe;
  if (f.bandwidth) probe = std::make_unique<ReadProbe>(ctx.params().n_threads);
  kernels::set_matmul_timing(f.bandwidth);
  for (TestResult& r : results) {
    // Warm-up (as llama-bench: one small run so first-touch costs are not timed).
    if (auto w = run_once(ctx, rng, r.n_prompt > 0 ? std::min(r.n_prompt, 32) : 0,
                          r.n_gen > 0 ? 1 : 0, 0);
        !w.ok()) {
      return fail("mnemo bench", w.status().to_string(), 1);
    }
    const bool beside = f.bandwidth && r.n_gen > 0 && r.n_prompt == 0 && probe && probe->ok();
    ProbeLog log;
    for (int i = 0; i < f.reps; ++i) {
      auto ns =
          run_once(ctx, rng, r.n_prompt, r.n_gen, r.n_depth, beside ? probe.get() : nullptr, &log);
      if (!ns.ok()) return fail("mnemo bench", ns.status().to_string(), 1);
      r.samples_ns.push_back(*ns);
      r.samples_ts.push_back((r.n_prompt + r.n_gen) * 1e9 / *ns);
    }
    if (beside && !log.bw.empty()) {
      r.read_bw_samples = log.bw;
      r.read_bw = double(log.bw.size()) * double(ReadProbe::kBytes) / (log.ns * 1e-9);
      r.read_bw_best = log.best;
      r.matmul_ns_per_token = log.matmul_ns / (double(f.reps) * r.n_gen);
    }
    mean_std(r.samples_ns, &r.avg_ns, &r.stddev_ns);
    mean_std(r.samples_ts, &r.avg_ts, &r.stddev_ts);
    fmt::print(stderr, "mnemo bench: {} {:.2f} ± {:.2f} t/s\n", test_name(r), r.avg_ts,
               r.stddev_ts);
  }

  // The machine's read bandwidth (--bandwidth): over all passes read between generated tokens
  // (their bytes over their time), or the best of 3 passes when no test generates.
  double read_bw = 0;
  if (f.bandwidth) {
    double n = 0, secs = 0;
    for (const TestResult& r : results) {
      if (r.read_bw <= 0) continue;
      n += double(r.read_bw_samples.size());
      secs += double(r.read_bw_samples.size()) * double(ReadProbe::kBytes) / r.read_bw;
    }
    probe.reset();  // its 1 GiB before another is mapped
    read_bw = n > 0 ? n * double(ReadProbe::kBytes) / secs
                    : measure_read_bandwidth(ctx.params().n_threads);  // 0: no memory
  }
  print_results(f, model, cp, ctx.params().n_threads, results, read_bw);
  return 0;
}

}  // namespace

RunFn register_bench(CLI::App& app) {
  auto f = std::make_shared<BenchFlags>();
  f->model.add_to(app, false);
  app.add_option("-p,--n-prompt", f->n_prompt, "prompt tokens (0: no pp test)")->delimiter(',');
  app.add_option("-n,--n-gen", f->n_gen, "generated tokens (0: no tg test)")->delimiter(',');
  app.add_option("-d,--n-depth", f->n_depth, "tokens already in the context")->delimiter(',');
  app.add_option("-r,--repetitions", f->reps, "repetitions of each test");
  app.add_option("-o,--output", f->output, "md or json");
  app.add_flag("--bandwidth", f->bandwidth,
               "also measure the read bandwidth and report bytes read per generated token");
  return [f]() { return bench_main(*f); };
}

}  // namespace mnemo::tools
