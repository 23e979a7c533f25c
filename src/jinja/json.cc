// JSON output of the tojson filter (builtins.h): Python's json.dumps over Jinja values.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/utf8.h"
#include "jinja/builtins.h"
#include "jinja/py_str.h"

namespace mnemo::jinja {
namespace {

using K = Value::Kind;

void json_string(const std::string& s, std::string* out) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (c < 0x20) {
          *out += fmt::format("\\u{:04x}", c);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

bool json_value(Renderer& r, const Value& v, const std::string* indent, const std::string& item_sep,
                const std::string& key_sep, bool sort_keys, int line, int level, std::string* out) {
  if (level > 256) {
    r.fail(line, "tojson: nested deeper than 256");
    return false;
  }
  auto newline = [&](int lv) {
    out->push_back('\n');
    for (int k = 0; k < lv; ++k) *out += *indent;
    return r.reserve(out->size());
  };
  switch (v.kind) {
    case K::kNone:
      *out += "null";
      return true;
    case K::kBool:
      *out += v.b ? "true" : "false";
      return true;
    case K::kInt:
      *out += std::to_string(v.i);
      return true;
    case K::kFloat:
      if (std::isnan(v.f)) {
        *out += "NaN";
      } else if (std::isinf(v.f)) {
        *out += v.f > 0 ? "Infinity" : "-Infinity";
      } else {
        *out += to_str(v);
      }
      return true;
    case K::kString:
      json_string(v.s, out);
      return true;
    case K::kList: {
      if (v.list->items.empty()) {
        *out += "[]";
        return true;
      }
      out->push_back('[');
      for (size_t k = 0; k < v.list->items.size(); ++k) {
        if (k > 0) *out += item_sep;
        if (indent != nullptr && !newline(level + 1)) return false;
        if (!json_value(r, v.list->items[k], indent, item_sep, key_sep, sort_keys, line, level + 1,
                        out)) {
          return false;
        }
      }
      if (indent != nullptr && !newline(level)) return false;
      out->push_back(']');
      return true;
    }
    case K::kDict: {
      if (v.dict->is_namespace) break;
      if (v.dict->items.empty()) {
        *out += "{}";
        return true;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict->items) items.push_back(&kv);
      if (sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out->push_back('{');
      for (size_t k = 0; k < items.size(); ++k) {
        if (k > 0) *out += item_sep;
        if (indent != nullptr && !newline(level + 1)) return false;
        json_string(items[k]->first, out);
        *out += key_sep;
        if (!json_value(r, items[k]->second, indent, item_sep, key_sep, sort_keys, line, level + 1,
                        out)) {
          return false;
        }
      }
      if (indent != nullptr && !newline(level)) return false;
      out->push_back('}');
      return true;
    }
    default:
      break;
  }
  r.fail(line,
         fmt::format("Object of type {} is not JSON serializable", v.is_undefined() ? "Undefined"
                                                                   : v.is_dict()    ? "Namespace"
                                                                                    : "function"));
  return false;
}

}  // namespace

bool to_json(Renderer& r, const Value& v, const std::string* indent, const std::string& item_sep,
             const std::string& key_sep, bool sort_keys, int line, std::string* out) {
  return json_value(r, v, indent, item_sep, key_sep, sort_keys, line, 0, out);
}

std::string json_ascii_escape(const std::string& json) {
  std::string out;
  for (std::string_view u : code_points(json)) {
    if (u.size() == 1) {
      out.append(u);
      continue;
    }
    const uint32_t cp = utf8::sequence_value(u);
    if (cp < 0x10000) {
      out += fmt::format("\\u{:04x}", cp);
    } else {
      const uint32_t v = cp - 0x10000;
      out += fmt::format("\\u{:04x}\\u{:04x}", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
    }
  }
  return out;
}

}  // namespace mnemo::jinja
