// The filters of text and numbers (builtins.h), and the table every filter is found through.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "jinja/builtins.h"
#include "jinja/py_str.h"

namespace mnemo::jinja {
namespace {

using K = Value::Kind;

// Python's len(v) (0 for Undefined); an error for a value that has none.
Value length_of(Renderer& r, const Value& v, int line) {
  switch (v.kind) {
    case K::kUndefined:
      return Value::integer(0);
    case K::kString:
      return Value::integer(static_cast<int64_t>(py_len(v.s)));
    case K::kList:
      return Value::integer(static_cast<int64_t>(v.list->items.size()));
    case K::kDict:
      return Value::integer(static_cast<int64_t>(v.dict->items.size()));
    default:
      return r.fail(line,
                    fmt::format("object of type '{}' has no len()", v.is_none() ? "NoneType"
                                                                    : v.kind == K::kBool ? "bool"
                                                                    : v.kind == K::kInt  ? "int"
                                                                                        : "float"));
  }
}

Value filter_safe(Renderer& r, std::string_view name, const Value& v, Args& args) {
  Value out = Value::string(to_str(v));
  out.safe = true;
  return out;
}

Value filter_string(Renderer& r, std::string_view name, const Value& v, Args& args) {
  return v.is_string() ? v : Value::string(to_str(v));
}

Value filter_trim(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const Value chars = args.get(0, "chars", Value::none());
  const std::string s = to_str(v);
  return Value::string(py_strip(s, chars.is_string() ? &chars.s : nullptr, true, true));
}

Value filter_upper(Renderer& r, std::string_view name, const Value& v, Args& args) {
  return Value::string(py_upper(to_str(v)));
}

Value filter_lower(Renderer& r, std::string_view name, const Value& v, Args& args) {
  return Value::string(py_lower(to_str(v)));
}

Value filter_capitalize(Renderer& r, std::string_view name, const Value& v, Args& args) {
  return Value::string(capitalize(to_str(v)));
}

Value filter_title(Renderer& r, std::string_view name, const Value& v, Args& args) {
  return Value::string(jinja_title(to_str(v)));
}

// length, and its alias count.
Value filter_length(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const int line = args.line;
  return length_of(r, v, line);
}

// default, and its alias d.
Value filter_default(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const Value fallback = args.get(0, "default_value", Value::string(""));
  const bool boolean = args.get(1, "boolean", Value::boolean(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return fallback;
  return v;
}

Value filter_tojson(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const int line = args.line;
  // transformers' signature: tojson(x, ensure_ascii=False, indent=None, separators=None,
  // sort_keys=False).
  const bool ensure_ascii = args.get(0, "ensure_ascii", Value::boolean(false)).truthy();
  const Value indent = args.get(1, "indent", Value::none());
  const Value separators = args.get(2, "separators", Value::none());
  const bool sort_keys = args.get(3, "sort_keys", Value::boolean(false)).truthy();
  std::string indent_text;
  const std::string* ind = nullptr;
  if (is_int(indent)) {
    indent_text.assign(static_cast<size_t>(std::clamp<int64_t>(int_of(indent), 0, 64)), ' ');
    ind = &indent_text;
  } else if (indent.is_string()) {
    indent_text = indent.s;
    ind = &indent_text;
  }
  std::string item_sep = ind != nullptr ? "," : ", ", key_sep = ": ";
  if (separators.is_list() && separators.list->items.size() == 2 &&
      separators.list->items[0].is_string() && separators.list->items[1].is_string()) {
    item_sep = separators.list->items[0].s;
    key_sep = separators.list->items[1].s;
  }
  std::string out;
  if (!to_json(r, v, ind, item_sep, key_sep, sort_keys, line, &out)) return {};
  if (ensure_ascii) out = json_ascii_escape(out);
  return Value::string(std::move(out));
}

Value filter_replace(Renderer& r, std::string_view name, const Value& v, Args& args) {
  if (!v.is_string() && !v.is_undefined()) {
    return r.fail(args.line, "the filter 'replace' needs a string");
  }
  const Value from = args.get(0, "old"), to = args.get(1, "new");
  const Value count = args.get(2, "count", Value::none());
  const std::string text = to_str(v), f = to_str(from), t = to_str(to);
  const int64_t c = is_int(count) ? int_of(count) : -1;
  if (!r.reserve(replace_size(text, f, t, c))) return {};
  return Value::string(py_replace(text, f, t, c));
}

Value filter_int(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const Value fallback = args.get(0, "default", Value::integer(0));
  if (is_int(v)) return Value::integer(int_of(v));
  if (v.kind == K::kFloat) {
    if (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18) return fallback;
    return Value::integer(static_cast<int64_t>(v.f));
  }
  if (v.is_string()) {
    int64_t x = 0;
    if (parse_int(v.s, &x)) return Value::integer(x);
    double d = 0;
    if (parse_float(v.s, &d) && std::isfinite(d) && std::fabs(d) < 9.2e18) {
      return Value::integer(static_cast<int64_t>(d));
    }
  }
  return fallback;
}

Value filter_float(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const Value fallback = args.get(0, "default", Value::real(0.0));
  if (v.is_number()) return Value::real(v.as_double());
  double d = 0;
  if (v.is_string() && parse_float(v.s, &d)) return Value::real(d);
  return fallback;
}

Value filter_abs(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const int line = args.line;
  if (v.kind == K::kFloat) return Value::real(std::fabs(v.f));
  if (is_int(v)) {
    if (int_of(v) == INT64_MIN) return r.fail(line, "integer overflow");
    return Value::integer(std::llabs(int_of(v)));
  }
  return r.fail(line, "bad operand type for abs()");
}

Value filter_round(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const int line = args.line;
  if (!v.is_number()) return r.fail(line, "round needs a number");
  const int64_t precision = int_of(args.get(0, "precision", Value::integer(0)));
  const Value method = args.get(1, "method", Value::string("common"));
  const std::string how = method.is_string() ? method.s : "common";
  if (how == "common") {
    // Python's round(): an int stays an int; a float is rounded half to even on its exact
    // binary value (which printf's correctly rounded %.Nf does too).
    if (is_int(v) && precision >= 0) return Value::integer(int_of(v));
    if (precision < 0 || precision > 300) {
      const double scale = std::pow(10.0, static_cast<double>(precision));
      return Value::real(std::nearbyint(v.as_double() * scale) / scale);
    }
    const std::string text = fmt::format("{:.{}f}", v.as_double(), precision);
    return Value::real(std::strtod(text.c_str(), nullptr));
  }
  if (how != "ceil" && how != "floor") {
    return r.fail(line, "round's method must be 'common', 'ceil' or 'floor'");
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_double() * scale;
  return Value::real((how == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value filter_indent(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const Value width = args.get(0, "width", Value::integer(4));
  const bool first = args.get(1, "first", Value::boolean(false)).truthy();
  const bool blank = args.get(2, "blank", Value::boolean(false)).truthy();
  const std::string ind =
      width.is_string()
          ? width.s
          : std::string(static_cast<size_t>(std::clamp<int64_t>(int_of(width), 0, 256)), ' ');
  const std::string text = to_str(v);
  if (!r.reserve(text.size() + (std::count(text.begin(), text.end(), '\n') + 2) * ind.size())) {
    return {};
  }
  const std::vector<std::string> lines = splitlines(text + "\n");
  std::string out;
  if (blank) {
    for (size_t k = 0; k < lines.size(); ++k) {
      if (k > 0) out += "\n" + ind;
      out += lines[k];
    }
  } else if (!lines.empty()) {
    out = lines[0];
    for (size_t k = 1; k < lines.size(); ++k) {
      out += "\n";
      if (!lines[k].empty()) out += ind;
      out += lines[k];
    }
  }
  if (first) out = ind + out;
  return Value::string(std::move(out));
}

Value filter_center(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const int64_t width = int_of(args.get(0, "width", Value::integer(80)));
  const std::string s = to_str(v);
  const int64_t n = static_cast<int64_t>(code_points(s).size());
  if (width <= n || width > (1 << 20)) return Value::string(s);
  const int64_t pad = width - n;
  const int64_t left = pad / 2 + (pad & width & 1);
  return Value::string(std::string(static_cast<size_t>(left), ' ') + s +
                       std::string(static_cast<size_t>(pad - left), ' '));
}

Value filter_wordcount(Renderer& r, std::string_view name, const Value& v, Args& args) {
  int64_t n = 0;
  bool in_word = false;
  for (unsigned char c : to_str(v)) {
    const bool w = std::isalnum(c) || c == '_' || c >= 0x80;
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

Value filter_format(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const int line = args.line;
  if (!v.is_string()) return r.fail(line, "format needs a format string");
  return percent_format(r, v.s, args.pos, line);
}

// escape, and its alias e.
Value filter_escape(Renderer& r, std::string_view name, const Value& v, Args& args) {
  if (v.is_string() && v.safe) return v;
  Value out = Value::string(html_escape(to_str(v)));
  out.safe = true;
  return out;
}

}  // namespace

void add_text_filters(FilterTable* table) {
  (*table)["safe"] = filter_safe;
  (*table)["string"] = filter_string;
  (*table)["trim"] = filter_trim;
  (*table)["upper"] = filter_upper;
  (*table)["lower"] = filter_lower;
  (*table)["capitalize"] = filter_capitalize;
  (*table)["title"] = filter_title;
  (*table)["length"] = filter_length;
  (*table)["count"] = filter_length;
  (*table)["default"] = filter_default;
  (*table)["d"] = filter_default;
  (*table)["tojson"] = filter_tojson;
  (*table)["replace"] = filter_replace;
  (*table)["int"] = filter_int;
  (*table)["float"] = filter_float;
  (*table)["abs"] = filter_abs;
  (*table)["round"] = filter_round;
  (*table)["indent"] = filter_indent;
  (*table)["center"] = filter_center;
  (*table)["wordcount"] = filter_wordcount;
  (*table)["format"] = filter_format;
  (*table)["escape"] = filter_escape;
  (*table)["e"] = filter_escape;
}

Value apply_filter(Renderer& r, std::string_view name, const Value& v, Args& args) {
  static const FilterTable kFilters = [] {
    FilterTable table;
    add_text_filters(&table);
    add_sequence_filters(&table);
    return table;
  }();
  const auto it = kFilters.find(name);
  if (it == kFilters.end()) return r.fail(args.line, fmt::format("no filter named '{}'", name));
  return it->second(r, name, v, args);
}

}  // namespace mnemo::jinja
