// Server counters, updated by the loop thread and the HTTP threads (relaxed atomics: each value
// is independent, and a scrape may see one request's counters half updated), and their
// Prometheus text exposition (format 0.0.4: "# HELP", "# TYPE", "name{labels} value").
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace mnemo::server {

struct ControlReply;
struct EngineInfo;

/// Monotonic counters since the server started. Thread-safe.
struct Metrics {
  std::atomic<uint64_t> requests_total{0};       // completions finished (any reason)
  std::atomic<uint64_t> prompt_tokens_total{0};  // prompt tokens evaluated (cache hits excluded)
  std::atomic<uint64_t> prompt_tokens_cached_total{0};  // prompt tokens reused from a slot
  std::atomic<uint64_t> tokens_predicted_total{0};      // tokens sampled
  std::atomic<uint64_t> prompt_us_total{0};             // microseconds spent on prompts
  std::atomic<uint64_t> predicted_us_total{0};          // microseconds spent generating
  std::atomic<uint64_t> decode_steps_total{0};          // Context::decode calls
  std::atomic<uint64_t> context_shifts_total{0};
  std::atomic<uint64_t> requantizations_total{0};
  std::atomic<uint64_t> cancelled_total{0};  // completions whose client went away
  // Running requests whose memory was set aside to free cells of a full unified KV cache (each
  // resumed byte-identical when cells free up).
  std::atomic<uint64_t> preemptions_total{0};
  std::atomic<uint64_t> draft_tokens_total{0};           // speculative: drafted and verified
  std::atomic<uint64_t> draft_tokens_accepted_total{0};  // ... the target agreed with
  std::atomic<uint64_t> draft_steps_total{0};   // speculative: verification steps (drafts)
  std::atomic<uint64_t> busy_slots_total{0};    // per decode step: the slots in its batch
  std::atomic<uint64_t> n_tokens_max{0};        // largest prompt + generated of a completion
  // Prompt-cache outcomes of admitted requests with cache_prompt: a hit reused at least one
  // prompt token, from a slot [0] (its own or another's), the RAM tier [1] or the disk tier [2].
  // [3]: the shared store.
  std::array<std::atomic<uint64_t>, 4> prompt_cache_hits_total{};
  std::atomic<uint64_t> prompt_cache_misses_total{0};
  std::array<std::atomic<uint64_t>, 16> errors_total{};  // indexed by ErrorKind

  /// Adds one to errors_total[kind] (kind < 16).
  void count_error(uint8_t kind) {
    if (kind < errors_total.size()) errors_total[kind].fetch_add(1, std::memory_order_relaxed);
  }
};

/// One figure the HTTP side reports beside the engine's (the stored responses of OpenAI's
/// Responses API: response_store.h): reported as "# HELP mnemo_NAME HELP", "# TYPE mnemo_NAME
/// TYPE", "mnemo_NAME VALUE".
struct MetricValue {
  std::string name;  // without the "mnemo_" prefix
  const char* type;  // "counter" or "gauge"
  std::string help;
  double value = 0;
};

/// The /metrics body: the counters above, tokens/s (totals over time spent), requests in flight
/// and queued, and per slot and per stream: KV cells used / total and bytes by K/V type, all
/// taken from `snap` (a kSnapshot reply), then `extra`. Metric names start with "mnemo_"; the
/// figures llama-server also reports appear again under its names
/// ("llamacpp:prompt_tokens_total", "llamacpp:requests_processing", ...), so dashboards written
/// for it work unchanged.
std::string prometheus_text(const Metrics& m, const EngineInfo& info, const ControlReply& snap,
                            const std::vector<MetricValue>& extra = {});

}  // namespace mnemo::server
