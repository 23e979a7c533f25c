// Jinja values with Python's semantics (module-private): the value type, its list, dict, call
// arguments and callables, and what Python defines on every value (str(), repr(), ==, ordering,
// type names). The syntax tree is syntax.h, the built-ins builtins.h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mnemo/jinja.h"

namespace mnemo::jinja {

struct Value;
struct List;
struct Dict;
struct Func;
struct Args;
class Renderer;

/// A Jinja value: Python's None, bool, int, float, str, list/tuple, dict, a callable, or
/// jinja2's Undefined. Lists and dicts are shared (Python reference semantics: a namespace
/// assigned in a loop is seen after it).
struct Value {
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kFunc
  };
  Kind kind = Kind::kUndefined;
  /// kString: marked safe (jinja2's Markup, from the `safe` or `escape` filter). Adding a plain
  /// string to a safe one HTML-escapes the plain one, as Markup.__add__ does.
  bool safe = false;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;  // kString: the text (UTF-8); kUndefined: the name that was looked up
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;
  std::shared_ptr<const Func> func;

  static Value undefined(std::string name = {}) {
    Value v;
    v.s = std::move(name);
    return v;
  }
  static Value none() { return of(Kind::kNone); }
  static Value boolean(bool x) {
    Value v = of(Kind::kBool);
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v = of(Kind::kInt);
    v.i = x;
    return v;
  }
  static Value real(double x) {
    Value v = of(Kind::kFloat);
    v.f = x;
    return v;
  }
  static Value string(std::string x) {
    Value v = of(Kind::kString);
    v.s = std::move(x);
    return v;
  }
  static Value new_list(std::vector<Value> items = {}, bool tuple = false);
  static Value new_dict();
  static Value function(std::string name, std::function<Value(Renderer&, Args&)> fn);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_list() const { return kind == Kind::kList; }
  bool is_dict() const { return kind == Kind::kDict; }
  /// int or bool or float (Python's numbers; bool is an int).
  bool is_number() const {
    return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool;
  }
  /// Python's truth value.
  bool truthy() const;
  /// Nesting depth: 0 for a scalar, 1 + the deepest item for a list or dict.
  int depth() const;
  /// The number as a double (bool, int, float).
  double as_double() const { return kind == Kind::kFloat ? f : kind == Kind::kBool ? b : i; }

 private:
  static Value of(Kind k) {
    Value v;
    v.kind = k;
    return v;
  }
};

/// A list or tuple (shared by the values that hold it).
struct List {
  std::vector<Value> items;
  bool tuple = false;  // prints as (a, b)
  int depth = 1;       // 1 + the deepest item's depth (the renderer refuses values past 256)
  /// A named tuple (groupby's (grouper, list)): the attribute names of the items, in order.
  std::vector<std::string> fields;
};

/// A dict keeping insertion order (Python 3.7+). Keys are strings, or the str() of an int key
/// (a dict literal's {4096: 512}); int_keys marks those, so iterating gives ints back.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  std::vector<bool> int_keys;  // [items.size()]
  int depth = 1;               // 1 + the deepest value's depth
  bool is_namespace = false;   // namespace(): attributes may be assigned with {% set ns.x = %}
  /// nullptr when absent.
  const Value* find(std::string_view key) const;
  /// Inserts or replaces.
  void set(std::string key, Value v, bool int_key = false);
  /// The k-th key as a value (a string, or an int for an int key).
  Value key(size_t k) const;
};

/// A call's arguments: positional, then keyword.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  int line = 0;
  /// The argument named `name` (keyword) or at `index` (positional); `fallback` when neither.
  Value get(size_t index, std::string_view name, Value fallback = Value::undefined()) const;
};

/// A callable: a macro, a loop's cycle(), a global such as range().
struct Func {
  std::string name;
  std::function<Value(Renderer&, Args&)> fn;
};

/// Python's int or bool (an integer for arithmetic).
inline bool is_int(const Value& v) {
  return v.kind == Value::Kind::kInt || v.kind == Value::Kind::kBool;
}
/// The integer of an int or bool value.
inline int64_t int_of(const Value& v) { return v.kind == Value::Kind::kBool ? v.b : v.i; }

/// Python's str(v): "None", "True", "1.0", "['a', 1]", the text of a string; "" for Undefined.
std::string to_str(const Value& v);
/// Python's repr(v) ('a' quoted, containers as to_str).
std::string to_repr(const Value& v);
/// Python's type name of v for error messages: "NoneType", "int", "str", "tuple", ...;
/// "Undefined" and "function" for jinja2's own.
const char* type_name(const Value& v);
/// markupsafe's escape: & < > " ' as &amp; &lt; &gt; &#34; &#39;.
std::string html_escape(const std::string& s);
/// Python's == (1 == 1.0 == True; lists and dicts by content).
bool equals(const Value& a, const Value& b);
/// Python's ordering of a and b (numbers, strings by code point, lists item by item): *c is
/// -1, 0 or 1; false when the two cannot be ordered.
bool order_values(const Value& a, const Value& b, int* c);
/// A JSON value as a template sees it: objects become dicts keeping their key order, arrays
/// lists, integers past int64 floats.
Value from_json(const nlohmann::ordered_json& j);

}  // namespace mnemo::jinja
