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

double load(const std::atomic<uint64_t>& a) {
  return static_cast<double>(a.load(std::memory_order_relaxed));
}

}  // namespace

std::string prometheus_text(const Metrics& m, const EngineInfo& info, const ControlReply& snap) {
  std::string o;
  auto counter = [&](const char* name, const char* help, double v) {
    family(&o, name, "counter", help);
    sample(&o, name, v);
  };
  auto gauge = [&](const char* name, const char* help, double v) {
    family(&o, name, "gauge", help);
    sample(&o, name, v);
  };
  counter("requests_total", "Completions finished (any reason).", load(m.requests_total));
  counter("prompt_tokens_total", "Prompt tokens evaluated.", load(m.prompt_tokens_total));
  counter("prompt_tokens_cached_total", "Prompt tokens reused from a slot's cache.",
          load(m.prompt_tokens_cached_total));
  counter("tokens_predicted_total", "Tokens generated.", load(m.tokens_predicted_total));
  counter("prompt_seconds_total", "Time spent on prompts.", load(m.prompt_us_total) / 1e6);
  counter("tokens_predicted_seconds_total", "Time spent generating.",
          load(m.predicted_us_total) / 1e6);
  const double p_s = load(m.prompt_us_total) / 1e6;
  const double g_s = load(m.predicted_us_total) / 1e6;
  gauge("prompt_tokens_per_second", "Prompt tokens per second of prompt time, since start.",
        p_s > 0 ? load(m.prompt_tokens_total) / p_s : 0.0);
  gauge("predicted_tokens_per_second",
        "Generated tokens per second of generation time (per request), since start.",
        g_s > 0 ? load(m.tokens_predicted_total) / g_s : 0.0);
  counter("decode_steps_total", "Batches decoded.", load(m.decode_steps_total));
  counter("context_shifts_total", "Context shifts.", load(m.context_shifts_total));
  counter("requantizations_total", "KV requantizations done.", load(m.requantizations_total));
  counter("cancelled_total", "Completions whose client went away.", load(m.cancelled_total));
  gauge("requests_processing", "Requests holding a slot.", snap.n_processing);
  gauge("requests_deferred", "Requests waiting for a slot.", snap.n_queued);
  gauge("slots", "Slots.", info.n_slots);

  family(&o, "errors_total", "counter", "Failed requests by kind.");
  for (uint8_t k = 0; k < uint8_t(ErrorKind::kCount); ++k) {
    sample(&o, "errors_total", load(m.errors_total[k]),
           fmt::format("kind=\"{}\"", error_kind_name(ErrorKind(k))));
  }

  family(&o, "slot_tokens", "gauge", "Tokens a slot holds in the KV cache.");
  for (const SlotInfo& s : snap.slots) {
    sample(&o, "slot_tokens", s.n_tokens,
           fmt::format("slot=\"{}\",state=\"{}\"", s.id, slot_state_name(s.state)));
  }
  family(&o, "slot_kv_bytes", "gauge",
         "Bytes serving a slot: its K/V stream (unified KV: its share by cells held) and its "
         "recurrent state.");
  // A slot that holds no K/V (a recurrent state alone) has type_k="none", type_v="none".
  auto name = [](const std::optional<GgmlType>& t) {
    return t ? std::string(type_name(*t)) : std::string("none");
  };
  for (const SlotInfo& s : snap.slots) {
    sample(&o, "slot_kv_bytes", double(s.bytes),
           fmt::format("slot=\"{}\",type_k=\"{}\",type_v=\"{}\"", s.id, name(s.type_k),
                       name(s.type_v)));
  }
  family(&o, "kv_cells_used", "gauge", "Occupied KV cells per stream.");
  for (const auto& st : snap.breakdown.streams) {
    sample(&o, "kv_cells_used", st.used,
           fmt::format("part=\"{}\",stream=\"{}\"", st.part, st.stream));
  }
  family(&o, "kv_cells", "gauge", "KV cells per stream.");
  for (const auto& st : snap.breakdown.streams) {
    sample(&o, "kv_cells", st.n_cells,
           fmt::format("part=\"{}\",stream=\"{}\"", st.part, st.stream));
  }
  family(&o, "kv_bytes", "gauge", "K/V tensor bytes per stream, kind and type.");
  std::map<std::pair<std::string, uint32_t>, std::pair<size_t, size_t>> kv;  // (part, stream)
  for (const auto& t : snap.breakdown.tensors) {
    auto& e = kv[{t.part, t.stream}];
    (t.kind == 'K' ? e.first : e.second) += t.bytes;
  }
  for (const auto& st : snap.breakdown.streams) {
    const auto [k, v] = kv[{st.part, st.stream}];
    sample(&o, "kv_bytes", double(k),
           fmt::format("part=\"{}\",stream=\"{}\",kind=\"K\",type=\"{}\"", st.part, st.stream,
                       type_name(st.k_type)));
    sample(&o, "kv_bytes", double(v),
           fmt::format("part=\"{}\",stream=\"{}\",kind=\"V\",type=\"{}\"", st.part, st.stream,
                       type_name(st.v_type)));
  }
  gauge("kv_bytes_total", "K/V tensor bytes of the whole cache.",
        double(snap.breakdown.tensor_bytes));
  return o;
}

}  // namespace mnemo::server
