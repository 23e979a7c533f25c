// The Engine's internals (src/server/engine.h): the loop thread's private structs: a queued
// completion (Task), a queue entry, a slot and one step's work item, plus two small helpers.
// Shared by the engine's source files (engine.cc, scheduler.cc, slots.cc, control.cc) and by
// nothing else.
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
#include "server/prompt_reuse.h"
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

/// A completion between submit() and its end (llama.cpp's server_task): queued, then served by
/// a slot.
struct Engine::Task {
  uint64_t id = 0;
  CompletionRequest req;
  std::shared_ptr<TaskChannel> channel;
  // Its prompt-cache lookups still running or done (a disk read, the store's answer): admission
  // waits for them once.
  ReuseFetch fetch;
};

/// One entry of the incoming queue.
struct Engine::Incoming {
  std::unique_ptr<Task> completion;  // a completion, or else a control request:
  ControlRequest control;
  std::promise<ControlReply> reply;
};

/// A slot: sequence `id` of the memory and the request it serves (engine.h, "Slots").
struct Engine::Slot {
  int32_t id = 0;
  SlotState state = SlotState::kIdle;
  HeldSeq held;              // sequence `id` and the tokens it holds (held.seq == id)
  uint64_t last_used = 0;    // clock_ when it was last released (LRU order)
  uint64_t last_active = 0;  // steps_ of its last decode (for the KV policy)
  // The request being served (state != kIdle).
  std::unique_ptr<Task> task;
  std::unique_ptr<Sampler> sampler;
  TextStream stream;
  TokenId pending = kTokenNull;          // kGenerating: sampled, to be decoded next step
  std::vector<TokenId> unsent_tokens;    // sampled since the last event
  std::vector<TokenProbs> unsent_probs;  // their probabilities (n_probs > 0)
  CompletionStats stats;
  double t_start = 0;  // admission, ms (now_ms)
  double t_first = 0;  // first token sampled, ms (now_ms)
};

/// Rows one slot contributes to a step: a prompt chunk or its pending generated token.
struct Engine::WorkItem {
  Slot* slot = nullptr;
  Pos pos0 = 0;                 // position of tokens[0]
  std::vector<TokenId> tokens;  // consecutive positions
  bool output = false;          // the last token needs logits
};

}  // namespace mnemo::server
