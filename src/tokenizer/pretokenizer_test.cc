// Pre-tokenizer splits (tokenizer/pretokenizer.h) and the byte-level alphabet, against
// hand-derived expectations from the regex semantics llama.cpp implements.
#include "tokenizer/pretokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/unicode.h"

namespace mnemo::tok {
namespace {

using Words = std::vector<std::string>;

Words split(PreTokenizer pre, const std::string& text) {
  auto p = Pretokenizer::create(pre);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.value()->split_raw(text);
}

TEST(ByteAlphabet, KnownSymbols) {
  EXPECT_EQ(byte_to_cpt('!'), uint32_t{'!'});
  EXPECT_EQ(byte_to_cpt('~'), uint32_t{'~'});
  EXPECT_EQ(byte_to_cpt(0x00), 0x100u);
  EXPECT_EQ(byte_to_cpt('\t'), 0x109u);  // 'ĉ'
  EXPECT_EQ(byte_to_cpt('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(byte_to_cpt(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(byte_to_cpt(0x7F), 0x121u);
  EXPECT_EQ(byte_to_cpt(0xA0), 0x142u);
  EXPECT_EQ(byte_to_cpt(0xAD), 0x143u);  // the last of the 68 remapped bytes
  EXPECT_EQ(byte_to_cpt(0xE9), 0xE9u);
  EXPECT_EQ(byte_to_symbol(' '), "\xC4\xA0");
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(cpt_to_byte(byte_to_cpt(static_cast<uint8_t>(b))), b);
  }
  EXPECT_EQ(cpt_to_byte(0x144), -1);
  EXPECT_EQ(cpt_to_byte(' '), -1);
}

TEST(Pretokenizer, ExpandWhitespace) {
  const std::string e = Pretokenizer::expand_whitespace(R"(a\s+(?!\S)[^\s\p{L}]\\s)");
  EXPECT_EQ(e.find("\\s"), e.rfind("\\s"));  // only the escaped backslash + 's' remains
  EXPECT_NE(e.find("[^\\t-\\r "), std::string::npos);
  EXPECT_NE(e.find("\\x{3000}"), std::string::npos);
}

TEST(Pretokenizer, Gpt2) {
  EXPECT_EQ(split(PreTokenizer::kGpt2, "Hello world"), (Words{"Hello", " world"}));
  EXPECT_EQ(split(PreTokenizer::kGpt2, "I'm they'll"), (Words{"I", "'m", " they", "'ll"}));
  // Contractions are case-sensitive for gpt2.
  EXPECT_EQ(split(PreTokenizer::kGpt2, "I'M"), (Words{"I", "'", "M"}));
  EXPECT_EQ(split(PreTokenizer::kGpt2, "a  b"), (Words{"a", " ", " b"}));
  EXPECT_EQ(split(PreTokenizer::kGpt2, "a \n b"), (Words{"a", " \n", " b"}));
  EXPECT_EQ(split(PreTokenizer::kGpt2, "a\nb"), (Words{"a", "\n", "b"}));
  EXPECT_EQ(split(PreTokenizer::kGpt2, "x  "), (Words{"x", "  "}));
  EXPECT_EQ(split(PreTokenizer::kGpt2, "12345 6"), (Words{"12345", " 6"}));
  EXPECT_EQ(split(PreTokenizer::kGpt2, "a...!? b"), (Words{"a", "...!?", " b"}));
  EXPECT_EQ(split(PreTokenizer::kGpt2, ""), Words{});
}

TEST(Pretokenizer, WhitespaceIsLlamaCppSet) {
  // U+0085 (NEL) is whitespace for llama.cpp: two of them before a letter split 1 + 1.
  EXPECT_EQ(split(PreTokenizer::kGpt2,
                  "a\xC2\x85\xC2\x85"
                  "b"),
            (Words{"a", "\xC2\x85", "\xC2\x85", "b"}));
  // U+001C is not (Python's str.isspace says it is; llama.cpp's table does not).
  EXPECT_EQ(split(PreTokenizer::kGpt2,
                  "a\x1C\x1C"
                  "b"),
            (Words{"a", "\x1C\x1C", "b"}));
  // U+3000 ideographic space is.
  EXPECT_EQ(split(PreTokenizer::kGpt2,
                  "a\xE3\x80\x80"
                  "b"),
            (Words{"a", "\xE3\x80\x80", "b"}));
}

TEST(Pretokenizer, InvalidUtf8BecomesReplacementChar) {
  EXPECT_EQ(split(PreTokenizer::kGpt2,
                  "a\xFF"
                  "b"),
            (Words{"a", "\xEF\xBF\xBD", "b"}));
  auto p = Pretokenizer::create(PreTokenizer::kGpt2);
  ASSERT_TRUE(p.ok());
  // Byte-level: U+FFFD's bytes EF BF BD -> 'ï', '¿', '½'.
  EXPECT_EQ(p.value()->split("\xFF"), (Words{"\xC3\xAF\xC2\xBF\xC2\xBD"}));
  // A surrogate (ED A0 80) is kept as llama.cpp keeps it, and is not a letter.
  EXPECT_EQ(split(PreTokenizer::kGpt2, "a\xED\xA0\x80"), (Words{"a", "\xED\xA0\x80"}));
}

TEST(Pretokenizer, Llama3) {
  EXPECT_EQ(split(PreTokenizer::kLlama3, "I'M 12345"), (Words{"I", "'M", " ", "123", "45"}));
  EXPECT_EQ(split(PreTokenizer::kLlama3, "a \n b"), (Words{"a", " \n", " b"}));
  EXPECT_EQ(split(PreTokenizer::kLlama3, "(hello) x"), (Words{"(hello", ")", " x"}));
  EXPECT_EQ(split(PreTokenizer::kLlama3, "x;\n\ny"), (Words{"x", ";\n\n", "y"}));
  EXPECT_EQ(split(PreTokenizer::kLlama3, "\tfoo"), (Words{"\tfoo"}));
  EXPECT_EQ(split(PreTokenizer::kLlama3, "a   b"), (Words{"a", "  ", " b"}));
}

TEST(Pretokenizer, Qwen2SplitsEveryDigit) {
  EXPECT_EQ(split(PreTokenizer::kQwen2, "x 2024!"), (Words{"x", " ", "2", "0", "2", "4", "!"}));
}

TEST(Pretokenizer, SmollmDigitsFirst) {
  // \p{N} first: every digit alone, then gpt2 on the rest (" 6" loses its digit to pass 1).
  EXPECT_EQ(split(PreTokenizer::kSmollm, "ab12 6"), (Words{"ab", "1", "2", " ", "6"}));
  EXPECT_EQ(split(PreTokenizer::kSmollm, "Hello world"), (Words{"Hello", " world"}));
}

TEST(Pretokenizer, DefaultCascade) {
  // Punctuation runs first, then gpt2, then digit runs, then triples of ASCII digits.
  EXPECT_EQ(split(PreTokenizer::kDefault, "ab,cd 12345"),
            (Words{"ab", ",", "cd", " ", "123", "45"}));
}

TEST(Pretokenizer, Qwen35KeepsMarksWithLetters) {
  // U+0301 COMBINING ACUTE ACCENT is \p{M}: Qwen 3.5 keeps it in the word; for Qwen 2 it is
  // not a letter, so it ends "Vie" and is the optional prefix of "t".
  EXPECT_EQ(split(PreTokenizer::kQwen35, "Vie\xCC\x81t Nam"), (Words{"Vie\xCC\x81t", " Nam"}));
  EXPECT_EQ(split(PreTokenizer::kQwen2, "Vie\xCC\x81t Nam"), (Words{"Vie", "\xCC\x81t", " Nam"}));
}

TEST(Pretokenizer, DeepseekCoderCascade) {
  // Newlines alone; letter runs (CJK too), punctuation runs, CJK runs, then single digits.
  EXPECT_EQ(split(PreTokenizer::kDeepseekCoder, "ab 12,\n\xE4\xB8\xAD\xE6\x96\x87 x"),
            (Words{"ab", " ", "1", "2", ",", "\n", "\xE4\xB8\xAD\xE6\x96\x87", " x"}));
}

TEST(Pretokenizer, FalconIsolatesPunctuationFirst) {
  EXPECT_EQ(split(PreTokenizer::kFalcon, "x`y 12345"), (Words{"x", "`", "y", " ", "123", "45"}));
}

TEST(Pretokenizer, Gemma4SplitsLinesFromNewlines) {
  EXPECT_EQ(split(PreTokenizer::kGemma4, "a b\n\nc \n"), (Words{"a b", "\n\n", "c ", "\n"}));
}

TEST(Pretokenizer, PatternsWithoutPropertiesSeeNonAsciiSpacesAsVerticalTab) {
  // DeepSeek LLM's punctuation pattern lists U+3000 IDEOGRAPHIC SPACE in a range; llama.cpp
  // matches property-free patterns with every non-ASCII space turned into U+000B, so U+3000 is
  // only the optional leading \s there: "!" and "\u3000!" are two words, not one run.
  EXPECT_EQ(split(PreTokenizer::kDeepseekLlm, "!\xE3\x80\x80!"), (Words{"!", "\xE3\x80\x80!"}));
  // The same text under a pattern with a property is matched as it is.
  auto p = Pretokenizer::create(std::vector<std::string>{R"([\p{P}\x{3000}]+)"});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p.value()->split_raw("!\xE3\x80\x80!"), (Words{"!\xE3\x80\x80!"}));
}

TEST(Pretokenizer, DollarIsTheEndOfThePieceOnly) {
  auto p = Pretokenizer::create(std::vector<std::string>{"a$"});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p.value()->split_raw("ba"), (Words{"b", "a"}));
  EXPECT_EQ(p.value()->split_raw("ba\n"), (Words{"ba\n"}));  // not before a final newline
}

TEST(Pretokenizer, CustomPatternErrors) {
  auto bad = Pretokenizer::create(std::vector<std::string>{"(unclosed"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("(unclosed"), std::string::npos);
}

TEST(Pretokenizer, LongInputsAreLinear) {
  auto p = Pretokenizer::create(PreTokenizer::kLlama3);
  ASSERT_TRUE(p.ok());
  // 2 MB of one word, of spaces, and of punctuation: must finish (JIT stack, no blow-up).
  for (const std::string& unit : {std::string("a"), std::string(" "), std::string("!")}) {
    std::string s;
    for (int i = 0; i < (2 << 20); ++i) s += unit;
    s += "x";
    const Words w = p.value()->split_raw(s);
    size_t total = 0;
    for (const auto& x : w) total += x.size();
    EXPECT_EQ(total, s.size());
  }
}

}  // namespace
}  // namespace mnemo::tok
