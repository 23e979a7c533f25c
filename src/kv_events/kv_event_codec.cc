// KV-event encoding (kv_event_codec.h) with msgpack-cxx's packer, which writes integers in their
// shortest form as msgspec does.
#include "kv_events/kv_event_codec.h"

#include <msgpack.hpp>

namespace mnemo::kv_events {

namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

EncodedEvent bytes_of(const msgpack::sbuffer& b) {
  return EncodedEvent(reinterpret_cast<const uint8_t*>(b.data()),
                      reinterpret_cast<const uint8_t*>(b.data()) + b.size());
}

void pack_str(Packer& p, std::string_view s) {
  p.pack_str(static_cast<uint32_t>(s.size()));
  p.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void pack_hashes(Packer& p, std::span<const uint64_t> hashes) {
  p.pack_array(static_cast<uint32_t>(hashes.size()));
  for (uint64_t h : hashes) p.pack_uint64(h);
}

void pack_parent(Packer& p, const std::optional<uint64_t>& parent) {
  if (parent) {
    p.pack_uint64(*parent);
  } else {
    p.pack_nil();
  }
}

void pack_tokens(Packer& p, std::span<const int32_t> tokens) {
  p.pack_array(static_cast<uint32_t>(tokens.size()));
  for (int32_t t : tokens) p.pack_int32(t);
}

}  // namespace

Result<EventFormat> parse_event_format(std::string_view name) {
  if (name == "vllm") return EventFormat::kVllm;
  if (name == "legacy") return EventFormat::kLegacy;
  return Status::invalid_argument("--kv-events-format: '" + std::string(name) +
                                  "' is not a format (vllm, legacy)");
}

EncodedEvent encode_block_stored(EventFormat f, const BlockStoredEvent& e) {
  msgpack::sbuffer b;
  Packer p(b);
  if (f == EventFormat::kLegacy) {
    p.pack_array(7);
    pack_str(p, "BlockStored");
    pack_hashes(p, e.hashes);
    pack_parent(p, e.parent);
    pack_tokens(p, e.tokens);
    p.pack_uint32(e.block_size);
    p.pack_nil();  // lora_id
    pack_str(p, e.medium);
    return bytes_of(b);
  }
  const bool window = e.group.sliding_window.has_value();
  p.pack_map(window ? 11 : 10);
  pack_str(p, "type");
  pack_str(p, "BlockStored");
  pack_str(p, "block_hashes");
  pack_hashes(p, e.hashes);
  pack_str(p, "parent_block_hash");
  pack_parent(p, e.parent);
  pack_str(p, "token_ids");
  pack_tokens(p, e.tokens);
  pack_str(p, "block_size");
  p.pack_uint32(e.block_size);
  pack_str(p, "lora_id");
  p.pack_nil();
  pack_str(p, "medium");
  pack_str(p, e.medium);
  pack_str(p, "lora_name");
  p.pack_nil();
  // extra_keys (default None) is left out.
  pack_str(p, "group_idx");
  p.pack_uint32(e.group.idx);
  pack_str(p, "kv_cache_spec_kind");
  pack_str(p, e.group.kind);
  if (window) {
    pack_str(p, "kv_cache_spec_sliding_window");
    p.pack_uint32(*e.group.sliding_window);
  }
  return bytes_of(b);
}

EncodedEvent encode_block_removed(EventFormat f, std::span<const uint64_t> hashes,
                                  std::string_view medium, uint32_t group_idx) {
  msgpack::sbuffer b;
  Packer p(b);
  if (f == EventFormat::kLegacy) {
    p.pack_array(3);
    pack_str(p, "BlockRemoved");
    pack_hashes(p, hashes);
    pack_str(p, medium);
    return bytes_of(b);
  }
  p.pack_map(4);
  pack_str(p, "type");
  pack_str(p, "BlockRemoved");
  pack_str(p, "block_hashes");
  pack_hashes(p, hashes);
  pack_str(p, "medium");
  pack_str(p, medium);
  pack_str(p, "group_idx");
  p.pack_uint32(group_idx);
  return bytes_of(b);
}

EncodedEvent encode_all_blocks_cleared(EventFormat f) {
  msgpack::sbuffer b;
  Packer p(b);
  if (f == EventFormat::kLegacy) {
    p.pack_array(1);
  } else {
    p.pack_map(1);
    pack_str(p, "type");
  }
  pack_str(p, "AllBlocksCleared");
  return bytes_of(b);
}

std::vector<uint8_t> encode_batch(EventFormat f, double ts, std::span<const EncodedEvent> events) {
  msgpack::sbuffer b;
  Packer p(b);
  const bool map = f == EventFormat::kVllm;
  if (map) {
    p.pack_map(3);
    pack_str(p, "ts");
  } else {
    p.pack_array(2);
  }
  p.pack_double(ts);
  if (map) pack_str(p, "events");
  p.pack_array(static_cast<uint32_t>(events.size()));
  for (const EncodedEvent& e : events) b.write(reinterpret_cast<const char*>(e.data()), e.size());
  if (map) {
    pack_str(p, "data_parallel_rank");
    p.pack_uint32(0);
  }
  return bytes_of(b);
}

}  // namespace mnemo::kv_events
