// ResponseStore: the responses of POST /v1/responses kept with `store: true` (OpenAI's Responses
// API), so a later request can continue one by naming it (`previous_response_id`) and send only
// its new input, and GET / DELETE /v1/responses/{id} can read or remove it.
//
// What a stored response keeps is its conversation: the chat messages of every turn so far,
// this response's output included (what the next turn's prompt is rendered from), plus the
// response object itself. The memory of the conversation (its K/V) is not here: it is where every
// other prompt's memory is, in a slot or the prompt cache's tiers (PromptReuse), found by the
// continuation's prompt like any other prefix.
//
// Bounded by count and by bytes (of the JSON text of what an entry keeps), least recently used
// out first; an entry larger than the byte budget alone is not kept (put() says so). Thread-safe
// (HTTP threads).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "server/metrics.h"

namespace mnemo::server {

/// One stored response.
struct StoredResponse {
  std::string id;                   // "resp_..."
  nlohmann::ordered_json response;  // the response object as the API returned it
  nlohmann::ordered_json messages;  // the conversation through this response's output: an
                                    // array of chat messages (role, content, tool_calls, ...)
  size_t bytes = 0;                 // size of both as JSON text (set by ResponseStore::put)
};

/// Counters and sizes for /metrics.
struct ResponseStoreStats {
  size_t count = 0;      // responses kept now
  size_t bytes = 0;      // their bytes (StoredResponse::bytes)
  size_t max_count = 0;  // the bounds
  size_t max_bytes = 0;
  uint64_t stored_total = 0;   // put() that kept the entry
  uint64_t evicted_total = 0;  // entries dropped to make room (least recently used)
  uint64_t hits_total = 0;     // get() that found the id
  uint64_t misses_total = 0;   // get() that did not (never stored, evicted, deleted)
};

/// The figures /metrics reports of the store: mnemo_responses_stored (gauge: kept now),
/// mnemo_responses_bytes, mnemo_responses_max and mnemo_responses_max_bytes (gauges: the bounds),
/// mnemo_responses_stored_total, mnemo_responses_evicted_total, mnemo_responses_hits_total and
/// mnemo_responses_misses_total (counters).
std::vector<MetricValue> response_store_metrics(const ResponseStoreStats& s);

class ResponseStore {
 public:
  /// Keeps at most `max_count` responses and `max_bytes` bytes of them (0: nothing is kept).
  ResponseStore(size_t max_count, size_t max_bytes)
      : max_count_(max_count), max_bytes_(max_bytes) {}

  /// Keeps `r` (replacing an entry of the same id) as the most recently used, evicting the least
  /// recently used entries beyond the bounds. Returns false, and keeps nothing, when `r` alone is
  /// larger than the byte budget (every other entry stays).
  bool put(StoredResponse r);
  /// The entry `id`, marked used; null when there is none.
  std::shared_ptr<const StoredResponse> get(std::string_view id);
  /// Removes entry `id`; false when there was none.
  bool erase(std::string_view id);
  ResponseStoreStats stats() const;

 private:
  using Entry = std::shared_ptr<const StoredResponse>;
  void evict_locked();

  const size_t max_count_, max_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> by_id_;
  size_t bytes_ = 0;
  uint64_t stored_total_ = 0, evicted_total_ = 0, hits_total_ = 0, misses_total_ = 0;
};

}  // namespace mnemo::server
