// The tests of `x is name(args)` (builtins.h), as jinja2/tests.py defines them.
#include <fmt/format.h>

#include "jinja/builtins.h"
#include "jinja/py_str.h"

namespace mnemo::jinja {

using K = Value::Kind;

Value apply_test(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const int line = args.line;
  const Value arg = args.get(0, "value", Value::undefined());
  auto b = [](bool x) { return Value::boolean(x); };
  if (name == "defined") return b(!v.is_undefined());
  if (name == "undefined") return b(v.is_undefined());
  if (name == "none") return b(v.is_none());
  if (name == "boolean") return b(v.kind == K::kBool);
  if (name == "true") return b(v.kind == K::kBool && v.b);
  if (name == "false") return b(v.kind == K::kBool && !v.b);
  if (name == "integer") return b(v.kind == K::kInt);
  if (name == "float") return b(v.kind == K::kFloat);
  if (name == "number") return b(v.is_number());
  if (name == "string") return b(v.is_string());
  if (name == "mapping") return b(v.is_dict());
  if (name == "iterable") return b(v.is_list() || v.is_dict() || v.is_string() || v.is_undefined());
  if (name == "sequence") return b(v.is_list() || v.is_dict() || v.is_string());
  if (name == "callable") return b(v.kind == K::kFunc);
  if (name == "lower") return b(v.is_string() && py_lower(v.s) == v.s);
  if (name == "upper") return b(v.is_string() && py_upper(v.s) == v.s);
  if (name == "escaped") return b(false);
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!is_int(v)) return r.fail(line, fmt::format("the test '{}' needs an integer", name));
    if (name == "odd") return b(int_of(v) % 2 != 0);
    if (name == "even") return b(int_of(v) % 2 == 0);
    if (!is_int(arg) || int_of(arg) == 0)
      return r.fail(line, "divisibleby needs a non-zero integer");
    return b(int_of(v) % int_of(arg) == 0);
  }
  if (name == "eq" || name == "equalto" || name == "==") return b(equals(v, arg));
  if (name == "ne" || name == "!=") return b(!equals(v, arg));
  if (name == "sameas") {
    if (v.kind != arg.kind) return b(false);
    switch (v.kind) {
      case K::kNone:
      case K::kUndefined:
        return b(true);
      case K::kBool:
        return b(v.b == arg.b);
      case K::kInt:
        return b(v.i == arg.i && v.i >= -5 && v.i <= 256);  // CPython's small-int cache
      case K::kList:
        return b(v.list == arg.list);
      case K::kDict:
        return b(v.dict == arg.dict);
      default:
        return b(false);
    }
  }
  if (name == "in") {
    if (arg.is_string()) return b(v.is_string() && arg.s.find(v.s) != std::string::npos);
    if (arg.is_list()) {
      for (const Value& x : arg.list->items) {
        if (equals(v, x)) return b(true);
      }
      return b(false);
    }
    if (arg.is_dict()) return b(v.is_string() && arg.dict->find(v.s) != nullptr);
    return r.fail(line, "the test 'in' needs a container");
  }
  static constexpr std::pair<std::string_view, std::string_view> kOrder[] = {
      {"lt", "<"}, {"lessthan", "<"},    {"<", "<"}, {"le", "<="}, {"<=", "<="},
      {"gt", ">"}, {"greaterthan", ">"}, {">", ">"}, {"ge", ">="}, {">=", ">="}};
  for (auto [n, op] : kOrder) {
    if (name != n) continue;
    int c = 0;
    if (!order_values(v, arg, &c)) return r.fail(line, "values that cannot be ordered");
    if (op == "<") return b(c < 0);
    if (op == "<=") return b(c <= 0);
    if (op == ">") return b(c > 0);
    return b(c >= 0);
  }
  return r.fail(line, fmt::format("no test named '{}'", name));
}

}  // namespace mnemo::jinja
