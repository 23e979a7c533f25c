#include "server/models_catalog.h"

#include <fmt/format.h>
#include <ini.h>

#include <algorithm>
#include <filesystem>
#include <map>

namespace mnemo::server {
namespace {

namespace fs = std::filesystem;

struct PresetSection {
  std::string model;
  std::vector<std::string> args;
};

struct PresetParse {
  std::map<std::string, PresetSection> sections;  // "*" included
  std::string error;
};

// inih's handler: one key of one section; returns 0 (inih then reports the line) on a bad key.
int on_key(void* user, const char* section, const char* key, const char* value) {
  auto* p = static_cast<PresetParse*>(user);
  const std::string name = section, k = key, v = value;
  if (name.empty()) {
    p->error = fmt::format("'{}' is outside any [section]", k);
    return 0;
  }
  PresetSection& s = p->sections[name];
  if (k == "model" || k == "m") {
    s.model = v;
    return 1;
  }
  if (k.empty() || k[0] == '-') {
    p->error = fmt::format("key '{}': write flags without their dashes", k);
    return 0;
  }
  if (v == "false") return 1;
  s.args.push_back(k.size() == 1 ? "-" + k : "--" + k);
  if (v != "true") s.args.push_back(v);
  return 1;
}

}  // namespace

Result<std::vector<ModelEntry>> list_models(const std::string& dir, const std::string& preset) {
  std::map<std::string, ModelEntry> models;
  if (!dir.empty()) {
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    if (ec) {
      return Status::invalid_argument(
          fmt::format("--models-dir '{}': cannot list it ({})", dir, ec.message()));
    }
    for (const fs::directory_entry& e : it) {
      const fs::path& p = e.path();
      if (p.extension() != ".gguf" || !fs::is_regular_file(p, ec)) continue;
      ModelEntry m;
      m.name = p.stem().string();
      m.path = p.string();
      m.source = "models_dir";
      models[m.name] = std::move(m);
    }
  }
  if (!preset.empty()) {
    PresetParse parsed;
    const int line = ini_parse(preset.c_str(), on_key, &parsed);
    if (line < 0) return Status::invalid_argument("--models-preset '" + preset + "': cannot read it");
    if (line > 0) {
      return Status::invalid_argument(fmt::format("--models-preset '{}': line {}: {}", preset, line,
                                                  parsed.error.empty() ? "not a key = value line"
                                                                       : parsed.error));
    }
    const PresetSection global = parsed.sections["*"];
    for (auto& [name, s] : parsed.sections) {
      if (name == "*") continue;
      auto found = models.find(name);
      if (s.model.empty() && found == models.end()) {
        return Status::invalid_argument(
            fmt::format("--models-preset '{}': [{}] has no 'model = PATH'", preset, name));
      }
      ModelEntry& m = models[name];
      m.name = name;
      if (!s.model.empty()) m.path = s.model;
      m.source = found == models.end() ? "preset" : m.source;
      m.args = global.args;
      m.args.insert(m.args.end(), s.args.begin(), s.args.end());
    }
    for (auto& [name, m] : models) {
      if (m.source == "models_dir" && m.args.empty()) m.args = global.args;
    }
  }
  if (models.empty()) {
    return Status::invalid_argument(
        "no model to serve: give -m FILE, or --models-dir DIR holding GGUF files, or "
        "--models-preset FILE");
  }
  std::vector<ModelEntry> out;
  for (auto& [name, m] : models) out.push_back(std::move(m));
  return out;
}

}  // namespace mnemo::server
