// Parsing statements (parser.h): the token cursor, bodies of statements up to their end tag, and
// each statement: if, for, set (and set blocks), macro, break, continue, filter, with, generation.
#include <unordered_map>

#include <fmt/format.h>

#include "jinja/parser.h"

namespace mnemo::jinja {

Status Parser::run(Program* prog) {
  std::string end;
  MNEMO_RETURN_IF_ERROR(body({}, &prog->body, &end));
  return Status();
}

Status Parser::error(std::string_view what) const {
  return Status::invalid_argument(fmt::format("line {}: {}", peek().line, what));
}

Status Parser::expect_op(std::string_view op) {
  if (!is_op(op)) return error(fmt::format("expected '{}'", op));
  next();
  return Status();
}

Status Parser::expect_block_end() {
  if (peek().type != Tok::kBlockEnd) return error("expected the end of the tag '%}'");
  next();
  return Status();
}

Status Parser::expect_name(std::string* out) {
  if (peek().type != Tok::kName) return error("expected a name");
  *out = next().text;
  return Status();
}

NodePtr Parser::node(NodeKind k, int line) {
  auto n = std::make_unique<Node>();
  n->kind = k;
  n->line = line;
  return n;
}

// Sets n's height from its children; a tree taller than kMaxDepth is refused (long chains
// such as 1+1+...+1 or a|f|f|... grow it without nesting in the source).
Status Parser::measure(Node* n) const {
  int h = 0;
  for (const NodePtr& k : n->kids) {
    if (k != nullptr) h = std::max(h, k->height);
  }
  for (const auto& kw : n->kwargs) {
    if (kw.second != nullptr) h = std::max(h, kw.second->height);
  }
  n->height = h + 1;
  if (n->height > kMaxDepth) {
    return Status::invalid_argument(
        fmt::format("line {}: an expression nested deeper than {}", n->line, kMaxDepth));
  }
  return Status();
}

// Statements up to a block tag whose keyword is one of `ends` (its name is consumed and
// returned in *end; the rest of that tag is the caller's). Empty `ends`: up to the end.
Status Parser::body(std::initializer_list<std::string_view> ends, std::vector<NodePtr>* out,
                    std::string* end) {
  if (++depth_ > kMaxDepth) return error("blocks nested deeper than 256");
  while (true) {
    const Token& t = peek();
    if (t.type == Tok::kEof) {
      if (ends.size() == 0) break;
      return error(fmt::format("a block is never closed (expected {{% {} %}})", *ends.begin()));
    }
    if (t.type == Tok::kText) {
      auto n = node(NodeKind::kText, t.line);
      n->name = next().text;
      out->push_back(std::move(n));
    } else if (t.type == Tok::kVarBegin) {
      next();
      auto n = node(NodeKind::kOutput, t.line);
      NodePtr e;
      MNEMO_RETURN_IF_ERROR(expr(&e));
      n->kids.push_back(std::move(e));
      if (peek().type != Tok::kVarEnd) return error("expected the end of the tag '}}'");
      next();
      out->push_back(std::move(n));
    } else if (t.type == Tok::kBlockBegin) {
      next();
      if (peek().type != Tok::kName) return error("expected a statement name after '{%'");
      const std::string kw = peek().text;
      for (std::string_view e : ends) {
        if (kw == e) {
          next();
          *end = kw;
          --depth_;
          return Status();
        }
      }
      NodePtr n;
      MNEMO_RETURN_IF_ERROR(statement(&n));
      out->push_back(std::move(n));
    } else {
      return error("unexpected token");
    }
  }
  --depth_;
  return Status();
}

Status Parser::statement(NodePtr* out) {
  using Rule = Status (Parser::*)(const Token& kw, NodePtr* out);
  static const std::unordered_map<std::string_view, Rule> kRules = {
      {"if", &Parser::if_statement},
      {"for", &Parser::for_statement},
      {"set", &Parser::set_statement},
      {"macro", &Parser::macro_statement},
      {"break", &Parser::loop_control},
      {"continue", &Parser::loop_control},
      {"filter", &Parser::filter_statement},
      {"with", &Parser::with_statement},
      {"generation", &Parser::generation_statement},
  };
  const Token kw = next();
  const auto rule = kRules.find(kw.text);
  if (rule == kRules.end()) {
    return Status::invalid_argument(
        fmt::format("line {}: the statement '{}' is not supported", kw.line, kw.text));
  }
  return (this->*rule->second)(kw, out);
}

Status Parser::block_body(std::string_view end_keyword, Node* n) {
  n->bodies.resize(1);
  std::string end;
  MNEMO_RETURN_IF_ERROR(body({end_keyword}, &n->bodies[0], &end));
  return expect_block_end();
}

// {% if c %} ... {% elif c %} ... {% else %} ... {% endif %}
Status Parser::if_statement(const Token& kw, NodePtr* out) {
  auto n = node(NodeKind::kIf, kw.line);
  while (true) {
    NodePtr cond;
    MNEMO_RETURN_IF_ERROR(expr(&cond));
    MNEMO_RETURN_IF_ERROR(expect_block_end());
    n->kids.push_back(std::move(cond));
    n->bodies.emplace_back();
    std::string end;
    MNEMO_RETURN_IF_ERROR(body({"elif", "else", "endif"}, &n->bodies.back(), &end));
    if (end == "elif") continue;
    if (end == "else") {
      MNEMO_RETURN_IF_ERROR(expect_block_end());
      n->bodies.emplace_back();
      MNEMO_RETURN_IF_ERROR(body({"endif"}, &n->bodies.back(), &end));
    }
    MNEMO_RETURN_IF_ERROR(expect_block_end());
    break;
  }
  *out = std::move(n);
  return Status();
}

// {% for targets in iterable [if filter] %} ... [{% else %} ...] {% endfor %}
Status Parser::for_statement(const Token& kw, NodePtr* out) {
  auto n = node(NodeKind::kFor, kw.line);
  MNEMO_RETURN_IF_ERROR(target_list(&n->targets));
  if (!is_name("in")) return error("expected 'in' in a for loop");
  next();
  NodePtr iter;
  MNEMO_RETURN_IF_ERROR(or_expr(&iter));  // no conditional: `if` starts the loop filter
  n->kids.push_back(std::move(iter));
  if (is_name("if")) {
    next();
    NodePtr cond;
    MNEMO_RETURN_IF_ERROR(or_expr(&cond));
    n->kids.push_back(std::move(cond));
  }
  if (is_name("recursive")) return error("recursive loops are not supported");
  MNEMO_RETURN_IF_ERROR(expect_block_end());
  n->bodies.resize(2);
  std::string end;
  ++loops_;
  Status st = body({"else", "endfor"}, &n->bodies[0], &end);
  --loops_;
  MNEMO_RETURN_IF_ERROR(st);
  if (end == "else") {
    MNEMO_RETURN_IF_ERROR(expect_block_end());
    MNEMO_RETURN_IF_ERROR(body({"endfor"}, &n->bodies[1], &end));
  }
  MNEMO_RETURN_IF_ERROR(expect_block_end());
  *out = std::move(n);
  return Status();
}

// {% set ns.attr = e %}, {% set a, b = e %}, or a set block {% set x [| filters] %}...{% endset %}
Status Parser::set_statement(const Token& kw, NodePtr* out) {
  const int line = kw.line;
  std::string first;
  MNEMO_RETURN_IF_ERROR(expect_name(&first));
  if (is_op(".")) {
    next();
    auto n = node(NodeKind::kSet, line);
    n->targets.push_back(first);
    MNEMO_RETURN_IF_ERROR(expect_name(&n->attr));
    MNEMO_RETURN_IF_ERROR(expect_op("="));
    NodePtr v;
    MNEMO_RETURN_IF_ERROR(tuple_expr(&v));
    n->kids.push_back(std::move(v));
    MNEMO_RETURN_IF_ERROR(expect_block_end());
    *out = std::move(n);
    return Status();
  }
  std::vector<std::string> targets{first};
  while (is_op(",")) {
    next();
    std::string more;
    MNEMO_RETURN_IF_ERROR(expect_name(&more));
    targets.push_back(more);
  }
  if (is_op("=")) {
    next();
    auto n = node(NodeKind::kSet, line);
    n->targets = std::move(targets);
    NodePtr v;
    MNEMO_RETURN_IF_ERROR(tuple_expr(&v));
    n->kids.push_back(std::move(v));
    MNEMO_RETURN_IF_ERROR(expect_block_end());
    *out = std::move(n);
    return Status();
  }
  if (targets.size() != 1) return error("expected '=' in a set statement");
  auto n = node(NodeKind::kSetBlock, line);
  n->targets = std::move(targets);
  if (is_op("|")) MNEMO_RETURN_IF_ERROR(block_filters(line, n.get()));
  MNEMO_RETURN_IF_ERROR(expect_block_end());
  MNEMO_RETURN_IF_ERROR(block_body("endset", n.get()));
  *out = std::move(n);
  return Status();
}

// {% macro name(a, b=default) %} ... {% endmacro [name] %}
Status Parser::macro_statement(const Token& kw, NodePtr* out) {
  auto n = node(NodeKind::kMacro, kw.line);
  MNEMO_RETURN_IF_ERROR(expect_name(&n->name));
  MNEMO_RETURN_IF_ERROR(expect_op("("));
  while (!is_op(")")) {
    std::string param;
    MNEMO_RETURN_IF_ERROR(expect_name(&param));
    NodePtr def;
    if (is_op("=")) {
      next();
      MNEMO_RETURN_IF_ERROR(expr(&def));
    } else if (!n->kids.empty() && n->kids.back() != nullptr) {
      return error("a macro parameter without a default follows one with a default");
    }
    n->targets.push_back(param);
    n->kids.push_back(std::move(def));
    if (!is_op(",")) break;
    next();
  }
  MNEMO_RETURN_IF_ERROR(expect_op(")"));
  MNEMO_RETURN_IF_ERROR(expect_block_end());
  n->bodies.resize(1);
  std::string end;
  MNEMO_RETURN_IF_ERROR(body({"endmacro"}, &n->bodies[0], &end));
  if (peek().type == Tok::kName && peek().text == n->name) next();
  MNEMO_RETURN_IF_ERROR(expect_block_end());
  *out = std::move(n);
  return Status();
}

// {% break %}, {% continue %}: only inside a for loop's body.
Status Parser::loop_control(const Token& kw, NodePtr* out) {
  if (loops_ == 0) return error(fmt::format("'{}' outside a for loop", kw.text));
  *out = node(kw.text == "break" ? NodeKind::kBreak : NodeKind::kContinue, kw.line);
  return expect_block_end();
}

// {% filter name(args) | more %} ... {% endfilter %}
Status Parser::filter_statement(const Token& kw, NodePtr* out) {
  auto n = node(NodeKind::kFilterBlock, kw.line);
  MNEMO_RETURN_IF_ERROR(block_filters(kw.line, n.get()));
  MNEMO_RETURN_IF_ERROR(expect_block_end());
  MNEMO_RETURN_IF_ERROR(block_body("endfilter", n.get()));
  *out = std::move(n);
  return Status();
}

// {% with a = e, b = e %} ... {% endwith %}
Status Parser::with_statement(const Token& kw, NodePtr* out) {
  auto n = node(NodeKind::kWith, kw.line);
  while (peek().type != Tok::kBlockEnd) {
    std::string name;
    MNEMO_RETURN_IF_ERROR(expect_name(&name));
    MNEMO_RETURN_IF_ERROR(expect_op("="));
    NodePtr v;
    MNEMO_RETURN_IF_ERROR(expr(&v));
    n->targets.push_back(name);
    n->kids.push_back(std::move(v));
    if (!is_op(",")) break;
    next();
  }
  MNEMO_RETURN_IF_ERROR(expect_block_end());
  MNEMO_RETURN_IF_ERROR(block_body("endwith", n.get()));
  *out = std::move(n);
  return Status();
}

// {% generation %} ... {% endgeneration %} (transformers' marker of the assistant's text).
Status Parser::generation_statement(const Token& kw, NodePtr* out) {
  auto n = node(NodeKind::kGeneration, kw.line);
  MNEMO_RETURN_IF_ERROR(expect_block_end());
  MNEMO_RETURN_IF_ERROR(block_body("endgeneration", n.get()));
  *out = std::move(n);
  return Status();
}
// `| name(args) | name ...` of a filter block or set block, applied to a kBlockValue.
Status Parser::block_filters(int line, Node* n) {
  NodePtr v = node(NodeKind::kBlockValue, line);
  if (n->kind == NodeKind::kSetBlock) {
    MNEMO_RETURN_IF_ERROR(filter_chain(&v));
  } else {
    // {% filter name(args) | other %}: the first filter has no leading '|'.
    MNEMO_RETURN_IF_ERROR(one_filter(&v));
    MNEMO_RETURN_IF_ERROR(filter_chain(&v));
  }
  n->kids.push_back(std::move(v));
  return Status();
}

Status Parser::target_list(std::vector<std::string>* out) {
  const bool paren = is_op("(");
  if (paren) next();
  while (true) {
    std::string name;
    MNEMO_RETURN_IF_ERROR(expect_name(&name));
    out->push_back(name);
    if (!is_op(",")) break;
    next();
  }
  if (paren) MNEMO_RETURN_IF_ERROR(expect_op(")"));
  return Status();
}

// An expression, or a tuple of them without parentheses (`set a, b = 1, 2`).
Status Parser::tuple_expr(NodePtr* out) {
  const int line = peek().line;
  NodePtr first;
  MNEMO_RETURN_IF_ERROR(expr(&first));
  if (!is_op(",")) {
    *out = std::move(first);
    return Status();
  }
  auto t = node(NodeKind::kTuple, line);
  t->kids.push_back(std::move(first));
  while (is_op(",")) {
    next();
    if (peek().type == Tok::kBlockEnd) break;
    NodePtr e;
    MNEMO_RETURN_IF_ERROR(expr(&e));
    t->kids.push_back(std::move(e));
  }
  MNEMO_RETURN_IF_ERROR(measure(t.get()));
  *out = std::move(t);
  return Status();
}

Result<std::shared_ptr<const Program>> parse_program(std::string_view source,
                                                     const ParseOptions& options) {
  std::vector<Token> tokens;
  MNEMO_RETURN_IF_ERROR(lex(source, options, &tokens));
  auto prog = std::make_shared<Program>();
  Parser parser(std::move(tokens));
  MNEMO_RETURN_IF_ERROR(parser.run(prog.get()));
  return std::shared_ptr<const Program>(std::move(prog));
}

}  // namespace mnemo::jinja
