// The syntax tree of a parsed template (module-private): statements and expressions as one
// node type, and the parser's entry point. The lexer is lexer.h, the parser parser.h; the
// renderer walks the tree (interp.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace mnemo::jinja {

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
