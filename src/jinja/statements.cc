// Statements of a template (interp.h): output, if, for, set, set blocks, filter blocks, macros,
// with, break and continue.
#include <fmt/format.h>

#include "jinja/interp.h"
#include "jinja/py_str.h"

namespace mnemo::jinja {
namespace {

// Whether `v` holds the dict `d` (a namespace assigned into itself would make a cycle).
bool reaches(const Value& v, const Dict* d) {
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

// The `loop` variable of iteration k over `items` (jinja2's LoopContext, without recursion).
Value loop_value(const std::vector<Value>& items, int64_t k) {
  const int64_t length = static_cast<int64_t>(items.size());
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
  return loop;
}

}  // namespace

// Renders a macro call: the arguments bound to its parameters in a scope over the
// template's top-level variables.
Value Interp::call_macro(const Node& m, Args& args) {
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

Flow Interp::exec(const std::vector<NodePtr>& body) {
  for (const NodePtr& n : body) {
    const Flow f = exec_one(*n);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Flow Interp::exec_one(const Node& n) {
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
    case NodeKind::kSet:
      return exec_set(n);
    case NodeKind::kSetBlock:
    case NodeKind::kFilterBlock:
      return exec_block(n);
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
    case NodeKind::kWith:
      return exec_with(n);
    case NodeKind::kGeneration:
      return exec(n.bodies[0]);
    default:
      fail(n.line, "an expression where a statement was expected");
      return Flow::kError;
  }
}

// {% set x = e %}, {% set a, b = e %} (unpacked), {% set ns.attr = e %} (a namespace only).
Flow Interp::exec_set(const Node& n) {
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

// {% set x %}...{% endset %} and {% filter f %}...{% endfilter %}: the body rendered, through
// the filters if any (they see it as kBlockValue), then assigned or output.
Flow Interp::exec_block(const Node& n) {
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

// {% with a = e, ... %}: the body in a scope of its own.
Flow Interp::exec_with(const Node& n) {
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

// The items of an iterable, as a for loop sees them.
bool Interp::iterate(const Value& v, int line, std::vector<Value>* out) {
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
      if (!reserve(uint64_t(py_len(v.s)) * sizeof(Value))) return false;
      for (std::string_view cp : code_points(v.s)) out->push_back(Value::string(std::string(cp)));
      return true;
    default:
      fail(line, fmt::format("'{}' object is not iterable", type_name(v)));
      return false;
  }
}

bool Interp::unpack(const Value& v, size_t n, int line, std::vector<Value>* out) {
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

Flow Interp::exec_for(const Node& n) {
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
    Value loop = loop_value(items, k);
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

bool Interp::bind(const Node& n, const Value& item) {
  if (n.targets.size() == 1) {
    scopes_.back().emplace_back(n.targets[0], item);
    return true;
  }
  std::vector<Value> parts;
  if (!unpack(item, n.targets.size(), n.line, &parts)) return false;
  for (size_t k = 0; k < parts.size(); ++k) scopes_.back().emplace_back(n.targets[k], parts[k]);
  return true;
}

}  // namespace mnemo::jinja
