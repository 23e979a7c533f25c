// Rendering a parsed Jinja template (include/mnemo/jinja.h): scopes, statements, expressions.
//
// Scopes follow jinja2: a for loop's body gets a fresh scope on every iteration (a `set` in it
// is gone at the next iteration and after the loop, which is why templates use namespace()),
// `if` makes no scope, a macro sees the template's top-level variables and its arguments.
// Arithmetic and comparisons follow Python 3 (true division, floor division and modulo by the
// divisor's sign, int overflow an error rather than a bignum).
#include <charconv>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "jinja/internal.h"

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

std::vector<std::string_view> code_points(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + n > s.size()) n = 1;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) n = 1;
    }
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

uint32_t decode_utf8(std::string_view u) {
  const unsigned char c = u[0];
  if (u.size() == 1) return c;
  uint32_t cp = c & (u.size() == 2 ? 0x1f : u.size() == 3 ? 0x0f : 0x07);
  for (size_t k = 1; k < u.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(u[k]) & 0x3f);
  return cp;
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
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
      const uint32_t cp = decode_utf8(u);
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

namespace {

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

int64_t int_of(const Value& v) { return v.kind == Value::Kind::kBool ? v.b : v.i; }

enum class Flow : uint8_t { kNormal, kBreak, kContinue, kError };

using Scope = std::vector<std::pair<std::string, Value>>;

class Interp final : public Renderer {
 public:
  Interp(const RenderOptions& o, const nlohmann::ordered_json& context) : opt_(o) {
    scopes_.emplace_back();  // globals
    Dict globals;
    add_globals(&globals);
    for (auto& [k, v] : globals.items) scopes_.back().emplace_back(k, v);
    scopes_.emplace_back();  // the context and the template's own top-level variables
    if (context.is_object()) {
      for (auto it = context.begin(); it != context.end(); ++it) {
        set_var(it.key(), from_json(it.value()));
      }
    }
  }

  Status run(const Program& p, std::string* out) {
    out_ = out;
    exec(p.body);
    return error_;
  }

  // Renderer.
  Value fail(int line, std::string message) override {
    if (error_.ok()) {
      error_ = Status::invalid_argument(line > 0 ? fmt::format("line {}: {}", line, message)
                                                 : std::move(message));
    }
    return Value::undefined();
  }
  bool failed() const override { return !error_.ok(); }
  bool step() override {
    if (++steps_ <= opt_.max_steps) return true;
    if (error_.ok()) {
      error_ = Status::out_of_range(
          fmt::format("the template ran past {} evaluation steps", opt_.max_steps));
    }
    return false;
  }
  bool steps(uint64_t n) override {
    steps_ += n;
    return step();
  }
  bool reserve(uint64_t bytes) override {
    if (bytes + total_before_ + out_->size() <= opt_.max_output_bytes) return true;
    if (error_.ok()) {
      error_ = Status::out_of_range(fmt::format(
          "the template builds a value past the output limit of {} bytes", opt_.max_output_bytes));
    }
    return false;
  }
  int64_t now(bool* utc) const override {
    *utc = opt_.now_unix >= 0;
    return opt_.now_unix >= 0 ? opt_.now_unix : static_cast<int64_t>(std::time(nullptr));
  }
  Value call(const Value& fn, Args& args) override {
    if (fn.kind != Value::Kind::kFunc) {
      if (fn.is_undefined()) {
        return fail(args.line, fmt::format("'{}' is undefined", fn.s.empty() ? "value" : fn.s));
      }
      return fail(args.line, fmt::format("'{}' object is not callable", type_name(fn)));
    }
    if (++call_depth_ > kMaxCallDepth) {
      --call_depth_;
      return fail(args.line, fmt::format("calls nested deeper than {}", kMaxCallDepth));
    }
    Value r = fn.func->fn(*this, args);
    --call_depth_;
    return r;
  }
  Value filter(std::string_view name, const Value& v, Args& args) override {
    return apply_filter(*this, name, v, args);
  }
  Value test(std::string_view name, const Value& v, Args& args) override {
    return apply_test(*this, name, v, args);
  }
  Value attribute(const Value& obj, const std::string& name, int line) override {
    if (obj.is_undefined()) {
      return fail(line, fmt::format("'{}' is undefined", obj.s.empty() ? name : obj.s));
    }
    if (obj.is_dict()) {
      if (const Value* v = obj.dict->find(name)) return *v;
      return Value::undefined(name);
    }
    if (obj.is_list()) {
      for (size_t k = 0; k < obj.list->fields.size() && k < obj.list->items.size(); ++k) {
        if (obj.list->fields[k] == name) return obj.list->items[k];
      }
    }
    return Value::undefined(name);
  }

  // Renders a macro call: the arguments bound to its parameters in a scope over the
  // template's top-level variables.
  Value call_macro(const Node& m, Args& args) {
    if (args.pos.size() > m.targets.size()) {
      return fail(args.line, fmt::format("macro '{}' takes not more than {} argument(s)", m.name,
                                         m.targets.size()));
    }
    for (const auto& [name, kv] : args.kw) {
      bool known = false;
      for (const std::string& t : m.targets) known = known || t == name;
      if (!known) {
        return fail(args.line,
                    fmt::format("macro '{}' takes no keyword argument '{}'", m.name, name));
      }
    }
    // The macro's scope over the template's top-level variables; defaults are evaluated in it,
    // in order, so a default may name an earlier parameter (as jinja2).
    std::vector<Scope> saved(scopes_.begin() + 2, scopes_.end());
    scopes_.resize(2);
    scopes_.emplace_back();
    std::string text;
    std::string* saved_out = out_;
    total_before_ += saved_out->size();
    out_ = &text;
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    for (size_t k = 0; k < m.targets.size() && !failed(); ++k) {
      Value v = k < args.pos.size() ? args.pos[k] : Value::undefined(m.targets[k]);
      bool given = k < args.pos.size();
      for (const auto& [name, kv] : args.kw) {
        if (name == m.targets[k]) {
          v = kv;
          given = true;
        }
      }
      if (!given && m.kids[k] != nullptr) v = eval(*m.kids[k]);
      scopes_.back().emplace_back(m.targets[k], std::move(v));
    }
    if (!failed()) exec(m.bodies[0]);
    loop_depth_ = saved_loops;
    out_ = saved_out;
    total_before_ -= saved_out->size();
    scopes_.resize(2);
    for (auto& s : saved) scopes_.push_back(std::move(s));
    if (failed()) return {};
    return Value::string(std::move(text));
  }

 private:
  static constexpr int kMaxCallDepth = 64;
  static constexpr int kMaxValueDepth = 256;

  // Whether `v` holds the dict `d` (a namespace assigned into itself would make a cycle).
  static bool reaches(const Value& v, const Dict* d) {
    if (v.is_dict()) {
      if (v.dict.get() == d) return true;
      for (const auto& kv : v.dict->items) {
        if (reaches(kv.second, d)) return true;
      }
    } else if (v.is_list()) {
      for (const Value& x : v.list->items) {
        if (reaches(x, d)) return true;
      }
    }
    return false;
  }

  Value lookup(const std::string& name) const {
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s) {
      for (auto it = s->rbegin(); it != s->rend(); ++it) {
        if (it->first == name) return it->second;
      }
    }
    return Value::undefined(name);
  }
  void set_var(const std::string& name, Value v) {
    for (auto& [k, old] : scopes_.back()) {
      if (k == name) {
        old = std::move(v);
        return;
      }
    }
    scopes_.back().emplace_back(name, std::move(v));
  }

  bool emit(std::string_view s) {
    out_->append(s);
    if (out_->size() + total_before_ > opt_.max_output_bytes) {
      if (error_.ok()) {
        error_ = Status::out_of_range(
            fmt::format("the template's output passed {} bytes", opt_.max_output_bytes));
      }
      return false;
    }
    return true;
  }

  // Renders `body` into a new string (set blocks, filter blocks).
  bool capture(const std::vector<NodePtr>& body, std::string* text) {
    std::string* saved = out_;
    total_before_ += saved->size();
    out_ = text;
    const Flow f = exec(body);
    out_ = saved;
    total_before_ -= saved->size();
    return f != Flow::kError && !failed();
  }

  Flow exec(const std::vector<NodePtr>& body) {
    for (const NodePtr& n : body) {
      const Flow f = exec_one(*n);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow exec_one(const Node& n) {
    if (!step()) return Flow::kError;
    Recursion guard{&recursion_};
    if (++recursion_ > kMaxRecursion) {
      fail(n.line, fmt::format("the template nests deeper than {} levels", kMaxRecursion));
      return Flow::kError;
    }
    switch (n.kind) {
      case NodeKind::kText:
        return emit(n.name) ? Flow::kNormal : Flow::kError;
      case NodeKind::kOutput: {
        const Value v = eval(*n.kids[0]);
        if (failed()) return Flow::kError;
        return emit(to_str(v)) ? Flow::kNormal : Flow::kError;
      }
      case NodeKind::kIf:
        for (size_t k = 0; k < n.bodies.size(); ++k) {
          if (k < n.kids.size()) {
            const Value c = eval(*n.kids[k]);
            if (failed()) return Flow::kError;
            if (!c.truthy()) continue;
          }
          return exec(n.bodies[k]);
        }
        return Flow::kNormal;
      case NodeKind::kFor:
        return exec_for(n);
      case NodeKind::kSet: {
        Value v = eval(*n.kids[0]);
        if (failed()) return Flow::kError;
        if (!n.attr.empty()) {
          const Value ns = lookup(n.targets[0]);
          if (!ns.is_dict() || !ns.dict->is_namespace) {
            fail(n.line,
                 fmt::format("cannot assign attribute on non-namespace object '{}'", n.targets[0]));
            return Flow::kError;
          }
          if (reaches(v, ns.dict.get())) {
            fail(n.line, "a namespace cannot hold itself");
            return Flow::kError;
          }
          ns.dict->set(n.attr, std::move(v));
          if (ns.dict->depth > kMaxValueDepth) {
            fail(n.line, fmt::format("a value nested deeper than {} levels", kMaxValueDepth));
            return Flow::kError;
          }
          return Flow::kNormal;
        }
        if (n.targets.size() == 1) {
          set_var(n.targets[0], std::move(v));
          return Flow::kNormal;
        }
        std::vector<Value> items;
        if (!unpack(v, n.targets.size(), n.line, &items)) return Flow::kError;
        for (size_t k = 0; k < items.size(); ++k) set_var(n.targets[k], std::move(items[k]));
        return Flow::kNormal;
      }
      case NodeKind::kSetBlock:
      case NodeKind::kFilterBlock: {
        std::string text;
        if (!capture(n.bodies[0], &text)) return Flow::kError;
        Value v = Value::string(std::move(text));
        if (!n.kids.empty()) {
          block_value_ = std::move(v);
          v = eval(*n.kids[0]);
          if (failed()) return Flow::kError;
        }
        if (n.kind == NodeKind::kSetBlock) {
          set_var(n.targets[0], std::move(v));
          return Flow::kNormal;
        }
        return emit(to_str(v)) ? Flow::kNormal : Flow::kError;
      }
      case NodeKind::kMacro: {
        const Node* m = &n;
        set_var(n.name, Value::function(n.name, [m](Renderer& r, Args& args) {
                  return static_cast<Interp&>(r).call_macro(*m, args);
                }));
        return Flow::kNormal;
      }
      case NodeKind::kBreak:
        return loop_depth_ > 0 ? Flow::kBreak : Flow::kNormal;
      case NodeKind::kContinue:
        return loop_depth_ > 0 ? Flow::kContinue : Flow::kNormal;
      case NodeKind::kWith: {
        Scope frame;
        for (size_t k = 0; k < n.targets.size(); ++k) {
          Value v = eval(*n.kids[k]);
          if (failed()) return Flow::kError;
          frame.emplace_back(n.targets[k], std::move(v));
        }
        scopes_.push_back(std::move(frame));
        const Flow f = exec(n.bodies[0]);
        scopes_.pop_back();
        return f;
      }
      case NodeKind::kGeneration:
        return exec(n.bodies[0]);
      default:
        fail(n.line, "an expression where a statement was expected");
        return Flow::kError;
    }
  }

  // The items of an iterable, as a for loop sees them.
  bool iterate(const Value& v, int line, std::vector<Value>* out) {
    switch (v.kind) {
      case Value::Kind::kUndefined:
        return true;
      case Value::Kind::kList: {
        size_t bytes = 0;
        for (const Value& x : v.list->items) bytes += x.s.size() + sizeof(Value);
        if (!charge(bytes)) return false;
        *out = v.list->items;
        return true;
      }
      case Value::Kind::kDict:
        for (size_t k = 0; k < v.dict->items.size(); ++k) out->push_back(v.dict->key(k));
        return true;
      case Value::Kind::kString:
        if (!reserve(uint64_t(utf8_length(v.s)) * sizeof(Value))) return false;
        for (std::string_view cp : code_points(v.s)) out->push_back(Value::string(std::string(cp)));
        return true;
      default:
        fail(line, fmt::format("'{}' object is not iterable", type_name(v)));
        return false;
    }
  }

  bool unpack(const Value& v, size_t n, int line, std::vector<Value>* out) {
    std::vector<Value> items;
    if (!iterate(v, line, &items)) return false;
    if (items.size() != n) {
      fail(line, items.size() > n ? fmt::format("too many values to unpack (expected {})", n)
                                  : fmt::format("not enough values to unpack (expected {}, got {})",
                                                n, items.size()));
      return false;
    }
    *out = std::move(items);
    return true;
  }

  Flow exec_for(const Node& n) {
    const Value seq = eval(*n.kids[0]);
    if (failed()) return Flow::kError;
    std::vector<Value> all;
    if (!iterate(seq, n.line, &all)) return Flow::kError;
    // The loop filter runs first, so loop.length and loop.last count only what passes.
    std::vector<Value> items;
    if (n.kids.size() > 1) {
      for (Value& item : all) {
        scopes_.emplace_back();
        const bool ok = bind(n, item);
        Value keep = ok ? eval(*n.kids[1]) : Value();
        scopes_.pop_back();
        if (!ok || failed()) return Flow::kError;
        if (keep.truthy()) items.push_back(std::move(item));
      }
    } else {
      items = std::move(all);
    }
    if (items.empty()) return exec(n.bodies[1]);
    const int64_t length = static_cast<int64_t>(items.size());
    ++loop_depth_;
    Flow result = Flow::kNormal;
    // jinja2 runs the else block unless some iteration reached the end of the body (one left
    // by break or continue does not count).
    bool completed = false;
    for (int64_t k = 0; k < length; ++k) {
      if (!step()) {
        result = Flow::kError;
        break;
      }
      Value loop = Value::new_dict();
      Dict& d = *loop.dict;
      d.set("index", Value::integer(k + 1));
      d.set("index0", Value::integer(k));
      d.set("revindex", Value::integer(length - k));
      d.set("revindex0", Value::integer(length - k - 1));
      d.set("first", Value::boolean(k == 0));
      d.set("last", Value::boolean(k == length - 1));
      d.set("length", Value::integer(length));
      d.set("depth", Value::integer(1));
      d.set("depth0", Value::integer(0));
      if (k > 0) d.set("previtem", items[k - 1]);
      if (k + 1 < length) d.set("nextitem", items[k + 1]);
      d.set("cycle", Value::function("cycle", [k](Renderer& r, Args& args) {
              if (args.pos.empty()) return r.fail(args.line, "no items for cycling given");
              return args.pos[static_cast<size_t>(k) % args.pos.size()];
            }));
      scopes_.emplace_back();
      scopes_.back().emplace_back("loop", std::move(loop));
      if (!bind(n, items[k])) {
        scopes_.pop_back();
        result = Flow::kError;
        break;
      }
      const Flow f = exec(n.bodies[0]);
      scopes_.pop_back();
      if (f == Flow::kError) {
        result = f;
        break;
      }
      if (f == Flow::kBreak) break;
      if (f == Flow::kNormal) completed = true;
    }
    --loop_depth_;
    if (result == Flow::kNormal && !completed) return exec(n.bodies[1]);
    return result;
  }

  bool bind(const Node& n, const Value& item) {
    if (n.targets.size() == 1) {
      scopes_.back().emplace_back(n.targets[0], item);
      return true;
    }
    std::vector<Value> parts;
    if (!unpack(item, n.targets.size(), n.line, &parts)) return false;
    for (size_t k = 0; k < parts.size(); ++k) scopes_.back().emplace_back(n.targets[k], parts[k]);
    return true;
  }

  bool args_of(const Node& n, size_t first, Args* out) {
    out->line = n.line;
    for (size_t k = first; k < n.kids.size(); ++k) {
      out->pos.push_back(eval(*n.kids[k]));
      if (failed()) return false;
    }
    for (const auto& [name, e] : n.kwargs) {
      out->kw.emplace_back(name, eval(*e));
      if (failed()) return false;
    }
    return true;
  }

  // An expression's value. Copying a string costs in proportion to its size: every string
  // value produced is charged one step per 1024 bytes, so a template that rebuilds a long string
  // over and over runs out of steps instead of running for minutes.
  // Bounds the C++ recursion of rendering (statements in statements, expressions in
  // expressions, macro calls): kMaxRecursion levels fit an 8 MiB thread stack with room.
  struct Recursion {
    int* depth;
    ~Recursion() { --*depth; }
  };
  static constexpr int kMaxRecursion = 1000;

  Value eval(const Node& n) {
    Recursion guard{&recursion_};
    if (++recursion_ > kMaxRecursion) {
      return fail(n.line, fmt::format("the template nests deeper than {} levels", kMaxRecursion));
    }
    Value v = eval_node(n);
    if (v.depth() > kMaxValueDepth) {
      return fail(n.line, fmt::format("a value nested deeper than {} levels", kMaxValueDepth));
    }
    // No single value may outgrow the output limit (a string doubled in a loop, a list grown
    // by +): the render stops before memory does.
    if ((v.kind == Value::Kind::kString && !reserve(v.s.size())) ||
        (v.kind == Value::Kind::kList && !reserve(v.list->items.size() * sizeof(Value)))) {
      return {};
    }
    if (v.kind == Value::Kind::kString && v.s.size() >= 1024) charge(v.s.size());
    return v;
  }

  bool charge(size_t bytes) {
    steps_ += bytes / 1024;
    return step();
  }

  Value eval_node(const Node& n) {
    if (!step()) return {};
    switch (n.kind) {
      case NodeKind::kLiteral:
        return n.value;
      case NodeKind::kName:
        return lookup(n.name);
      case NodeKind::kBlockValue:
        return block_value_;
      case NodeKind::kAttr: {
        const Value obj = eval(*n.kids[0]);
        if (failed()) return {};
        return attribute(obj, n.name, n.line);
      }
      case NodeKind::kItem: {
        const Value obj = eval(*n.kids[0]);
        if (failed()) return {};
        const Value key = eval(*n.kids[1]);
        if (failed()) return {};
        return item(obj, key, n.line);
      }
      case NodeKind::kSlice:
        return slice(n);
      case NodeKind::kCall: {
        const Node& callee = *n.kids[0];
        Args args;
        if (callee.kind == NodeKind::kAttr) {
          const Value obj = eval(*callee.kids[0]);
          if (failed()) return {};
          if (!args_of(n, 1, &args)) return {};
          if (obj.is_string() || obj.is_list() || (obj.is_dict() && !obj.dict->is_namespace)) {
            bool found = false;
            Value r = call_method(*this, obj, callee.name, args, &found);
            if (found || failed()) return r;
          }
          const Value fn = attribute(obj, callee.name, callee.line);
          if (failed()) return {};
          return call(fn, args);
        }
        const Value fn = eval(callee);
        if (failed()) return {};
        if (!args_of(n, 1, &args)) return {};
        return call(fn, args);
      }
      case NodeKind::kFilter: {
        const Value v = eval(*n.kids[0]);
        if (failed()) return {};
        Args args;
        if (!args_of(n, 1, &args)) return {};
        return apply_filter(*this, n.name, v, args);
      }
      case NodeKind::kTest: {
        const Value v = eval(*n.kids[0]);
        if (failed()) return {};
        Args args;
        if (!args_of(n, 1, &args)) return {};
        const Value r = apply_test(*this, n.name, v, args);
        if (failed()) return {};
        return Value::boolean(r.truthy() != n.negate);
      }
      case NodeKind::kUnary: {
        const Value v = eval(*n.kids[0]);
        if (failed()) return {};
        if (n.name == "not") return Value::boolean(!v.truthy());
        if (v.kind == Value::Kind::kFloat) return Value::real(n.name == "-" ? -v.f : v.f);
        if (v.kind == Value::Kind::kInt || v.kind == Value::Kind::kBool) {
          const int64_t x = int_of(v);
          if (n.name == "+") return Value::integer(x);
          if (x == INT64_MIN) return fail(n.line, "integer overflow");
          return Value::integer(-x);
        }
        return fail(n.line,
                    fmt::format("bad operand type for unary {}: '{}'", n.name, type_name(v)));
      }
      case NodeKind::kBinary: {
        const Value a = eval(*n.kids[0]);
        if (failed()) return {};
        const Value b = eval(*n.kids[1]);
        if (failed()) return {};
        return binary(n.name, a, b, n.line);
      }
      case NodeKind::kCompare: {
        Value left = eval(*n.kids[0]);
        if (failed()) return {};
        for (size_t k = 0; k < n.ops.size(); ++k) {
          Value right = eval(*n.kids[k + 1]);
          if (failed()) return {};
          const Value r = compare(n.ops[k], left, right, n.line);
          if (failed()) return {};
          if (!r.b) return r;
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case NodeKind::kAnd: {
        Value a = eval(*n.kids[0]);
        if (failed() || !a.truthy()) return a;
        return eval(*n.kids[1]);
      }
      case NodeKind::kOr: {
        Value a = eval(*n.kids[0]);
        if (failed() || a.truthy()) return a;
        return eval(*n.kids[1]);
      }
      case NodeKind::kCond: {
        const Value c = eval(*n.kids[1]);
        if (failed()) return {};
        if (c.truthy()) return eval(*n.kids[0]);
        if (n.kids[2] == nullptr) return Value::undefined();
        return eval(*n.kids[2]);
      }
      case NodeKind::kList:
      case NodeKind::kTuple: {
        std::vector<Value> items;
        for (const NodePtr& k : n.kids) {
          items.push_back(eval(*k));
          if (failed()) return {};
        }
        return Value::new_list(std::move(items), n.kind == NodeKind::kTuple);
      }
      case NodeKind::kDict: {
        Value d = Value::new_dict();
        for (size_t k = 0; k + 1 < n.kids.size(); k += 2) {
          const Value key = eval(*n.kids[k]);
          if (failed()) return {};
          Value v = eval(*n.kids[k + 1]);
          if (failed()) return {};
          if (!key.is_string() && key.kind != Value::Kind::kInt) {
            return fail(n.line, "dict keys must be strings or integers");
          }
          d.dict->set(to_str(key), std::move(v), key.kind == Value::Kind::kInt);
        }
        return d;
      }
      default:
        return fail(n.line, "a statement where an expression was expected");
    }
  }

  Value item(const Value& obj, const Value& key, int line) {
    if (obj.is_undefined()) {
      return fail(line, fmt::format("'{}' is undefined", obj.s.empty() ? "value" : obj.s));
    }
    if (obj.is_dict()) {
      if (key.is_string() || key.kind == Value::Kind::kInt) {
        if (const Value* v = obj.dict->find(to_str(key))) return *v;
      }
      return Value::undefined(key.is_string() ? key.s : to_str(key));
    }
    if ((obj.is_list() || obj.is_string()) &&
        (key.kind == Value::Kind::kInt || key.kind == Value::Kind::kBool)) {
      std::vector<std::string_view> cps;
      if (obj.is_string()) cps = code_points(obj.s);
      const int64_t size = obj.is_list() ? static_cast<int64_t>(obj.list->items.size())
                                         : static_cast<int64_t>(cps.size());
      int64_t k = int_of(key);
      if (k < 0) k += size;
      if (k < 0 || k >= size) return Value::undefined();
      if (obj.is_list()) return obj.list->items[static_cast<size_t>(k)];
      return Value::string(std::string(cps[static_cast<size_t>(k)]));
    }
    if (key.is_string()) return attribute(obj, key.s, line);
    return Value::undefined();
  }

  Value slice(const Node& n) {
    const Value obj = eval(*n.kids[0]);
    if (failed()) return {};
    int64_t bounds[3] = {0, 0, 1};
    bool given[3] = {false, false, false};
    for (int k = 0; k < 3; ++k) {
      if (n.kids[k + 1] == nullptr) continue;
      const Value v = eval(*n.kids[k + 1]);
      if (failed()) return {};
      if (v.is_none()) continue;
      if (v.kind != Value::Kind::kInt && v.kind != Value::Kind::kBool) {
        return fail(n.line, "slice indices must be integers or None");
      }
      bounds[k] = int_of(v);
      given[k] = true;
    }
    const int64_t step = bounds[2];
    if (step == 0) return fail(n.line, "slice step cannot be zero");
    std::vector<std::string_view> cps;
    int64_t size = 0;
    if (obj.is_list()) {
      size = static_cast<int64_t>(obj.list->items.size());
    } else if (obj.is_string()) {
      cps = code_points(obj.s);
      size = static_cast<int64_t>(cps.size());
    } else if (obj.is_undefined()) {
      return fail(n.line, fmt::format("'{}' is undefined", obj.s.empty() ? "value" : obj.s));
    } else {
      return fail(n.line, fmt::format("'{}' object is not subscriptable", type_name(obj)));
    }
    // Python's slice.indices().
    auto clamp = [&](int64_t v, bool is_given, int64_t def) {
      if (!is_given) return def;
      if (v < 0) {
        v += size;
        if (v < 0) v = step < 0 ? -1 : 0;
      } else if (v >= size) {
        v = step < 0 ? size - 1 : size;
      }
      return v;
    };
    const int64_t start = clamp(bounds[0], given[0], step < 0 ? size - 1 : 0);
    const int64_t stop = clamp(bounds[1], given[1], step < 0 ? -1 : size);
    std::vector<size_t> picks;
    for (__int128 k = start; step > 0 ? k < stop : k > stop; k += step) {
      picks.push_back(static_cast<size_t>(k));
    }
    if (obj.is_list()) {
      std::vector<Value> items;
      for (size_t k : picks) items.push_back(obj.list->items[k]);
      return Value::new_list(std::move(items), obj.list->tuple);
    }
    std::string out;
    for (size_t k : picks) out.append(cps[k]);
    return Value::string(std::move(out));
  }

  Value binary(const std::string& op, const Value& a, const Value& b, int line) {
    using K = Value::Kind;
    if (op == "~") return Value::string(to_str(a) + to_str(b));
    const bool ints =
        (a.kind == K::kInt || a.kind == K::kBool) && (b.kind == K::kInt || b.kind == K::kBool);
    const bool nums = a.is_number() && b.is_number();
    auto unsupported = [&] {
      return fail(line, fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op,
                                    type_name(a), type_name(b)));
    };
    if (a.is_undefined() || b.is_undefined()) {
      const Value& u = a.is_undefined() ? a : b;
      return fail(line, fmt::format("'{}' is undefined", u.s.empty() ? "value" : u.s));
    }
    int64_t r = 0;
    if (op == "+") {
      if (ints) {
        if (__builtin_add_overflow(int_of(a), int_of(b), &r)) return fail(line, "integer overflow");
        return Value::integer(r);
      }
      if (nums) return Value::real(a.as_double() + b.as_double());
      if (a.is_string() && b.is_string()) {
        if (a.safe == b.safe) {
          Value r = Value::string(a.s + b.s);
          r.safe = a.safe;
          return r;
        }
        Value r = Value::string(a.safe ? a.s + html_escape(b.s) : html_escape(a.s) + b.s);
        r.safe = true;
        return r;
      }
      if (a.is_list() && b.is_list() && a.list->tuple == b.list->tuple) {
        if (!reserve((uint64_t(a.list->items.size()) + b.list->items.size()) * sizeof(Value))) {
          return {};
        }
        std::vector<Value> items = a.list->items;
        items.insert(items.end(), b.list->items.begin(), b.list->items.end());
        return Value::new_list(std::move(items), a.list->tuple);
      }
      if (a.is_string() || b.is_string()) {
        return fail(line, fmt::format("can only concatenate str (not \"{}\") to str",
                                      type_name(a.is_string() ? b : a)));
      }
      return unsupported();
    }
    if (op == "-") {
      if (ints) {
        if (__builtin_sub_overflow(int_of(a), int_of(b), &r)) return fail(line, "integer overflow");
        return Value::integer(r);
      }
      if (nums) return Value::real(a.as_double() - b.as_double());
      return unsupported();
    }
    if (op == "*") {
      if (ints) {
        if (__builtin_mul_overflow(int_of(a), int_of(b), &r)) return fail(line, "integer overflow");
        return Value::integer(r);
      }
      if (nums) return Value::real(a.as_double() * b.as_double());
      const Value* seq = a.is_string() || a.is_list() ? &a : &b;
      const Value* count = seq == &a ? &b : &a;
      if ((seq->is_string() || seq->is_list()) &&
          (count->kind == K::kInt || count->kind == K::kBool)) {
        const int64_t times = std::max<int64_t>(0, int_of(*count));
        uint64_t unit = seq->is_string() ? seq->s.size() : 0;
        if (seq->is_list()) {
          for (const Value& x : seq->list->items) unit += sizeof(Value) + x.s.size();
        }
        if (unit > 0 && static_cast<uint64_t>(times) > opt_.max_output_bytes / unit) {
          if (error_.ok())
            error_ = Status::out_of_range("a repeated sequence past the output limit");
          return {};
        }
        if (seq->is_string()) {
          std::string s;
          for (int64_t k = 0; k < times; ++k) s += seq->s;
          return Value::string(std::move(s));
        }
        std::vector<Value> items;
        for (int64_t k = 0; k < times; ++k) {
          items.insert(items.end(), seq->list->items.begin(), seq->list->items.end());
        }
        return Value::new_list(std::move(items), seq->list->tuple);
      }
      return unsupported();
    }
    if (op == "%" && a.is_string()) {
      // printf-style formatting: "fmt" % value or "fmt" % (values, ...).
      std::vector<Value> fargs;
      if (b.is_list() && b.list->tuple) {
        fargs = b.list->items;
      } else {
        fargs.push_back(b);
      }
      return percent_format(*this, a.s, fargs, line);
    }
    if (!nums) return unsupported();
    if (op == "/") {
      if (b.as_double() == 0) return fail(line, "division by zero");
      return Value::real(a.as_double() / b.as_double());
    }
    if (op == "//" || op == "%") {
      if (b.as_double() == 0) {
        return fail(line,
                    op == "%" ? "integer modulo by zero" : "integer division or modulo by zero");
      }
      if (ints) {
        const int64_t x = int_of(a), y = int_of(b);
        if (x == INT64_MIN && y == -1) return fail(line, "integer overflow");
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          --q;
          m += y;
        }
        return Value::integer(op == "//" ? q : m);
      }
      // CPython's float_divmod.
      const double x = a.as_double(), y = b.as_double();
      double m = std::fmod(x, y);
      double div = (x - m) / y;
      if (m != 0) {
        if ((y < 0) != (m < 0)) {
          m += y;
          div -= 1.0;
        }
      } else {
        m = std::copysign(0.0, y);
      }
      if (op == "%") return Value::real(m);
      double q = std::copysign(0.0, x / y);
      if (div != 0) {
        q = std::floor(div);
        if (div - q > 0.5) q += 1.0;
      }
      return Value::real(q);
    }
    if (op == "**") {
      if (ints && int_of(b) >= 0) {
        int64_t base = int_of(a), e = int_of(b), acc = 1;
        while (e > 0) {
          if (e & 1) {
            if (__builtin_mul_overflow(acc, base, &acc)) return fail(line, "integer overflow");
          }
          e >>= 1;
          if (e > 0 && __builtin_mul_overflow(base, base, &base))
            return fail(line, "integer overflow");
        }
        return Value::integer(acc);
      }
      return Value::real(std::pow(a.as_double(), b.as_double()));
    }
    return unsupported();
  }

  Value compare(const std::string& op, const Value& a, const Value& b, int line) {
    if (a.is_list() && b.is_list() &&
        !steps(std::min(a.list->items.size(), b.list->items.size()))) {
      return {};
    }
    if (op == "==") return Value::boolean(equals(a, b));
    if (op == "!=") return Value::boolean(!equals(a, b));
    if (op == "in" || op == "notin") {
      bool found = false;
      if (b.is_string()) {
        if (!a.is_string()) {
          return fail(line, fmt::format("'in <string>' requires string as left operand, not {}",
                                        type_name(a)));
        }
        found = b.s.find(a.s) != std::string::npos;
      } else if (b.is_list()) {
        if (!steps(b.list->items.size())) return {};
        for (const Value& v : b.list->items) found = found || equals(a, v);
      } else if (b.is_dict()) {
        found =
            (a.is_string() || a.kind == Value::Kind::kInt) && b.dict->find(to_str(a)) != nullptr;
      } else if (!b.is_undefined()) {
        return fail(line, fmt::format("argument of type '{}' is not iterable", type_name(b)));
      }
      return Value::boolean(op == "in" ? found : !found);
    }
    int c = 0;
    if (!order(a, b, &c)) {
      return fail(line, fmt::format("'{}' not supported between instances of '{}' and '{}'", op,
                                    type_name(a), type_name(b)));
    }
    if (op == "<") return Value::boolean(c < 0);
    if (op == "<=") return Value::boolean(c <= 0);
    if (op == ">") return Value::boolean(c > 0);
    return Value::boolean(c >= 0);
  }

 public:
  // Python's ordering of two values: numbers, strings (by code point), lists (item by item).
  static bool order(const Value& a, const Value& b, int* c) {
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
        return order(a.list->items[k], b.list->items[k], c);
      }
      const size_t x = a.list->items.size(), y = b.list->items.size();
      *c = x < y ? -1 : x > y ? 1 : 0;
      return true;
    }
    return false;
  }

 private:
  RenderOptions opt_;
  std::vector<Scope> scopes_;
  std::string* out_ = nullptr;
  size_t total_before_ = 0;
  Status error_;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  int loop_depth_ = 0;
  int recursion_ = 0;
  Value block_value_;
};

}  // namespace

bool order_values(const Value& a, const Value& b, int* c) { return Interp::order(a, b, c); }

Result<Template> Template::parse(std::string_view source, const ParseOptions& options) {
  auto prog = parse_program(source, options);
  if (!prog.ok()) return prog.status();
  Template t;
  t.program_ = std::move(prog).value();
  return t;
}

Result<std::string> Template::render(const nlohmann::ordered_json& context,
                                     const RenderOptions& options) const {
  if (program_ == nullptr) return Status::invalid_argument("an empty template object");
  if (!context.is_object()) return Status::invalid_argument("the context must be a JSON object");
  Interp interp(options, context);
  std::string out;
  MNEMO_RETURN_IF_ERROR(interp.run(*program_, &out));
  return out;
}

}  // namespace mnemo::jinja
