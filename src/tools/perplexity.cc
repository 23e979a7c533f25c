// `mnemo perplexity`: perplexity of a model over a text file, as llama.cpp's llama-perplexity
// computes it, plus K/V quality experiments: requantizing the cache mid-sequence
// (--requantize-at) and top-1 agreement with a reference run (--top1-out / --top1-ref).
//
// Method: the text is tokenized once (no special tokens) and cut into chunks of n_ctx tokens;
// each chunk starts from an empty cache, its first token replaced by BOS when the model adds one.
// Every position in the second half of a chunk is scored: nll_j = -log softmax(logits_j)[t_{j+1}]
// for j in [n_ctx/2, n_ctx - 1). PPL = exp(mean nll), with the standard error of the mean
// carried through exp (PPL * stddev(nll) / sqrt(N)).
//
// --requantize-at N TYPE: each chunk decodes its first N tokens with -ctk/-ctv, then the whole
// cache is requantized to TYPE (K and V; "K/V" for different types) and the chunk goes on. With
// N = n_ctx/2 the scored half runs entirely over the requantized cache, which is the
// "requantized mid-sequence" column of docs/kv-quality.md.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tools/commands.h"
#include "tools/common.h"

namespace mnemo::tools {
namespace {

struct PplFlags {
  ModelFlags model;
  std::string text_path;
  int32_t n_chunks = -1;                     // -1: every full chunk of the text
  std::vector<std::string> requantize_args;  // --requantize-at N TYPE
  int32_t requantize_at = -1;                // N: tokens into each chunk; -1: never
  std::string requantize_type;               // TYPE: "q8_0" or "q8_0/q4_0"
  std::string top1_out;                      // file: the argmax token of every scored position
  std::string top1_ref;                      // file written by --top1-out of a reference run
  bool no_kv_rotation = false;
};

Status parse_pair(const std::string& s, GgmlType* k, GgmlType* v) {
  const size_t slash = s.find('/');
  const auto a = type_from_name(s.substr(0, slash));
  const auto b = type_from_name(slash == std::string::npos ? s : s.substr(slash + 1));
  if (!a || !b) return Status::invalid_argument("--requantize-at: unknown cache type '" + s + "'");
  *k = *a;
  *v = *b;
  return Status();
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found("cannot open " + path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// log-softmax of logits at index `target`, and the argmax.
double log_prob(std::span<const float> logits, int32_t target, int32_t* argmax) {
  float mx = logits[0];
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > mx) mx = logits[i], best = i;
  }
  double sum = 0;
  for (float x : logits) sum += std::exp(double(x) - mx);
  *argmax = int32_t(best);
  return double(logits[size_t(target)]) - mx - std::log(sum);
}

int ppl_main(PplFlags& f) {
  f.model.ctx.kv_rotation = !f.no_kv_rotation;
  if (Status st = f.model.resolve(); !st.ok()) return fail("mnemo perplexity", st.message(), 2);
  GgmlType rq_k = GgmlType::F16, rq_v = GgmlType::F16;
  if (f.requantize_at >= 0) {
    if (Status st = parse_pair(f.requantize_type, &rq_k, &rq_v); !st.ok()) {
      return fail("mnemo perplexity", st.message(), 2);
    }
  }
  const uint32_t n_ctx = f.model.ctx.n_ctx;
  if (n_ctx < 8 || (f.requantize_at >= 0 && uint32_t(f.requantize_at) >= n_ctx)) {
    return fail("mnemo perplexity", "need n_ctx >= 8 and --requantize-at < n_ctx", 2);
  }
  f.model.ctx.n_seq_max = 1;
  f.model.ctx.n_batch = std::min(f.model.ctx.n_batch, n_ctx);
  f.model.ctx.n_ubatch = std::min(f.model.ctx.n_ubatch, f.model.ctx.n_batch);

  auto text = read_file(f.text_path);
  if (!text.ok()) return fail("mnemo perplexity", text.status().message(), 1);
  auto lm = load_model(f.model);
  if (!lm.ok()) return fail("mnemo perplexity", lm.status().to_string(), 1);
  const Tokenizer& tok = *lm->tokenizer;
  auto ctx_r = Context::create(*lm->model, f.model.ctx);
  if (!ctx_r.ok()) return fail("mnemo perplexity", ctx_r.status().to_string(), 1);
  Context& ctx = **ctx_r;

  const std::vector<TokenId> tokens = tok.tokenize(*text, /*add_special=*/false, false);
  int64_t n_chunks = int64_t(tokens.size()) / n_ctx;
  if (f.n_chunks >= 0) n_chunks = std::min<int64_t>(n_chunks, f.n_chunks);
  if (n_chunks == 0) {
    fmt::print(stderr, "mnemo perplexity: {} tokens are fewer than one chunk of n_ctx {}\n",
               tokens.size(), n_ctx);
    return 1;
  }
  std::vector<int32_t> ref;
  if (!f.top1_ref.empty()) {
    std::ifstream in(f.top1_ref);
    for (int32_t t; in >> t;) ref.push_back(t);
  }
  fmt::print(stderr, "mnemo perplexity: {} ({} tokens, {} chunks of {}), K/V {}/{}{}{}\n",
             lm->model->describe(), tokens.size(), n_chunks, n_ctx, f.model.type_k, f.model.type_v,
             f.no_kv_rotation ? ", rotation off" : "",
             f.requantize_at >= 0 ? fmt::format(", requantized to {} after {} tokens",
                                                f.requantize_type, f.requantize_at)
                                  : std::string());

  const uint32_t first = n_ctx / 2;
  double sum = 0, sum2 = 0;
  int64_t n_scored = 0, n_agree = 0;
  std::vector<int32_t> top1;
  const double t0 = now_ms();
  for (int64_t c = 0; c < n_chunks; ++c) {
    ctx.memory().clear();
    if (f.requantize_at >= 0) {
      // Back to the starting types for the next chunk (cheap: the cache is empty).
      Status st = ctx.memory().requantize(f.model.ctx.type_k, f.model.ctx.type_v);
      if (!st.ok()) return fail("mnemo perplexity", st.to_string(), 1);
    }
    std::vector<TokenId> chunk(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
    if (tok.add_bos()) chunk[0] = tok.bos();
    uint32_t pos = 0;
    while (pos < n_ctx) {
      uint32_t end = std::min(n_ctx, pos + ctx.params().n_batch);
      if (f.requantize_at >= 0 && pos < uint32_t(f.requantize_at)) {
        end = std::min(end, uint32_t(f.requantize_at));
      }
      Batch b;
      for (uint32_t j = pos; j < end; ++j)
        b.add(chunk[j], Pos(j), {0}, j >= first && j + 1 < n_ctx);
      if (Status st = ctx.decode(b); !st.ok()) {
        fmt::print(stderr, "mnemo perplexity: decode failed: {}\n", st.to_string());
        return 1;
      }
      uint32_t k = 0;
      for (uint32_t j = pos; j < end; ++j) {
        if (!(j >= first && j + 1 < n_ctx)) continue;
        int32_t argmax = 0;
        const double lp = log_prob(ctx.logits(k++), chunk[j + 1], &argmax);
        sum += -lp;
        sum2 += lp * lp;
        top1.push_back(argmax);
        if (size_t(n_scored) < ref.size() && ref[size_t(n_scored)] == argmax) ++n_agree;
        ++n_scored;
      }
      pos = end;
      if (f.requantize_at >= 0 && pos == uint32_t(f.requantize_at)) {
        Status st = ctx.memory().requantize(rq_k, rq_v);
        if (!st.ok()) {
          fmt::print(stderr, "mnemo perplexity: requantize: {}\n", st.to_string());
          return 1;
        }
      }
    }
    const double mean = sum / double(n_scored);
    fmt::print(stderr, "[{}]{:.4f}{}", c + 1, std::exp(mean), c + 1 == n_chunks ? "\n" : ",");
  }
  const double mean = sum / double(n_scored);
  const double var = std::max(0.0, sum2 / double(n_scored) - mean * mean);
  const double ppl = std::exp(mean);
  const double err = ppl * std::sqrt(var / double(std::max<int64_t>(1, n_scored - 1)));
  std::string agree;
  if (!ref.empty()) {
    agree = fmt::format(", top-1 agreement {:.4f} ({} of {})",
                        double(n_agree) / double(std::min<size_t>(ref.size(), size_t(n_scored))),
                        n_agree, std::min<size_t>(ref.size(), size_t(n_scored)));
  }
  fmt::print("ppl {:.4f} +/- {:.4f} over {} scored tokens{} ({:.1f} s)\n", ppl, err, n_scored,
             agree, (now_ms() - t0) / 1000.0);
  if (!f.top1_out.empty()) {
    std::ofstream out(f.top1_out);
    for (int32_t t : top1) out << t << "\n";
    if (!out) {
      fmt::print(stderr, "mnemo perplexity: cannot write {}\n", f.top1_out);
      return 1;
    }
  }
  return 0;
}

}  // namespace

RunFn register_perplexity(CLI::App& app) {
  auto f = std::make_shared<PplFlags>();
  f->model.ctx.n_ctx = 512;
  f->model.ctx.n_batch = 512;
  f->model.add_to(app, false);
  app.add_option("-f,--file", f->text_path, "text file to score")->required();
  app.add_option("--chunks", f->n_chunks, "score at most this many chunks of n_ctx tokens");
  app.add_option("--requantize-at", f->requantize_args,
                 "N TYPE: after N tokens of each chunk, requantize the cache to TYPE (K and V; "
                 "K/V for two types)")
      ->expected(2);
  app.add_option("--top1-out", f->top1_out, "write the argmax token of every scored position");
  app.add_option("--top1-ref", f->top1_ref,
                 "compare argmax tokens with a file written by --top1-out (top-1 agreement)");
  app.add_flag("--no-kv-rotation", f->no_kv_rotation,
               "store quantized K/V unrotated (default: Hadamard-rotated per head)");
  return [f]() {
    if (f->requantize_args.size() == 2) {
      char* end = nullptr;
      const long n = std::strtol(f->requantize_args[0].c_str(), &end, 10);
      if (end == f->requantize_args[0].c_str() || *end != 0 || n < 0) {
        return fail("mnemo perplexity", "--requantize-at N TYPE: N must be a token count", 2);
      }
      f->requantize_at = int32_t(n);
      f->requantize_type = f->requantize_args[1];
    }
    return ppl_main(*f);
  };
}

}  // namespace mnemo::tools
