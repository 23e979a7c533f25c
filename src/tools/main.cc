// The `mnemo` command: one binary, one subcommand per job (docs/design.md §2, tools/).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kernels/kernels.h"
#include "tools/commands.h"

namespace {

// llama.cpp's tools accept multi-letter single-dash flags ("-ub", "-ctk"); CLI11 only allows one
// letter after a single dash, so these aliases are rewritten to their long forms before parsing.
// An "=value" suffix is kept ("-ctk=q8_0" -> "--cache-type-k=q8_0").
constexpr std::pair<const char*, const char*> kLlamaAliases[] = {
    {"-ub", "--ubatch-size"},   {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"},
    {"-kvu", "--kv-unified"},   {"-np", "--parallel"},      {"-fa", "--flash-attn"},
    {"-ngl", "--n-gpu-layers"}, {"-nr", "--no-repack"},      {"-md", "--model-draft"},
};

std::vector<std::string> rewrite_aliases(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    for (const auto& [alias, long_form] : kLlamaAliases) {
      const std::string a(alias);
      if (args[i] == a) {
        args[i] = long_form;
      } else if (args[i].rfind(a + "=", 0) == 0) {
        args[i] = long_form + args[i].substr(a.size());
      }
    }
  }
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mnemo: LLM inference engine and server built around its memory subsystem"};
  app.require_subcommand(1);
  // The SIMD target the kernels dispatch to (after any MNEMO_SIMD cap): scripts/test reads it
  // to run the real-model tests under every target this CPU has.
  app.set_version_flag("--version",
                       std::string("mnemo 0.1.0 (SIMD ") + mnemo::kernels::simd_target() + ")");

  std::map<const CLI::App*, mnemo::tools::RunFn> runs;
  auto add = [&](const char* name, const char* help, auto reg) {
    CLI::App* sub = app.add_subcommand(name, help);
    runs[sub] = reg(*sub);
  };
  add("inspect", "Print a GGUF file's architecture, hyper-parameters, tokenizer and tensors",
      mnemo::tools::register_inspect);
  add("run", "Generate text from a prompt", mnemo::tools::register_run);
  add("bench", "Prompt-processing and generation throughput (llama-bench's format)",
      mnemo::tools::register_bench);
  add("perplexity", "Perplexity over a text file; K/V requantization experiments",
      mnemo::tools::register_perplexity);
  add("serve", "HTTP server: OpenAI and llama.cpp APIs over slots", mnemo::tools::register_serve);
  add("template", "Render a Jinja chat template (the server's engine) with given variables",
      mnemo::tools::register_template);
  add("cache", "List, verify or clear a prompt cache directory (serve --cache-dir)",
      mnemo::tools::register_cache);

  std::vector<std::string> args = rewrite_aliases(argc, argv);
  if (args.size() >= 2) {
    mnemo::tools::set_subcommand_args(std::vector<std::string>(args.begin() + 2, args.end()));
  }
  std::vector<char*> argp;
  for (auto& a : args) argp.push_back(a.data());
  try {
    app.parse(int(argp.size()), argp.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  for (CLI::App* sub : app.get_subcommands()) {
    auto it = runs.find(sub);
    if (it != runs.end()) return it->second();
  }
  return 2;
}
