// Byte-level BPE pre-tokenizer: text -> words, by a list of PCRE2 regexes (module-private).
//
// Semantics (llama.cpp's unicode_regex_split): the text is decoded to code points (base/utf8.h,
// LENIENT rule); the first regex splits the whole text into pieces, each match and each stretch
// between matches being one piece; every later regex splits each piece the same way, seeing only
// that piece (a lookahead cannot see past its end). Finally every piece is re-encoded as UTF-8
// and each of its bytes mapped to GPT-2's byte-level alphabet (tok::byte_to_symbol).
//
// The patterns are llama.cpp's for each pre-tokenizer type (src/llama-vocab.cpp,
// llm_tokenizer_bpe). '\s' is replaced by llama.cpp's whitespace set (Unicode White_Space: U+0009-
// U+000D, U+0020, U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000),
// which is what llama.cpp's own splitters match; \p{L}, \p{N}, \p{P}, \p{M} are PCRE2's Unicode
// properties (compiled with PCRE2_UTF | PCRE2_UCP, JIT when available); '$' is the end of the
// piece only (PCRE2_DOLLAR_ENDONLY, as in ECMAScript). A pattern without any \p{...} is matched
// with every non-ASCII whitespace of the text seen as U+000B: llama.cpp runs such patterns with
// std::wregex, whose \s knows only ASCII spaces, after that substitution, so that e.g. U+3000
// is a space there and not a member of an explicit range that holds it.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mnemo/status.h"
#include "mnemo/tokenizer.h"

namespace mnemo::tok {

/// The regexes of one pre-tokenizer type, compiled once. Immutable; split() is thread-safe.
class Pretokenizer {
 public:
  /// Compiles the patterns of `pre` (not kNone). Internal if PCRE2 rejects a pattern.
  static Result<std::unique_ptr<Pretokenizer>> create(PreTokenizer pre);
  /// Compiles explicit patterns (tests). InvalidArgument naming the pattern and PCRE2's message
  /// if one does not compile.
  static Result<std::unique_ptr<Pretokenizer>> create(const std::vector<std::string>& patterns);
  ~Pretokenizer();

  /// Words of `text`, byte-level encoded (see the file comment). Empty text -> no words.
  std::vector<std::string> split(std::string_view text) const;
  /// The same pieces without the byte-level mapping (UTF-8 of the decoded code points).
  std::vector<std::string> split_raw(std::string_view text) const;

  /// The patterns llama.cpp applies for `pre`, in order ('\s' not yet expanded).
  static std::vector<std::string> patterns_for(PreTokenizer pre);
  /// `pattern` with every \s / \S replaced by the explicit whitespace class (see file comment).
  static std::string expand_whitespace(std::string_view pattern);

 private:
  struct Regex;
  Pretokenizer() = default;
  // Piece boundaries, as code point offsets [0, ..., n_cpts], for the decoded text.
  std::vector<size_t> boundaries(std::string_view text, std::vector<uint32_t>* cpts) const;

  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace mnemo::tok
