// Constants of the recurrent part of a mnemo state file: the sections RecurrentMemory writes
// between HEAD and TOKN (HybridMemory: after its KV part). Byte layout, field by field:
// docs/formats/state_recurrent.md; the framing (section header, XXH3-64 checksum, HEAD, TOKN,
// DONE) is docs/formats/state.md / include/mnemo/state_format.h.
//
//   part   := RSPT block*
//   RSPT   := role:u32 n_seq_max:u32 checkpoint_interval:u32 n_checkpoints:u32 n_blocks:u32
//             n_layer:u32 n_layer x (il:u32 n_embd_r:u32 n_embd_s:u32)
//   block  := RSSQ RSDT                               one non-empty sequence
//   RSSQ   := seq_id:i32 pos_min:i32 pos_max:i32 n_ckpt:u32 n_ckpt x ckpt_pos:i32 (ascending)
//   RSDT   := (1 + n_ckpt) x state                    the live state, then each checkpoint
//   state  := for each RSPT layer: n_embd_r x f32 (conv state), n_embd_s x f32 (ssm state)
//
// All integers and floats little-endian (IEEE 754 binary32).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "mnemo/state_format.h"

namespace mnemo::state_format {

inline constexpr uint32_t kTagRsPart = make_tag('R', 'S', 'P', 'T');
inline constexpr uint32_t kTagRsSeq = make_tag('R', 'S', 'S', 'Q');
inline constexpr uint32_t kTagRsData = make_tag('R', 'S', 'D', 'T');

/// RSPT.role: which recurrent state of the memory the part belongs to (one so far).
inline constexpr uint32_t kRsRoleRecurrent = 0;

inline constexpr size_t kRsPartFixedBytes = 6 * 4;  // role .. n_layer
inline constexpr size_t kRsLayerBytes = 3 * 4;      // il n_embd_r n_embd_s
inline constexpr size_t kRsSeqFixedBytes = 4 * 4;   // seq_id pos_min pos_max n_ckpt

/// Limits a reader enforces before trusting a count.
inline constexpr uint32_t kMaxCheckpointsPerSeq = 4096;

static_assert(!is_ancillary(kTagRsPart) && !is_ancillary(kTagRsSeq) && !is_ancillary(kTagRsData));
static_assert(kTagRsPart == 0x54505352u, "tags are little-endian ASCII");
static_assert(kRsPartFixedBytes == 24 && kRsLayerBytes == 12 && kRsSeqFixedBytes == 16);
static_assert(std::endian::native == std::endian::little,
              "states store f32 as little-endian bytes; a big-endian host needs byte swaps");
static_assert(sizeof(float) == 4);

}  // namespace mnemo::state_format
