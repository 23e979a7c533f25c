// Byte-level helpers shared by the tokenizers (module-private): GPT-2's byte alphabet and
// SentencePiece's escaped space.
//
// UTF-8 itself is base/utf8.h's: the tokenizers decode by its LENIENT rule (llama.cpp's
// unicode_cpts_from_utf8), so that the BPE pre-tokenizer sees the code points llama.cpp sees.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mnemo::tok {

/// U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's escaped space, as UTF-8.
inline constexpr std::string_view kSpmSpace = "\xE2\x96\x81";

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
