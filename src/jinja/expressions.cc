// Expressions of a template (interp.h): literals, names, attributes, items, slices, calls
// (methods included), filters, tests, unary operators, chained comparisons, and/or,
// conditionals, list, tuple and dict displays. The operators themselves are operators.cc.
#include <fmt/format.h>

#include "jinja/interp.h"
#include "jinja/py_str.h"

namespace mnemo::jinja {

bool Interp::args_of(const Node& n, size_t first, Args* out) {
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
Value Interp::eval(const Node& n) {
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

Value Interp::eval_node(const Node& n) {
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
    case NodeKind::kCall:
      return eval_call(n);
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
    case NodeKind::kUnary:
      return eval_unary(n);
    case NodeKind::kBinary: {
      const Value a = eval(*n.kids[0]);
      if (failed()) return {};
      const Value b = eval(*n.kids[1]);
      if (failed()) return {};
      return binary(n.name, a, b, n.line);
    }
    case NodeKind::kCompare:
      return eval_compare(n);
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
    case NodeKind::kDict:
      return eval_dict(n);
    default:
      return fail(n.line, "a statement where an expression was expected");
  }
}

// A call: a method of a str, list or dict when `callee` names one, else a callable value.
Value Interp::eval_call(const Node& n) {
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

// not, unary - and +.
Value Interp::eval_unary(const Node& n) {
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
  return fail(n.line, fmt::format("bad operand type for unary {}: '{}'", n.name, type_name(v)));
}

// a < b <= c ...: each comparison on the previous right operand, stopping at the first false.
Value Interp::eval_compare(const Node& n) {
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

// {k: v, ...}: keys are strings or ints.
Value Interp::eval_dict(const Node& n) {
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

Value Interp::item(const Value& obj, const Value& key, int line) {
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

Value Interp::slice(const Node& n) {
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

}  // namespace mnemo::jinja
