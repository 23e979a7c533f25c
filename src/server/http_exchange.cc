// Completions over HTTP, for every wire API alike: the route's WireApi parses the body and
// builds every response, event and error; this file submits to the engine, waits on its
// TaskChannel (for a slot, bounded by --timeout; for events), streams SSE with keep-alive
// comments, keeps a slow non-streamed answer's connection checked with a whitespace heartbeat,
// cancels a completion whose client went away, and logs one line when the response ends.
#include <fmt/format.h>

#include <algorithm>

#include "server/http_front.h"

namespace mnemo::server {
namespace {

std::string completion_log(const CompletionStats& s, const char* outcome) {
  const double tps = s.gen_ms > 0 ? s.n_generated * 1000.0 / s.gen_ms : 0.0;
  return fmt::format(" | slot {} | prompt {} (cached {}) | generated {} | {:.1f} tok/s | {}",
                     s.id_slot, s.n_prompt, s.n_cached, s.n_generated, tps, outcome);
}

const char* outcome_name(FinishReason r) {
  switch (r) {
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kWord:
      return "stop word";
    case FinishReason::kLimit:
      return "n_predict";
    case FinishReason::kContext:
      return "context full";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kNone:
      break;
  }
  return "";
}

// Writes events; false when the client went away.
bool send_events(httplib::DataSink& sink, const std::vector<SseEvent>& events) {
  for (const SseEvent& e : events) {
    const std::string s = e.wire();
    if (!sink.write(s.data(), s.size())) return false;
  }
  return true;
}

}  // namespace

bool absorb(Exchange& ex, const CompletionEvent& ev) {
  switch (ev.kind) {
    case CompletionEvent::Kind::kAdmitted:
      ex.id_slot = ev.stats.id_slot;
      ex.result.stats = ev.stats;  // n_prompt and n_cached, for stream_begin
      return false;
    case CompletionEvent::Kind::kProgress:
      return false;
    case CompletionEvent::Kind::kText:
      ex.result.text += ev.text;
      ex.result.tokens.insert(ex.result.tokens.end(), ev.tokens.begin(), ev.tokens.end());
      ex.result.probs.insert(ex.result.probs.end(), ev.probs.begin(), ev.probs.end());
      return false;
    case CompletionEvent::Kind::kDone:
      ex.result.finish = ev.finish;
      ex.result.stop_word = ev.stop_word;
      ex.result.stats = ev.stats;
      ex.outcome = completion_log(ev.stats, outcome_name(ev.finish));
      ex.finished = true;
      return true;
    case CompletionEvent::Kind::kError:
      ex.outcome = fmt::format(" | slot {} | error: {}", ex.id_slot, ev.error);
      ex.finished = true;
      return true;
  }
  return true;
}

void Front::finish_log(Exchange& ex, int status) {
  if (ex.logged) return;
  ex.logged = true;
  ex.log.extra = ex.outcome.empty()
                     ? fmt::format(" | slot {} | cancelled (client went away)", ex.id_slot)
                     : ex.outcome;
  log_request(ex.method, ex.path, status, ex.log);
}

bool Front::pump_sse(Exchange& ex, DataSink& sink) {
  const WireApi& api = *ex.api;
  const ParsedCompletion& p = ex.parsed;
  if (!ex.begun) {
    ex.begun = true;
    if (!send_events(sink, api.stream_begin(p, ex.result, defaults_, ex.ids))) return false;
  }
  const std::string keep_alive = api.keep_alive();
  auto last_write = Clock::now();
  while (true) {
    auto ev = ex.channel->pop(kPoll);
    if (Clock::now() - last_write >= kPoll) {
      // Nothing sent for a while (a long prompt, text held back): a keep-alive (an SSE comment,
      // or the API's own ping event) keeps the connection and finds a dead one.
      if (!sink.write(keep_alive.data(), keep_alive.size())) return false;
      last_write = Clock::now();
    }
    if (!ev) continue;
    const CompletionEvent& e = *ev;
    const bool last = absorb(ex, e);
    std::vector<SseEvent> out;
    if (e.kind == CompletionEvent::Kind::kProgress) {
      out = api.stream_progress(p, e, ex.id_slot, defaults_, ex.ids);
    } else if (e.kind == CompletionEvent::Kind::kText) {
      out = api.stream_delta(p, e, ex.result, ex.id_slot, defaults_, ex.ids);
    } else if (e.kind == CompletionEvent::Kind::kDone) {
      out = api.stream_end(p, ex.result, defaults_, ex.ids);
      for (SseEvent& c : api.stream_close(p, &ex.result.stats, defaults_, ex.ids)) {
        out.push_back(std::move(c));
      }
    } else if (e.kind == CompletionEvent::Kind::kError) {
      out =
          api.stream_failed(p, ex.result, {e.error_kind, e.error, std::nullopt}, defaults_, ex.ids);
    }
    if (!send_events(sink, out)) return false;
    if (!out.empty()) last_write = Clock::now();
    if (last) {
      sink.done();
      return true;
    }
  }
}

bool Front::parse_completions(const Request& req, Response& res, const WireApi& api,
                              std::vector<ParsedCompletion>* all) {
  Json body;
  if (Status st = parse_json_body(req.body, &body); !st.ok()) {
    reply_error(res, api, {ErrorKind::kInvalidRequest, st.message(), std::nullopt});
    return false;
  }
  if (Status st = api.parse(body, tok_, tmpl_, defaults_, all); !st.ok()) {
    WireError e{error_kind_for(st, ErrorOrigin::kRequest), st.message(), std::nullopt};
    if (e.kind == ErrorKind::kPromptTooLong) {
      e.prompt_size = WireError::PromptSize{all->empty() ? 0 : all->front().n_prompt_tokens,
                                            engine_.info().n_ctx_seq};
    }
    reply_error(res, api, e);
    return false;
  }
  return true;
}

void Front::count_tokens(const Request& req, Response& res, RequestLog& log) {
  std::vector<ParsedCompletion> all;
  if (!parse_completions(req, res, anthropic_messages_api(), &all)) return;
  log.extra = fmt::format(" | {} tokens", all.front().n_prompt_tokens);
  reply_json(res, message_token_count_json(all.front().n_prompt_tokens));
}

void Front::completion(const Request& req, Response& res, RequestLog& log, const WireApi& api) {
  std::vector<ParsedCompletion> all;
  if (!parse_completions(req, res, api, &all)) return;
  if (all.size() > 1) {
    completion_multi(req, res, log, api, std::move(all));
    return;
  }
  auto ex = std::make_shared<Exchange>();
  ex->api = &api;
  ex->parsed = std::move(all.front());
  ex->ids = new_response_ids(api.id_prefix());
  if (!admit(*ex, res, log)) return;
  ex->log = log;
  ex->method = req.method;
  ex->path = req.path;
  log.deferred = true;
  if (ex->parsed.stream) {
    stream_sse(ex, res);
  } else {
    answer_json(ex, res);
  }
}

bool Front::admit(Exchange& ex, Response& res, RequestLog& log) {
  const WireApi& api = *ex.api;
  ErrorKind kind = ErrorKind::kInternal;
  auto ch = engine_.submit(ex.parsed.req, &kind);
  if (!ch.ok()) {
    reply_error(res, api, {kind, ch.status().message(), std::nullopt});
    return false;
  }
  ex.channel = *ch;
  // Wait for a slot (queued requests wait here, bounded by --timeout).
  const auto deadline = Clock::now() + std::chrono::seconds(params_.timeout_s);
  while (true) {
    auto ev = ex.channel->pop(kPoll);
    if (!ev) {
      if (Clock::now() < deadline) continue;
      ex.channel->cancel();
      reply_error(res, api,
                  {ErrorKind::kTimeout,
                   fmt::format("no slot became free within {} s (--timeout)", params_.timeout_s),
                   std::nullopt});
      return false;
    }
    if (ev->kind == CompletionEvent::Kind::kError) {
      log.extra = " | refused: " + ev->error;
      reply_error(res, api, {ev->error_kind, ev->error, std::nullopt}, /*count=*/false);
      return false;
    }
    absorb(ex, *ev);
    return true;  // kAdmitted
  }
}

void Front::stream_sse(const std::shared_ptr<Exchange>& ex, Response& res) {
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, ex](size_t, DataSink& sink) {
        if (pump_sse(*ex, sink)) return true;
        ex->channel->cancel();  // the client went away
        return false;
      },
      [this, ex](bool success) {
        if (!ex->finished) ex->channel->cancel();
        finish_log(*ex, success ? 200 : 499);
      });
}

void Front::answer_json(const std::shared_ptr<Exchange>& ex, Response& res) {
  const WireApi& api = *ex->api;
  // A quick answer gets an exact status; a slow one switches to a chunked body.
  const auto quick = Clock::now() + kHeartbeat;
  while (!ex->finished && Clock::now() < quick) {
    auto ev = ex->channel->pop(std::chrono::duration_cast<std::chrono::milliseconds>(
        quick - Clock::now() + std::chrono::milliseconds(1)));
    if (ev) {
      if (ev->kind == CompletionEvent::Kind::kError) {
        absorb(*ex, *ev);
        reply_error(res, api, {ev->error_kind, ev->error, std::nullopt}, /*count=*/false);
        finish_log(*ex, res.status);
        return;
      }
      absorb(*ex, *ev);
    }
  }
  if (ex->finished) {
    reply_json(res, api.response(ex->parsed, ex->result, defaults_, ex->ids));
    finish_log(*ex, 200);
    return;
  }
  res.status = 200;
  res.set_chunked_content_provider(
      "application/json; charset=utf-8",
      [this, ex, &api](size_t, DataSink& sink) {
        auto last_write = Clock::now();
        while (true) {
          auto ev = ex->channel->pop(kHeartbeat);
          // A space every heartbeat, events or not: the only way to find out the client left.
          if (Clock::now() - last_write >= kHeartbeat) {
            if (!sink.write(" ", 1)) {
              ex->channel->cancel();
              return false;
            }
            last_write = Clock::now();
          }
          if (!ev || !absorb(*ex, *ev)) continue;
          const Json j = ev->kind == CompletionEvent::Kind::kError
                             ? api.error_body({ev->error_kind, ev->error, std::nullopt})
                             : api.response(ex->parsed, ex->result, defaults_, ex->ids);
          const std::string s = dump(j);
          if (!sink.write(s.data(), s.size())) return false;
          sink.done();
          return true;
        }
      },
      [this, ex](bool success) {
        if (!ex->finished) ex->channel->cancel();
        finish_log(*ex, success ? 200 : 499);
      });
}

// The exchanges of a multi-completion request, pumped together by one HTTP thread.
struct MultiExchange {
  const WireApi* api = nullptr;
  std::vector<std::shared_ptr<Exchange>> ex;
  std::vector<bool> started;
  ResponseIds ids;
  Clock::time_point deadline;  // --timeout for them all
  bool failed = false;
  ErrorKind error_kind = ErrorKind::kInternal;
  std::string error;

  bool all_finished() const {
    return std::all_of(ex.begin(), ex.end(), [](const auto& e) { return e->finished; });
  }
  void cancel_all() {
    for (const auto& e : ex) {
      if (e->channel && !e->finished) e->channel->cancel();
    }
  }
  void fail(ErrorKind kind, std::string message) {
    failed = true;
    error_kind = kind;
    error = std::move(message);
  }
  void time_out() { fail(ErrorKind::kTimeout, "the completions did not finish within --timeout"); }
  WireError wire_error() const { return {error_kind, error, std::nullopt}; }
  // Usage of them all: prompt tokens counted once per prompt (copies share the first's),
  // generated tokens of every completion; timings of the first.
  CompletionStats usage() const {
    CompletionStats sum = ex.front()->result.stats;
    sum.n_prompt = sum.n_cached = sum.n_generated = 0;
    for (const auto& e : ex) {
      const CompletionStats& s = e->result.stats;
      if (e->parsed.copy_of < 0) {
        sum.n_prompt += s.n_prompt;
        sum.n_cached += s.n_cached;
      }
      sum.n_generated += s.n_generated;
    }
    return sum;
  }
  // Starts every completion that may start now: firsts at once, copies once their first has
  // produced a token (its prompt is then in a slot's memory). false when a submit failed.
  bool start_ready(Engine& engine) {
    for (size_t i = 0; i < ex.size(); ++i) {
      if (started[i]) continue;
      Exchange& e = *ex[i];
      const int32_t first = e.parsed.copy_of;
      if (first >= 0 && !ex[size_t(first)]->finished && ex[size_t(first)]->result.tokens.empty()) {
        continue;
      }
      ErrorKind kind = ErrorKind::kInternal;
      auto ch = engine.submit(e.parsed.req, &kind);
      if (!ch.ok()) {
        fail(kind, ch.status().message());
        return false;
      }
      e.channel = *ch;
      started[i] = true;
    }
    return true;
  }
  // One round over the started, unfinished completions: each event is absorbed (an error fails
  // them all), then goes to `on_event`; false when on_event returned false.
  bool pump(const std::function<bool(size_t, const CompletionEvent&)>& on_event) {
    bool any = false;
    for (size_t i = 0; i < ex.size(); ++i) {
      Exchange& e = *ex[i];
      if (!started[i] || e.finished) continue;
      while (auto ev = e.channel->pop(std::chrono::milliseconds(any ? 0 : 5))) {
        any = true;
        absorb(e, *ev);
        if (ev->kind == CompletionEvent::Kind::kError) fail(ev->error_kind, ev->error);
        if (!on_event(i, *ev)) return false;
        if (e.finished) break;
      }
    }
    return true;
  }
};

void Front::completion_multi(const Request& req, Response& res, RequestLog& log, const WireApi& api,
                             std::vector<ParsedCompletion> all) {
  auto m = std::make_shared<MultiExchange>();
  m->api = &api;
  m->ids = new_response_ids(api.id_prefix());
  for (ParsedCompletion& p : all) {
    auto e = std::make_shared<Exchange>();
    e->api = &api;
    e->parsed = std::move(p);
    e->ids = m->ids;
    m->ex.push_back(std::move(e));
  }
  m->started.assign(m->ex.size(), false);
  const bool stream = m->ex.front()->parsed.stream;
  log.extra = fmt::format(" | {} completions", m->ex.size());
  if (!m->start_ready(engine_)) {
    reply_error(res, api, m->wire_error(), /*count=*/false);
    return;
  }
  log.deferred = true;
  const std::string method = req.method, path = req.path;
  auto finish = [m, method, path, log](bool success) {
    m->cancel_all();
    RequestLog l = log;
    l.extra += m->failed ? " | error: " + m->error : "";
    log_request(method, path, success ? 200 : 499, l);
  };
  m->deadline = Clock::now() + std::chrono::seconds(params_.timeout_s);
  res.status = 200;
  if (stream) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [this, m](size_t, DataSink& sink) { return multi_sse(*m, sink); },
        finish);
  } else {
    res.set_chunked_content_provider(
        "application/json; charset=utf-8",
        [this, m](size_t, DataSink& sink) { return multi_json(*m, sink); }, finish);
  }
}

bool Front::multi_json(MultiExchange& m, DataSink& sink) {
  const WireApi& api = *m.api;
  auto last_write = Clock::now();
  while (!m.all_finished() && !m.failed) {
    if (!m.start_ready(engine_)) break;
    m.pump([&](size_t, const CompletionEvent&) { return !m.failed; });
    if (Clock::now() - last_write >= kHeartbeat) {  // JSON whitespace: a client alive?
      if (!sink.write(" ", 1)) {
        m.cancel_all();
        return false;
      }
      last_write = Clock::now();
    }
    if (Clock::now() > m.deadline) m.time_out();
  }
  Json out;
  if (m.failed) {
    m.cancel_all();
    out = api.error_body(m.wire_error());
  } else {
    std::vector<Json> each;
    for (const auto& e : m.ex) each.push_back(api.response(e->parsed, e->result, defaults_, m.ids));
    out = api.response_multi(std::move(each), m.usage());
  }
  const std::string s = dump(out);
  if (!sink.write(s.data(), s.size())) return false;
  sink.done();
  return true;
}

bool Front::multi_sse(MultiExchange& m, DataSink& sink) {
  const WireApi& api = *m.api;
  for (const auto& e : m.ex) {
    if (!send_events(sink, api.stream_begin(e->parsed, e->result, defaults_, m.ids))) return false;
  }
  const std::string keep_alive = api.keep_alive();
  auto last_write = Clock::now();
  while (!m.all_finished() && !m.failed) {
    if (!m.start_ready(engine_)) break;
    const bool alive = m.pump([&](size_t i, const CompletionEvent& ev) {
      Exchange& e = *m.ex[i];
      bool ok = true;
      if (ev.kind == CompletionEvent::Kind::kText) {
        ok = send_events(sink,
                         api.stream_delta(e.parsed, ev, e.result, e.id_slot, defaults_, m.ids));
      } else if (ev.kind == CompletionEvent::Kind::kDone) {
        ok = send_events(sink, api.stream_end(e.parsed, e.result, defaults_, m.ids));
      }
      if (ok) last_write = Clock::now();
      return ok;
    });
    if (!alive) {
      m.cancel_all();
      return false;
    }
    if (Clock::now() - last_write >= kPoll) {
      if (!sink.write(keep_alive.data(), keep_alive.size())) {
        m.cancel_all();
        return false;
      }
      last_write = Clock::now();
    }
    if (Clock::now() > m.deadline) m.time_out();
  }
  const CompletionStats usage = m.usage();
  if (m.failed) {
    m.cancel_all();
    if (!send_events(sink, api.stream_error(m.wire_error()))) return false;
  }
  if (!send_events(sink, api.stream_close(m.ex.front()->parsed, m.failed ? nullptr : &usage,
                                          defaults_, m.ids))) {
    return false;
  }
  sink.done();
  return true;
}

}  // namespace mnemo::server
