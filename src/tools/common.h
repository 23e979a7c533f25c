// Flags and loading shared by the subcommands that run a model (run, bench, serve, perplexity).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <string_view>

#include "mnemo/context.h"
#include "mnemo/model.h"
#include "mnemo/sampling.h"
#include "mnemo/speculative.h"
#include "mnemo/status.h"
#include "mnemo/tokenizer.h"

namespace mnemo::tools {

/// Model and context flags, named as llama.cpp's tools name them.
struct ModelFlags {
  std::string model_path;
  ContextParams ctx;
  std::string type_k = "f16";
  std::string type_v = "f16";
  bool no_repack = false;
  std::string repack_cache;  // --repack-cache DIR (ModelParams::repack_cache_dir)

  /// Registers -m, -c, -b, -ub, -t, -ctk, -ctv, -kvu (and -np when with_parallel); -m is
  /// required unless model_optional (the server's router mode has none).
  void add_to(CLI::App& app, bool with_parallel, bool model_optional = false);
  /// Resolves the type names into ctx.type_k / ctx.type_v (InvalidArgument naming the flag).
  Status resolve();
};

/// Sampling flags: --temp, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n,
/// --frequency-penalty, --presence-penalty, --seed.
void add_sampling_flags(CLI::App& app, SamplingParams* p);

/// Speculative decoding flags, named as llama.cpp's (its older and newer spellings both):
/// --spec-type (none | ngram-simple | draft-simple), --spec-ngram-size-n
/// (--spec-ngram-simple-size-n), -md / --model-draft (--spec-draft-model), --draft-max
/// (--draft, --spec-draft-n-max), --draft-min (--spec-draft-n-min), --draft-p-min
/// (--spec-draft-p-min), --draft-vocab.
struct SpecFlags {
  SpecParams spec;
  std::string spec_type = "none";
  std::string model_draft;  // path of the draft model; empty: none
  void add_to(CLI::App& app);
  /// Resolves spec_type into spec.ngram and validates (InvalidArgument naming the flag).
  Status resolve();
  bool enabled() const { return spec.ngram || !model_draft.empty(); }
};

/// A model with its tokenizer, loaded once.
struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  double load_ms = 0;
};

/// Loads flags.model_path and its tokenizer, repacking weights unless --no-repack (with
/// flags.ctx.n_threads threads); errors name the file.
Result<LoadedModel> load_model(const ModelFlags& flags);
/// Loads the draft model (-md) with the target's model flags (threads, repacking, repack cache);
/// errors are prefixed "--model-draft: ".
Result<LoadedModel> load_draft_model(const ModelFlags& target, const std::string& path);
/// One line on the repacked weights for the tools' load message ("" when none).
std::string repack_summary(const Model& model);

/// What stops a subcommand: prints "<command>: <message>" on stderr and returns `code`, the exit
/// status (2 for bad flags, 1 for a failure).
int fail(std::string_view command, std::string_view message, int code);
/// The load message of a subcommand: "<command>: <model> (loaded in N ms)", then the repacked
/// weights' line when there are any.
void report_loaded(std::string_view command, const LoadedModel& lm);

/// Wall-clock milliseconds since an arbitrary start (steady clock).
double now_ms();

}  // namespace mnemo::tools
