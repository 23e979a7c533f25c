// The msgpack encoding of KV events (kv_events.h publishes them), in the two wire forms that
// vLLM's `vllm/distributed/kv_events.py` has used. The format is the msgspec encoding of that
// file's structs (docs/deployment.md "KV events" has the tables):
//
// kVllm (the default; vLLM's structs without array_like, so msgspec writes maps):
//   batch  {"ts": float64, "events": [event, ...], "data_parallel_rank": 0}
//   event  a map whose first key is the tag "type" (the class name), then the struct's fields in
//          declaration order; a field whose value equals its default (None) is left out
//          (omit_defaults), a field without a default is always written (nil when None):
//     {"type": "BlockStored", "block_hashes": [u64...], "parent_block_hash": u64 | nil,
//      "token_ids": [i32...], "block_size": u32, "lora_id": nil, "medium": str,
//      "lora_name": nil, "group_idx": u32, "kv_cache_spec_kind": str
//      [, "kv_cache_spec_sliding_window": u32]}          (extra_keys: never written)
//     {"type": "BlockRemoved", "block_hashes": [u64...], "medium": str, "group_idx": u32}
//     {"type": "AllBlocksCleared"}
// kLegacy (older vLLM: array_like=True, positional; no groups):
//   batch  [ts, [event, ...]]
//   event  ["BlockStored", block_hashes, parent_block_hash | nil, token_ids, block_size,
//           lora_id (nil), medium]
//          ["BlockRemoved", block_hashes, medium]
//          ["AllBlocksCleared"]
// Integers are written in msgpack's shortest form (as msgspec writes them), so the kVllm bytes
// equal msgspec's encoding of the same structs (kv_events_test.cc pins one of each).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mnemo/status.h"

namespace mnemo::kv_events {

/// Which of vLLM's two wire forms (`--kv-events-format vllm | legacy`).
enum class EventFormat : uint8_t {
  kVllm,    // maps with the "type" tag, groups (today's vLLM)
  kLegacy,  // positional arrays, no groups (vLLM before its structs dropped array_like)
};

/// "vllm" or "legacy". Errors: kInvalidArgument naming the flag and the accepted names.
Result<EventFormat> parse_event_format(std::string_view name);

/// The KV-cache group a block event describes (vLLM: one group per kind of attention layer;
/// its KVCacheSpecKind names). Only the kVllm form writes it.
struct EventGroup {
  uint32_t idx = 0;                        // group_idx
  std::string kind = "full_attention";     // kv_cache_spec_kind
  std::optional<uint32_t> sliding_window;  // kv_cache_spec_sliding_window (nullopt: left out)
};

/// One BlockStored event: `hashes` are consecutive blocks of one chain, `tokens` their tokens
/// (block_size per block), `parent` the hash of the block before the first (nullopt for a
/// chain's first block).
struct BlockStoredEvent {
  std::span<const uint64_t> hashes;
  std::optional<uint64_t> parent;
  std::span<const int32_t> tokens;
  uint32_t block_size = 0;
  std::string_view medium;
  EventGroup group;
};

/// One encoded event (a msgpack value), written into a batch by encode_batch.
using EncodedEvent = std::vector<uint8_t>;

/// BlockStored of `e` (kLegacy drops e.group).
EncodedEvent encode_block_stored(EventFormat f, const BlockStoredEvent& e);
/// BlockRemoved of `hashes` in `medium`, group `group_idx` (kVllm only).
EncodedEvent encode_block_removed(EventFormat f, std::span<const uint64_t> hashes,
                                  std::string_view medium, uint32_t group_idx);
/// AllBlocksCleared: the subscriber forgets every block of this replica.
EncodedEvent encode_all_blocks_cleared(EventFormat f);
/// A batch: `ts` in seconds since the epoch, the events in order. kVllm also writes
/// data_parallel_rank (0: a replica is one rank).
std::vector<uint8_t> encode_batch(EventFormat f, double ts, std::span<const EncodedEvent> events);

}  // namespace mnemo::kv_events
