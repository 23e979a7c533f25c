#include "base/utf8.h"

namespace mnemo::utf8 {
namespace {

// The sequence at s[pos] checked by RFC 3629, surrogates allowed or not (the one difference
// between STRICT and LENIENT): its code point and length, or false.
bool decode_at(std::string_view s, size_t pos, bool allow_surrogates, uint32_t* cp, size_t* len) {
  const auto c = static_cast<uint8_t>(s[pos]);
  const size_t n = lead_length(c);
  if (n == 0 || n > s.size() - pos) return false;
  if (n == 1) {
    *cp = c;
    *len = 1;
    return true;
  }
  uint32_t v = c & (0x7Fu >> n);  // the lead byte's payload: 5, 4 or 3 bits
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<uint8_t>(s[pos + k]);
    if (!is_continuation(b)) return false;
    v = (v << 6) | (b & 0x3Fu);
  }
  // The shortest form only (RFC 3629 §3: "overlong" sequences are invalid), and nothing past
  // U+10FFFF.
  static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < kMin[n] || v > kMaxCodePoint) return false;
  if (!allow_surrogates && v >= 0xD800 && v <= 0xDFFF) return false;
  *cp = v;
  *len = n;
  return true;
}

}  // namespace

bool decode_strict(std::string_view s, size_t* pos, uint32_t* cp) {
  uint32_t v = 0;
  size_t n = 0;
  if (!decode_at(s, *pos, /*allow_surrogates=*/false, &v, &n)) return false;
  *cp = v;
  *pos += n;
  return true;
}

bool decode_strict_all(std::string_view s, std::vector<uint32_t>* out) {
  out->clear();
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    if (!decode_strict(s, &i, &cp)) return false;
    out->push_back(cp);
  }
  return true;
}

uint32_t decode_lenient(std::string_view s, size_t* pos) {
  uint32_t v = 0;
  size_t n = 0;
  if (!decode_at(s, *pos, /*allow_surrogates=*/true, &v, &n)) {
    ++*pos;
    return kReplacementChar;
  }
  *pos += n;
  return v;
}

std::vector<uint32_t> decode_lenient_all(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(decode_lenient(s, &i));
  return out;
}

void append(uint32_t cp, std::string* out) {
  if (cp > kMaxCodePoint) cp = kReplacementChar;
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t incomplete_tail(std::string_view s) {
  for (size_t back = 1; back <= 4 && back <= s.size(); ++back) {
    const auto c = static_cast<uint8_t>(s[s.size() - back]);
    if (is_continuation(c)) continue;  // the lead byte is further back
    return lead_length(c) > back ? back : 0;
  }
  return 0;  // only continuation bytes: nothing to complete
}

size_t sequence_length(std::string_view s, size_t pos) {
  const size_t n = lead_length(static_cast<uint8_t>(s[pos]));
  if (n <= 1 || n > s.size() - pos) return 1;
  for (size_t k = 1; k < n; ++k) {
    if (!is_continuation(static_cast<uint8_t>(s[pos + k]))) return 1;
  }
  return n;
}

uint32_t sequence_value(std::string_view seq) {
  const auto c = static_cast<uint8_t>(seq[0]);
  if (seq.size() == 1) return c;
  uint32_t v = c & (0x7Fu >> seq.size());
  for (size_t k = 1; k < seq.size(); ++k) v = (v << 6) | (static_cast<uint8_t>(seq[k]) & 0x3Fu);
  return v;
}

}  // namespace mnemo::utf8
