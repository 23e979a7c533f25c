// base/utf8: STRICT decoding against RFC 3629 §4's byte grammar written out independently,
// LENIENT decoding against llama.cpp's results, the encoder, and the byte-level helpers.
#include "base/utf8.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace mnemo::utf8 {
namespace {

// The length of the UTF8-char of RFC 3629 §4's ABNF at s[pos], or 0 when none matches:
//   UTF8-1 = %x00-7F
//   UTF8-2 = %xC2-DF UTF8-tail
//   UTF8-3 = %xE0 %xA0-BF UTF8-tail / %xE1-EC 2( UTF8-tail ) /
//            %xED %x80-9F UTF8-tail / %xEE-EF 2( UTF8-tail )
//   UTF8-4 = %xF0 %x90-BF 2( UTF8-tail ) / %xF1-F3 3( UTF8-tail ) /
//            %xF4 %x80-8F 2( UTF8-tail )
size_t rfc3629_char(const std::string& s, size_t pos) {
  auto at = [&](size_t k) { return pos + k < s.size() ? static_cast<uint8_t>(s[pos + k]) : -1; };
  auto in = [](int b, int lo, int hi) { return b >= lo && b <= hi; };
  auto tail = [&](size_t k) { return in(at(k), 0x80, 0xBF); };
  const int c = at(0);
  if (in(c, 0x00, 0x7F)) return 1;
  if (in(c, 0xC2, 0xDF)) return tail(1) ? 2 : 0;
  if (c == 0xE0) return in(at(1), 0xA0, 0xBF) && tail(2) ? 3 : 0;
  if (in(c, 0xE1, 0xEC) || in(c, 0xEE, 0xEF)) return tail(1) && tail(2) ? 3 : 0;
  if (c == 0xED) return in(at(1), 0x80, 0x9F) && tail(2) ? 3 : 0;
  if (c == 0xF0) return in(at(1), 0x90, 0xBF) && tail(2) && tail(3) ? 4 : 0;
  if (in(c, 0xF1, 0xF3)) return tail(1) && tail(2) && tail(3) ? 4 : 0;
  if (c == 0xF4) return in(at(1), 0x80, 0x8F) && tail(2) && tail(3) ? 4 : 0;
  return 0;
}

bool rfc3629_valid(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = rfc3629_char(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

TEST(Utf8Test, StrictDecodesWellFormedText) {
  std::vector<uint32_t> cps;
  EXPECT_TRUE(decode_strict_all("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", &cps));
  EXPECT_EQ(cps, (std::vector<uint32_t>{'a', 0xE9, 0x20AC, 0x1F600}));
  EXPECT_TRUE(decode_strict_all("", &cps));
  EXPECT_TRUE(cps.empty());
  // The edges of each length, and the last code point.
  EXPECT_TRUE(
      decode_strict_all("\x7f\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf\xf0\x90\x80\x80"
                        "\xf4\x8f\xbf\xbf",
                        &cps));
  EXPECT_EQ(cps, (std::vector<uint32_t>{0x7F, 0x80, 0x7FF, 0x800, 0xFFFF, 0x10000, 0x10FFFF}));
}

TEST(Utf8Test, StrictRefusesWhatRfc3629Refuses) {
  std::vector<uint32_t> cps;
  // Truncated, overlong, a surrogate, past U+10FFFF, a stray continuation byte, FF.
  for (const char* bad :
       {"\xc3", "\xe2\x82", "\xc0\xaf", "\xe0\x9f\xbf", "\xf0\x8f\xbf\xbf", "\xed\xa0\x80",
        "\xf4\x90\x80\x80", "\x80", "\xff", "\xf8\x88\x80\x80\x80", "a\xc3(", "\xe2\x28\xa1"}) {
    EXPECT_FALSE(decode_strict_all(bad, &cps)) << bad;
  }
  // A failure leaves the position and the code point as they were.
  const std::string s = "a\xc3";
  size_t pos = 1;
  uint32_t cp = 7;
  EXPECT_FALSE(decode_strict(s, &pos, &cp));
  EXPECT_EQ(pos, 1u);
  EXPECT_EQ(cp, 7u);
  pos = 0;
  EXPECT_TRUE(decode_strict(s, &pos, &cp));
  EXPECT_EQ(pos, 1u);
  EXPECT_EQ(cp, uint32_t{'a'});
}

// Every string of 1 to 3 bytes, and random strings of 4 to 6, against the ABNF.
TEST(Utf8Test, StrictEqualsTheRfc3629Grammar) {
  std::vector<uint32_t> cps;
  std::string s;
  for (uint32_t len = 1; len <= 3; ++len) {
    s.assign(len, '\0');
    for (uint32_t x = 0; x < (1u << (8 * len)); ++x) {
      for (uint32_t k = 0; k < len; ++k) s[k] = static_cast<char>(x >> (8 * k));
      ASSERT_EQ(decode_strict_all(s, &cps), rfc3629_valid(s)) << testing::PrintToString(s);
    }
  }
  std::mt19937 rng(3629);
  // Bytes drawn mostly from the interesting ranges (leads, edges of the tails).
  const uint8_t kBytes[] = {0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF,
                            0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xEC, 0xED, 0xEE,
                            0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xF7, 0xF8, 0xFF};
  for (int trial = 0; trial < 300000; ++trial) {
    s.assign(4 + rng() % 3, '\0');
    for (char& c : s) c = static_cast<char>(kBytes[rng() % sizeof kBytes]);
    ASSERT_EQ(decode_strict_all(s, &cps), rfc3629_valid(s)) << testing::PrintToString(s);
  }
}

TEST(Utf8Test, EncoderRoundTripsEveryCodePoint) {
  std::vector<uint32_t> cps;
  for (uint32_t cp = 0; cp <= kMaxCodePoint; ++cp) {
    std::string s;
    append(cp, &s);
    ASSERT_EQ(s.size(), cp < 0x80 ? 1u : cp < 0x800 ? 2u : cp < 0x10000 ? 3u : 4u);
    const bool surrogate = cp >= 0xD800 && cp <= 0xDFFF;
    ASSERT_EQ(decode_strict_all(s, &cps), !surrogate) << cp;
    if (!surrogate) {
      ASSERT_EQ(cps, std::vector<uint32_t>{cp});
    }
    ASSERT_EQ(decode_lenient_all(s), std::vector<uint32_t>{cp});  // surrogates too
    ASSERT_EQ(sequence_length(s, 0), s.size());
    ASSERT_EQ(sequence_value(s), cp);
  }
  std::string s;
  append(0x110000, &s);
  EXPECT_EQ(s, "\xef\xbf\xbd");  // U+FFFD
  s.clear();
  append(0x1F999, &s);
  EXPECT_EQ(s, "\xF0\x9F\xA6\x99");
}

// llama.cpp's unicode_cpts_from_utf8 (the results were checked against it).
TEST(Utf8Test, LenientDecodesLikeLlamaCpp) {
  EXPECT_EQ(decode_lenient_all("a\xC3\xA9"), (std::vector<uint32_t>{'a', 0xE9}));
  // Stray continuation byte, truncated sequence, 0xFF: each one byte -> U+FFFD.
  EXPECT_EQ(decode_lenient_all("\x80"), (std::vector<uint32_t>{0xFFFD}));
  EXPECT_EQ(decode_lenient_all("\xE2\x82"), (std::vector<uint32_t>{0xFFFD, 0xFFFD}));
  EXPECT_EQ(decode_lenient_all("\xFFx"), (std::vector<uint32_t>{0xFFFD, 'x'}));
  EXPECT_EQ(decode_lenient_all("\xF0\x9F\xA6\x99"), (std::vector<uint32_t>{0x1F999}));
  // Overlong forms and values past U+10FFFF: every byte is U+FFFD (as llama.cpp).
  EXPECT_EQ(decode_lenient_all(std::string("\xC0\x80", 2)),
            (std::vector<uint32_t>{0xFFFD, 0xFFFD}));
  EXPECT_EQ(decode_lenient_all("\xE0\x9F\xBF"), (std::vector<uint32_t>{0xFFFD, 0xFFFD, 0xFFFD}));
  EXPECT_EQ(decode_lenient_all("\xF0\x8F\xBF\xBF").size(), 4u);
  EXPECT_EQ(decode_lenient_all("\xF4\x90\x80\x80"),
            (std::vector<uint32_t>{0xFFFD, 0xFFFD, 0xFFFD, 0xFFFD}));
  EXPECT_EQ(decode_lenient_all("\xE0\xA0\x80"), (std::vector<uint32_t>{0x800}));
  EXPECT_EQ(decode_lenient_all("\xF4\x8F\xBF\xBF"), (std::vector<uint32_t>{0x10FFFF}));
  // Surrogates are decoded.
  EXPECT_EQ(decode_lenient_all("\xED\xA0\x80"), (std::vector<uint32_t>{0xD800}));
  // A bad continuation byte: the lead byte alone is U+FFFD, the next byte is read afresh.
  EXPECT_EQ(decode_lenient_all("\xE2(\xA1"), (std::vector<uint32_t>{0xFFFD, '(', 0xFFFD}));
}

// LENIENT is STRICT with surrogates allowed and U+FFFD (one byte) for each failure.
TEST(Utf8Test, LenientIsStrictPlusSurrogatesAndReplacement) {
  std::vector<uint32_t> cps;
  std::string s(3, '\0');
  for (uint32_t x = 0; x < (1u << 24); x += 7) {  // a 1-in-7 sample of the 3-byte strings
    for (uint32_t k = 0; k < 3; ++k) s[k] = static_cast<char>(x >> (8 * k));
    std::vector<uint32_t> want;
    for (size_t i = 0; i < s.size();) {
      uint32_t cp = 0;
      const size_t at = i;
      if (decode_strict(s, &i, &cp)) {
        want.push_back(cp);
      } else if (i + 3 <= s.size() && static_cast<uint8_t>(s[i]) == 0xED &&
                 static_cast<uint8_t>(s[i + 1]) >= 0xA0 &&
                 is_continuation(static_cast<uint8_t>(s[i + 1])) &&
                 is_continuation(static_cast<uint8_t>(s[i + 2]))) {
        want.push_back(sequence_value(s.substr(i, 3)));
        i += 3;
      } else {
        want.push_back(kReplacementChar);
        i = at + 1;
      }
    }
    ASSERT_EQ(decode_lenient_all(s), want) << testing::PrintToString(s);
  }
}

TEST(Utf8Test, LeadAndLenientLengths) {
  EXPECT_EQ(lead_length(0x00), 1u);
  EXPECT_EQ(lead_length(0x7F), 1u);
  EXPECT_EQ(lead_length(0x80), 0u);
  EXPECT_EQ(lead_length(0xBF), 0u);
  EXPECT_EQ(lead_length(0xC0), 2u);
  EXPECT_EQ(lead_length(0xDF), 2u);
  EXPECT_EQ(lead_length(0xE0), 3u);
  EXPECT_EQ(lead_length(0xEF), 3u);
  EXPECT_EQ(lead_length(0xF0), 4u);
  EXPECT_EQ(lead_length(0xF7), 4u);
  EXPECT_EQ(lead_length(0xF8), 0u);
  EXPECT_EQ(lead_length(0xFF), 0u);
  // llama.cpp's unicode_len_utf8: the top four bits only.
  EXPECT_EQ(lenient_length(0x41), 1u);
  EXPECT_EQ(lenient_length(0x80), 1u);
  EXPECT_EQ(lenient_length(0xBF), 1u);
  EXPECT_EQ(lenient_length(0xC0), 2u);
  EXPECT_EQ(lenient_length(0xE5), 3u);
  EXPECT_EQ(lenient_length(0xF0), 4u);
  EXPECT_EQ(lenient_length(0xFF), 4u);
}

TEST(Utf8Test, IncompleteTail) {
  EXPECT_EQ(incomplete_tail(""), 0u);
  EXPECT_EQ(incomplete_tail("abc"), 0u);
  EXPECT_EQ(incomplete_tail("a\xc3"), 1u);
  EXPECT_EQ(incomplete_tail("a\xc3\xa9"), 0u);
  EXPECT_EQ(incomplete_tail("\xe2\x82"), 2u);
  EXPECT_EQ(incomplete_tail("\xf0\x9f\x98"), 3u);
  EXPECT_EQ(incomplete_tail("\xf0\x9f\x98\x80"), 0u);
  EXPECT_EQ(incomplete_tail("\x80\x80"), 0u);          // no lead byte: nothing to wait for
  EXPECT_EQ(incomplete_tail("\x80\x80\x80\x80"), 0u);  // idem
  EXPECT_EQ(incomplete_tail("x\xff"), 0u);             // starts nothing
}

TEST(Utf8Test, StructuralSequences) {
  // Complete by structure, whatever the value: an overlong form, a surrogate, past U+10FFFF.
  EXPECT_EQ(sequence_length("\xc0\x80", 0), 2u);
  EXPECT_EQ(sequence_value("\xc0\x80"), 0u);
  EXPECT_EQ(sequence_length("\xed\xa0\x80", 0), 3u);
  EXPECT_EQ(sequence_value("\xed\xa0\x80"), 0xD800u);
  EXPECT_EQ(sequence_length("\xf7\xbf\xbf\xbf", 0), 4u);
  EXPECT_EQ(sequence_value("\xf7\xbf\xbf\xbf"), 0x1FFFFFu);
  // Not complete: one byte, which stands for its own value.
  EXPECT_EQ(sequence_length("\xc3", 0), 1u);
  EXPECT_EQ(sequence_length("\xc3(", 0), 1u);
  EXPECT_EQ(sequence_length("\x80", 0), 1u);
  EXPECT_EQ(sequence_length("\xff\x80", 0), 1u);
  EXPECT_EQ(sequence_value("\xe9"), 0xE9u);
  EXPECT_EQ(sequence_length("a\xe2\x82\xac", 1), 3u);
}

}  // namespace
}  // namespace mnemo::utf8
