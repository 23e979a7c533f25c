// The parts of the Jinja engine (include/mnemo/jinja.h) shared by its files: values, the syntax
// tree, and the renderer's interface to the built-in filters, tests and methods.
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
  static Value function(std::string name, std::function<Value(Renderer&, struct Args&)> fn);

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

/// Python's str(v): "None", "True", "1.0", "['a', 1]", the text of a string; "" for Undefined.
std::string to_str(const Value& v);
/// Python's repr(v) ('a' quoted, containers as to_str).
std::string to_repr(const Value& v);
/// markupsafe's escape: & < > " ' as &amp; &lt; &gt; &#34; &#39;.
std::string html_escape(const std::string& s);
/// Python's == (1 == 1.0 == True; lists and dicts by content).
bool equals(const Value& a, const Value& b);
/// Python's ordering of a and b (numbers, strings by code point, lists item by item): *c is
/// -1, 0 or 1; false when the two cannot be ordered.
bool order_values(const Value& a, const Value& b, int* c);
/// The code point of one UTF-8 character `u` (a single byte that is not UTF-8: its value).
uint32_t decode_utf8(std::string_view u);
/// Appends code point `cp` (<= U+10FFFF) as UTF-8.
void append_utf8(uint32_t cp, std::string* out);
/// Python's str.isspace() for one code point (UTF-8 bytes).
bool is_py_space(std::string_view cp);
/// Code points in UTF-8 `s` (bytes that do not continue a character), without materializing.
size_t utf8_length(std::string_view s);
/// Code points of UTF-8 `s` (bytes that are not UTF-8 count as one code point each).
std::vector<std::string_view> code_points(std::string_view s);

/// What the built-ins need from the renderer: errors, and calling back into values.
class Renderer {
 public:
  virtual ~Renderer() = default;
  /// Records an error (the first one wins) and returns Undefined; callers return at once.
  virtual Value fail(int line, std::string message) = 0;
  virtual bool failed() const = 0;
  /// Calls a callable value (macro, built-in).
  virtual Value call(const Value& fn, Args& args) = 0;
  /// Applies the filter or test named `name` to `v` with extra arguments.
  virtual Value filter(std::string_view name, const Value& v, Args& args) = 0;
  virtual Value test(std::string_view name, const Value& v, Args& args) = 0;
  /// obj.name / obj[name] as in a template.
  virtual Value attribute(const Value& obj, const std::string& name, int line) = 0;
  /// strftime_now's clock, and whether it is UTC.
  virtual int64_t now(bool* utc) const = 0;
  /// Counts one unit of work; false (after recording the error) once the budget is spent.
  virtual bool step() = 0;
  /// Counts n units of work at once (a filter's loop over n items).
  virtual bool steps(uint64_t n) = 0;
  /// Before building a value of about `bytes` bytes: false (after recording an OutOfRange
  /// error) when that is past the render's output limit.
  virtual bool reserve(uint64_t bytes) = 0;
};

/// The filter `name` applied to `v` (`args` holds the rest). Sets an error through `r` for an
/// unknown filter or bad arguments.
Value apply_filter(Renderer& r, std::string_view name, const Value& v, Args& args);
/// The test `name` (`is name(args)`); a bool, or an error through `r`.
Value apply_test(Renderer& r, std::string_view name, const Value& v, Args& args);
/// A method of a str, dict or list (`"a b".split()`, `d.items()`); `*found` false when `obj`
/// has no such method.
Value call_method(Renderer& r, const Value& obj, const std::string& name, Args& args, bool* found);
/// Python's printf-style `fmt % args` (%s %r %d %i %f %e %x %o %c %%, flags, width, precision).
Value percent_format(Renderer& r, const std::string& fmt, const std::vector<Value>& args, int line);
/// The globals every template sees: range, namespace, dict, raise_exception, strftime_now.
void add_globals(Dict* globals);
/// json.dumps(v, ensure_ascii=False, indent, separators, sort_keys) (Python's json module):
/// `indent` nullptr for one line, else the text of one level of indentation. false (after
/// r.fail) for a value JSON cannot hold (Undefined, a callable) or nesting past 256.
bool to_json(Renderer& r, const Value& v, const std::string* indent, const std::string& item_sep,
             const std::string& key_sep, bool sort_keys, int line, std::string* out);

/// A node of the syntax tree: a statement or an expression.
enum class NodeKind : uint8_t {
  // Statements.
  kText,      // name: the text
  kOutput,    // {{ kids[0] }}
  kIf,        // kids: conditions; bodies: one per condition, plus the else body if any
  kFor,       // targets in kids[0] [if kids[1]]; bodies[0] body, bodies[1] else (may be empty)
  kSet,       // targets (or name.attr) = kids[0]
  kSetBlock,  // targets[0] = the body rendered, through kids[0] (filters) if present
  kMacro,     // name(targets = kids defaults); bodies[0]
  kBreak,
  kContinue,
  kFilterBlock,  // kids[0] (filters over kBlockValue) applied to bodies[0] rendered
  kWith,         // targets = kids; bodies[0]
  kGeneration,   // bodies[0]
  // Expressions.
  kLiteral,     // value
  kName,        // name
  kAttr,        // kids[0].name
  kItem,        // kids[0][kids[1]]
  kSlice,       // kids[0][kids[1]:kids[2]:kids[3]] (nullptr where omitted)
  kCall,        // kids[0](kids[1..], kwargs)
  kFilter,      // kids[0] | name(kids[1..], kwargs)
  kTest,        // kids[0] is [not] name(kids[1..], kwargs); negate
  kUnary,       // name: "-", "+" or "not"; kids[0]
  kBinary,      // kids[0] name kids[1]; name: + - * / // % ** ~
  kCompare,     // kids[0] ops[0] kids[1] ops[1] kids[2] ...; ops: == != < <= > >= in notin
  kAnd,         // kids[0] and kids[1]
  kOr,          // kids[0] or kids[1]
  kCond,        // kids[0] if kids[1] else kids[2] (kids[2] nullptr: Undefined)
  kList,        // [kids]
  kTuple,       // (kids)
  kDict,        // {kids[0]: kids[1], kids[2]: kids[3], ...}
  kBlockValue,  // the rendered body of a filter block or set block
};

/// A node: its kind says which fields it uses (see NodeKind). Expression trees are at most
/// 256 nodes high (the parser refuses taller ones), so rendering and destroying recurse boundedly.
struct Node {
  NodeKind kind = NodeKind::kText;
  int line = 0;
  int height = 1;  // expressions: 1 + the tallest child
  std::string name;
  Value value;
  bool negate = false;
  std::vector<std::unique_ptr<Node>> kids;
  std::vector<std::pair<std::string, std::unique_ptr<Node>>> kwargs;
  std::vector<std::string> targets;
  std::string attr;  // kSet of a namespace attribute: targets[0].attr
  std::vector<std::string> ops;
  std::vector<std::vector<std::unique_ptr<Node>>> bodies;
};
using NodePtr = std::unique_ptr<Node>;

/// A parsed template: its top-level statements.
class Program {
 public:
  std::vector<NodePtr> body;
};

/// Splits and parses `source` (see include/mnemo/jinja.h). Errors: "line N: <problem>".
Result<std::shared_ptr<const Program>> parse_program(std::string_view source,
                                                     const ParseOptions& options);

}  // namespace mnemo::jinja
