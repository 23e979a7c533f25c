// The loop thread's private state of an Engine (src/server/engine.h): a queued completion, a
// queue entry, a slot and one step's work item, plus two small helpers. Shared by the engine's
// source files (engine.cc, scheduler.cc, slots.cc, control.cc) and by nothing else.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <vector>

#include "mnemo/sampling.h"
#include "mnemo/tokenizer.h"
#include "server/engine.h"
#include "server/text_stream.h"

namespace mnemo::server {

/// Milliseconds on the steady clock (differences only).
inline double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

/// Length of the longest common prefix of a and b, in tokens.
inline size_t common_prefix(const std::vector<TokenId>& a, const std::vector<TokenId>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

/// A completion between submit() and its slot.
struct Engine::Waiting {
  uint64_t id = 0;
  CompletionRequest req;
  std::shared_ptr<TaskChannel> channel;
  // A prompt-cache entry being read from disk for this request (admit waits for it once).
  std::shared_ptr<prompt_cache::CacheFetch> fetch;
  // The shared store's answer for this request's prompt (asked once).
  std::shared_ptr<prompt_cache::StoreFetch> store_fetch;
  bool pending() const {
    return (fetch && !fetch->done.load(std::memory_order_acquire)) ||
           (store_fetch && !store_fetch->done.load(std::memory_order_acquire));
  }
};

/// One entry of the incoming queue.
struct Engine::Incoming {
  std::unique_ptr<Waiting> completion;  // a completion, or else a control request:
  ControlRequest control;
  std::promise<ControlReply> reply;
};

/// A slot: sequence `id` of the memory and the request it serves (engine.h, "Slots").
struct Engine::Slot {
  int32_t id = 0;
  SlotState state = SlotState::kIdle;
  std::vector<TokenId> cache_tokens;  // tokens held by sequence `id`, positions 0..size-1
  bool cacheable = true;              // cache_tokens may go into the prompt cache (stash)
  uint64_t stashed_key = 0;           // entry_key of the tokens last stashed (0: none)
  uint64_t last_used = 0;             // clock_ when it was last released (LRU order)
  uint64_t last_active = 0;           // steps_ of its last decode (for the KV policy)
  // The request being served (state != kIdle).
  std::unique_ptr<Waiting> task;
  std::unique_ptr<Sampler> sampler;
  TextStream stream;
  TokenId pending = kTokenNull;          // kGenerating: sampled, to be decoded next step
  std::vector<TokenId> unsent_tokens;    // sampled since the last event
  std::vector<TokenProbs> unsent_probs;  // their probabilities (n_probs > 0)
  CompletionStats stats;
  double t_start = 0;  // admission, ms (now_ms)
  double t_first = 0;  // first token sampled, ms (now_ms)
};

/// Where admission takes a prompt's reusable prefix from (Engine::choose_source).
struct Engine::Source {
  enum class Kind : uint8_t { kNone, kOwn, kSlot, kEntry };
  Kind kind = Kind::kNone;
  size_t keep = 0;                 // prompt tokens it gives (kEntry: at most; the restore says)
  const Slot* slot = nullptr;      // kSlot: the slot whose sequence is copied
  prompt_cache::CacheMatch match;  // kEntry
  // kEntry: the state when it came from the shared store (else from the cache or a fetch).
  std::shared_ptr<const std::vector<uint8_t>> bytes;
};

/// Rows one slot contributes to a step: a prompt chunk or its pending generated token.
struct Engine::WorkItem {
  Slot* slot = nullptr;
  Pos pos0 = 0;                 // position of tokens[0]
  std::vector<TokenId> tokens;  // consecutive positions
  bool output = false;          // the last token needs logits
};

}  // namespace mnemo::server
