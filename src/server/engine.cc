#include "server/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "mnemo/check.h"
#include "mnemo/log.h"
#include "server/slot_state.h"
#include "server/text_stream.h"

namespace mnemo::server {
namespace {

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

size_t common_prefix(const std::vector<TokenId>& a, const std::vector<TokenId>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

// True for the breakdown entries that describe a stream's cells (a SwaKvCache reports its
// full-attention child as "kv_base": that one bounds what a sequence can hold).
bool is_primary_part(const std::string& part) { return part == "kv" || part == "kv_base"; }

}  // namespace

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidRequest:
      return "invalid_request";
    case ErrorKind::kUnauthorized:
      return "unauthorized";
    case ErrorKind::kNotFound:
      return "not_found";
    case ErrorKind::kBusy:
      return "busy";
    case ErrorKind::kPromptTooLong:
      return "too_large";
    case ErrorKind::kCacheFull:
      return "cache_full";
    case ErrorKind::kQueueFull:
      return "queue_full";
    case ErrorKind::kTimeout:
      return "timeout";
    case ErrorKind::kNotSupported:
      return "not_supported";
    case ErrorKind::kInternal:
      return "internal";
    case ErrorKind::kCount:
      break;
  }
  return "unknown";
}

int http_status(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidRequest:
      return 400;
    case ErrorKind::kUnauthorized:
      return 401;
    case ErrorKind::kNotFound:
      return 404;
    case ErrorKind::kBusy:
      return 409;
    case ErrorKind::kPromptTooLong:
      return 413;
    case ErrorKind::kCacheFull:
    case ErrorKind::kQueueFull:
    case ErrorKind::kTimeout:
      return 503;
    case ErrorKind::kNotSupported:
      return 501;
    case ErrorKind::kInternal:
    case ErrorKind::kCount:
      break;
  }
  return 500;
}

const char* slot_state_name(SlotState s) {
  switch (s) {
    case SlotState::kIdle:
      return "idle";
    case SlotState::kPrompt:
      return "prompt";
    case SlotState::kGenerating:
      return "generating";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------------------------
// TaskChannel

void TaskChannel::push(CompletionEvent ev) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    events_.push_back(std::move(ev));
  }
  cv_.notify_one();
}

std::optional<CompletionEvent> TaskChannel::pop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!cv_.wait_for(lk, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  CompletionEvent ev = std::move(events_.front());
  events_.pop_front();
  return ev;
}

// ---------------------------------------------------------------------------------------------
// Engine state

struct Engine::Waiting {
  uint64_t id = 0;
  CompletionRequest req;
  std::shared_ptr<TaskChannel> channel;
};

struct Engine::Incoming {
  std::unique_ptr<Waiting> completion;  // a completion, or else a control request:
  ControlRequest control;
  std::promise<ControlReply> reply;
};

struct Engine::Slot {
  int32_t id = 0;
  SlotState state = SlotState::kIdle;
  std::vector<TokenId> cache_tokens;  // tokens held by sequence `id`, positions 0..size-1
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
  double t_start = 0;  // admission
  double t_first = 0;  // first token sampled
};

// Rows one slot contributes to a step: a prompt chunk or its pending generated token.
struct Engine::WorkItem {
  Slot* slot = nullptr;
  Pos pos0 = 0;                 // position of tokens[0]
  std::vector<TokenId> tokens;  // consecutive positions
  bool output = false;          // the last token needs logits
};

Engine::Engine(const Model& model, const Tokenizer& tok, Metrics* metrics)
    : model_(model), tok_(tok), metrics_(metrics) {}

Engine::~Engine() { stop(); }

Result<std::unique_ptr<Engine>> Engine::create(const Model& model, const Tokenizer& tok,
                                               const EngineParams& params, Metrics* metrics) {
  CHECK(metrics != nullptr);
  std::unique_ptr<Engine> e(new Engine(model, tok, metrics));
  auto ctx = Context::create(model, params.ctx);
  if (!ctx.ok()) return ctx.status();
  e->ctx_ = std::move(ctx).value();
  e->params_ = params;
  const ContextParams& cp = e->ctx_->params();
  e->info_.n_ctx = cp.n_ctx;
  e->info_.n_ctx_seq = e->ctx_->n_ctx_seq();
  e->info_.n_slots = cp.n_seq_max;
  e->info_.n_batch = cp.n_batch;
  e->info_.n_ubatch = cp.n_ubatch;
  e->info_.kv_unified = cp.kv_unified;
  e->info_.context_shift = params.context_shift;
  e->info_.n_threads = cp.n_threads;
  if (params.kv_policy) e->info_.kv_policy = params.kv_policy->to_string();
  for (uint32_t i = 0; i < cp.n_seq_max; ++i) {
    auto s = std::make_unique<Slot>();
    s->id = static_cast<int32_t>(i);
    e->slots_.push_back(std::move(s));
  }
  return e;
}

void Engine::start() {
  CHECK(!thread_.joinable());
  thread_ = std::thread([this] { loop(); });
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Result<std::shared_ptr<TaskChannel>> Engine::submit(CompletionRequest req, ErrorKind* error_kind) {
  auto w = std::make_unique<Waiting>();
  w->id = next_task_id_.fetch_add(1);
  w->req = std::move(req);
  w->channel = std::make_shared<TaskChannel>();
  std::shared_ptr<TaskChannel> ch = w->channel;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) {
      *error_kind = ErrorKind::kTimeout;
      return Status::aborted("the server is shutting down");
    }
    const uint32_t n = n_waiting_.load();
    if (n >= params_.max_queue) {
      *error_kind = ErrorKind::kQueueFull;
      return Status::no_space(
          fmt::format("{} requests are already waiting for a slot (the queue holds at most {})", n,
                      params_.max_queue));
    }
    n_waiting_.fetch_add(1);
    Incoming in;
    in.completion = std::move(w);
    incoming_.push_back(std::move(in));
  }
  cv_.notify_one();
  return ch;
}

std::future<ControlReply> Engine::control(ControlRequest req) {
  Incoming in;
  in.control = std::move(req);
  std::future<ControlReply> f = in.reply.get_future();
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) {
      ControlReply r;
      r.status = Status::aborted("the server is shutting down");
      r.error_kind = ErrorKind::kTimeout;
      in.reply.set_value(std::move(r));
      return f;
    }
    incoming_.push_back(std::move(in));
  }
  cv_.notify_one();
  return f;
}

// ---------------------------------------------------------------------------------------------
// The loop

void Engine::loop() {
  MNEMO_LOG(kDebug) << "server loop started";
  while (true) {
    bool active = false;
    for (auto& s : slots_) active = active || s->state != SlotState::kIdle;
    drain(/*block=*/!active && waiting_.empty());
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stop_) break;
    }
    check_cancelled();
    assign_waiting();
    step();
    apply_policy();
  }
  // Shutting down: everyone still waiting hears so.
  for (auto& s : slots_) {
    if (s->state != SlotState::kIdle) fail(*s, ErrorKind::kTimeout, "the server is shutting down");
  }
  for (auto& w : waiting_) {
    CompletionEvent ev;
    ev.kind = CompletionEvent::Kind::kError;
    ev.error_kind = ErrorKind::kTimeout;
    ev.error = "the server is shutting down";
    w->channel->push(std::move(ev));
  }
  waiting_.clear();
  std::vector<Incoming> rest;
  {
    std::lock_guard<std::mutex> lk(mu_);
    rest.swap(incoming_);
  }
  for (auto& in : rest) {
    if (in.completion) {
      CompletionEvent ev;
      ev.kind = CompletionEvent::Kind::kError;
      ev.error_kind = ErrorKind::kTimeout;
      ev.error = "the server is shutting down";
      in.completion->channel->push(std::move(ev));
    } else {
      ControlReply r;
      r.status = Status::aborted("the server is shutting down");
      r.error_kind = ErrorKind::kTimeout;
      in.reply.set_value(std::move(r));
    }
  }
}

void Engine::drain(bool block) {
  std::vector<Incoming> in;
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (block) cv_.wait(lk, [&] { return stop_ || !incoming_.empty(); });
    in.swap(incoming_);
  }
  for (Incoming& x : in) {
    if (x.completion) {
      waiting_.push_back(std::move(x.completion));
    } else {
      run_control(x.control, x.reply);
    }
  }
}

void Engine::run_control(ControlRequest& req, std::promise<ControlReply>& reply) {
  ControlReply r;
  switch (req.kind) {
    case ControlKind::kSnapshot:
      r = snapshot();
      break;
    case ControlKind::kSlotSave:
      r = slot_save(req);
      break;
    case ControlKind::kSlotRestore:
      r = slot_restore(req);
      break;
    case ControlKind::kSlotErase:
      r = slot_erase(req);
      break;
    case ControlKind::kRequantize:
      r = requantize(req);
      break;
  }
  reply.set_value(std::move(r));
}

void Engine::check_cancelled() {
  for (auto& s : slots_) {
    if (s->state != SlotState::kIdle && s->task->channel->cancelled()) {
      finish(*s, FinishReason::kCancelled);
    }
  }
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if ((*it)->channel->cancelled()) {
      metrics_->cancelled_total.fetch_add(1, std::memory_order_relaxed);
      it = waiting_.erase(it);
      n_waiting_.fetch_sub(1);
    } else {
      ++it;
    }
  }
}

Engine::Slot* Engine::pick_slot(const Waiting& w) {
  if (w.req.id_slot >= 0) {
    if (w.req.id_slot >= static_cast<int32_t>(slots_.size())) return nullptr;
    Slot* s = slots_[w.req.id_slot].get();
    return s->state == SlotState::kIdle ? s : nullptr;
  }
  Slot* best = nullptr;
  size_t best_lcp = 0;
  for (auto& s : slots_) {
    if (s->state != SlotState::kIdle) continue;
    const size_t lcp = w.req.cache_prompt ? common_prefix(s->cache_tokens, w.req.prompt) : 0;
    if (best == nullptr || lcp > best_lcp || (lcp == best_lcp && s->last_used < best->last_used)) {
      best = s.get();
      best_lcp = lcp;
    }
  }
  return best;
}

void Engine::assign_waiting() {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Waiting& w = **it;
    if (w.req.id_slot >= static_cast<int32_t>(slots_.size())) {
      CompletionEvent ev;
      ev.kind = CompletionEvent::Kind::kError;
      ev.error_kind = ErrorKind::kInvalidRequest;
      ev.error = fmt::format("id_slot {} does not exist (the server has {} slots)", w.req.id_slot,
                             slots_.size());
      metrics_->count_error(uint8_t(ev.error_kind));
      w.channel->push(std::move(ev));
      it = waiting_.erase(it);
      n_waiting_.fetch_sub(1);
      continue;
    }
    Slot* slot = pick_slot(w);
    if (slot == nullptr) {
      ++it;  // waits (for its slot, or for any slot); later requests may still find theirs
      continue;
    }
    ErrorKind kind = ErrorKind::kInternal;
    std::string why;
    if (!admit(w, *slot, &kind, &why)) {
      CompletionEvent ev;
      ev.kind = CompletionEvent::Kind::kError;
      ev.error_kind = kind;
      ev.error = std::move(why);
      metrics_->count_error(uint8_t(kind));
      w.channel->push(std::move(ev));
    } else {
      slot->task = std::move(*it);
    }
    it = waiting_.erase(it);
    n_waiting_.fetch_sub(1);
  }
}

uint32_t Engine::stream_free_cells(uint32_t stream) const {
  const MemoryBreakdown b = ctx_->memory().breakdown();
  for (const auto& st : b.streams) {
    if (st.stream == stream && is_primary_part(st.part)) return st.free;
  }
  // No KV part at all (a recurrent memory, mamba2): states are preallocated per slot, there are
  // no cells to run out of.
  for (const auto& st : b.streams) {
    if (is_primary_part(st.part)) return 0;
  }
  return 1u << 30;
}

bool Engine::admit(Waiting& w, Slot& slot, ErrorKind* kind, std::string* why) {
  const std::vector<TokenId>& prompt = w.req.prompt;
  const size_t n_prompt = prompt.size();
  if (n_prompt == 0) {
    *kind = ErrorKind::kInvalidRequest;
    *why = "the prompt is empty";
    return false;
  }
  if (n_prompt >= info_.n_ctx_seq) {
    *kind = ErrorKind::kPromptTooLong;
    *why = fmt::format(
        "the prompt has {} tokens; a slot holds at most {} tokens including the reply "
        "(n_ctx {}, {} slots, {} KV)",
        n_prompt, info_.n_ctx_seq, info_.n_ctx, info_.n_slots,
        info_.kv_unified ? "unified" : "split");
    return false;
  }
  size_t n_cached = w.req.cache_prompt ? common_prefix(slot.cache_tokens, prompt) : 0;
  // The last prompt token is always evaluated: its logits give the first generated token.
  if (n_cached == n_prompt) --n_cached;
  // A recurrent memory keeps a prefix only up to a checkpoint (memory.h, plan_truncate): resume
  // from there. Attention-only memories keep every position (keep == n_cached).
  if (auto plan = ctx_->memory().plan_truncate(slot.id, static_cast<Pos>(n_cached)); plan.ok()) {
    n_cached = static_cast<size_t>(plan->keep);
  }
  const uint32_t need = static_cast<uint32_t>(n_prompt - n_cached);
  const uint32_t stream = info_.kv_unified ? 0 : static_cast<uint32_t>(slot.id);
  // This slot's cells past the reused prefix are freed by the seq_rm below.
  uint32_t free =
      stream_free_cells(stream) + static_cast<uint32_t>(slot.cache_tokens.size() - n_cached);
  if (need > free && info_.kv_unified) {
    // Idle slots' prompt caches are the only cells that can go: least recently used first, and
    // only when that makes the prompt fit.
    std::vector<Slot*> idle;
    uint32_t evictable = 0;
    for (auto& s : slots_) {
      if (s.get() != &slot && s->state == SlotState::kIdle && !s->cache_tokens.empty()) {
        idle.push_back(s.get());
        evictable += static_cast<uint32_t>(s->cache_tokens.size());
      }
    }
    if (free + evictable >= need) {
      std::sort(idle.begin(), idle.end(),
                [](const Slot* a, const Slot* b) { return a->last_used < b->last_used; });
      for (Slot* s : idle) {
        if (free >= need) break;
        if (!ctx_->memory().seq_rm(s->id, -1, -1).ok()) continue;
        free += static_cast<uint32_t>(s->cache_tokens.size());
        s->cache_tokens.clear();
      }
    }
  }
  if (need > free) {
    *kind = ErrorKind::kCacheFull;
    *why = fmt::format(
        "KV cache full: the prompt needs {} new cells ({} tokens, {} reused from the slot's "
        "cache) but stream {} has {} free cells of {}; retry later or start the server with a "
        "larger -c",
        need, n_prompt, n_cached, stream, free, info_.kv_unified ? info_.n_ctx : info_.n_ctx_seq);
    return false;
  }
  if (Status st = ctx_->memory().seq_rm(slot.id, static_cast<Pos>(n_cached), -1); !st.ok()) {
    *kind = ErrorKind::kInternal;
    *why = "seq_rm failed: " + st.to_string();
    return false;
  }
  slot.cache_tokens.resize(n_cached);
  slot.sampler = std::make_unique<Sampler>(w.req.sampling);
  const size_t n_window = static_cast<size_t>(std::max(0, w.req.sampling.repeat_last_n));
  for (size_t i = n_prompt - std::min(n_prompt, n_window); i < n_prompt; ++i) {
    slot.sampler->accept(prompt[i]);
  }
  slot.stream.reset(w.req.stop);
  slot.pending = kTokenNull;
  slot.unsent_tokens.clear();
  slot.unsent_probs.clear();
  slot.stats = CompletionStats{};
  slot.stats.id_slot = slot.id;
  slot.stats.n_prompt = static_cast<int32_t>(n_prompt);
  slot.stats.n_cached = static_cast<int32_t>(n_cached);
  slot.t_start = now_ms();
  slot.t_first = 0;
  slot.state = SlotState::kPrompt;
  CompletionEvent ev;
  ev.kind = CompletionEvent::Kind::kAdmitted;
  ev.stats = slot.stats;
  w.channel->push(std::move(ev));
  return true;
}

void Engine::step() {
  std::vector<WorkItem> items;
  uint32_t budget = info_.n_batch;
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (s.state != SlotState::kGenerating || budget == 0) continue;
    if (s.cache_tokens.size() >= info_.n_ctx_seq) {
      if (!params_.context_shift || !context_shift(s)) {
        finish(s, FinishReason::kContext);
        continue;
      }
    }
    WorkItem it;
    it.slot = &s;
    it.pos0 = static_cast<Pos>(s.cache_tokens.size());
    it.tokens = {s.pending};
    it.output = true;
    items.push_back(std::move(it));
    --budget;
  }
  // While some slots generate, prompt chunks are capped at one ubatch so a long prompt delays
  // their next token by one forward pass, not by n_batch / n_ubatch of them.
  if (!items.empty()) budget = std::min(budget, info_.n_ubatch);
  const uint32_t n = static_cast<uint32_t>(slots_.size());
  for (uint32_t k = 0; k < n && budget > 0; ++k) {
    Slot& s = *slots_[(rr_ + k) % n];
    if (s.state != SlotState::kPrompt) continue;
    const std::vector<TokenId>& prompt = s.task->req.prompt;
    const size_t done = s.cache_tokens.size();
    const size_t take = std::min<size_t>(budget, prompt.size() - done);
    WorkItem it;
    it.slot = &s;
    it.pos0 = static_cast<Pos>(done);
    it.tokens.assign(prompt.begin() + done, prompt.begin() + done + take);
    it.output = done + take == prompt.size();
    items.push_back(std::move(it));
    budget -= static_cast<uint32_t>(take);
  }
  ++rr_;
  if (!items.empty()) {
    ++steps_;
    decode_items(items);
  }
}

void Engine::apply_policy() {
  if (!params_.kv_policy) return;
  std::vector<uint64_t> last_active(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) last_active[i] = slots_[i]->last_active;
  auto moves = params_.kv_policy->step(ctx_->memory(), last_active);
  if (!moves.ok()) {
    MNEMO_LOG(kWarn) << "kv policy: " << moves.status().to_string();
    return;
  }
  for (const KvPolicy::Move& m : *moves) {
    metrics_->requantizations_total.fetch_add(1, std::memory_order_relaxed);
    MNEMO_LOG(kInfo) << fmt::format("kv policy: slot {} rung {} -> {} (occupancy {:.2f} -> {:.2f})",
                                    m.seq, m.from_rung, m.to_rung, m.occupancy_before,
                                    m.occupancy_after);
  }
}

void Engine::decode_items(std::vector<WorkItem>& items) {
  Batch batch;
  std::vector<uint32_t> out_row(items.size(), UINT32_MAX);
  uint32_t n_out = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const WorkItem& it = items[i];
    for (size_t j = 0; j < it.tokens.size(); ++j) {
      const bool out = it.output && j + 1 == it.tokens.size();
      batch.add(it.tokens[j], it.pos0 + static_cast<Pos>(j), {it.slot->id}, out);
    }
    if (it.output) out_row[i] = n_out++;
  }
  const Status st = ctx_->decode(batch);
  metrics_->decode_steps_total.fetch_add(1, std::memory_order_relaxed);
  if (st.ok()) {
    for (size_t i = 0; i < items.size(); ++i) commit(items[i], out_row[i]);
    return;
  }
  if (st.code() == StatusCode::kNoSpace && items.size() > 1) {
    // The memory is unchanged; give each slot its own chance so one full conversation does
    // not stop the others.
    for (WorkItem& it : items) {
      std::vector<WorkItem> one;
      one.push_back(std::move(it));
      decode_items(one);
    }
    return;
  }
  for (WorkItem& it : items) {
    Slot& s = *it.slot;
    if (st.code() == StatusCode::kNoSpace) {
      if (s.state == SlotState::kGenerating && params_.context_shift && context_shift(s)) continue;
      fail(s, ErrorKind::kCacheFull,
           fmt::format("KV cache full while decoding {} tokens for slot {} (it holds {}): {}",
                       it.tokens.size(), s.id, s.cache_tokens.size(), st.message()));
    } else {
      MNEMO_LOG(kError) << "decode failed: " << st.to_string();
      fail(s, ErrorKind::kInternal, "decode failed: " + st.to_string());
    }
  }
}

void Engine::commit(WorkItem& item, uint32_t out_row) {
  Slot& s = *item.slot;
  s.cache_tokens.insert(s.cache_tokens.end(), item.tokens.begin(), item.tokens.end());
  s.last_active = steps_;
  check_slot(s);
  if (!item.output) return;
  if (s.state == SlotState::kPrompt) {
    s.state = SlotState::kGenerating;
    s.t_first = now_ms();
    s.stats.prompt_ms = s.t_first - s.t_start;
    if (s.task->req.n_predict == 0) {
      finish(s, FinishReason::kLimit);
      return;
    }
  }
  const std::span<const float> logits = ctx_->logits(out_row);
  on_token(s, s.sampler->sample(logits), logits);
}

namespace {

// Log-softmax of `logits` at `tok` and the n best entries (n_vocab work per call).
TokenProbs token_probs(std::span<const float> logits, TokenId tok, int32_t n) {
  float max = logits[0];
  for (float x : logits) max = std::max(max, x);
  double sum = 0;
  for (float x : logits) sum += std::exp(double(x) - max);
  const float log_z = max + static_cast<float>(std::log(sum));
  TokenProbs p;
  p.id = tok;
  p.logprob = logits[tok] - log_z;
  std::vector<TokenId> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<TokenId>(i);
  const size_t k = std::min<size_t>(static_cast<size_t>(n), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](TokenId a, TokenId b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (size_t i = 0; i < k; ++i) p.top.emplace_back(ids[i], logits[ids[i]] - log_z);
  return p;
}

}  // namespace

void Engine::on_token(Slot& s, TokenId tok, std::span<const float> logits) {
  s.sampler->accept(tok);
  ++s.stats.n_generated;
  if (!s.task->req.ignore_eos && tok_.is_eog(tok)) {
    finish(s, FinishReason::kEos);
    return;
  }
  s.unsent_tokens.push_back(tok);
  if (s.task->req.n_probs > 0) {
    s.unsent_probs.push_back(token_probs(logits, tok, s.task->req.n_probs));
  }
  std::string text = s.stream.append(tok_.token_to_piece(tok, /*special=*/false));
  const bool stopped = s.stream.stopped();
  const bool limit = s.stats.n_generated >= s.task->req.n_predict;
  if (!text.empty() || (!stopped && !limit)) {
    CompletionEvent ev;
    ev.kind = CompletionEvent::Kind::kText;
    ev.text = std::move(text);
    ev.tokens.swap(s.unsent_tokens);
    ev.probs.swap(s.unsent_probs);
    s.task->channel->push(std::move(ev));
  }
  if (stopped) {
    finish(s, FinishReason::kWord);
  } else if (limit) {
    finish(s, FinishReason::kLimit);
  } else {
    s.pending = tok;
  }
}

bool Engine::context_shift(Slot& s) {
  const int32_t n_past = static_cast<int32_t>(s.cache_tokens.size());
  int32_t n_keep = s.task->req.n_keep < 0 ? s.stats.n_prompt : s.task->req.n_keep;
  n_keep = std::max(0, std::min(n_keep, n_past - 2));
  const int32_t n_discard = (n_past - n_keep) / 2;
  if (n_discard <= 0) return false;
  Memory& mem = ctx_->memory();
  if (!mem.seq_rm(s.id, n_keep, n_keep + n_discard).ok()) return false;
  if (Status st = mem.seq_add(s.id, n_keep + n_discard, -1, -n_discard); !st.ok()) {
    // Cannot happen for a well-formed sequence; keep the slot consistent anyway.
    MNEMO_LOG(kError) << "context shift: seq_add failed: " << st.to_string();
    (void)mem.seq_rm(s.id, -1, -1);
    s.cache_tokens.clear();
    return false;
  }
  s.cache_tokens.erase(s.cache_tokens.begin() + n_keep,
                       s.cache_tokens.begin() + n_keep + n_discard);
  ++s.stats.n_shifts;
  metrics_->context_shifts_total.fetch_add(1, std::memory_order_relaxed);
  MNEMO_LOG(kInfo) << "slot " << s.id << ": context shift, kept " << n_keep << ", dropped "
                   << n_discard << ", now " << s.cache_tokens.size() << " tokens";
  check_slot(s);
  return true;
}

void Engine::finish(Slot& s, FinishReason reason) {
  const double now = now_ms();
  std::string rest = s.stream.flush();
  if (!rest.empty() || !s.unsent_tokens.empty()) {
    CompletionEvent ev;
    ev.kind = CompletionEvent::Kind::kText;
    ev.text = std::move(rest);
    ev.tokens.swap(s.unsent_tokens);
    ev.probs.swap(s.unsent_probs);
    s.task->channel->push(std::move(ev));
  }
  if (s.t_first == 0) {
    s.stats.prompt_ms = now - s.t_start;
  } else {
    s.stats.gen_ms = now - s.t_first;
  }
  CompletionEvent done;
  done.kind = CompletionEvent::Kind::kDone;
  done.finish = reason;
  done.stop_word = s.stream.stop_word();
  done.stats = s.stats;
  s.task->channel->push(std::move(done));

  Metrics& m = *metrics_;
  constexpr auto kRelaxed = std::memory_order_relaxed;
  m.requests_total.fetch_add(1, kRelaxed);
  m.prompt_tokens_total.fetch_add(uint64_t(s.stats.n_prompt - s.stats.n_cached), kRelaxed);
  m.prompt_tokens_cached_total.fetch_add(uint64_t(s.stats.n_cached), kRelaxed);
  m.tokens_predicted_total.fetch_add(uint64_t(s.stats.n_generated), kRelaxed);
  m.prompt_us_total.fetch_add(uint64_t(s.stats.prompt_ms * 1000), kRelaxed);
  m.predicted_us_total.fetch_add(uint64_t(s.stats.gen_ms * 1000), kRelaxed);
  if (reason == FinishReason::kCancelled) m.cancelled_total.fetch_add(1, kRelaxed);
  release(s);
}

void Engine::fail(Slot& s, ErrorKind kind, const std::string& why) {
  CompletionEvent ev;
  ev.kind = CompletionEvent::Kind::kError;
  ev.error_kind = kind;
  ev.error = why;
  s.task->channel->push(std::move(ev));
  metrics_->count_error(uint8_t(kind));
  release(s);
}

void Engine::release(Slot& s) {
  s.state = SlotState::kIdle;
  s.task.reset();
  s.sampler.reset();
  s.pending = kTokenNull;
  s.unsent_tokens.clear();
  s.unsent_probs.clear();
  s.last_used = ++clock_;
}

void Engine::check_slot(const Slot& s) const {
  DCHECK(ctx_->memory().seq_pos_max(s.id) == static_cast<Pos>(s.cache_tokens.size()) - 1)
      << "slot " << s.id << " holds " << s.cache_tokens.size()
      << " tokens but its sequence ends at " << ctx_->memory().seq_pos_max(s.id);
}

// ---------------------------------------------------------------------------------------------
// Control requests

ControlReply Engine::snapshot() {
  ControlReply r;
  r.breakdown = ctx_->memory().breakdown();
  r.n_queued = static_cast<int32_t>(waiting_.size());
  for (auto& sp : slots_) {
    const Slot& s = *sp;
    SlotInfo info;
    info.id = s.id;
    info.state = s.state;
    info.n_ctx = info_.n_ctx_seq;
    info.n_tokens = static_cast<int32_t>(s.cache_tokens.size());
    if (s.state != SlotState::kIdle) {
      ++r.n_processing;
      info.n_prompt = s.stats.n_prompt;
      info.n_generated = s.stats.n_generated;
      info.id_task = s.task->id;
    }
    const uint32_t stream = info_.kv_unified ? 0 : static_cast<uint32_t>(s.id);
    size_t stream_bytes = 0;
    uint32_t n_cells = 0;
    for (const auto& st : r.breakdown.streams) {
      if (st.stream != stream) continue;
      stream_bytes += st.tensor_bytes;
      if (is_primary_part(st.part)) {
        info.type_k = st.k_type;
        info.type_v = st.v_type;
        n_cells = st.n_cells;
      }
    }
    if (!info_.kv_unified) {
      info.bytes = stream_bytes;
    } else if (n_cells > 0) {
      info.bytes = static_cast<size_t>(double(stream_bytes) * info.n_tokens / n_cells);
    }
    r.slots.push_back(info);
  }
  return r;
}

namespace {

ControlReply error_reply(ErrorKind kind, Status st) {
  ControlReply r;
  r.status = std::move(st);
  r.error_kind = kind;
  return r;
}

}  // namespace

std::optional<ControlReply> Engine::idle_slot_error(int32_t slot) const {
  if (slot < 0 || slot >= static_cast<int32_t>(slots_.size())) {
    return error_reply(ErrorKind::kNotFound,
                       Status::not_found(fmt::format("slot {} does not exist", slot)));
  }
  if (slots_[slot]->state != SlotState::kIdle) {
    return error_reply(ErrorKind::kBusy, Status::invalid_argument(fmt::format(
                                             "slot {} is processing a request", slot)));
  }
  return std::nullopt;
}

ControlReply Engine::slot_erase(const ControlRequest& req) {
  if (auto err = idle_slot_error(req.slot)) return *err;
  Slot& s = *slots_[req.slot];
  const double t0 = now_ms();
  ControlReply r;
  r.n_tokens = static_cast<int32_t>(s.cache_tokens.size());
  if (Status st = ctx_->memory().seq_rm(s.id, -1, -1); !st.ok()) {
    return error_reply(ErrorKind::kInternal, st);
  }
  s.cache_tokens.clear();
  r.ms = now_ms() - t0;
  return r;
}

ControlReply Engine::slot_save(const ControlRequest& req) {
  if (auto err = idle_slot_error(req.slot)) return *err;
  Slot& s = *slots_[req.slot];
  const double t0 = now_ms();
  ControlReply r;
  auto bytes = save_slot_file(*ctx_, s.id, req.path, s.cache_tokens);
  if (!bytes.ok()) {
    const ErrorKind kind = bytes.status().code() == StatusCode::kNotSupported
                               ? ErrorKind::kNotSupported
                               : ErrorKind::kInternal;
    return error_reply(kind, bytes.status());
  }
  r.n_tokens = static_cast<int32_t>(s.cache_tokens.size());
  r.bytes = *bytes;
  r.ms = now_ms() - t0;
  return r;
}

ControlReply Engine::slot_restore(const ControlRequest& req) {
  if (auto err = idle_slot_error(req.slot)) return *err;
  Slot& s = *slots_[req.slot];
  const double t0 = now_ms();
  std::vector<TokenId> tokens;
  auto bytes = load_slot_file(*ctx_, s.id, req.path, &tokens);
  if (!bytes.ok()) {
    // A bad, damaged, newer or other model's file is the client's problem (400).
    ErrorKind kind = ErrorKind::kInvalidRequest;
    switch (bytes.status().code()) {
      case StatusCode::kNotFound:
        kind = ErrorKind::kNotFound;
        break;
      case StatusCode::kNoSpace:
        kind = ErrorKind::kCacheFull;
        break;
      case StatusCode::kIOError:
      case StatusCode::kInternal:
        kind = ErrorKind::kInternal;
        break;
      default:
        break;
    }
    // The state API leaves the sequence as it was on every error but one (a file changed while
    // it was read, or a token list that does not match the cells): then it is empty.
    if (ctx_->memory().seq_pos_max(s.id) != static_cast<Pos>(s.cache_tokens.size()) - 1) {
      (void)ctx_->memory().seq_rm(s.id, -1, -1);
      s.cache_tokens.clear();
    }
    return error_reply(kind, bytes.status());
  }
  s.cache_tokens = std::move(tokens);
  check_slot(s);
  ControlReply r;
  r.n_tokens = static_cast<int32_t>(s.cache_tokens.size());
  r.bytes = *bytes;
  r.ms = now_ms() - t0;
  return r;
}

ControlReply Engine::requantize(const ControlRequest& req) {
  if (req.slot >= static_cast<int32_t>(slots_.size())) {
    return error_reply(ErrorKind::kNotFound,
                       Status::not_found(fmt::format("slot {} does not exist", req.slot)));
  }
  if (req.slot >= 0 && info_.kv_unified) {
    return error_reply(ErrorKind::kInvalidRequest,
                       Status::invalid_argument(
                           "per-slot requantization needs split KV (one stream per slot); this "
                           "server runs with -kvu: requantize the whole cache instead"));
  }
  const double t0 = now_ms();
  ControlReply r;
  r.bytes_before = ctx_->memory().breakdown().tensor_bytes;
  if (Status st = requantize_memory(*ctx_, req.slot, req.type_k, req.type_v); !st.ok()) {
    ErrorKind kind = ErrorKind::kInternal;
    if (st.code() == StatusCode::kNotSupported) kind = ErrorKind::kNotSupported;
    if (st.code() == StatusCode::kInvalidArgument) kind = ErrorKind::kInvalidRequest;
    if (st.code() == StatusCode::kNoSpace) kind = ErrorKind::kCacheFull;
    return error_reply(kind, st);
  }
  r.bytes_after = ctx_->memory().breakdown().tensor_bytes;
  r.ms = now_ms() - t0;
  metrics_->requantizations_total.fetch_add(1, std::memory_order_relaxed);
  for (auto& s : slots_) check_slot(*s);
  return r;
}

}  // namespace mnemo::server
