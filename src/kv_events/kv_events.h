// KV events for prefix-aware routers (`mnemo serve --kv-events tcp://HOST:PORT`): which blocks
// of tokens this replica holds, published as vLLM's KV-event stream so routers built for vLLM
// (llm-d, Dynamo, vLLM's router) can send a request to the replica holding its prefix.
//
// Transport (vLLM's ZmqEventPublisher; docs/deployment.md "KV events"): a ZeroMQ PUB socket bound
// to the endpoint sends one three-part message per batch of events:
//   [topic (empty), sequence number (8-byte big-endian, from 0), payload]
// The payload is a batch in the form kv_event_codec.h describes (today's vLLM maps by default,
// the older positional arrays with EventFormat::kLegacy). With a replay endpoint, a ROUTER socket
// answers a request [start sequence number (8-byte big-endian)] (after the client's identity and
// an empty delimiter frame, as a REQ socket sends it) with every buffered batch from that number
// on, one message [seq, payload] each, then the end marker [-1 (8 bytes, all 0xff), empty]. The
// buffer keeps the last replay_batches batches (and at most replay_bytes of them).
//
// Block hashes are the prompt cache's chained hashes (src/prompt_cache/block_hash.h: XXH3-64 of
// the block's tokens seeded with the parent block's hash; the first block's parent is the
// model's root) as unsigned 64-bit integers. A BlockStored event covers a run of consecutive
// blocks: its token_ids are those blocks' tokens, block_size tokens each.
//
// What is tracked: "holders" (a slot's sequence, a prompt-cache entry), each holding the full
// blocks of a token list in one medium ("CPU": slots, the engine's live memory; "CPU_CACHE":
// entries of the prompt cache below the slots). A block is stored in a medium (and group) when
// its first holder there takes it and removed when its last holder lets go, so the stream
// describes exactly the set of blocks held. AllBlocksCleared is sent first, when the publisher
// starts: a restarted replica holds nothing it held before.
//
// Groups (kVllm form), as vLLM's hybrid KV cache describes its layers: group 0 ("full_attention")
// holds every full block of a holder. A model with sliding-window layers (Gemma 3) adds group 1
// ("sliding_window" with kv_cache_spec_sliding_window = n_swa, or "chunked_local_attention"):
// only the blocks whose every token the local layers still hold (a block starting at or after
// the holder's `first_pos`). A router that applies vLLM's rule (a prefix of L tokens is a hit when
// group 0 holds its blocks and group 1 the blocks covering the window before L) then credits only
// prefixes the replica can continue (SwaKvCache::plan_truncate). The kLegacy form has no groups:
// for such a model a holder's blocks are published only when every prefix of them can be
// continued (the local layers still hold the start of the sequence), else none.
//
// Thread-safety: every public member may be called from any thread; the sockets live on the
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
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kv_events/kv_event_codec.h"
#include "mnemo/batch.h"
#include "mnemo/status.h"
#include "mnemo/swa.h"

namespace mnemo::kv_events {

/// How a publisher is set up (`mnemo serve --kv-events / --kv-events-replay /
/// --kv-events-format`, and the model).
struct PublisherParams {
  std::string endpoint;         // the PUB socket, e.g. tcp://127.0.0.1:5557 or tcp://*:5557
  std::string replay_endpoint;  // the ROUTER socket for replay ("" = none)
  EventFormat format = EventFormat::kVllm;
  uint32_t block_tokens = 64;  // tokens per block, >= 1
  uint64_t root = 0;           // the model's chain root (model_root_hash)
  /// The model's sliding-window layers (kNone / 0: none, or they keep every position).
  SwaType swa_type = SwaType::kNone;
  uint32_t n_swa = 0;
  size_t replay_batches = 10000;           // batches kept for replay
  size_t replay_bytes = size_t{64} << 20;  // and at most this many payload bytes of them
};

/// `first_pos` of a holder whose local layers' first position is not known: the publisher
/// assumes only the window of the holder's next token is held (what a window never evicts).
inline constexpr Pos kFirstPosUnknown = -1;

class KvEventPublisher {
 public:
  /// Binds the PUB socket (and the ROUTER socket when params.replay_endpoint is set) and
  /// publishes AllBlocksCleared. Errors: kInvalidArgument for an endpoint ZeroMQ refuses, kIOError
  /// when one cannot be bound (in use), both naming the flag and the endpoint.
  static Result<std::unique_ptr<KvEventPublisher>> open(const PublisherParams& params);
  /// Sends what is queued, then closes the sockets.
  ~KvEventPublisher();
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  /// `holder` now holds the full blocks of `tokens` in `medium` (replacing what it held there):
  /// blocks new to the medium (and group) are published as BlockStored, blocks it no longer holds
  /// and nobody else does as BlockRemoved. `first_pos`: the lowest position the sliding-window
  /// layers hold (Memory::seq_pos_min of a SwaKvCache; ignored without such layers), or
  /// kFirstPosUnknown. Cost: O(tokens / block_tokens) hashes.
  void hold(const std::string& holder, std::span<const int32_t> tokens, const std::string& medium,
            Pos first_pos = kFirstPosUnknown);
  /// `holder` holds nothing any more (BlockRemoved for blocks nobody else holds).
  void release(const std::string& holder);

  /// Events published so far (tests).
  uint64_t n_events() const;

 private:
  static constexpr size_t kMaxGroups = 2;
  struct Range {
    size_t begin = 0, end = 0;  // indices into Held::blocks
    bool has(size_t i) const { return i >= begin && i < end; }
  };
  struct Held {
    std::string medium;
    std::vector<uint64_t> blocks;  // chained hashes, in order
    Range groups[kMaxGroups];      // the blocks published in each group
  };
  struct Replay;  // the ROUTER socket and the buffered batches (publisher thread only)

  explicit KvEventPublisher(const PublisherParams& params);
  void run(void* pub, void* router);
  // Publisher thread: answers one waiting replay request, if any.
  void serve_replay(Replay& replay);
  // The blocks published in each group (out[kMaxGroups]) for a holder of `n_tokens` tokens whose
  // local layers hold positions from `first_pos` on.
  void ranges(size_t n_tokens, Pos first_pos, Range* out) const;
  uint32_t n_groups() const;
  EventGroup group(uint32_t g) const;
  // mu_ held: adds `holder`'s new blocks / drops its old ones, queuing the events.
  void update_locked(const std::string& holder, std::span<const int32_t> tokens,
                     const std::string& medium, Pos first_pos);
  void enqueue_locked(EncodedEvent event);

  PublisherParams params_;
  void* zmq_context_ = nullptr;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<std::string, Held> holders_;
  // (medium, group, hash) -> holders
  std::map<std::tuple<std::string, uint32_t, uint64_t>, uint32_t> refs_;
  std::deque<EncodedEvent> queue_;  // msgpack-encoded events
  uint64_t n_events_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace mnemo::kv_events
