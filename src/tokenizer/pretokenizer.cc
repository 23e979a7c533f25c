#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "base/utf8.h"
#include "mnemo/check.h"
#include "mnemo/log.h"
#include "tokenizer/unicode.h"

namespace mnemo::tok {

namespace {

// llama.cpp's whitespace set (Unicode White_Space), as the inside of a PCRE2 character class.
constexpr std::string_view kWhitespaceClass =
    "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}"
    "\\x{3000}";

// The pre-tokenizer patterns of llama.cpp (src/llama-vocab.cpp, llm_tokenizer_bpe; facts about
// the GPT-2, Llama 3 and Qwen 2 tokenizers). For "gpt2" llama.cpp runs a hand-written splitter
// equivalent to the pattern plus a final "|\s+" (a lone whitespace before a non-space is its own
// word), which is what kGpt2Pattern spells out.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Pattern =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Pattern =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|)"
    R"(\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Largest JIT stack one split() may use. Our patterns backtrack at most one character per
// repeat, so this is far more than any input needs.
constexpr size_t kJitStackMax = 8u << 20;

}  // namespace

struct Pretokenizer::Regex {
  std::string pattern;  // as compiled (whitespace expanded)
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Regex() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

Pretokenizer::~Pretokenizer() = default;

std::vector<std::string> Pretokenizer::patterns_for(PreTokenizer pre) {
  switch (pre) {
    case PreTokenizer::kNone:
      return {};
    case PreTokenizer::kGpt2:
      return {std::string(kGpt2Pattern)};
    case PreTokenizer::kLlama3:
      return {std::string(kLlama3Pattern)};
    case PreTokenizer::kQwen2:
      return {std::string(kQwen2Pattern)};
    case PreTokenizer::kSmollm:
      return {R"(\p{N})", std::string(kGpt2Pattern)};
    case PreTokenizer::kDefault:
      return {R"([\p{P}\$\+<=>\^~\|]+)", std::string(kGpt2Pattern), R"(\p{N}+)", "[0-9][0-9][0-9]"};
  }
  return {};
}

std::string Pretokenizer::expand_whitespace(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      if (e == 's') {
        if (in_class) {
          out.append(kWhitespaceClass);
        } else {
          out.push_back('[');
          out.append(kWhitespaceClass);
          out.push_back(']');
        }
      } else if (e == 'S') {
        CHECK(!in_class) << "\\S inside a character class is not supported: " << pattern;
        out.append("[^");
        out.append(kWhitespaceClass);
        out.push_back(']');
      } else {
        out.push_back(c);
        out.push_back(e);
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  return out;
}

Result<std::unique_ptr<Pretokenizer>> Pretokenizer::create(PreTokenizer pre) {
  auto r = create(patterns_for(pre));
  if (!r.ok()) {
    return Status::internal("pre-tokenizer '" + std::string(pre_tokenizer_name(pre)) +
                            "': " + r.status().message());
  }
  return r;
}

Result<std::unique_ptr<Pretokenizer>> Pretokenizer::create(
    const std::vector<std::string>& patterns) {
  std::unique_ptr<Pretokenizer> p(new Pretokenizer());
  for (const std::string& raw : patterns) {
    auto re = std::make_unique<Regex>();
    re->pattern = expand_whitespace(raw);
    int err = 0;
    PCRE2_SIZE err_off = 0;
    re->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(re->pattern.data()), re->pattern.size(),
                             PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
    if (re->code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      return Status::invalid_argument("regex '" + raw + "' does not compile at offset " +
                                      std::to_string(err_off) + ": " +
                                      reinterpret_cast<const char*>(msg));
    }
    re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
    p->regexes_.push_back(std::move(re));
  }
  return p;
}

std::vector<size_t> Pretokenizer::boundaries(std::string_view text,
                                             std::vector<uint32_t>* cpts) const {
  *cpts = utf8::decode_lenient_all(text);
  const size_t n = cpts->size();
  // The subject PCRE2 sees: valid UTF-8 of the code points, with the ones UTF-8 cannot carry
  // (surrogates, > U+10FFFF) shown as U+FFFD; like U+FFFD they are neither letter, number nor
  // space, so every pattern treats them alike. byte_off[i] = start of code point i.
  std::string subject;
  subject.reserve(text.size() + 8);
  std::vector<size_t> byte_off(n + 1);
  for (size_t i = 0; i < n; ++i) {
    byte_off[i] = subject.size();
    uint32_t c = (*cpts)[i];
    if ((c >= 0xD800 && c <= 0xDFFF) || c > utf8::kMaxCodePoint) c = utf8::kReplacementChar;
    utf8::append(c, &subject);
  }
  byte_off[n] = subject.size();
  auto cpt_at = [&](size_t byte) {  // byte offset (on a character boundary) -> code point index
    return static_cast<size_t>(std::lower_bound(byte_off.begin(), byte_off.end(), byte) -
                               byte_off.begin());
  };

  std::vector<size_t> bounds = {0, n};  // piece i is [bounds[i], bounds[i+1])
  if (n == 0) return {0};

  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, kJitStackMax, nullptr);
  pcre2_match_context* mctx = pcre2_match_context_create(nullptr);
  if (jit_stack != nullptr && mctx != nullptr) pcre2_jit_stack_assign(mctx, nullptr, jit_stack);

  std::vector<size_t> next;
  for (const auto& re : regexes_) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re->code, nullptr);
    CHECK(md != nullptr) << "out of memory";
    next.clear();
    next.push_back(0);
    for (size_t k = 0; k + 1 < bounds.size(); ++k) {
      const size_t a = bounds[k];
      const size_t b = bounds[k + 1];
      const auto* piece = reinterpret_cast<PCRE2_SPTR>(subject.data() + byte_off[a]);
      const size_t len = byte_off[b] - byte_off[a];
      size_t pos = 0;   // where the next search starts (bytes into the piece)
      size_t last = 0;  // end of the last piece emitted
      while (pos < len) {
        int rc = pcre2_match(re->code, piece, len, pos, PCRE2_NO_UTF_CHECK, md, mctx);
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && re->jit) {
          rc = pcre2_match(re->code, piece, len, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, mctx);
        }
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          MNEMO_LOG(kWarn) << "pre-tokenizer: PCRE2 error " << rc << " on regex '" << re->pattern
                           << "'; the rest of a " << len << "-byte piece stays one word";
          break;
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t ms = ov[0];
        const size_t me = ov[1];
        if (me == ms) {  // empty match: none of our patterns has one; step over one character
          pos = ms + utf8::lenient_length(static_cast<uint8_t>(subject[byte_off[a] + ms]));
          continue;
        }
        if (ms > last) next.push_back(cpt_at(byte_off[a] + ms));
        next.push_back(cpt_at(byte_off[a] + me));
        last = me;
        pos = me;
      }
      if (last < len) next.push_back(b);
    }
    pcre2_match_data_free(md);
    bounds.swap(next);
  }
  if (mctx != nullptr) pcre2_match_context_free(mctx);
  if (jit_stack != nullptr) pcre2_jit_stack_free(jit_stack);
  return bounds;
}

std::vector<std::string> Pretokenizer::split_raw(std::string_view text) const {
  std::vector<uint32_t> cpts;
  const std::vector<size_t> b = boundaries(text, &cpts);
  std::vector<std::string> words;
  words.reserve(b.size());
  for (size_t k = 0; k + 1 < b.size(); ++k) {
    std::string w;
    for (size_t i = b[k]; i < b[k + 1]; ++i) utf8::append(cpts[i], &w);
    words.push_back(std::move(w));
  }
  return words;
}

std::vector<std::string> Pretokenizer::split(std::string_view text) const {
  std::vector<std::string> words = split_raw(text);
  std::string enc;
  for (std::string& w : words) {
    enc.clear();
    for (char c : w) enc.append(byte_to_symbol(static_cast<uint8_t>(c)));
    w.swap(enc);
  }
  return words;
}

}  // namespace mnemo::tok
