#include "tokenizer/unicode.h"

#include <array>

namespace mnemo::tok {

size_t utf8_seq_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

namespace {
bool is_cont(uint8_t b) { return (b & 0xC0) == 0x80; }
}  // namespace

std::vector<uint32_t> utf8_decode(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t c = p[i];
    if (c < 0x80) {
      out.push_back(c);
      i += 1;
    } else if ((c & 0x40) == 0) {  // a stray continuation byte
      out.push_back(kReplacementChar);
      i += 1;
    } else if ((c & 0x20) == 0) {
      if (c >= 0xC2 && i + 1 < n && is_cont(p[i + 1])) {  // C0, C1: overlong
        out.push_back((uint32_t{c & 0x1Fu} << 6) | (p[i + 1] & 0x3Fu));
        i += 2;
      } else {
        out.push_back(kReplacementChar);
        i += 1;
      }
    } else if ((c & 0x10) == 0) {
      const uint32_t cpt =
          i + 2 < n && is_cont(p[i + 1]) && is_cont(p[i + 2])
              ? (uint32_t{c & 0x0Fu} << 12) | (uint32_t{p[i + 1] & 0x3Fu} << 6) | (p[i + 2] & 0x3Fu)
              : 0;
      if (cpt >= 0x800) {  // surrogates D800-DFFF pass, as in llama.cpp
        out.push_back(cpt);
        i += 3;
      } else {
        out.push_back(kReplacementChar);
        i += 1;
      }
    } else if ((c & 0x08) == 0) {
      const uint32_t cpt = i + 3 < n && is_cont(p[i + 1]) && is_cont(p[i + 2]) && is_cont(p[i + 3])
                               ? (uint32_t{c & 0x07u} << 18) | (uint32_t{p[i + 1] & 0x3Fu} << 12) |
                                     (uint32_t{p[i + 2] & 0x3Fu} << 6) | (p[i + 3] & 0x3Fu)
                               : 0;
      if (cpt >= 0x10000 && cpt <= 0x10FFFF) {
        out.push_back(cpt);
        i += 4;
      } else {
        out.push_back(kReplacementChar);
        i += 1;
      }
    } else {  // 0xF8..0xFF never start a sequence
      out.push_back(kReplacementChar);
      i += 1;
    }
  }
  return out;
}

void utf8_append(uint32_t cpt, std::string* out) {
  if (cpt <= 0x7F) {
    out->push_back(static_cast<char>(cpt));
  } else if (cpt <= 0x7FF) {
    out->push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt <= 0xFFFF) {
    out->push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt <= 0x10FFFF) {
    out->push_back(static_cast<char>(0xF0 | (cpt >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    utf8_append(kReplacementChar, out);
  }
}

namespace {

struct ByteAlphabet {
  std::array<uint32_t, 256> to_cpt{};
  std::array<std::string, 256> to_symbol;
  ByteAlphabet() {
    auto printable = [](int b) {
      return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      to_cpt[b] = printable(b) ? static_cast<uint32_t>(b) : next++;
      utf8_append(to_cpt[b], &to_symbol[b]);
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

}  // namespace

uint32_t byte_to_cpt(uint8_t byte) { return alphabet().to_cpt[byte]; }

const std::string& byte_to_symbol(uint8_t byte) { return alphabet().to_symbol[byte]; }

int cpt_to_byte(uint32_t cpt) {
  // Printable bytes map to themselves; the 68 others to U+0100..U+0143 in increasing order.
  if ((cpt >= 0x21 && cpt <= 0x7E) || (cpt >= 0xA1 && cpt <= 0xAC) ||
      (cpt >= 0xAE && cpt <= 0xFF)) {
    return static_cast<int>(cpt);
  }
  if (cpt >= 0x100 && cpt < 0x100 + 68) {
    static const std::array<uint8_t, 68> kInverse = [] {
      std::array<uint8_t, 68> inv{};
      for (int b = 0; b < 256; ++b) {
        const uint32_t c = byte_to_cpt(static_cast<uint8_t>(b));
        if (c >= 0x100) inv[c - 0x100] = static_cast<uint8_t>(b);
      }
      return inv;
    }();
    return kInverse[cpt - 0x100];
  }
  return -1;
}

std::string escape_spm_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  for (char c : text) {
    if (c == ' ') {
      out.append(kSpmSpace);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace mnemo::tok
