#include "server/metrics.h"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <string>
#include <utility>

#include "server/engine.h"

namespace mnemo::server {
namespace {

void family(std::string* out, const char* name, const char* type, const char* help) {
  *out += fmt::format("# HELP mnemo_{} {}\n# TYPE mnemo_{} {}\n", name, help, name, type);
}

void sample(std::string* out, const char* name, double v, const std::string& labels = {}) {
  if (labels.empty()) {
    *out += fmt::format("mnemo_{} {}\n", name, v);
  } else {
    *out += fmt::format("mnemo_{}{{{}}} {}\n", name, labels, v);
  }
}

// The same quantity under llama-server's name (llamacpp:NAME), for dashboards written for it.
void llamacpp(std::string* out, const char* name, const char* type, const char* help, double v) {
  *out += fmt::format("# HELP llamacpp:{} {}\n# TYPE llamacpp:{} {}\nllamacpp:{} {}\n", name, help,
                      name, type, name, v);
}

double load(const std::atomic<uint64_t>& a) {
  return static_cast<double>(a.load(std::memory_order_relaxed));
}

void counter(std::string* o, const char* name, const char* help, double v) {
  family(o, name, "counter", help);
  sample(o, name, v);
}

void gauge(std::string* o, const char* name, const char* help, double v) {
  family(o, name, "gauge", help);
  sample(o, name, v);
}

// Seconds spent on prompts / generating, since start.
double prompt_seconds(const Metrics& m) { return load(m.prompt_us_total) / 1e6; }
double predicted_seconds(const Metrics& m) { return load(m.predicted_us_total) / 1e6; }

// Requests, tokens and time since start, requests now, failures by kind.
void request_metrics(std::string* o, const Metrics& m, const EngineInfo& info,
                     const ControlReply& snap) {
  counter(o, "requests_total", "Completions finished (any reason).", load(m.requests_total));
  counter(o, "prompt_tokens_total", "Prompt tokens evaluated.", load(m.prompt_tokens_total));
  counter(o, "prompt_tokens_cached_total", "Prompt tokens reused from a slot's cache.",
          load(m.prompt_tokens_cached_total));
  counter(o, "tokens_predicted_total", "Tokens generated.", load(m.tokens_predicted_total));
  counter(o, "prompt_seconds_total", "Time spent on prompts.", load(m.prompt_us_total) / 1e6);
  counter(o, "tokens_predicted_seconds_total", "Time spent generating.",
          load(m.predicted_us_total) / 1e6);
  const double p_s = prompt_seconds(m);
  const double g_s = predicted_seconds(m);
  gauge(o, "prompt_tokens_per_second", "Prompt tokens per second of prompt time, since start.",
        p_s > 0 ? load(m.prompt_tokens_total) / p_s : 0.0);
  gauge(o, "predicted_tokens_per_second",
        "Generated tokens per second of generation time (per request), since start.",
        g_s > 0 ? load(m.tokens_predicted_total) / g_s : 0.0);
  counter(o, "decode_steps_total", "Batches decoded.", load(m.decode_steps_total));
  counter(o, "context_shifts_total", "Context shifts.", load(m.context_shifts_total));
  counter(o, "requantizations_total", "KV requantizations done.", load(m.requantizations_total));
  counter(o, "cancelled_total", "Completions whose client went away.", load(m.cancelled_total));
  counter(o, "preemptions_total",
          "Running requests whose memory was set aside (stashed, cells freed) to make room in a "
          "full unified KV cache; each resumes byte-identical.",
          load(m.preemptions_total));
  counter(o, "draft_tokens_total",
          "Speculative decoding: tokens drafted and verified (timings.draft_n summed).",
          load(m.draft_tokens_total));
  counter(o, "draft_tokens_accepted_total",
          "Speculative decoding: drafted tokens the model agreed with (draft_n_accepted).",
          load(m.draft_tokens_accepted_total));
  gauge(o, "requests_processing", "Requests holding a slot.", snap.n_processing);
  gauge(o, "requests_deferred", "Requests waiting for a slot.", snap.n_queued);
  gauge(o, "requests_preempted",
        "Requests holding a slot whose memory is set aside until the unified KV cache has room.",
        snap.n_preempted);
  gauge(o, "slots", "Slots.", info.n_slots);

  family(o, "errors_total", "counter", "Failed requests by kind.");
  for (uint8_t k = 0; k < uint8_t(ErrorKind::kCount); ++k) {
    sample(o, "errors_total", load(m.errors_total[k]),
           fmt::format("kind=\"{}\"", error_kind_name(ErrorKind(k))));
  }
}

// Per slot and per stream of the memory: tokens held, bytes by K/V type, cells.
void memory_metrics(std::string* o, const ControlReply& snap) {
  family(o, "slot_tokens", "gauge", "Tokens a slot holds in the KV cache.");
  for (const SlotInfo& s : snap.slots) {
    sample(o, "slot_tokens", s.n_tokens,
           fmt::format("slot=\"{}\",state=\"{}\"", s.id, slot_state_name(s.state)));
  }
  family(o, "slot_kv_bytes", "gauge",
         "Bytes serving a slot: its K/V stream (unified KV: its share by cells held) and its "
         "recurrent state.");
  // A slot that holds no K/V (a recurrent state alone) has type_k="none", type_v="none".
  auto name = [](const std::optional<GgmlType>& t) {
    return t ? std::string(type_name(*t)) : std::string("none");
  };
  for (const SlotInfo& s : snap.slots) {
    sample(o, "slot_kv_bytes", double(s.bytes),
           fmt::format("slot=\"{}\",type_k=\"{}\",type_v=\"{}\"", s.id, name(s.type_k),
                       name(s.type_v)));
  }
  family(o, "kv_cells_used", "gauge", "Occupied KV cells per stream.");
  for (const auto& st : snap.breakdown.streams) {
    sample(o, "kv_cells_used", st.used,
           fmt::format("part=\"{}\",stream=\"{}\"", st.part, st.stream));
  }
  family(o, "kv_cells", "gauge", "KV cells per stream.");
  for (const auto& st : snap.breakdown.streams) {
    sample(o, "kv_cells", st.n_cells, fmt::format("part=\"{}\",stream=\"{}\"", st.part, st.stream));
  }
  family(o, "kv_bytes", "gauge", "K/V tensor bytes per stream, kind and type.");
  std::map<std::pair<std::string, uint32_t>, std::pair<size_t, size_t>> kv;  // (part, stream)
  for (const auto& t : snap.breakdown.tensors) {
    auto& e = kv[{t.part, t.stream}];
    (t.kind == 'K' ? e.first : e.second) += t.bytes;
  }
  for (const auto& st : snap.breakdown.streams) {
    const auto [k, v] = kv[{st.part, st.stream}];
    sample(o, "kv_bytes", double(k),
           fmt::format("part=\"{}\",stream=\"{}\",kind=\"K\",type=\"{}\"", st.part, st.stream,
                       type_name(st.k_type)));
    sample(o, "kv_bytes", double(v),
           fmt::format("part=\"{}\",stream=\"{}\",kind=\"V\",type=\"{}\"", st.part, st.stream,
                       type_name(st.v_type)));
  }
  gauge(o, "kv_bytes_total", "K/V tensor bytes of the whole cache.",
        double(snap.breakdown.tensor_bytes));
}

// The prompt cache (src/prompt_cache/prompt_cache.h): outcomes per request, then the tiers.
void prompt_cache_metrics(std::string* o, const Metrics& m, const ControlReply& snap) {
  family(o, "prompt_cache_hits_total", "counter",
         "Requests that reused prompt tokens, by where they came from.");
  const char* kTiers[] = {"slot", "ram", "disk", "store"};
  for (size_t t = 0; t < 4; ++t) {
    sample(o, "prompt_cache_hits_total", load(m.prompt_cache_hits_total[t]),
           fmt::format("tier=\"{}\"", kTiers[t]));
  }
  counter(o, "prompt_cache_misses_total",
          "Requests (cache_prompt: true) that reused no prompt token.",
          load(m.prompt_cache_misses_total));
  counter(o, "prompt_cache_tokens_reused_total",
          "Prompt tokens reused from a slot or the prompt cache (not evaluated).",
          load(m.prompt_tokens_cached_total));
  if (snap.cache) {
    const prompt_cache::CacheStats& c = *snap.cache;
    family(o, "prompt_cache_bytes", "gauge", "State bytes held by each prompt-cache tier.");
    sample(o, "prompt_cache_bytes", double(c.bytes_ram), "tier=\"ram\"");
    sample(o, "prompt_cache_bytes", double(c.bytes_disk), "tier=\"disk\"");
    family(o, "prompt_cache_entries", "gauge", "Entries held by each prompt-cache tier.");
    sample(o, "prompt_cache_entries", double(c.entries_ram), "tier=\"ram\"");
    sample(o, "prompt_cache_entries", double(c.entries_disk), "tier=\"disk\"");
    family(o, "prompt_cache_evictions_total", "counter",
           "Entries that left a tier for its budget (least recently used first).");
    sample(o, "prompt_cache_evictions_total", double(c.evicted_ram_total), "tier=\"ram\"");
    sample(o, "prompt_cache_evictions_total", double(c.evicted_disk_total), "tier=\"disk\"");
    counter(o, "prompt_cache_stored_total", "Slot states stored into the prompt cache.",
            double(c.stored_total));
    counter(o, "prompt_cache_superseded_total",
            "Entries dropped because a longer entry serves their tokens.",
            double(c.superseded_total));
    counter(o, "prompt_cache_ignored_total",
            "Entries skipped or dropped as unusable: damaged, truncated, another model's, or "
            "tokens that do not match.",
            double(c.ignored_total));
    counter(o, "prompt_cache_disk_writes_total", "Entry files written.",
            double(c.disk_writes_total));
    counter(o, "prompt_cache_disk_reads_total", "Entry files read back.",
            double(c.disk_reads_total));
    counter(o, "prompt_cache_disk_errors_total",
            "Failed disk-tier operations (directory, write, read, index); entries stay in RAM.",
            double(c.disk_errors_total));
  }
}

// The shared store (--cache-store), when there is one.
void store_metrics(std::string* o, const ControlReply& snap) {
  if (!snap.store) return;
  const prompt_cache::StoreStats& st = *snap.store;
  gauge(o, "prompt_cache_store_up", "1 while the shared store (--cache-store) is connected.",
        st.connected ? 1.0 : 0.0);
  counter(o, "prompt_cache_store_hits_total", "Store lookups that returned a verified entry.",
          double(st.hits_total));
  counter(o, "prompt_cache_store_misses_total",
          "Store lookups without one (none, evicted, store unreachable).", double(st.misses_total));
  counter(o, "prompt_cache_store_ignored_total",
          "Values fetched from the store and discarded: damaged, another model's, wrong tokens.",
          double(st.ignored_total));
  counter(o, "prompt_cache_store_writes_total", "Entries written to the store.",
          double(st.writes_total));
  counter(o, "prompt_cache_store_dropped_total",
          "Entries not written: store down, slow or full, or too many queued.",
          double(st.dropped_total));
  counter(o, "prompt_cache_store_errors_total", "Failed store commands and connection attempts.",
          double(st.errors_total));
  gauge(o, "prompt_cache_store_pending", "Entries queued for the store, not yet written.",
        double(st.pending));
}

// llama-server's names of the figures above.
void llamacpp_metrics(std::string* o, const Metrics& m, const ControlReply& snap) {
  const double p_s = prompt_seconds(m);
  const double g_s = predicted_seconds(m);
  // llama-server's names, HELP texts and order (its /metrics with --metrics).
  llamacpp(o, "prompt_tokens_total", "counter",
           "Number of prompt tokens processed, excluding cached tokens",
           load(m.prompt_tokens_total));
  llamacpp(o, "prompt_tokens_cached_total", "counter",
           "Number of prompt tokens reused from the cache", load(m.prompt_tokens_cached_total));
  llamacpp(o, "prompt_seconds_total", "counter", "Total time spent processing prompts", p_s);
  llamacpp(o, "tokens_predicted_total", "counter", "Number of generation tokens processed",
           load(m.tokens_predicted_total));
  llamacpp(o, "tokens_predicted_seconds_total", "counter", "Total time spent generating tokens",
           g_s);
  llamacpp(o, "n_decode_total", "counter",
           "Total number of llama_decode() calls, excluding speculative decoding and multimodal "
           "decoding",
           load(m.decode_steps_total));
  llamacpp(o, "n_tokens_max", "counter",
           "Largest observed sequence length (prompt + generation)", load(m.n_tokens_max));
  llamacpp(o, "spec_decode_num_draft_tokens_total", "counter",
           "Speculative: Total draft tokens generated", load(m.draft_tokens_total));
  llamacpp(o, "spec_decode_num_accepted_tokens_total", "counter",
           "Speculative: Total draft tokens accepted by the target model",
           load(m.draft_tokens_accepted_total));
  llamacpp(o, "spec_decode_num_drafts_total", "counter",
           "Speculative: Total speculative decoding verification steps",
           load(m.draft_steps_total));
  llamacpp(o, "prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s",
           p_s > 0 ? load(m.prompt_tokens_total) / p_s : 0.0);
  llamacpp(o, "predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s",
           g_s > 0 ? load(m.tokens_predicted_total) / g_s : 0.0);
  llamacpp(o, "requests_processing", "gauge", "Number of requests processing",
           snap.n_processing);
  llamacpp(o, "requests_deferred", "gauge", "Number of requests deferred", snap.n_queued);
  const double n_decode = load(m.decode_steps_total);
  llamacpp(o, "n_busy_slots_per_decode", "gauge",
           "Average number of busy slots per llama_decode() call",
           n_decode > 0 ? load(m.busy_slots_total) / n_decode : 0.0);
}

}  // namespace

std::string prometheus_text(const Metrics& m, const EngineInfo& info, const ControlReply& snap,
                            const std::vector<MetricValue>& extra) {
  std::string o;
  request_metrics(&o, m, info, snap);
  memory_metrics(&o, snap);
  prompt_cache_metrics(&o, m, snap);
  store_metrics(&o, snap);
  for (const MetricValue& v : extra) {
    family(&o, v.name.c_str(), v.type, v.help.c_str());
    sample(&o, v.name.c_str(), v.value);
  }
  llamacpp_metrics(&o, m, snap);
  return o;
}

}  // namespace mnemo::server
