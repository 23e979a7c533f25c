// `mnemo inspect FILE [--json]`: what a GGUF file holds, for people (text) and machines (JSON).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "mnemo/gguf.h"
#include "mnemo/quant.h"
#include "tools/commands.h"

namespace mnemo::tools {
namespace {

using nlohmann::json;

// Architecture-prefixed hyper-parameter keys shown by inspect (GGUF spec "LLM" section).
constexpr const char* kHparamSuffixes[] = {
    "context_length",
    "embedding_length",
    "block_count",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.layer_norm_rms_epsilon",
    "attention.layer_norm_epsilon",
    "attention.sliding_window",
    "rope.dimension_count",
    "rope.freq_base",
    "rope.scaling.type",
    "rope.scaling.factor",
    "vocab_size",
    "expert_count",
    "expert_used_count",
    "expert_feed_forward_length",
    "expert_shared_feed_forward_length",
    "full_attention_interval",
    "rope.dimension_sections",
    "ssm.conv_kernel",
    "ssm.state_size",
    "ssm.inner_size",
    "ssm.time_step_rank",
    "ssm.group_count",
};

// Arrays longer than this are summarized, not listed, in the JSON metadata.
constexpr size_t kMaxListedArray = 16;

json value_to_json(const gguf::Value& v, bool summarize_arrays) {
  if (const auto* s = v.as_string()) return *s;
  if (const auto* a = v.as_array()) {
    if (summarize_arrays && a->items.size() > kMaxListedArray) {
      return json{{"array_of", std::string(gguf::value_type_name(a->elem_type))},
                  {"length", a->items.size()}};
    }
    json out = json::array();
    for (const auto& item : a->items) out.push_back(value_to_json(item, summarize_arrays));
    return out;
  }
  if (auto b = v.as_bool()) return *b;
  if (v.is_float()) return *v.as_double();
  if (auto i = v.as_int()) return *i;
  if (auto u = v.as_uint()) return *u;
  return nullptr;
}

std::string value_to_text(const gguf::Value& v) {
  if (const auto* a = v.as_array()) {
    return fmt::format("[{} x {}]", a->items.size(), gguf::value_type_name(a->elem_type));
  }
  if (const auto* s = v.as_string()) {
    if (s->size() > 60) return fmt::format("\"{}...\" ({} bytes)", s->substr(0, 57), s->size());
    return fmt::format("\"{}\"", *s);
  }
  return value_to_json(v, true).dump();
}

std::string shape_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

std::string human_bytes(uint64_t n) {
  if (n >= (1ull << 30)) return fmt::format("{:.2f} GiB", n / double(1ull << 30));
  if (n >= (1ull << 20)) return fmt::format("{:.2f} MiB", n / double(1ull << 20));
  if (n >= (1ull << 10)) return fmt::format("{:.2f} KiB", n / double(1ull << 10));
  return fmt::format("{} B", n);
}

// The text of token `id` from tokenizer.ggml.tokens, or "" if out of range.
std::string token_text(const gguf::File& f, int64_t id) {
  const gguf::Value* tokens = f.find("tokenizer.ggml.tokens");
  const gguf::Array* a = tokens ? tokens->as_array() : nullptr;
  if (a == nullptr || id < 0 || static_cast<size_t>(id) >= a->items.size()) return "";
  const std::string* s = a->items[id].as_string();
  return s ? *s : "";
}

json build_report(const gguf::File& f, const std::string& path) {
  json r;
  r["file"] = path;
  r["gguf_version"] = f.version();
  r["file_size"] = f.file_size();
  r["alignment"] = f.alignment();
  r["architecture"] = f.architecture();
  if (auto name = f.get_string("general.name"); name.ok()) r["name"] = *name;

  json hp = json::object();
  for (const char* suffix : kHparamSuffixes) {
    if (const gguf::Value* v = f.find(f.arch_key(suffix))) hp[suffix] = value_to_json(*v, true);
  }
  r["hparams"] = hp;
  if (auto blocks = f.get_arch_uint("block_count"); blocks.ok()) r["n_blocks"] = *blocks;

  json tok = json::object();
  if (auto model = f.get_string("tokenizer.ggml.model"); model.ok()) tok["model"] = *model;
  if (auto pre = f.get_string("tokenizer.ggml.pre"); pre.ok()) tok["pre"] = *pre;
  if (auto tokens = f.get_array("tokenizer.ggml.tokens"); tokens.ok()) {
    tok["vocab_size"] = (*tokens)->items.size();
  }
  if (auto merges = f.get_array("tokenizer.ggml.merges"); merges.ok()) {
    tok["n_merges"] = (*merges)->items.size();
  }
  json special = json::object();
  for (const char* which : {"bos", "eos", "eot", "unk", "sep", "pad", "mask"}) {
    auto id = f.get_int(fmt::format("tokenizer.ggml.{}_token_id", which));
    if (id.ok()) special[which] = json{{"id", *id}, {"text", token_text(f, *id)}};
  }
  tok["special"] = special;
  for (const char* flag : {"add_bos_token", "add_eos_token", "add_space_prefix"}) {
    if (auto b = f.get_bool(fmt::format("tokenizer.ggml.{}", flag)); b.ok()) tok[flag] = *b;
  }
  if (auto tmpl = f.get_string("tokenizer.chat_template"); tmpl.ok()) {
    tok["chat_template_bytes"] = tmpl->size();
  }
  r["tokenizer"] = tok;

  json tensors = json::array();
  std::map<std::string, std::pair<uint64_t, uint64_t>> per_type;  // name -> (count, bytes)
  uint64_t n_params = 0, n_bytes = 0;
  for (const auto& t : f.tensors()) {
    std::string type(type_name(t.type));
    tensors.push_back({{"name", t.name},
                       {"type", type},
                       {"shape", t.dims},
                       {"bytes", t.n_bytes},
                       {"offset", t.offset}});
    n_params += static_cast<uint64_t>(t.n_elements());
    n_bytes += t.n_bytes;
    per_type[type].first += 1;
    per_type[type].second += t.n_bytes;
  }
  r["tensors"] = tensors;
  r["n_tensors"] = f.tensors().size();
  r["n_params"] = n_params;
  r["tensor_bytes"] = n_bytes;
  json by_type = json::object();
  for (const auto& [type, cb] : per_type)
    by_type[type] = {{"tensors", cb.first}, {"bytes", cb.second}};
  r["bytes_per_type"] = by_type;

  json meta = json::object();
  for (const auto& [key, value] : f.metadata()) meta[key] = value_to_json(value, true);
  r["metadata"] = meta;
  return r;
}

void print_text(const gguf::File& f, const json& r) {
  fmt::print("file:          {}\n", r["file"].get<std::string>());
  fmt::print("gguf:          v{}, {} ({} bytes), alignment {}\n", f.version(),
             human_bytes(f.file_size()), f.file_size(), f.alignment());
  fmt::print("architecture:  {}\n", f.architecture().empty() ? "(none)" : f.architecture());
  if (r.contains("name")) fmt::print("name:          {}\n", r["name"].get<std::string>());
  if (r.contains("n_blocks")) fmt::print("blocks:        {}\n", r["n_blocks"].get<uint64_t>());

  fmt::print("\nhyper-parameters:\n");
  for (const char* suffix : kHparamSuffixes) {
    if (const gguf::Value* v = f.find(f.arch_key(suffix))) {
      fmt::print("  {:<36} {}\n", f.arch_key(suffix), value_to_text(*v));
    }
  }

  const json& tok = r["tokenizer"];
  fmt::print("\ntokenizer:\n");
  for (const char* k : {"model", "pre", "vocab_size", "n_merges", "add_bos_token", "add_eos_token",
                        "add_space_prefix", "chat_template_bytes"}) {
    if (tok.contains(k)) fmt::print("  {:<20} {}\n", k, tok[k].dump());
  }
  for (const auto& [which, info] : tok["special"].items()) {
    fmt::print("  {:<20} {} {}\n", which + " token", info["id"].get<int64_t>(),
               info["text"].dump());
  }

  fmt::print("\ntensors ({}):\n", f.tensors().size());
  fmt::print("  {:<40} {:<8} {:<22} {:>12}\n", "name", "type", "shape", "bytes");
  for (const auto& t : f.tensors()) {
    fmt::print("  {:<40} {:<8} {:<22} {:>12}\n", t.name, type_name(t.type), shape_text(t.dims),
               t.n_bytes);
  }

  fmt::print("\ntotals:\n");
  fmt::print("  parameters: {} ({:.1f} M)\n", r["n_params"].get<uint64_t>(),
             r["n_params"].get<uint64_t>() / 1e6);
  fmt::print("  tensor bytes: {} ({})\n", r["tensor_bytes"].get<uint64_t>(),
             human_bytes(r["tensor_bytes"].get<uint64_t>()));
  for (const auto& [type, info] : r["bytes_per_type"].items()) {
    fmt::print("  {:<8} {:>4} tensors {:>12} bytes\n", type, info["tensors"].get<uint64_t>(),
               info["bytes"].get<uint64_t>());
  }
}

}  // namespace

RunFn register_inspect(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  app.add_option("file", *path, "GGUF file")->required();
  app.add_flag("--json", *as_json, "Print a JSON report (all metadata, long arrays summarized)");
  return [path, as_json]() {
    auto file = gguf::File::open(*path);
    if (!file.ok()) {
      fmt::print(stderr, "mnemo inspect: {}: {}\n", *path, file.status().to_string());
      return 1;
    }
    json report = build_report(*file, *path);
    if (*as_json) {
      fmt::print("{}\n", report.dump(2));
    } else {
      print_text(*file, report);
    }
    return 0;
  };
}

}  // namespace mnemo::tools
