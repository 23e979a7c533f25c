// The lexer of Jinja sources (module-private): text and tags, the tokens inside tags.
//
// The whitespace rules are jinja2 3.1's lexer's (jinja2/lexer.py), with trim_blocks and
// lstrip_blocks as options:
//   - "{%-", "{{-", "{#-" remove all whitespace before the tag; "-%}", "-}}", "-#}" all after.
//   - trim_blocks: one "\n" right after "%}" or "#}" is dropped ("+%}" keeps it).
//   - lstrip_blocks: before "{%" or "{#" (not "{{", not "{%+"), the spaces and tabs between the
//     start of the line and the tag are dropped when nothing else stands there.
//   - "{% raw %}" keeps the newline after it even with trim_blocks.
// "\r\n" and "\r" become "\n", and one trailing "\n" is dropped (jinja2's defaults).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mnemo/jinja.h"

namespace mnemo::jinja {

/// The deepest nesting the parser accepts: blocks in blocks, and expression trees.
inline constexpr int kMaxDepth = 256;

/// A token's type: text outside tags, a tag's delimiters, or what stands inside a tag.
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

/// One token, with the line it starts on (1-based).
struct Token {
  Tok type = Tok::kEof;
  std::string text;  // kText, kName, kString (decoded), kOp
  int64_t i = 0;
  double f = 0;
  int line = 1;
};

/// The tokens of `source`, ending with one kEof. Errors: InvalidArgument "line N: <problem>" (an
/// unclosed tag, comment, string or raw block, an unexpected character, a bad escape, an integer
/// literal past 64 bits).
Status lex(std::string_view source, const ParseOptions& options, std::vector<Token>* out);

}  // namespace mnemo::jinja
