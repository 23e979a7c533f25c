// The `mnemo` command: one binary, one subcommand per job (DESIGN §2, tools/).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <string>

#include "tools/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"mnemo: LLM inference engine and server built around its memory subsystem"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("mnemo 0.1.0"));

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
  add("serve", "HTTP server: OpenAI and llama.cpp APIs over slots", mnemo::tools::register_serve);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  for (CLI::App* sub : app.get_subcommands()) {
    auto it = runs.find(sub);
    if (it != runs.end()) return it->second();
  }
  return 2;
}
