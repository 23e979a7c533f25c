// Subcommands of the `mnemo` binary. Each registers its flags on a CLI11 subcommand and runs
// when selected; a run function returns the process exit code (0 ok, 1 error, 2 usage error)
// and prints errors to stderr itself.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace mnemo::tools {

/// A subcommand's run function, bound to its parsed options.
using RunFn = std::function<int()>;

/// `mnemo inspect FILE [--json]`: architecture, hyper-parameters, tokenizer summary, tensor
/// table, totals of a GGUF file.
RunFn register_inspect(CLI::App& app);

/// `mnemo run -m FILE -p TEXT ...`: generate text (llama-cli's flags).
RunFn register_run(CLI::App& app);

/// `mnemo bench -m FILE ...`: pp/tg throughput in llama-bench's table and JSON shape.
RunFn register_bench(CLI::App& app);

/// `mnemo perplexity -m FILE -f TEXT [-c N] [-ctk T] [--requantize-at N TYPE]`: perplexity as
/// llama-perplexity computes it; top-1 agreement with a reference run (src/tools/perplexity.cc).
RunFn register_perplexity(CLI::App& app);

/// `mnemo cache list|verify|clear DIR [--json]`: a prompt cache directory's entries (model,
/// tokens, bytes; verify also checks every checksum), or deletes them (src/tools/cache.cc).
RunFn register_cache(CLI::App& app);

/// `mnemo template (--file T | --model F) --context CTX.json`: renders a Jinja chat template
/// with the server's engine (src/tools/template.cc).
RunFn register_template(CLI::App& app);

/// `mnemo serve -m FILE ...`: the HTTP server (llama-server's flags; include/mnemo/server.h).
RunFn register_serve(CLI::App& app);

/// The command line after the subcommand's name, with llama.cpp's short aliases rewritten
/// (main.cc sets it before parsing): the server's router re-reads it for each model it loads.
void set_subcommand_args(std::vector<std::string> args);
const std::vector<std::string>& subcommand_args();

}  // namespace mnemo::tools
