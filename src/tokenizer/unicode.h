// UTF-8 and byte-level helpers shared by the tokenizers (module-private).
//
// The decoder follows llama.cpp's unicode_cpts_from_utf8 (as of llama.cpp 0.7.0, build 11669,
// checked byte by byte against it), because the BPE pre-tokenizer must see the same code points
// llama.cpp sees: a lead byte announces the length; a sequence that is truncated, has a bad
// continuation byte, is overlong (C0/C1, E0 80-9F, F0 80-8F) or exceeds U+10FFFF is not decoded:
// its first byte becomes U+FFFD and decoding goes on at the next byte. Surrogates (ED A0-BF) are
// decoded like any 3-byte sequence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mnemo::tok {

inline constexpr uint32_t kReplacementChar = 0xFFFD;
/// U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's escaped space, as UTF-8.
inline constexpr std::string_view kSpmSpace = "\xE2\x96\x81";

/// Length of the UTF-8 sequence a byte starts, from its top four bits: 1 for 0x00-0xBF (ASCII and
/// stray continuation bytes), 2 for 0xC0-0xDF, 3 for 0xE0-0xEF, 4 for 0xF0-0xFF.
size_t utf8_seq_len(uint8_t lead);

/// Code points of `s` (see the file comment for invalid input). Output length <= s.size().
std::vector<uint32_t> utf8_decode(std::string_view s);

/// Appends the UTF-8 encoding of `cpt` (1-4 bytes; surrogates are encoded as 3 bytes, as
/// llama.cpp does). A value above U+10FFFF appends U+FFFD.
void utf8_append(uint32_t cpt, std::string* out);

/// GPT-2's byte-level alphabet (the encoder's bytes_to_unicode): the printable bytes '!'..'~',
/// 0xA1..0xAC and 0xAE..0xFF stand for themselves; the other 68 bytes map, in increasing order,
/// to U+0100, U+0101, ... Returns the code point for `byte`.
uint32_t byte_to_cpt(uint8_t byte);
/// Inverse of byte_to_cpt: the byte for a code point of the alphabet, or -1.
int cpt_to_byte(uint32_t cpt);
/// UTF-8 of byte_to_cpt(byte) (1 or 2 bytes).
const std::string& byte_to_symbol(uint8_t byte);

/// Replaces every ' ' by kSpmSpace.
std::string escape_spm_spaces(std::string_view text);

}  // namespace mnemo::tok
