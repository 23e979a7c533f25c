// Splitting a Jinja source into text and tags, and parsing the tags (include/mnemo/jinja.h).
//
// The whitespace rules are jinja2 3.1's lexer's (jinja2/lexer.py), with trim_blocks and
// lstrip_blocks as options:
//   - "{%-", "{{-", "{#-" remove all whitespace before the tag; "-%}", "-}}", "-#}" all after.
//   - trim_blocks: one "\n" right after "%}" or "#}" is dropped ("+%}" keeps it).
//   - lstrip_blocks: before "{%" or "{#" (not "{{", not "{%+"), the spaces and tabs between the
//     start of the line and the tag are dropped when nothing else stands there.
//   - "{% raw %}" keeps the newline after it even with trim_blocks.
// Expression precedence, loosest first (jinja2/parser.py): conditional `a if b else c`, or,
// and, not, comparisons (chained), + -, ~, * / // %, **, unary - +, then postfix (. [] ()) and
// filters / tests.
#include <charconv>
#include <cstring>

#include <fmt/format.h>

#include "jinja/internal.h"

namespace mnemo::jinja {

namespace {

constexpr int kMaxDepth = 256;

enum class Tok : uint8_t {
  kText,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInt,
  kFloat,
  kOp,
  kEof
};

struct Token {
  Tok type = Tok::kEof;
  std::string text;  // kText, kName, kString (decoded), kOp
  int64_t i = 0;
  double f = 0;
  int line = 1;
};

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// jinja2's lexer: "\r\n" and "\r" become "\n" (its newline_sequence), and one trailing "\n" is
// dropped (keep_trailing_newline=False).
std::string normalize_newlines(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
      out.push_back('\n');
    } else {
      out.push_back(s[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// The length of the UTF-8 whitespace character (Python's isspace) that ends `s`, or 0.
size_t trailing_space(std::string_view s) {
  for (size_t n = 1; n <= 3 && n <= s.size(); ++n) {
    const std::string_view cp = s.substr(s.size() - n);
    if ((static_cast<unsigned char>(cp[0]) & 0xc0) == 0x80) continue;
    return is_py_space(cp) ? n : 0;
  }
  return 0;
}

// The length of the UTF-8 whitespace character at the start of `s`, or 0.
size_t leading_space(std::string_view s) {
  if (s.empty()) return 0;
  const unsigned char c = s[0];
  const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
  if (n > s.size()) return 0;
  return is_py_space(s.substr(0, n)) ? n : 0;
}

// Python's str.rstrip() (what "{%-" does to the text before it).
std::string_view rstrip_ws(std::string_view s) {
  while (size_t n = trailing_space(s)) s.remove_suffix(n);
  return s;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A string literal's body decoded as Python's "unicode-escape" codec does: \n \t \r \\ \' \"
// \a \b \f \v, octal \NNN, \xHH, \uHHHH, \UHHHHHHHH; an unknown escape stays as written.
bool unescape(std::string_view body, std::string* out, std::string* error) {
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out->push_back(body[i]);
      continue;
    }
    const char e = body[++i];
    switch (e) {
      case 'n':
        out->push_back('\n');
        break;
      case 't':
        out->push_back('\t');
        break;
      case 'r':
        out->push_back('\r');
        break;
      case '\\':
        out->push_back('\\');
        break;
      case '\'':
        out->push_back('\'');
        break;
      case '"':
        out->push_back('"');
        break;
      case 'a':
        out->push_back('\a');
        break;
      case 'b':
        out->push_back('\b');
        break;
      case 'f':
        out->push_back('\f');
        break;
      case 'v':
        out->push_back('\v');
        break;
      case '\n':
        break;  // a backslash-newline continues the line
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t cp = 0;
        for (size_t k = 0; k < n; ++k) {
          const int h = i + 1 + k < body.size() ? hex_value(body[i + 1 + k]) : -1;
          if (h < 0) {
            *error = fmt::format("truncated \\{} escape in a string", e);
            return false;
          }
          cp = cp * 16 + static_cast<uint32_t>(h);
        }
        if (cp > 0x10ffff) {
          *error = "a \\U escape past U+10FFFF in a string";
          return false;
        }
        i += n;
        append_utf8(cp, out);
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k) {
            cp = cp * 8 + static_cast<uint32_t>(body[++i] - '0');
          }
          append_utf8(cp, out);
        } else {
          out->push_back('\\');
          out->push_back(e);
        }
    }
  }
  return true;
}

class Lexer {
 public:
  Lexer(std::string src, const ParseOptions& o) : src_(std::move(src)), opt_(o) {}

  Status run(std::vector<Token>* out) {
    out_ = out;
    bool line_starting = true;
    while (pos_ < src_.size()) {
      const size_t k = find_tag(pos_);
      if (k == std::string::npos) {
        text(src_.substr(pos_));
        break;
      }
      std::string_view before(src_.data() + pos_, k - pos_);
      const char kind = src_[k + 1];
      const char sign =
          k + 2 < src_.size() && (src_[k + 2] == '-' || src_[k + 2] == '+') ? src_[k + 2] : '\0';
      if (sign == '-') {
        before = rstrip_ws(before);
      } else if (sign != '+' && opt_.lstrip_blocks && kind != '{') {
        const size_t nl = before.rfind('\n');
        const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if (l_pos > 0 || line_starting) {
          bool blank = true;
          for (size_t j = l_pos; j < before.size(); ++j) {
            if (before[j] != ' ' && before[j] != '\t') blank = false;
          }
          if (blank) before = before.substr(0, l_pos);
        }
      }
      text(before);
      const int line_at = line_of(k);
      size_t p = k + 2 + (sign != '\0' ? 1 : 0);
      if (kind == '#') {
        const size_t end = src_.find("#}", p);
        if (end == std::string::npos) return error(line_at, "a comment {# is never closed");
        p = end + 2;
        p = after_end(p, end > k + 2 ? src_[end - 1] : '\0', /*trim=*/true);
      } else if (kind == '%' && raw_begin(p, &p)) {
        MNEMO_RETURN_IF_ERROR(raw_body(line_at, &p));
      } else {
        const bool block = kind == '%';
        push(block ? Tok::kBlockBegin : Tok::kVarBegin, line_at);
        MNEMO_RETURN_IF_ERROR(expression(block, &p));
      }
      line_starting = p > 0 && src_[p - 1] == '\n';
      pos_ = p;
    }
    push(Tok::kEof, line_of(src_.size()));
    return Status();
  }

 private:
  Status error(int line, std::string_view what) {
    return Status::invalid_argument(fmt::format("line {}: {}", line, what));
  }

  int line_of(size_t at) {
    while (line_pos_ < at && line_pos_ < src_.size()) {
      if (src_[line_pos_++] == '\n') ++line_;
    }
    return line_;
  }

  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string::npos;
  }

  void push(Tok t, int line, std::string text = {}) {
    Token tok;
    tok.type = t;
    tok.line = line;
    tok.text = std::move(text);
    out_->push_back(std::move(tok));
  }

  void text(std::string_view t) {
    if (!t.empty()) push(Tok::kText, line_of(pos_), std::string(t));
  }

  // Past a tag's end at `p` (just after "%}" / "#}" / "}}"): `sign` is the character before the
  // end ('-': skip all whitespace, '+': nothing, else one "\n" when `trim`).
  size_t after_end(size_t p, char sign, bool trim) const {
    if (sign == '-') {
      while (size_t n = leading_space(std::string_view(src_).substr(p))) p += n;
    } else if (sign != '+' && trim && opt_.trim_blocks && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    return p;
  }

  // "\s*raw\s*(-%}\s*|%})" at p; on a match *end is past it.
  bool raw_begin(size_t p, size_t* end) const {
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    if (p < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) {
      return false;
    }
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "-%}") == 0) {
      *end = after_end(p + 3, '-', false);
      return true;
    }
    if (src_.compare(p, 2, "%}") == 0) {
      *end = p + 2;
      return true;
    }
    return false;
  }

  // The text up to "{% endraw %}" (whitespace rules as before any block tag), then past it.
  Status raw_body(int line, size_t* p) {
    for (size_t k = src_.find("{%", *p); k != std::string::npos; k = src_.find("{%", k + 2)) {
      size_t q = k + 2;
      const char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : '\0';
      if (sign != '\0') ++q;
      while (q < src_.size() && is_space(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < src_.size() && is_space(src_[q])) ++q;
      char end_sign = '\0';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) end_sign = src_[q++];
      if (src_.compare(q, 2, "%}") != 0) continue;
      std::string_view body(src_.data() + *p, k - *p);
      if (sign == '-') {
        body = rstrip_ws(body);
      } else if (sign != '+' && opt_.lstrip_blocks) {
        const size_t nl = body.rfind('\n');
        const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if (l_pos > 0 || (*p > 0 && src_[*p - 1] == '\n')) {
          bool blank = true;
          for (size_t j = l_pos; j < body.size(); ++j) {
            if (body[j] != ' ' && body[j] != '\t') blank = false;
          }
          if (blank) body = body.substr(0, l_pos);
        }
      }
      if (!body.empty()) push(Tok::kText, line, std::string(body));
      *p = after_end(q + 2, end_sign, /*trim=*/true);
      return Status();
    }
    return error(line, "{% raw %} is never closed by {% endraw %}");
  }

  // The tokens of a tag's inside, up to and past its end ("%}" or "}}").
  Status expression(bool block, size_t* pp) {
    size_t p = *pp;
    int depth = 0;
    const char close = block ? '%' : '}';
    while (true) {
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (p >= src_.size()) {
        return error(line_of(*pp), block ? "a tag {% is never closed" : "a tag {{ is never closed");
      }
      const int line = line_of(p);
      const char c = src_[p];
      // The end of the tag, with its whitespace sign.
      if (depth == 0 || block) {
        for (char sign : {'-', '+', '\0'}) {
          const size_t q = p + (sign != '\0' ? 1 : 0);
          if ((sign == '\0' || c == sign) && q + 1 < src_.size() + 0 && src_[q] == close &&
              src_[q + 1] == '}' && (sign != '+' || block)) {
            push(block ? Tok::kBlockEnd : Tok::kVarEnd, line);
            *pp = after_end(q + 2, sign, block);
            return Status();
          }
        }
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = p;
        while (e < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) {
          ++e;
        }
        push(Tok::kName, line, src_.substr(p, e - p));
        p = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        MNEMO_RETURN_IF_ERROR(number(line, &p));
      } else if (c == '\'' || c == '"') {
        size_t e = p + 1;
        while (e < src_.size() && src_[e] != c) e += src_[e] == '\\' ? 2 : 1;
        if (e >= src_.size()) return error(line, "a string is never closed");
        std::string value, problem;
        if (!unescape(std::string_view(src_).substr(p + 1, e - p - 1), &value, &problem)) {
          return error(line, problem);
        }
        push(Tok::kString, line, std::move(value));
        p = e + 1;
      } else {
        static constexpr const char* kTwo[] = {"**", "//", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* two : kTwo) {
          if (src_.compare(p, 2, two) == 0) op = two;
        }
        if (op.empty()) {
          if (std::strchr("+-*/%~<>=()[]{},.:|", c) == nullptr) {
            return error(line, fmt::format("unexpected character '{}'", c));
          }
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        push(Tok::kOp, line, op);
        p += op.size();
      }
    }
  }

  Status number(int line, size_t* pp) {
    size_t p = *pp;
    std::string digits;
    auto run = [&] {
      while (p < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[p])) ||
                                 (src_[p] == '_' && p + 1 < src_.size() &&
                                  std::isdigit(static_cast<unsigned char>(src_[p + 1]))))) {
        if (src_[p] != '_') digits.push_back(src_[p]);
        ++p;
      }
    };
    run();
    bool is_float = false;
    if (p + 1 < src_.size() && src_[p] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
      is_float = true;
      digits.push_back('.');
      ++p;
      run();
    }
    if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
      size_t q = p + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
        is_float = true;
        digits.append(src_, p, q - p);
        p = q;
        run();
      }
    }
    Token t;
    t.line = line;
    if (is_float) {
      t.type = Tok::kFloat;
      t.f = std::strtod(digits.c_str(), nullptr);
    } else {
      t.type = Tok::kInt;
      auto r = std::from_chars(digits.data(), digits.data() + digits.size(), t.i);
      if (r.ec != std::errc()) return error(line, "an integer literal past 64 bits");
    }
    out_->push_back(std::move(t));
    *pp = p;
    return Status();
  }

  std::string src_;
  ParseOptions opt_;
  size_t pos_ = 0;
  size_t line_pos_ = 0;
  int line_ = 1;
  std::vector<Token>* out_ = nullptr;
};

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Status run(Program* prog) {
    std::string end;
    MNEMO_RETURN_IF_ERROR(body({}, &prog->body, &end));
    return Status();
  }

 private:
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
  Status error(std::string_view what) const {
    return Status::invalid_argument(fmt::format("line {}: {}", peek().line, what));
  }
  Status expect_op(std::string_view op) {
    if (!is_op(op)) return error(fmt::format("expected '{}'", op));
    next();
    return Status();
  }
  Status expect_block_end() {
    if (peek().type != Tok::kBlockEnd) return error("expected the end of the tag '%}'");
    next();
    return Status();
  }
  Status expect_name(std::string* out) {
    if (peek().type != Tok::kName) return error("expected a name");
    *out = next().text;
    return Status();
  }
  NodePtr node(NodeKind k, int line) {
    auto n = std::make_unique<Node>();
    n->kind = k;
    n->line = line;
    return n;
  }

  // Sets n's height from its children; a tree taller than kMaxDepth is refused (long chains
  // such as 1+1+...+1 or a|f|f|... grow it without nesting in the source).
  Status measure(Node* n) const {
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
  Status body(std::initializer_list<std::string_view> ends, std::vector<NodePtr>* out,
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

  Status statement(NodePtr* out) {
    const Token kw = next();
    const int line = kw.line;
    if (kw.text == "if") {
      auto n = node(NodeKind::kIf, line);
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
    if (kw.text == "for") {
      auto n = node(NodeKind::kFor, line);
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
    if (kw.text == "set") {
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
      n->bodies.resize(1);
      std::string end;
      MNEMO_RETURN_IF_ERROR(body({"endset"}, &n->bodies[0], &end));
      MNEMO_RETURN_IF_ERROR(expect_block_end());
      *out = std::move(n);
      return Status();
    }
    if (kw.text == "macro") {
      auto n = node(NodeKind::kMacro, line);
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
    if (kw.text == "break" || kw.text == "continue") {
      if (loops_ == 0) return error(fmt::format("'{}' outside a for loop", kw.text));
      *out = node(kw.text == "break" ? NodeKind::kBreak : NodeKind::kContinue, line);
      return expect_block_end();
    }
    if (kw.text == "filter") {
      auto n = node(NodeKind::kFilterBlock, line);
      MNEMO_RETURN_IF_ERROR(block_filters(line, n.get()));
      MNEMO_RETURN_IF_ERROR(expect_block_end());
      n->bodies.resize(1);
      std::string end;
      MNEMO_RETURN_IF_ERROR(body({"endfilter"}, &n->bodies[0], &end));
      MNEMO_RETURN_IF_ERROR(expect_block_end());
      *out = std::move(n);
      return Status();
    }
    if (kw.text == "with") {
      auto n = node(NodeKind::kWith, line);
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
      n->bodies.resize(1);
      std::string end;
      MNEMO_RETURN_IF_ERROR(body({"endwith"}, &n->bodies[0], &end));
      MNEMO_RETURN_IF_ERROR(expect_block_end());
      *out = std::move(n);
      return Status();
    }
    if (kw.text == "generation") {
      auto n = node(NodeKind::kGeneration, line);
      MNEMO_RETURN_IF_ERROR(expect_block_end());
      n->bodies.resize(1);
      std::string end;
      MNEMO_RETURN_IF_ERROR(body({"endgeneration"}, &n->bodies[0], &end));
      MNEMO_RETURN_IF_ERROR(expect_block_end());
      *out = std::move(n);
      return Status();
    }
    return Status::invalid_argument(
        fmt::format("line {}: the statement '{}' is not supported", line, kw.text));
  }

  // `| name(args) | name ...` of a filter block or set block, applied to a kBlockValue.
  Status block_filters(int line, Node* n) {
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

  Status target_list(std::vector<std::string>* out) {
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
  Status tuple_expr(NodePtr* out) {
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

  struct DepthGuard {
    int* d;
    ~DepthGuard() { --*d; }
  };

  Status expr(NodePtr* out) {
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

  Status or_expr(NodePtr* out) {
    NodePtr a;
    MNEMO_RETURN_IF_ERROR(and_expr(&a));
    while (is_name("or")) {
      const int line = next().line;
      NodePtr b;
      MNEMO_RETURN_IF_ERROR(and_expr(&b));
      auto n = node(NodeKind::kOr, line);
      n->kids.push_back(std::move(a));
      n->kids.push_back(std::move(b));
      MNEMO_RETURN_IF_ERROR(measure(n.get()));
      a = std::move(n);
    }
    *out = std::move(a);
    return Status();
  }

  Status and_expr(NodePtr* out) {
    NodePtr a;
    MNEMO_RETURN_IF_ERROR(not_expr(&a));
    while (is_name("and")) {
      const int line = next().line;
      NodePtr b;
      MNEMO_RETURN_IF_ERROR(not_expr(&b));
      auto n = node(NodeKind::kAnd, line);
      n->kids.push_back(std::move(a));
      n->kids.push_back(std::move(b));
      MNEMO_RETURN_IF_ERROR(measure(n.get()));
      a = std::move(n);
    }
    *out = std::move(a);
    return Status();
  }

  Status not_expr(NodePtr* out) {
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

  Status compare(NodePtr* out) {
    const int line = peek().line;
    NodePtr a;
    MNEMO_RETURN_IF_ERROR(math1(&a));
    NodePtr n;
    while (true) {
      std::string op;
      if (peek().type == Tok::kOp &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
           peek().text == "<=" || peek().text == ">" || peek().text == ">=")) {
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
      MNEMO_RETURN_IF_ERROR(math1(&b));
      n->ops.push_back(op);
      n->kids.push_back(std::move(b));
      MNEMO_RETURN_IF_ERROR(measure(n.get()));
    }
    *out = n != nullptr ? std::move(n) : std::move(a);
    return Status();
  }

  Status binary_level(int level, NodePtr* out) {
    static const std::vector<std::vector<std::string_view>> kOps = {
        {"+", "-"}, {"~"}, {"*", "/", "//", "%"}, {"**"}};
    if (level == 4) return unary(out);
    NodePtr a;
    MNEMO_RETURN_IF_ERROR(binary_level(level + 1, &a));
    while (peek().type == Tok::kOp) {
      bool match = false;
      for (std::string_view op : kOps[level]) match = match || peek().text == op;
      if (!match) break;
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
  Status math1(NodePtr* out) { return binary_level(0, out); }

  // A unary expression: signs, a primary, its postfixes; then, unless `filters` is false (an
  // operand of a sign), its filters and tests. So -x|abs is abs(-x), as jinja2 parses it.
  Status unary(NodePtr* out, bool filters = true) {
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

  Status primary(NodePtr* out) {
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
      MNEMO_RETURN_IF_ERROR(expect_op(")"));
      MNEMO_RETURN_IF_ERROR(measure(tup.get()));
      *out = std::move(tup);
      return Status();
    }
    if (is_op("[")) {
      next();
      auto list = node(NodeKind::kList, line);
      while (!is_op("]")) {
        NodePtr e;
        MNEMO_RETURN_IF_ERROR(expr(&e));
        list->kids.push_back(std::move(e));
        if (!is_op(",")) break;
        next();
      }
      MNEMO_RETURN_IF_ERROR(expect_op("]"));
      MNEMO_RETURN_IF_ERROR(measure(list.get()));
      *out = std::move(list);
      return Status();
    }
    if (is_op("{")) {
      next();
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
      MNEMO_RETURN_IF_ERROR(expect_op("}"));
      MNEMO_RETURN_IF_ERROR(measure(dict.get()));
      *out = std::move(dict);
      return Status();
    }
    if (t.type == Tok::kEof || t.type == Tok::kBlockEnd || t.type == Tok::kVarEnd) {
      return error("an expression is missing");
    }
    return error(fmt::format("unexpected '{}'", t.text));
  }

  // . name, [ item or slice ], ( call ).
  Status postfix(NodePtr* a) {
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

  // ( positional, name=keyword ) appended to n's kids / kwargs.
  Status call_args(Node* n) {
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

  Status one_filter(NodePtr* a) {
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
  Status filter_chain(NodePtr* a) {
    while (true) {
      if (is_op("|")) {
        next();
        MNEMO_RETURN_IF_ERROR(one_filter(a));
      } else if (is_name("is")) {
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

  bool test_argument_follows() const {
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

  std::vector<Token> t_;
  size_t at_ = 0;
  int depth_ = 0;
  int edepth_ = 0;
  int loops_ = 0;  // for-loop bodies around the current statement
};

}  // namespace

Result<std::shared_ptr<const Program>> parse_program(std::string_view source,
                                                     const ParseOptions& options) {
  std::vector<Token> tokens;
  Lexer lexer(normalize_newlines(source), options);
  MNEMO_RETURN_IF_ERROR(lexer.run(&tokens));
  auto prog = std::make_shared<Program>();
  Parser parser(std::move(tokens));
  MNEMO_RETURN_IF_ERROR(parser.run(prog.get()));
  return std::shared_ptr<const Program>(std::move(prog));
}

}  // namespace mnemo::jinja
