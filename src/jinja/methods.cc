// The methods templates call on values (builtins.h): Python's str methods (a table from name to
// implementation), dict.get/items/keys/values and list.count/index.
#include <cctype>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "jinja/builtins.h"
#include "jinja/py_str.h"

namespace mnemo::jinja {
namespace {

using K = Value::Kind;

Value string_list(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (auto& p : parts) items.push_back(Value::string(std::move(p)));
  return Value::new_list(std::move(items));
}

// The first argument, positional only (None when absent).
Value first_arg(const Args& args) { return args.get(0, "", Value::none()); }

// --- str methods: `name` is the name called (aliases such as strip/lstrip share one) ---------

// strip, lstrip, rstrip.
Value str_strip(Renderer& r, const Value& obj, const std::string& name, Args& args) {
  const std::string& s = obj.s;
  const Value a0 = first_arg(args);
  const std::string* chars = a0.is_string() ? &a0.s : nullptr;
  return Value::string(py_strip(s, chars, name != "rstrip", name != "lstrip"));
}

// split, rsplit.
Value str_split(Renderer& r, const Value& obj, const std::string& name, Args& args) {
  const std::string& s = obj.s;
  const Value sep = args.get(0, "sep", Value::none());
  const Value maxsplit = args.get(1, "maxsplit", Value::integer(-1));
  if (sep.is_string() && sep.s.empty()) return r.fail(args.line, "empty separator");
  return string_list(py_split(s, sep.is_string() ? &sep.s : nullptr,
                              is_int(maxsplit) ? int_of(maxsplit) : -1, name == "rsplit"));
}

// startswith, endswith: a string or a tuple of strings.
Value str_startswith(Renderer& r, const Value& obj, const std::string& name, Args& args) {
  const std::string& s = obj.s;
  const Value a0 = first_arg(args);
  std::vector<std::string> options;
  if (a0.is_string()) {
    options.push_back(a0.s);
  } else if (a0.is_list()) {
    for (const Value& x : a0.list->items) {
      if (x.is_string()) options.push_back(x.s);
    }
  } else {
    return r.fail(args.line, fmt::format("{} needs a string or a tuple of strings", name));
  }
  for (const std::string& o : options) {
    const bool hit = name == "startswith"
                         ? s.compare(0, o.size(), o) == 0 && s.size() >= o.size()
                         : s.size() >= o.size() && s.compare(s.size() - o.size(), o.size(), o) == 0;
    if (hit) return Value::boolean(true);
  }
  return Value::boolean(false);
}

Value str_upper(Renderer&, const Value& obj, const std::string&, Args&) {
  return Value::string(py_upper(obj.s));
}
Value str_lower(Renderer&, const Value& obj, const std::string&, Args&) {
  return Value::string(py_lower(obj.s));
}
Value str_title(Renderer&, const Value& obj, const std::string&, Args&) {
  return Value::string(py_title(obj.s));
}
Value str_capitalize(Renderer&, const Value& obj, const std::string&, Args&) {
  return Value::string(capitalize(obj.s));
}

Value str_replace(Renderer& r, const Value& obj, const std::string& name, Args& args) {
  const std::string& s = obj.s;
  const Value count = args.get(2, "count", Value::integer(-1));
  const std::string f = to_str(args.get(0, "old")), t = to_str(args.get(1, "new"));
  const int64_t c = is_int(count) ? int_of(count) : -1;
  if (!r.reserve(replace_size(s, f, t, c))) return {};
  return Value::string(py_replace(s, f, t, c));
}

// find, rfind (the code point index, -1 when absent), count.
Value str_find(Renderer& r, const Value& obj, const std::string& name, Args& args) {
  const std::string& s = obj.s;
  const Value a0 = first_arg(args);
  if (!a0.is_string()) return r.fail(args.line, fmt::format("{} needs a string", name));
  if (name == "count") {
    if (a0.s.empty()) return Value::integer(static_cast<int64_t>(code_points(s).size()) + 1);
    int64_t n = 0;
    for (size_t at = s.find(a0.s); at != std::string::npos; at = s.find(a0.s, at + a0.s.size())) {
      ++n;
    }
    return Value::integer(n);
  }
  const size_t at = name == "find" ? s.find(a0.s) : s.rfind(a0.s);
  if (at == std::string::npos) return Value::integer(-1);
  return Value::integer(static_cast<int64_t>(code_points(s.substr(0, at)).size()));
}

Value str_join(Renderer& r, const Value& obj, const std::string& name, Args& args) {
  const std::string& s = obj.s;
  std::vector<Value> items;
  if (!items_of(r, first_arg(args), args.line, &items)) return {};
  std::string out;
  for (size_t k = 0; k < items.size(); ++k) {
    if (!items[k].is_string()) {
      return r.fail(args.line, fmt::format("sequence item {}: expected str instance", k));
    }
    if (k > 0) out += s;
    out += items[k].s;
    if (!r.reserve(out.size())) return {};
  }
  return Value::string(std::move(out));
}

// removeprefix, removesuffix.
Value str_remove(Renderer& r, const Value& obj, const std::string& name, Args& args) {
  const std::string& s = obj.s;
  const Value a0 = first_arg(args);
  if (!a0.is_string()) return r.fail(args.line, fmt::format("{} needs a string", name));
  if (name == "removeprefix" && s.compare(0, a0.s.size(), a0.s) == 0 && s.size() >= a0.s.size()) {
    return Value::string(s.substr(a0.s.size()));
  }
  if (name == "removesuffix" && s.size() >= a0.s.size() && !a0.s.empty() &&
      s.compare(s.size() - a0.s.size(), a0.s.size(), a0.s) == 0) {
    return Value::string(s.substr(0, s.size() - a0.s.size()));
  }
  return obj;
}

Value str_splitlines(Renderer&, const Value& obj, const std::string&, Args&) {
  return string_list(splitlines(obj.s));
}

Value str_format_method(Renderer& r, const Value& obj, const std::string&, Args& args) {
  const std::string& s = obj.s;
  return str_format(r, s, args, args.line);
}

// isdigit, isalpha, isalnum (bytes: any non-ASCII byte is a letter), isspace (code points),
// islower, isupper (ASCII letters decide).
Value str_is(Renderer& r, const Value& obj, const std::string& name, Args& args) {
  const std::string& s = obj.s;
  if (s.empty()) return Value::boolean(false);
  if (name == "isspace") {
    for (std::string_view cp : code_points(s)) {
      if (!is_py_space(cp)) return Value::boolean(false);
    }
    return Value::boolean(true);
  }
  if (name == "islower" || name == "isupper") {
    bool cased = false;
    for (unsigned char c : s) {
      if (std::isalpha(c)) {
        cased = true;
        if (name == "islower" ? std::isupper(c) != 0 : std::islower(c) != 0) {
          return Value::boolean(false);
        }
      }
    }
    return Value::boolean(cased);
  }
  for (unsigned char c : s) {
    const bool ok = name == "isdigit"   ? std::isdigit(c) != 0
                    : name == "isalpha" ? is_alpha(c)
                                        : (is_alpha(c) || std::isdigit(c) != 0);
    if (!ok) return Value::boolean(false);
  }
  return Value::boolean(true);
}

using StrMethod = Value (*)(Renderer& r, const Value& obj, const std::string& name, Args& args);

const std::unordered_map<std::string_view, StrMethod>& str_methods() {
  static const std::unordered_map<std::string_view, StrMethod> kMethods = {
      {"strip", str_strip},
      {"lstrip", str_strip},
      {"rstrip", str_strip},
      {"split", str_split},
      {"rsplit", str_split},
      {"startswith", str_startswith},
      {"endswith", str_startswith},
      {"upper", str_upper},
      {"lower", str_lower},
      {"title", str_title},
      {"capitalize", str_capitalize},
      {"replace", str_replace},
      {"find", str_find},
      {"rfind", str_find},
      {"count", str_find},
      {"join", str_join},
      {"removeprefix", str_remove},
      {"removesuffix", str_remove},
      {"splitlines", str_splitlines},
      {"format", str_format_method},
      {"isdigit", str_is},
      {"isalpha", str_is},
      {"isalnum", str_is},
      {"isspace", str_is},
      {"islower", str_is},
      {"isupper", str_is},
  };
  return kMethods;
}

// --- dict and list methods ---------------------------------------------------------------------

Value dict_method(const Dict& d, const std::string& name, Args& args, bool* found) {
  if (name == "items" || name == "keys" || name == "values") {
    std::vector<Value> out;
    for (size_t k = 0; k < d.items.size(); ++k) {
      if (name == "items") {
        out.push_back(Value::new_list({d.key(k), d.items[k].second}, /*tuple=*/true));
      } else {
        out.push_back(name == "keys" ? d.key(k) : d.items[k].second);
      }
    }
    return Value::new_list(std::move(out));
  }
  if (name == "get") {
    const Value key = args.get(0, "key");
    const Value fallback = args.get(1, "default", Value::none());
    if (key.is_string() || key.kind == K::kInt) {
      if (const Value* x = d.find(to_str(key))) return *x;
    }
    return fallback;
  }
  *found = false;
  return {};
}

Value list_method(Renderer& r, const List& list, const std::string& name, Args& args, bool* found) {
  if (name == "count" || name == "index") {
    const Value a0 = args.get(0, "value");
    int64_t n = 0;
    for (size_t k = 0; k < list.items.size(); ++k) {
      if (!equals(list.items[k], a0)) continue;
      if (name == "index") return Value::integer(static_cast<int64_t>(k));
      ++n;
    }
    if (name == "index") return r.fail(args.line, "list.index(x): x not in list");
    return Value::integer(n);
  }
  *found = false;
  return {};
}

}  // namespace

Value call_method(Renderer& r, const Value& obj, const std::string& name, Args& args, bool* found) {
  *found = true;
  if (obj.is_string()) {
    const auto& methods = str_methods();
    if (const auto it = methods.find(name); it != methods.end()) {
      return it->second(r, obj, name, args);
    }
  } else if (obj.is_dict()) {
    return dict_method(*obj.dict, name, args, found);
  } else if (obj.is_list()) {
    return list_method(r, *obj.list, name, args, found);
  }
  *found = false;
  return {};
}

}  // namespace mnemo::jinja
