#include "tokenizer/unicode.h"

#include <array>

#include "base/utf8.h"

namespace mnemo::tok {

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
      utf8::append(to_cpt[b], &to_symbol[b]);
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
