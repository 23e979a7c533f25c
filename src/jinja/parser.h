// The parser of Jinja tokens into the syntax tree (module-private). Recursive descent, split by
// concept:
//   parse_statements.cc   the token cursor, bodies of statements, and each statement
//   parse_expressions.cc  expressions, by precedence
//
// Expression precedence, loosest first (jinja2/parser.py): conditional `a if b else c`, or,
// and, not, comparisons (chained), + -, ~, * / // %, **, unary - +, then postfix (. [] ()) and
// filters / tests.
//
// Depth is bounded: blocks nest at most kMaxDepth deep, expression trees are at most kMaxDepth
// high (measure()), so parsing, rendering and destroying the tree recurse boundedly.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jinja/lexer.h"
#include "jinja/syntax.h"

namespace mnemo::jinja {

/// Parses one template's tokens (lex()'s output, ending with kEof). Single use.
class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  /// Parses all tokens into prog->body. Errors: InvalidArgument "line N: <problem>".
  Status run(Program* prog);

 private:
  // --- The token cursor (parse_statements.cc) ---
  const Token& peek(size_t ahead = 0) const { return t_[std::min(at_ + ahead, t_.size() - 1)]; }
  Token next() {
    Token t = peek();
    if (at_ < t_.size() - 1) ++at_;
    return t;
  }
  bool is_op(std::string_view op, size_t ahead = 0) const {
    return peek(ahead).type == Tok::kOp && peek(ahead).text == op;
  }
  bool is_name(std::string_view name, size_t ahead = 0) const {
    return peek(ahead).type == Tok::kName && peek(ahead).text == name;
  }
  Status error(std::string_view what) const;
  Status expect_op(std::string_view op);
  Status expect_block_end();
  Status expect_name(std::string* out);
  NodePtr node(NodeKind k, int line);
  // Sets n's height from its children; a tree taller than kMaxDepth is refused (long chains
  // such as 1+1+...+1 or a|f|f|... grow it without nesting in the source).
  Status measure(Node* n) const;

  // --- Statements (parse_statements.cc) ---
  // Statements up to a block tag whose keyword is one of `ends` (its name is consumed and
  // returned in *end; the rest of that tag is the caller's). Empty `ends`: up to the end.
  Status body(std::initializer_list<std::string_view> ends, std::vector<NodePtr>* out,
              std::string* end);
  // The statement whose keyword comes next (after "{%").
  Status statement(NodePtr* out);
  Status if_statement(const Token& kw, NodePtr* out);
  Status for_statement(const Token& kw, NodePtr* out);
  Status set_statement(const Token& kw, NodePtr* out);
  Status macro_statement(const Token& kw, NodePtr* out);
  Status loop_control(const Token& kw, NodePtr* out);
  Status filter_statement(const Token& kw, NodePtr* out);
  Status with_statement(const Token& kw, NodePtr* out);
  Status generation_statement(const Token& kw, NodePtr* out);
  // `{% end... %}` of a block statement whose head is parsed: its body into n->bodies[0].
  Status block_body(std::string_view end_keyword, Node* n);
  // `| name(args) | name ...` of a filter block or set block, applied to a kBlockValue.
  Status block_filters(int line, Node* n);
  Status target_list(std::vector<std::string>* out);
  // An expression, or a tuple of them without parentheses (`set a, b = 1, 2`).
  Status tuple_expr(NodePtr* out);

  // --- Expressions (parse_expressions.cc) ---
  struct DepthGuard {
    int* d;
    ~DepthGuard() { --*d; }
  };
  Status expr(NodePtr* out);
  // `a or b or ...` and `a and b and ...`: word_chain over and_expr / not_expr operands.
  Status or_expr(NodePtr* out);
  Status and_expr(NodePtr* out);
  // A left-associative chain `operand (word operand)*`, each link a node of `kind` whose kids
  // are the chain so far and the next operand.
  Status word_chain(std::string_view word, NodeKind kind, Status (Parser::*operand)(NodePtr*),
                    NodePtr* out);
  Status not_expr(NodePtr* out);
  Status compare(NodePtr* out);
  // Binary operators of precedence `level` (0: + -, 1: ~, 2: * / // %, 3: **) and tighter.
  Status binary_level(int level, NodePtr* out);
  // A unary expression: signs, a primary, its postfixes; then, unless `filters` is false (an
  // operand of a sign), its filters and tests. So -x|abs is abs(-x), as jinja2 parses it.
  Status unary(NodePtr* out, bool filters = true);
  Status primary(NodePtr* out);
  // ( ... ): an empty tuple, a parenthesized expression or a tuple.
  Status parenthesized(int line, NodePtr* out);
  // [ ... ] and { k: v, ... }.
  Status list_display(int line, NodePtr* out);
  Status dict_display(int line, NodePtr* out);
  // The end of a tuple, list or dict: expects `closer`, then measures n and hands it out.
  Status close_display(std::string_view closer, NodePtr n, NodePtr* out);
  // . name, [ item or slice ], ( call ).
  Status postfix(NodePtr* a);
  Status subscript(int line, NodePtr* a);
  // ( positional, name=keyword ) appended to n's kids / kwargs.
  Status call_args(Node* n);
  Status one_filter(NodePtr* a);
  // | filter, is [not] test, and calls after them.
  Status filter_chain(NodePtr* a);
  Status test(NodePtr* a);
  bool test_argument_follows() const;

  std::vector<Token> t_;
  size_t at_ = 0;
  int depth_ = 0;
  int edepth_ = 0;
  int loops_ = 0;  // for-loop bodies around the current statement
};

}  // namespace mnemo::jinja
