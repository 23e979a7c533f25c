// Parsing expressions (parser.h), by precedence from the loosest: conditional, or, and, not,
// comparisons, binary operators, unary signs, primaries with their postfixes, filters and tests.
#include <fmt/format.h>

#include "jinja/parser.h"

namespace mnemo::jinja {
namespace {

// Whether `op` is a binary operator of precedence `level` (0 the loosest).
bool binary_op_at(int level, std::string_view op) {
  switch (level) {
    case 0:
      return op == "+" || op == "-";
    case 1:
      return op == "~";
    case 2:
      return op == "*" || op == "/" || op == "%" || op == "//";
    default:
      return op == "**";
  }
}

}  // namespace

Status Parser::expr(NodePtr* out) {
  if (++edepth_ > kMaxDepth) return error("an expression nested deeper than 256");
  DepthGuard g{&edepth_};
  const int line = peek().line;
  NodePtr a;
  MNEMO_RETURN_IF_ERROR(or_expr(&a));
  while (is_name("if")) {
    next();
    auto c = node(NodeKind::kCond, line);
    NodePtr cond;
    MNEMO_RETURN_IF_ERROR(or_expr(&cond));
    NodePtr other;
    if (is_name("else")) {
      next();
      MNEMO_RETURN_IF_ERROR(expr(&other));
    }
    c->kids.push_back(std::move(a));
    c->kids.push_back(std::move(cond));
    c->kids.push_back(std::move(other));
    MNEMO_RETURN_IF_ERROR(measure(c.get()));
    a = std::move(c);
  }
  *out = std::move(a);
  return Status();
}

Status Parser::word_chain(std::string_view word, NodeKind kind, Status (Parser::*operand)(NodePtr*),
                          NodePtr* out) {
  NodePtr a;
  MNEMO_RETURN_IF_ERROR((this->*operand)(&a));
  while (is_name(word)) {
    const int line = next().line;
    NodePtr b;
    MNEMO_RETURN_IF_ERROR((this->*operand)(&b));
    auto n = node(kind, line);
    n->kids.push_back(std::move(a));
    n->kids.push_back(std::move(b));
    MNEMO_RETURN_IF_ERROR(measure(n.get()));
    a = std::move(n);
  }
  *out = std::move(a);
  return Status();
}

Status Parser::or_expr(NodePtr* out) {
  return word_chain("or", NodeKind::kOr, &Parser::and_expr, out);
}

Status Parser::and_expr(NodePtr* out) {
  return word_chain("and", NodeKind::kAnd, &Parser::not_expr, out);
}

Status Parser::not_expr(NodePtr* out) {
  if (is_name("not")) {
    const int line = next().line;
    if (++edepth_ > kMaxDepth) return error("an expression nested deeper than 256");
    DepthGuard g{&edepth_};
    NodePtr a;
    MNEMO_RETURN_IF_ERROR(not_expr(&a));
    auto n = node(NodeKind::kUnary, line);
    n->name = "not";
    n->kids.push_back(std::move(a));
    MNEMO_RETURN_IF_ERROR(measure(n.get()));
    *out = std::move(n);
    return Status();
  }
  return compare(out);
}

Status Parser::compare(NodePtr* out) {
  const int line = peek().line;
  NodePtr a;
  MNEMO_RETURN_IF_ERROR(binary_level(0, &a));
  NodePtr n;
  while (true) {
    std::string op;
    if (peek().type == Tok::kOp &&
        (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == "<=" ||
         peek().text == ">" || peek().text == ">=")) {
      op = next().text;
    } else if (is_name("in")) {
      next();
      op = "in";
    } else if (is_name("not") && is_name("in", 1)) {
      next();
      next();
      op = "notin";
    } else {
      break;
    }
    if (n == nullptr) {
      n = node(NodeKind::kCompare, line);
      n->kids.push_back(std::move(a));
    }
    NodePtr b;
    MNEMO_RETURN_IF_ERROR(binary_level(0, &b));
    n->ops.push_back(op);
    n->kids.push_back(std::move(b));
    MNEMO_RETURN_IF_ERROR(measure(n.get()));
  }
  *out = n != nullptr ? std::move(n) : std::move(a);
  return Status();
}

Status Parser::binary_level(int level, NodePtr* out) {
  if (level == 4) return unary(out);
  NodePtr a;
  MNEMO_RETURN_IF_ERROR(binary_level(level + 1, &a));
  while (peek().type == Tok::kOp) {
    if (!binary_op_at(level, peek().text)) break;
    const Token op = next();
    NodePtr b;
    MNEMO_RETURN_IF_ERROR(binary_level(level + 1, &b));
    auto n = node(NodeKind::kBinary, op.line);
    n->name = op.text;
    n->kids.push_back(std::move(a));
    n->kids.push_back(std::move(b));
    MNEMO_RETURN_IF_ERROR(measure(n.get()));
    a = std::move(n);
  }
  *out = std::move(a);
  return Status();
}

// A unary expression: signs, a primary, its postfixes; then, unless `filters` is false (an
// operand of a sign), its filters and tests. So -x|abs is abs(-x), as jinja2 parses it.
Status Parser::unary(NodePtr* out, bool filters) {
  NodePtr a;
  if (is_op("-") || is_op("+")) {
    const Token op = next();
    if (++edepth_ > kMaxDepth) return error("an expression nested deeper than 256");
    DepthGuard g{&edepth_};
    NodePtr operand;
    MNEMO_RETURN_IF_ERROR(unary(&operand, /*filters=*/false));
    a = node(NodeKind::kUnary, op.line);
    a->name = op.text;
    a->kids.push_back(std::move(operand));
    MNEMO_RETURN_IF_ERROR(measure(a.get()));
  } else {
    MNEMO_RETURN_IF_ERROR(primary(&a));
  }
  MNEMO_RETURN_IF_ERROR(postfix(&a));
  if (filters) MNEMO_RETURN_IF_ERROR(filter_chain(&a));
  *out = std::move(a);
  return Status();
}

Status Parser::primary(NodePtr* out) {
  if (++edepth_ > kMaxDepth) return error("an expression nested deeper than 256");
  DepthGuard g{&edepth_};
  const Token& t = peek();
  const int line = t.line;
  if (t.type == Tok::kName) {
    const std::string name = next().text;
    if (name == "true" || name == "True" || name == "false" || name == "False") {
      auto n = node(NodeKind::kLiteral, line);
      n->value = Value::boolean(name[0] == 't' || name[0] == 'T');
      *out = std::move(n);
    } else if (name == "none" || name == "None") {
      auto n = node(NodeKind::kLiteral, line);
      n->value = Value::none();
      *out = std::move(n);
    } else {
      auto n = node(NodeKind::kName, line);
      n->name = name;
      *out = std::move(n);
    }
    return Status();
  }
  if (t.type == Tok::kString) {
    std::string s = next().text;
    while (peek().type == Tok::kString) s += next().text;  // adjacent strings join
    auto n = node(NodeKind::kLiteral, line);
    n->value = Value::string(std::move(s));
    *out = std::move(n);
    return Status();
  }
  if (t.type == Tok::kInt || t.type == Tok::kFloat) {
    const Token num = next();
    auto n = node(NodeKind::kLiteral, line);
    n->value = num.type == Tok::kInt ? Value::integer(num.i) : Value::real(num.f);
    *out = std::move(n);
    return Status();
  }
  if (is_op("(")) {
    next();
    return parenthesized(line, out);
  }
  if (is_op("[")) {
    next();
    return list_display(line, out);
  }
  if (is_op("{")) {
    next();
    return dict_display(line, out);
  }
  if (t.type == Tok::kEof || t.type == Tok::kBlockEnd || t.type == Tok::kVarEnd) {
    return error("an expression is missing");
  }
  return error(fmt::format("unexpected '{}'", t.text));
}

Status Parser::parenthesized(int line, NodePtr* out) {
  if (is_op(")")) {
    next();
    *out = node(NodeKind::kTuple, line);
    return Status();
  }
  NodePtr first;
  MNEMO_RETURN_IF_ERROR(expr(&first));
  if (is_op(")")) {
    next();
    *out = std::move(first);
    return Status();
  }
  auto tup = node(NodeKind::kTuple, line);
  tup->kids.push_back(std::move(first));
  while (is_op(",")) {
    next();
    if (is_op(")")) break;
    NodePtr e;
    MNEMO_RETURN_IF_ERROR(expr(&e));
    tup->kids.push_back(std::move(e));
  }
  return close_display(")", std::move(tup), out);
}

Status Parser::close_display(std::string_view closer, NodePtr n, NodePtr* out) {
  MNEMO_RETURN_IF_ERROR(expect_op(closer));
  MNEMO_RETURN_IF_ERROR(measure(n.get()));
  *out = std::move(n);
  return Status();
}

Status Parser::list_display(int line, NodePtr* out) {
  auto list = node(NodeKind::kList, line);
  while (!is_op("]")) {
    NodePtr e;
    MNEMO_RETURN_IF_ERROR(expr(&e));
    list->kids.push_back(std::move(e));
    if (!is_op(",")) break;
    next();
  }
  return close_display("]", std::move(list), out);
}

Status Parser::dict_display(int line, NodePtr* out) {
  auto dict = node(NodeKind::kDict, line);
  while (!is_op("}")) {
    NodePtr k, v;
    MNEMO_RETURN_IF_ERROR(expr(&k));
    MNEMO_RETURN_IF_ERROR(expect_op(":"));
    MNEMO_RETURN_IF_ERROR(expr(&v));
    dict->kids.push_back(std::move(k));
    dict->kids.push_back(std::move(v));
    if (!is_op(",")) break;
    next();
  }
  return close_display("}", std::move(dict), out);
}

// . name, [ item or slice ], ( call ).
Status Parser::postfix(NodePtr* a) {
  while (true) {
    const int line = peek().line;
    if (is_op(".")) {
      next();
      auto n = node(NodeKind::kAttr, line);
      if (peek().type == Tok::kName) {
        n->name = next().text;
      } else if (peek().type == Tok::kInt) {
        n->kind = NodeKind::kItem;
        auto idx = node(NodeKind::kLiteral, line);
        idx->value = Value::integer(next().i);
        n->kids.push_back(std::move(*a));
        n->kids.push_back(std::move(idx));
        MNEMO_RETURN_IF_ERROR(measure(n.get()));
        *a = std::move(n);
        continue;
      } else {
        return error("expected a name after '.'");
      }
      n->kids.push_back(std::move(*a));
      MNEMO_RETURN_IF_ERROR(measure(n.get()));
      *a = std::move(n);
    } else if (is_op("[")) {
      next();
      MNEMO_RETURN_IF_ERROR(subscript(line, a));
    } else if (is_op("(")) {
      auto n = node(NodeKind::kCall, line);
      n->kids.push_back(std::move(*a));
      MNEMO_RETURN_IF_ERROR(call_args(n.get()));
      MNEMO_RETURN_IF_ERROR(measure(n.get()));
      *a = std::move(n);
    } else {
      return Status();
    }
  }
}

// [ item ] or [ start : stop : step ] (each part optional) after "[", applied to *a.
Status Parser::subscript(int line, NodePtr* a) {
  NodePtr parts[3];
  bool slice = false;
  for (int k = 0; k < 3; ++k) {
    if (!is_op(":") && !is_op("]")) MNEMO_RETURN_IF_ERROR(expr(&parts[k]));
    if (k < 2 && is_op(":")) {
      next();
      slice = true;
    } else {
      break;
    }
  }
  MNEMO_RETURN_IF_ERROR(expect_op("]"));
  auto n = node(slice ? NodeKind::kSlice : NodeKind::kItem, line);
  n->kids.push_back(std::move(*a));
  if (!slice && parts[0] == nullptr) return error("an empty subscript []");
  n->kids.push_back(std::move(parts[0]));
  if (slice) {
    n->kids.push_back(std::move(parts[1]));
    n->kids.push_back(std::move(parts[2]));
  }
  MNEMO_RETURN_IF_ERROR(measure(n.get()));
  *a = std::move(n);
  return Status();
}

// ( positional, name=keyword ) appended to n's kids / kwargs.
Status Parser::call_args(Node* n) {
  MNEMO_RETURN_IF_ERROR(expect_op("("));
  while (!is_op(")")) {
    if (peek().type == Tok::kName && is_op("=", 1)) {
      const std::string name = next().text;
      next();
      NodePtr v;
      MNEMO_RETURN_IF_ERROR(expr(&v));
      n->kwargs.emplace_back(name, std::move(v));
    } else {
      if (!n->kwargs.empty()) return error("a positional argument follows a keyword argument");
      NodePtr v;
      MNEMO_RETURN_IF_ERROR(expr(&v));
      n->kids.push_back(std::move(v));
    }
    if (!is_op(",")) break;
    next();
  }
  return expect_op(")");
}

Status Parser::one_filter(NodePtr* a) {
  const int line = peek().line;
  auto n = node(NodeKind::kFilter, line);
  MNEMO_RETURN_IF_ERROR(expect_name(&n->name));
  while (is_op(".")) {  // dotted filter names
    next();
    std::string more;
    MNEMO_RETURN_IF_ERROR(expect_name(&more));
    n->name += "." + more;
  }
  n->kids.push_back(std::move(*a));
  if (is_op("(")) MNEMO_RETURN_IF_ERROR(call_args(n.get()));
  MNEMO_RETURN_IF_ERROR(measure(n.get()));
  *a = std::move(n);
  return Status();
}

// | filter, is [not] test, and calls after them.
Status Parser::filter_chain(NodePtr* a) {
  while (true) {
    if (is_op("|")) {
      next();
      MNEMO_RETURN_IF_ERROR(one_filter(a));
    } else if (is_name("is")) {
      MNEMO_RETURN_IF_ERROR(test(a));
    } else if (is_op("(")) {
      auto n = node(NodeKind::kCall, peek().line);
      n->kids.push_back(std::move(*a));
      MNEMO_RETURN_IF_ERROR(call_args(n.get()));
      MNEMO_RETURN_IF_ERROR(measure(n.get()));
      *a = std::move(n);
    } else {
      return Status();
    }
  }
}

// is [not] name, is name(args), is name arg: the test applied to *a.
Status Parser::test(NodePtr* a) {
  const int line = next().line;
  auto n = node(NodeKind::kTest, line);
  if (is_name("not")) {
    next();
    n->negate = true;
  }
  if (peek().type != Tok::kName) return error("expected a test name after 'is'");
  n->name = next().text;
  n->kids.push_back(std::move(*a));
  if (is_op("(")) {
    MNEMO_RETURN_IF_ERROR(call_args(n.get()));
  } else if (test_argument_follows()) {
    // `is divisibleby 3`, `is sameas none`: one argument without parentheses.
    NodePtr arg;
    MNEMO_RETURN_IF_ERROR(primary(&arg));
    MNEMO_RETURN_IF_ERROR(postfix(&arg));
    n->kids.push_back(std::move(arg));
  }
  MNEMO_RETURN_IF_ERROR(measure(n.get()));
  *a = std::move(n);
  return Status();
}

bool Parser::test_argument_follows() const {
  const Token& t = peek();
  if (t.type == Tok::kString || t.type == Tok::kInt || t.type == Tok::kFloat) return true;
  if (t.type == Tok::kOp) return t.text == "[" || t.text == "{";
  if (t.type != Tok::kName) return false;
  static constexpr std::string_view kStop[] = {"else", "or", "and", "is", "in", "not", "if"};
  for (std::string_view s : kStop) {
    if (t.text == s) return false;
  }
  return true;
}

}  // namespace mnemo::jinja
