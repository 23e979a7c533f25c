// The lexer of Jinja sources (lexer.h): jinja2's whitespace rules, comments, raw blocks, and
// the tokens of tags (names, numbers, strings with Python's escapes, operators).
#include "jinja/lexer.h"

#include <cctype>
#include <charconv>
#include <cstring>

#include <fmt/format.h>

#include "base/utf8.h"
#include "jinja/py_str.h"

namespace mnemo::jinja {
namespace {

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
    if (utf8::is_continuation(static_cast<unsigned char>(cp[0]))) continue;
    return is_py_space(cp) ? n : 0;
  }
  return 0;
}

// The length of the UTF-8 whitespace character at the start of `s`, or 0.
size_t leading_space(std::string_view s) {
  if (s.empty()) return 0;
  const size_t n = utf8::lead_length(static_cast<unsigned char>(s[0]));
  if (n == 0 || n > s.size()) return 0;
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
        utf8::append(cp, out);
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k) {
            cp = cp * 8 + static_cast<uint32_t>(body[++i] - '0');
          }
          utf8::append(cp, out);
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

}  // namespace

Status lex(std::string_view source, const ParseOptions& options, std::vector<Token>* out) {
  Lexer lexer(normalize_newlines(source), options);
  return lexer.run(out);
}

}  // namespace mnemo::jinja
