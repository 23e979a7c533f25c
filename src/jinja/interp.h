// The renderer of a parsed template (module-private): one Interp per render, its scopes, output
// and budgets. Its work is split by concept:
//   render.cc      the render's frame: scopes, output, errors, budgets, the Renderer interface
//   statements.cc  statements: if, for, set, macros, blocks
//   expressions.cc expressions: names, attributes, items, slices, calls, filters, tests
//   operators.cc   Python's arithmetic and comparisons
//
// Scopes follow jinja2: a for loop's body gets a fresh scope on every iteration (a `set` in it
// is gone at the next iteration and after the loop, which is why templates use namespace()),
// `if` makes no scope, a macro sees the template's top-level variables and its arguments.
//
// Not thread-safe; a Template renders on many threads at once through one Interp each.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jinja/builtins.h"
#include "jinja/syntax.h"

namespace mnemo::jinja {

/// How a statement ended: normally, by break or continue (inside a loop), or with an error.
enum class Flow : uint8_t { kNormal, kBreak, kContinue, kError };

/// The variables of one scope, in the order they were set.
using Scope = std::vector<std::pair<std::string, Value>>;

/// One render of one template.
class Interp final : public Renderer {
 public:
  /// A render over `context` (a JSON object: its members become the template's variables).
  Interp(const RenderOptions& o, const nlohmann::ordered_json& context);

  /// Renders `p` into *out; the first error, if any.
  Status run(const Program& p, std::string* out);

  // Renderer.
  Value fail(int line, std::string message) override;
  bool failed() const override { return !error_.ok(); }
  bool step() override;
  bool steps(uint64_t n) override;
  bool reserve(uint64_t bytes) override;
  int64_t now(bool* utc) const override;
  Value call(const Value& fn, Args& args) override;
  Value filter(std::string_view name, const Value& v, Args& args) override;
  Value test(std::string_view name, const Value& v, Args& args) override;
  Value attribute(const Value& obj, const std::string& name, int line) override;

  /// Renders a macro call: the arguments bound to its parameters in a scope over the
  /// template's top-level variables.
  Value call_macro(const Node& m, Args& args);

 private:
  static constexpr int kMaxCallDepth = 64;
  static constexpr int kMaxValueDepth = 256;
  // Bounds the C++ recursion of rendering (statements in statements, expressions in
  // expressions, macro calls): kMaxRecursion levels fit an 8 MiB thread stack with room.
  static constexpr int kMaxRecursion = 1000;
  struct Recursion {
    int* depth;
    ~Recursion() { --*depth; }
  };

  // --- render.cc: scopes and output ---
  Value lookup(const std::string& name) const;
  void set_var(const std::string& name, Value v);
  bool emit(std::string_view s);
  // Renders `body` into a new string (set blocks, filter blocks).
  bool capture(const std::vector<NodePtr>& body, std::string* text);
  // Counts the work of copying `bytes` bytes (one step per 1024).
  bool charge(size_t bytes);

  // --- statements.cc ---
  Flow exec(const std::vector<NodePtr>& body);
  Flow exec_one(const Node& n);
  Flow exec_set(const Node& n);
  Flow exec_block(const Node& n);
  Flow exec_with(const Node& n);
  Flow exec_for(const Node& n);
  // The items of an iterable, as a for loop sees them.
  bool iterate(const Value& v, int line, std::vector<Value>* out);
  bool unpack(const Value& v, size_t n, int line, std::vector<Value>* out);
  // Binds a loop's targets to `item` in the innermost scope.
  bool bind(const Node& n, const Value& item);

  // --- expressions.cc ---
  Value eval(const Node& n);
  Value eval_node(const Node& n);
  Value eval_call(const Node& n);
  Value eval_unary(const Node& n);
  Value eval_compare(const Node& n);
  Value eval_dict(const Node& n);
  bool args_of(const Node& n, size_t first, Args* out);
  Value item(const Value& obj, const Value& key, int line);
  Value slice(const Node& n);

  // --- operators.cc ---
  Value binary(const std::string& op, const Value& a, const Value& b, int line);
  Value add(const Value& a, const Value& b, int line);
  Value multiply(const Value& a, const Value& b, int line);
  Value divide(const std::string& op, const Value& a, const Value& b, int line);
  Value power(const Value& a, const Value& b, int line);
  Value compare(const std::string& op, const Value& a, const Value& b, int line);

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

}  // namespace mnemo::jinja
