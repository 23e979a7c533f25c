// Jinja values with Python's semantics (value.h): construction, truth, str() and repr(), ==,
// ordering, type names, and values from JSON.
#include "jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "base/utf8.h"
#include "jinja/py_str.h"

namespace mnemo::jinja {

Value Value::new_list(std::vector<Value> items, bool tuple) {
  Value v = of(Kind::kList);
  v.list = std::make_shared<List>();
  v.list->items = std::move(items);
  v.list->tuple = tuple;
  for (const Value& x : v.list->items) v.list->depth = std::max(v.list->depth, 1 + x.depth());
  return v;
}

Value Value::new_dict() {
  Value v = of(Kind::kDict);
  v.dict = std::make_shared<Dict>();
  return v;
}

Value Value::function(std::string name, std::function<Value(Renderer&, Args&)> fn) {
  Value v = of(Kind::kFunc);
  auto f = std::make_shared<Func>();
  f->name = std::move(name);
  f->fn = std::move(fn);
  v.func = std::move(f);
  return v;
}

int Value::depth() const {
  return kind == Kind::kList ? list->depth : kind == Kind::kDict ? dict->depth : 0;
}

bool Value::truthy() const {
  switch (kind) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b;
    case Kind::kInt:
      return i != 0;
    case Kind::kFloat:
      return f != 0;
    case Kind::kString:
      return !s.empty();
    case Kind::kList:
      return !list->items.empty();
    case Kind::kDict:
      return !dict->items.empty();
    case Kind::kFunc:
      return true;
  }
  return false;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(std::string key, Value v, bool int_key) {
  depth = std::max(depth, 1 + v.depth());
  for (auto& [k, old] : items) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(v));
  int_keys.push_back(int_key);
}

Value Dict::key(size_t k) const {
  if (k < int_keys.size() && int_keys[k]) {
    int64_t x = 0;
    std::from_chars(items[k].first.data(), items[k].first.data() + items[k].first.size(), x);
    return Value::integer(x);
  }
  return Value::string(items[k].first);
}

Value Args::get(size_t index, std::string_view name, Value fallback) const {
  for (const auto& [k, v] : kw) {
    if (k == name) return v;
  }
  if (index < pos.size()) return pos[index];
  return fallback;
}

namespace {

// Python's repr(float): the shortest digits that read back the same; positional notation for
// exponents -4..15, else d.ddde+XX.
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view sci(buf, r.ptr - buf);
  std::string sign;
  if (!sci.empty() && sci[0] == '-') {
    sign = "-";
    sci.remove_prefix(1);
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e)) {
    if (c != '.') digits.push_back(c);
  }
  int exp = 0;
  std::string_view es = sci.substr(e + 1);
  if (!es.empty() && es[0] == '+') es.remove_prefix(1);
  std::from_chars(es.data(), es.data() + es.size(), exp);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  if (exp >= -4 && exp < 16) {
    std::string out;
    if (exp >= 0) {
      std::string whole = digits.substr(0, std::min<size_t>(digits.size(), exp + 1));
      whole.append(exp + 1 - whole.size(), '0');
      const std::string frac =
          digits.size() > static_cast<size_t>(exp + 1) ? digits.substr(exp + 1) : "0";
      out = whole + "." + frac;
    } else {
      out = "0." + std::string(-exp - 1, '0') + digits;
    }
    return sign + out;
  }
  std::string out = digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  return sign + out + fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
}

// Code points Python's str.isprintable() refuses beyond ASCII, so repr() escapes them: C1
// controls, the non-ASCII spaces and separators, format characters, private use. (Python's
// table is Unicode's categories Cc Cf Cs Co Cn Zl Zp Zs; unassigned code points are printed
// as they are here.)
bool unprintable(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0xa0) || cp == 0xad || cp == 0x61c || cp == 0x1680 || cp == 0x180e ||
         (cp >= 0x2000 && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202f) ||
         (cp >= 0x205f && cp <= 0x2064) || (cp >= 0x2066 && cp <= 0x206f) || cp == 0x3000 ||
         (cp >= 0xe000 && cp <= 0xf8ff) || cp == 0xfeff || (cp >= 0xfff9 && cp <= 0xfffb) ||
         (cp >= 0xf0000);
}

// Python's repr(str): single quotes unless the text has ' and no ", escapes for \\, the quote,
// \n \r \t, other control characters and the code points str.isprintable() refuses.
std::string string_repr(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (std::string_view u : code_points(s)) {
    if (u.size() > 1) {
      const uint32_t cp = utf8::sequence_value(u);
      if (!unprintable(cp)) {
        out.append(u);
      } else if (cp < 0x100) {
        out += fmt::format("\\x{:02x}", cp);
      } else if (cp < 0x10000) {
        out += fmt::format("\\u{:04x}", cp);
      } else {
        out += fmt::format("\\U{:08x}", cp);
      }
      continue;
    }
    const unsigned char c = u[0];
    if (c == '\\') {
      out += "\\\\";
    } else if (c == q) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  out += q;
  return out;
}

}  // namespace

std::string to_repr(const Value& v) {
  if (v.kind == Value::Kind::kString) return string_repr(v.s);
  return to_str(v);
}

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.b ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.i);
    case Value::Kind::kFloat:
      return float_repr(v.f);
    case Value::Kind::kString:
      return v.s;
    case Value::Kind::kList: {
      std::string out = v.list->tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->items.size(); ++k) {
        if (k > 0) out += ", ";
        out += to_repr(v.list->items[k]);
      }
      if (v.list->tuple && v.list->items.size() == 1) out += ",";
      return out + (v.list->tuple ? ")" : "]");
    }
    case Value::Kind::kDict: {
      if (v.dict->is_namespace) {
        std::string out = "<Namespace {";
        for (size_t k = 0; k < v.dict->items.size(); ++k) {
          if (k > 0) out += ", ";
          out += to_repr(v.dict->key(k)) + ": " + to_repr(v.dict->items[k].second);
        }
        return out + "}>";
      }
      std::string out = "{";
      for (size_t k = 0; k < v.dict->items.size(); ++k) {
        if (k > 0) out += ", ";
        out += to_repr(v.dict->key(k)) + ": " + to_repr(v.dict->items[k].second);
      }
      return out + "}";
    }
    case Value::Kind::kFunc:
      return "<function " + v.func->name + ">";
  }
  return "";
}

bool equals(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind != K::kFloat && b.kind != K::kFloat) {
      return (a.kind == K::kBool ? a.b : a.i) == (b.kind == K::kBool ? b.b : b.i);
    }
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.s == b.s;
    case K::kList:
      if (a.list->items.size() != b.list->items.size() || a.list->tuple != b.list->tuple) {
        return false;
      }
      for (size_t k = 0; k < a.list->items.size(); ++k) {
        if (!equals(a.list->items[k], b.list->items[k])) return false;
      }
      return true;
    case K::kDict:
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [key, v] : a.dict->items) {
        const Value* other = b.dict->find(key);
        if (other == nullptr || !equals(v, *other)) return false;
      }
      return true;
    case K::kFunc:
      return a.func == b.func;
    default:
      return false;
  }
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      return u <= static_cast<uint64_t>(INT64_MAX) ? Value::integer(static_cast<int64_t>(u))
                                                   : Value::real(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::real(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return Value::new_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = Value::new_dict();
      for (auto it = j.begin(); it != j.end(); ++it) d.dict->set(it.key(), from_json(it.value()));
      return d;
    }
    default:
      return Value::none();
  }
}

const char* type_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return v.list->tuple ? "tuple" : "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kFunc:
      return "function";
  }
  return "?";
}

bool order_values(const Value& a, const Value& b, int* c) {
  if (a.is_number() && b.is_number()) {
    const double x = a.as_double(), y = b.as_double();
    if (a.kind != Value::Kind::kFloat && b.kind != Value::Kind::kFloat) {
      const int64_t p = int_of(a), q = int_of(b);
      *c = p < q ? -1 : p > q ? 1 : 0;
    } else {
      *c = x < y ? -1 : x > y ? 1 : 0;
    }
    return true;
  }
  if (a.is_string() && b.is_string()) {
    const int r = a.s.compare(b.s);
    *c = r < 0 ? -1 : r > 0 ? 1 : 0;
    return true;
  }
  if (a.is_list() && b.is_list()) {
    const size_t n = std::min(a.list->items.size(), b.list->items.size());
    for (size_t k = 0; k < n; ++k) {
      if (equals(a.list->items[k], b.list->items[k])) continue;
      return order_values(a.list->items[k], b.list->items[k], c);
    }
    const size_t x = a.list->items.size(), y = b.list->items.size();
    *c = x < y ? -1 : x > y ? 1 : 0;
    return true;
  }
  return false;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

}  // namespace mnemo::jinja
