// `mnemo cache list|verify|clear DIR`: a prompt cache directory (`mnemo serve --cache-dir`) seen
// from outside the server (src/prompt_cache/cache_dir.h; layout: docs/formats/prompt_cache.md).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "prompt_cache/cache_dir.h"
#include "tools/commands.h"

namespace mnemo::tools {
namespace {

struct CacheFlags {
  std::string action;
  std::string dir;
  bool json = false;
};

int cache_main(const CacheFlags& f) {
  if (f.action == "clear") {
    auto n = prompt_cache::clear_cache_dir(f.dir);
    if (!n.ok()) {
      fmt::print(stderr, "mnemo cache: {}\n", n.status().message());
      return 1;
    }
    fmt::print("removed {} files from {}\n", n->removed, f.dir);
    for (const std::string& ns : n->in_use) {
      fmt::print(
          "{} is in use by a running server: its entries were deleted; its lock and the "
          "files it is writing were kept\n",
          ns);
    }
    return 0;
  }
  const bool verify = f.action == "verify";
  auto list = prompt_cache::scan_cache_dir(f.dir, verify);
  if (!list.ok()) {
    fmt::print(stderr, "mnemo cache: {}\n", list.status().message());
    return 1;
  }
  size_t n_bad = 0;
  uint64_t bytes = 0;
  for (const auto& e : *list) {
    n_bad += !e.status.ok();
    bytes += e.bytes;
  }
  if (f.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& e : *list) {
      j.push_back({{"name", e.name},
                   {"arch", e.arch},
                   {"bytes", e.bytes},
                   {"n_tokens", e.n_tokens},
                   {"ok", e.status.ok()},
                   {"error", e.status.ok() ? "" : e.status.message()}});
    }
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("{:<46} {:<10} {:>9} {:>12}  {}\n", "entry", "arch", "tokens", "bytes",
               verify ? "checksums" : "header");
    for (const auto& e : *list) {
      fmt::print("{:<46} {:<10} {:>9} {:>12}  {}\n", e.name, e.arch, e.n_tokens, e.bytes,
                 e.status.ok() ? "ok" : e.status.message());
    }
    fmt::print("{} entries, {:.1f} MiB, {} unusable\n", list->size(), bytes / 1048576.0, n_bad);
  }
  return n_bad == 0 ? 0 : 1;
}

}  // namespace

RunFn register_cache(CLI::App& app) {
  auto f = std::make_shared<CacheFlags>();
  app.add_option("action", f->action, "list | verify | clear")
      ->required()
      ->check(CLI::IsMember({"list", "verify", "clear"}));
  app.add_option("dir", f->dir, "the directory given to mnemo serve --cache-dir")->required();
  app.add_flag("--json", f->json, "list / verify: one JSON array");
  return [f]() { return cache_main(*f); };
}

}  // namespace mnemo::tools
