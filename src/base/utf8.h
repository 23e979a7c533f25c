// UTF-8 for the whole tree (RFC 3629): the lead-byte table, the two decoding rules, the encoder,
// and the byte-level helpers of callers that cut text at character boundaries.
//
// RFC 3629 §3: a character is 1 to 4 bytes. The lead byte's high bits announce the length
// (0xxxxxxx: 1, 110xxxxx: 2, 1110xxxx: 3, 11110xxx: 4); each byte after it is a continuation
// byte 10xxxxxx carrying 6 bits. A sequence is well formed only in its shortest form, outside
// the UTF-16 surrogates U+D800..U+DFFF, and at most U+10FFFF (the UTF8-octets grammar of §4, in
// which the bytes C0, C1 and F5..FF never appear).
//
// Two decoding rules; each caller names the one it means:
//   STRICT  (decode_strict, decode_strict_all): exactly RFC 3629. A bad lead byte, a truncated
//           sequence, a bad continuation byte, an overlong form, a surrogate or a value past
//           U+10FFFF is a failure the caller reports. Used where bad input is refused: GBNF
//           grammars and the text they match (grammar/), slot file names (server/slot_files.cc).
//   LENIENT (decode_lenient, decode_lenient_all): llama.cpp's unicode_cpts_from_utf8 (as of
//           llama.cpp 0.7.0, build 11669, checked byte by byte against it), because the
//           tokenizers must see the code points llama.cpp sees. Every byte that does not start a
//           well-formed sequence becomes U+FFFD and decoding goes on at the next byte; the one
//           thing it accepts beyond STRICT is a surrogate (ED A0..BF xx), decoded like any
//           3-byte sequence.
// The encoder (append) writes what either rule reads back (surrogates included, which only
// LENIENT accepts).
//
// Thread-safety: every function is pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mnemo::utf8 {

/// U+FFFD REPLACEMENT CHARACTER: what LENIENT decoding and the encoder put for what they cannot
/// carry.
inline constexpr uint32_t kReplacementChar = 0xFFFD;
/// The last code point (RFC 3629 §3: UTF-8 stops where UTF-16 does).
inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

/// The length a lead byte announces by its high bits (RFC 3629 §3): 1 for 00..7F, 2 for C0..DF,
/// 3 for E0..EF, 4 for F0..F7; 0 for a continuation byte 80..BF and for F8..FF, which start
/// nothing. Says nothing of whether the bytes after it complete a well-formed sequence.
constexpr size_t lead_length(uint8_t lead) {
  return lead < 0x80   ? 1
         : lead < 0xC0 ? 0
         : lead < 0xE0 ? 2
         : lead < 0xF0 ? 3
         : lead < 0xF8 ? 4
                       : 0;
}

/// Whether `b` is a continuation byte 10xxxxxx (RFC 3629 §3).
constexpr bool is_continuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// --- STRICT (RFC 3629) ------------------------------------------------------------------------

/// Decodes the character at s[*pos] (*pos < s.size()) by RFC 3629: true with its code point in
/// *cp and *pos advanced past it; false, with *pos and *cp untouched, when the bytes there are not
/// a well-formed sequence (a continuation byte or F8..FF as lead byte, a sequence cut by the end
/// of `s`, a bad continuation byte, an overlong form, a surrogate, a value past U+10FFFF).
bool decode_strict(std::string_view s, size_t* pos, uint32_t* cp);

/// The code points of all of `s` by RFC 3629 into *out (cleared first): false at the first
/// sequence decode_strict refuses (*out then holds the code points before it).
bool decode_strict_all(std::string_view s, std::vector<uint32_t>* out);

// --- LENIENT (llama.cpp) ----------------------------------------------------------------------

/// The code point at s[*pos] (*pos < s.size()), *pos advanced past it, by llama.cpp's rule: a
/// well-formed sequence or a surrogate gives its code point; any other byte gives U+FFFD and
/// *pos advances by that one byte. Never fails.
uint32_t decode_lenient(std::string_view s, size_t* pos);

/// The code points of all of `s` by the LENIENT rule (output length <= s.size()).
std::vector<uint32_t> decode_lenient_all(std::string_view s);

/// The length llama.cpp gives a character from its lead byte alone (its unicode_len_utf8, from
/// the top four bits): 1 for 00..BF (ASCII and stray continuation bytes), 2 for C0..DF, 3 for
/// E0..EF, 4 for F0..FF. For splitting text into characters as llama.cpp's SPM tokenizer does;
/// unlike decode_lenient it looks at no other byte.
constexpr size_t lenient_length(uint8_t lead) {
  return lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

// --- Encoding ---------------------------------------------------------------------------------

/// Appends the UTF-8 encoding of `cp` to *out (RFC 3629 §3): 1 to 4 bytes for cp <= U+10FFFF
/// (a surrogate as 3 bytes, which LENIENT reads back and STRICT refuses); U+FFFD for a value past
/// U+10FFFF.
void append(uint32_t cp, std::string* out);

// --- Byte-level helpers -----------------------------------------------------------------------

/// The number of bytes (0..3) at the end of `s` that begin a character not yet complete: a lead
/// byte followed by fewer continuation bytes than it announces. A stream that receives text in
/// pieces (a token may end inside a character) holds these back until the rest arrives. A tail of
/// continuation bytes with no lead byte before them, or a byte that starts nothing, is 0:
/// waiting cannot complete it.
size_t incomplete_tail(std::string_view s);

/// The length of the structurally complete sequence at s[pos] (pos < s.size()): the lead
/// byte's lead_length when that many bytes are there and all after the first are continuation
/// bytes; otherwise 1. The values are not checked (an overlong form or a surrogate counts as one
/// sequence). For code that must treat every byte string as a string of characters, where a
/// byte that starts no sequence stands for itself (jinja/'s Python str over bytes).
size_t sequence_length(std::string_view s, size_t pos);

/// The value the payload bits of `seq` spell, `seq` being one structurally complete sequence
/// (see sequence_length); a single byte gives its own value (00..FF). Nothing is checked, so an
/// overlong form, a surrogate and values up to 0x1FFFFF come out as written. STRICT and LENIENT
/// are the decoders; this is for code that has already split text with sequence_length.
uint32_t sequence_value(std::string_view seq);

}  // namespace mnemo::utf8
