#include "tools/common.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

namespace mnemo::tools {

void ModelFlags::add_to(CLI::App& app, bool with_parallel, bool model_optional) {
  auto* m = app.add_option("-m,--model", model_path, "GGUF model file");
  if (!model_optional) m->required();
  app.add_option("-c,--ctx-size", ctx.n_ctx, "KV cache size in cells (all sequences together)");
  app.add_option("-b,--batch-size", ctx.n_batch, "most tokens per decode call");
  app.add_option("--ubatch-size", ctx.n_ubatch, "most tokens per forward pass");
  app.add_option("-t,--threads", ctx.n_threads, "threads (0: all hardware threads)");
  app.add_option("--cache-type-k", type_k, "K cache type: " + std::string(kv_cache_type_names()));
  app.add_option("--cache-type-v", type_v, "V cache type (as -ctk)");
  app.add_flag("--kv-unified", ctx.kv_unified,
               "one KV stream shared by all sequences (default: one stream per sequence)");
  app.add_flag("--swa-full", ctx.swa_full, "full-size cache for sliding-window layers");
  app.add_option("--rs-ckpt-every", ctx.rs_checkpoint_interval,
                 "recurrent models: checkpoint each sequence's state every N tokens (0: never)");
  app.add_option("--rs-ckpts", ctx.rs_n_checkpoints,
                 "recurrent models: checkpoints kept per sequence (prompt cache, rollback)");
  app.add_flag("--no-repack", no_repack,
               "keep weights in the file's layout (default: repack linear weights at load for "
               "the VNNI / AMX kernels)");
  app.add_option("--repack-cache", repack_cache,
                 "keep the repacked weights in DIR (one checked file per model file and CPU "
                 "kind) and map them on the next start instead of repacking");
  if (with_parallel) app.add_option("--parallel", ctx.n_seq_max, "parallel sequences (slots)");
}

Status ModelFlags::resolve() {
  auto k = type_from_name(type_k);
  if (!k) return Status::invalid_argument("-ctk: unknown cache type '" + type_k + "'");
  auto v = type_from_name(type_v);
  if (!v) return Status::invalid_argument("-ctv: unknown cache type '" + type_v + "'");
  ctx.type_k = *k;
  ctx.type_v = *v;
  // As llama.cpp's tools: -b alone also bounds the ubatch (-b 32 means ubatches of 32).
  ctx.n_ubatch = std::min(ctx.n_ubatch, ctx.n_batch);
  return ctx.validate();
}

void add_sampling_flags(CLI::App& app, SamplingParams* p) {
  app.add_option("--temp", p->temp, "temperature (<= 0: greedy)");
  app.add_option("--top-k", p->top_k, "top-k (<= 0: off)");
  app.add_option("--top-p", p->top_p, "top-p (1: off)");
  app.add_option("--min-p", p->min_p, "min-p (0: off)");
  app.add_option("--repeat-penalty", p->repeat_penalty, "repetition penalty (1: off)");
  app.add_option("--repeat-last-n", p->repeat_last_n, "tokens the penalties look back over");
  app.add_option("--frequency-penalty", p->frequency_penalty, "frequency penalty");
  app.add_option("--presence-penalty", p->presence_penalty, "presence penalty");
  app.add_option("-s,--seed", p->seed, "random seed (default: random)");
}

void SpecFlags::add_to(CLI::App& app) {
  app.add_option("--spec-type", spec_type,
                 "speculative decoding: none, ngram-simple (drafts looked up in the sequence "
                 "itself; combines with -md) or draft-simple (the draft model alone)");
  app.add_option("--spec-ngram-size-n,--spec-ngram-simple-size-n", spec.ngram_size_n,
                 "ngram-simple: longest key looked up, in tokens");
  app.add_option("--model-draft,--spec-draft-model", model_draft,
                 "draft model for speculative decoding (same vocabulary as -m)");
  app.add_option("--draft-max,--draft,--draft-n,--spec-draft-n-max", spec.draft_max,
                 "most tokens drafted per step");
  app.add_option("--draft-min,--draft-n-min,--spec-draft-n-min", spec.draft_min,
                 "shorter drafts are not verified");
  app.add_option("--draft-p-min,--spec-draft-p-min", spec.draft_p_min,
                 "draft model: stop drafting when its pick's probability is below this");
  app.add_option("--draft-vocab", spec.draft_vocab,
                 "draft model: score only token ids below this (the most frequent in a BPE "
                 "vocabulary) and the tokens of the sequences; 0: every token (default: 32768)");
}

Status SpecFlags::resolve() {
  if (spec_type == "none" || spec_type == "draft-simple") {
    spec.ngram = false;
  } else if (spec_type == "ngram-simple") {
    spec.ngram = true;
  } else {
    return Status::invalid_argument("--spec-type: unknown type '" + spec_type +
                                    "' (none, ngram-simple, draft-simple)");
  }
  if (spec_type == "draft-simple" && model_draft.empty()) {
    return Status::invalid_argument("--spec-type draft-simple needs a draft model (-md)");
  }
  return spec.validate();
}

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

Result<LoadedModel> load_model(const ModelFlags& flags) {
  const std::string& path = flags.model_path;
  LoadedModel lm;
  const double t0 = now_ms();
  ModelParams mp;
  mp.repack = !flags.no_repack;
  mp.n_threads = flags.ctx.n_threads;
  mp.repack_cache_dir = flags.repack_cache;
  auto model = Model::load(path, mp);
  if (!model.ok()) return model.status();
  lm.model = std::move(model).value();
  auto tok = Tokenizer::from_gguf(lm.model->file());
  if (!tok.ok()) return tok.status().with_context(path);
  lm.tokenizer = std::make_unique<Tokenizer>(std::move(tok).value());
  lm.load_ms = now_ms() - t0;
  return lm;
}

Result<LoadedModel> load_draft_model(const ModelFlags& target, const std::string& path) {
  ModelFlags df = target;
  df.model_path = path;
  auto d = load_model(df);
  if (!d.ok()) return Status(d.status().code(), "--model-draft: " + d.status().to_string());
  return d;
}

int fail(std::string_view command, std::string_view message, int code) {
  fmt::print(stderr, "{}: {}\n", command, message);
  return code;
}

void report_loaded(std::string_view command, const LoadedModel& lm) {
  fmt::print(stderr, "{}: {} (loaded in {:.0f} ms)\n", command, lm.model->describe(), lm.load_ms);
  if (std::string r = repack_summary(*lm.model); !r.empty()) {
    fmt::print(stderr, "{}: {}\n", command, r);
  }
}

std::string repack_summary(const Model& model) {
  if (model.n_packed() == 0 && model.repack_note().empty()) return "";
  std::string s = fmt::format("{} weight matrices repacked ({:.1f} MiB)", model.n_packed(),
                              model.n_packed_bytes() / 1048576.0);
  if (!model.repack_note().empty()) s += ", " + model.repack_note();
  return s;
}

}  // namespace mnemo::tools
