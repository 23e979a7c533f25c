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
// Qwen 3.5: Qwen 2's with combining marks (\p{M}) kept with the letters they follow.
constexpr std::string_view kQwen35Pattern =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|)"
    R"(\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// DeepSeek LLM's cascade (its tokenizer.json's Split pre-tokenizers): newlines alone; runs of
// the letters of the cased scripts (Latin, Greek, Cyrillic, Armenian, Georgian, Cherokee, ...,
// listed range by range) with one optional leading space; runs of ASCII and fullwidth
// punctuation, curly quotes and the ideographic space / comma / full stop; trailing whitespace;
// runs of CJK ideographs, Hangul and the range U+0800-U+4E00 (as the tokenizer lists it); digit
// runs. DeepSeek Coder's: newlines alone, letter runs and punctuation runs (one optional leading
// space each), the same CJK runs, single digits.
constexpr std::string_view kDeepseekLlmLetters =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
    R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A})"
    R"(\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556})"
    R"(\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF})"
    R"(\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D})"
    R"(\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D})"
    R"(\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4})"
    R"(\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4})"
    R"(\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124})"
    R"(\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F})"
    R"(\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
    R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F})"
    R"(\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17})"
    R"(\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3})"
    R"(\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF})"
    R"(\x{1E900}-\x{1E943}]+)";
constexpr std::string_view kDeepseekLlmPunctuation =
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
constexpr std::string_view kCjkRuns = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

// Largest JIT stack one split() may use. Our patterns backtrack at most one character per
// repeat, so this is far more than any input needs.
constexpr size_t kJitStackMax = 8u << 20;

bool is_non_ascii_whitespace(uint32_t c) {
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// The subject PCRE2 sees for a text's code points: their valid UTF-8, with the ones UTF-8 cannot
// carry (surrogates, > U+10FFFF) shown as U+FFFD (like U+FFFD they are neither letter, number,
// space nor in any explicit range of our patterns, so every pattern treats them alike) and, when
// vt_whitespace, every non-ASCII whitespace as U+000B. byte_off[i] = start of code point i.
struct Subject {
  std::string text;
  std::vector<size_t> byte_off;

  // Code point index of a byte offset on a character boundary.
  size_t cpt_at(size_t byte) const {
    return static_cast<size_t>(std::lower_bound(byte_off.begin(), byte_off.end(), byte) -
                               byte_off.begin());
  }
};

Subject make_subject(const std::vector<uint32_t>& cpts, bool vt_whitespace) {
  Subject s;
  s.text.reserve(cpts.size() + 8);
  s.byte_off.resize(cpts.size() + 1);
  for (size_t i = 0; i < cpts.size(); ++i) {
    s.byte_off[i] = s.text.size();
    uint32_t c = cpts[i];
    if ((c >= 0xD800 && c <= 0xDFFF) || c > utf8::kMaxCodePoint) c = utf8::kReplacementChar;
    if (vt_whitespace && is_non_ascii_whitespace(c)) c = 0x0B;
    utf8::append(c, &s.text);
  }
  s.byte_off[cpts.size()] = s.text.size();
  return s;
}

}  // namespace

struct Pretokenizer::Regex {
  std::string pattern;  // as compiled (whitespace expanded)
  pcre2_code* code = nullptr;
  bool jit = false;
  bool vt_whitespace = false;  // matched against the subject with U+000B for non-ASCII spaces
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
    case PreTokenizer::kQwen35:
      return {std::string(kQwen35Pattern)};
    case PreTokenizer::kSmollm:
      return {R"(\p{N})", std::string(kGpt2Pattern)};
    case PreTokenizer::kDefault:
      return {R"([\p{P}\$\+<=>\^~\|]+)", std::string(kGpt2Pattern), R"(\p{N}+)", "[0-9][0-9][0-9]"};
    case PreTokenizer::kFalcon:
      return {R"([\p{P}\$\+<=>\^~\|`]+)", std::string(kGpt2Pattern), "[0-9][0-9][0-9]"};
    case PreTokenizer::kDeepseekLlm:
      return {R"([\r\n])",
              std::string(kDeepseekLlmLetters),
              std::string(kDeepseekLlmPunctuation),
              R"(\s+$)",
              std::string(kCjkRuns),
              R"(\p{N}+)"};
    case PreTokenizer::kDeepseekCoder:
      return {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", std::string(kCjkRuns), R"(\p{N})"};
    case PreTokenizer::kGemma4:
      return {R"([^\n]+|[\n]+)"};
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
    re->vt_whitespace = raw.find("\\p{") == std::string::npos;
    re->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(re->pattern.data()), re->pattern.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &err_off, nullptr);
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
  if (n == 0) return {0};
  const Subject plain = make_subject(*cpts, false);
  Subject vt;                           // made when a regex first needs it
  std::vector<size_t> bounds = {0, n};  // piece i is [bounds[i], bounds[i+1])

  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, kJitStackMax, nullptr);
  pcre2_match_context* mctx = pcre2_match_context_create(nullptr);
  if (jit_stack != nullptr && mctx != nullptr) pcre2_jit_stack_assign(mctx, nullptr, jit_stack);

  std::vector<size_t> next;
  for (const auto& re : regexes_) {
    if (re->vt_whitespace && vt.byte_off.empty()) vt = make_subject(*cpts, true);
    const Subject& sub = re->vt_whitespace ? vt : plain;
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re->code, nullptr);
    CHECK(md != nullptr) << "out of memory";
    next.clear();
    next.push_back(0);
    for (size_t k = 0; k + 1 < bounds.size(); ++k) {
      const size_t a = bounds[k];
      const size_t b = bounds[k + 1];
      const auto* piece = reinterpret_cast<PCRE2_SPTR>(sub.text.data() + sub.byte_off[a]);
      const size_t len = sub.byte_off[b] - sub.byte_off[a];
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
          pos = ms + utf8::lenient_length(static_cast<uint8_t>(sub.text[sub.byte_off[a] + ms]));
          continue;
        }
        if (ms > last) next.push_back(sub.cpt_at(sub.byte_off[a] + ms));
        next.push_back(sub.cpt_at(sub.byte_off[a] + me));
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
