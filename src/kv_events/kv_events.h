// KV events for prefix-aware routers (`mnemo serve --kv-events tcp://HOST:PORT`): which blocks
// of tokens this replica holds, published as vLLM's KV-event stream so routers built for vLLM
// (llm-d, Dynamo, vLLM's router) can send a request to the replica holding its prefix.
//
// Wire format (vLLM's, docs/deployment.md "KV events"): a ZeroMQ PUB socket bound to the
// endpoint sends one three-part message per batch of events:
//   [topic (empty), sequence number (8-byte big-endian, from 0), payload]
// where the payload is msgpack: [ts (float64, seconds since the epoch), [event, ...]] and an event
// is an array whose first element names it:
//   ["BlockStored", [block_hash, ...], parent_block_hash | nil, [token_id, ...], block_size,
//    lora_id (nil), medium]
//   ["BlockRemoved", [block_hash, ...], medium]
//   ["AllBlocksCleared"]
// Block hashes are the prompt cache's chained hashes (src/prompt_cache/block_hash.h: XXH3-64 of
// the block's tokens seeded with the parent block's hash; the first block's parent is the
// model's root) as unsigned 64-bit integers. A BlockStored event covers a run of consecutive
// blocks: its token_ids are those blocks' tokens, block_size tokens each.
//
// What is tracked: "holders" (a slot's sequence, a prompt-cache entry), each holding the full
// blocks of a token list in one medium ("CPU": slots, the engine's live memory; "CPU_CACHE":
// entries of the prompt cache below the slots). A block is stored in a medium when its first
// holder there takes it and removed when its last holder lets go, so the stream describes exactly
// the set of blocks held. AllBlocksCleared is sent first, when the publisher starts: a restarted
// replica holds nothing it held before.
//
// Thread-safety: every public member may be called from any thread; the socket lives on the
// publisher's own thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "mnemo/status.h"

namespace mnemo::kv_events {

class KvEventPublisher {
 public:
  /// Binds a PUB socket to `endpoint` (a ZeroMQ endpoint such as tcp://127.0.0.1:5557 or
  /// tcp://*:5557) and publishes AllBlocksCleared. `root` is the model's chain root
  /// (model_root_hash). Errors: kInvalidArgument for an endpoint ZeroMQ refuses, kIOError when it
  /// cannot be bound (in use), both naming the endpoint.
  static Result<std::unique_ptr<KvEventPublisher>> open(const std::string& endpoint,
                                                        uint32_t block_tokens, uint64_t root);
  /// Sends what is queued, then closes the socket.
  ~KvEventPublisher();
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  /// `holder` now holds the full blocks of `tokens` in `medium` (replacing what it held there):
  /// blocks new to the medium are published as BlockStored, blocks it no longer holds and nobody
  /// else does as BlockRemoved. Cost: O(tokens / block_tokens) hashes.
  void hold(const std::string& holder, std::span<const int32_t> tokens, const std::string& medium);
  /// `holder` holds nothing any more (BlockRemoved for blocks nobody else holds).
  void release(const std::string& holder);

  /// Events published so far (tests).
  uint64_t n_events() const;

 private:
  struct Held {
    std::string medium;
    std::vector<uint64_t> blocks;  // chained hashes, in order
  };
  struct Batch;  // events to send as one message

  KvEventPublisher(uint32_t block_tokens, uint64_t root);
  void run(void* socket);
  // mu_ held: adds `holder`'s new blocks / drops its old ones, queuing the events.
  void update_locked(const std::string& holder, std::span<const int32_t> tokens,
                     const std::string& medium);
  void enqueue_locked(std::vector<uint8_t> event);

  uint32_t block_tokens_;
  uint64_t root_;
  void* zmq_context_ = nullptr;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<std::string, Held> holders_;
  std::map<std::pair<std::string, uint64_t>, uint32_t> refs_;  // (medium, hash) -> holders
  std::deque<std::vector<uint8_t>> queue_;                     // msgpack-encoded events
  uint64_t n_events_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace mnemo::kv_events
