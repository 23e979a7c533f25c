// Constants of the mnemo state file format: the byte-level contract documented in
// docs/formats/state.md (read that first; this header only names its numbers).
//
// A state is a 16-byte file header followed by checksummed sections:
//
//   file    := header section*
//   header  := magic[8] version:u32 reserved:u32            (reserved = 0)
//   section := tag:u32 flags:u32 length:u64 payload[length] checksum:u64
//
// All integers are little-endian. checksum = XXH3-64 (seed 0) of the 16 section-header bytes
// followed by the payload. The sections of one state, in order:
//
//   HEAD                        scope, saved seq_id, memory kind, model fingerprint
//   <memory part>*              written by the memory (Memory::state_write); for KV caches:
//     KVPT                        one part (role kv / kv_base / kv_swa), writer geometry
//     (KVCL KVLY{n_layer})*       per stream block: cell records, then one section per layer
//   TOKN                        token list (may be empty)
//   DONE                        end marker (empty payload)
//
// Tags whose first byte is a lower-case ASCII letter are ancillary: a reader that does not know
// one skips it (after checking its checksum). Every other unknown tag is an error.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace mnemo::state_format {

/// The first 8 bytes of every state: 0x89 "MNST" CR LF 0x1A. The high byte catches 7-bit
/// transfers, CR LF catches line-ending conversion, 0x1A stops a DOS `type`.
inline constexpr std::array<uint8_t, 8> kMagic = {0x89, 'M', 'N', 'S', 'T', 0x0D, 0x0A, 0x1A};

/// The version this build writes, and the oldest it reads (compatibility policy in the doc:
/// every earlier version is read; a newer one is refused with kNotSupported).
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kMinVersion = 1;

inline constexpr size_t kFileHeaderBytes = 16;     // magic + version + reserved
inline constexpr size_t kSectionHeaderBytes = 16;  // tag + flags + length
inline constexpr size_t kChecksumBytes = 8;        // XXH3-64 after each payload

/// A tag is four ASCII bytes read as a little-endian u32 (so "HEAD" is stored as 'H' 'E' 'A' 'D').
constexpr uint32_t make_tag(char a, char b, char c, char d) {
  return uint32_t(uint8_t(a)) | uint32_t(uint8_t(b)) << 8 | uint32_t(uint8_t(c)) << 16 |
         uint32_t(uint8_t(d)) << 24;
}
/// True for ancillary tags (first byte 'a'..'z'): unknown ones may be skipped.
constexpr bool is_ancillary(uint32_t tag) {
  const uint8_t first = uint8_t(tag & 0xFF);
  return first >= 'a' && first <= 'z';
}

inline constexpr uint32_t kTagHead = make_tag('H', 'E', 'A', 'D');
inline constexpr uint32_t kTagKvPart = make_tag('K', 'V', 'P', 'T');
inline constexpr uint32_t kTagKvCells = make_tag('K', 'V', 'C', 'L');
inline constexpr uint32_t kTagKvLayer = make_tag('K', 'V', 'L', 'Y');
inline constexpr uint32_t kTagTokens = make_tag('T', 'O', 'K', 'N');
inline constexpr uint32_t kTagDone = make_tag('D', 'O', 'N', 'E');
// Tags starting with 'R' are reserved for recurrent-state parts (RecurrentMemory, HybridMemory).

/// HEAD.scope: what the state holds.
enum class Scope : uint32_t {
  kWhole = 1,     // every sequence of the memory
  kSequence = 2,  // the cells of one sequence
};

/// HEAD.memory_kind: which implementation wrote the parts (the reader must be the same kind).
enum class MemoryKindId : uint32_t {
  kNone = 0,       // never stored: a memory that cannot save its state (Memory's default)
  kAttention = 1,  // KvCache: one KVPT part, role kv
  kSwa = 2,        // SwaKvCache: parts kv_base then kv_swa
  kRecurrent = 3,  // RecurrentMemory (parts defined by its implementation, 'R' tags)
  kHybrid = 4,     // HybridMemory
};

/// KVPT.role: which KvCache of the memory the part belongs to.
enum class PartRole : uint32_t {
  kKv = 0,      // the KvCache of an attention-only model
  kKvBase = 1,  // SwaKvCache's full-attention child
  kKvSwa = 2,   // SwaKvCache's sliding-window child
};

// Fixed-size payload pieces (the variable parts are counted in the doc):
//   KVPT: role, unified, n_stream, n_ctx, swa_type, n_swa, n_blocks (7 x u32)
//   KVCL layer record: il, k_type, v_type, n_embd_k, n_embd_v (5 x u32), k_row, v_row (2 x u64)
//   KVCL cell record: pos, shift, n_seq (3 x u32), then n_seq x i32 seq_id
inline constexpr size_t kKvPartBytes = 7 * 4;
inline constexpr size_t kKvLayerInfoBytes = 5 * 4 + 2 * 8;
inline constexpr size_t kKvCellFixedBytes = 3 * 4;

/// Limits a reader enforces before allocating anything a file asks for.
inline constexpr uint32_t kMaxArchNameBytes = 256;
inline constexpr uint32_t kMaxLayers = 4096;
inline constexpr uint64_t kMaxTokens = uint64_t{1} << 28;

static_assert(kMagic.size() == 8);
static_assert(kFileHeaderBytes == kMagic.size() + 2 * sizeof(uint32_t));
static_assert(kSectionHeaderBytes == 2 * sizeof(uint32_t) + sizeof(uint64_t));
static_assert(kTagHead == 0x44414548u, "tags are little-endian ASCII");
static_assert(!is_ancillary(kTagHead) && is_ancillary(make_tag('n', 'o', 't', 'e')));
static_assert(kKvPartBytes == 28 && kKvLayerInfoBytes == 36 && kKvCellFixedBytes == 12);
static_assert(kMinVersion <= kVersion);

}  // namespace mnemo::state_format
