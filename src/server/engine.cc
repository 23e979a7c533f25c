// The Engine's construction, its incoming queue (submit, control) and the loop that drains it
// and runs one scheduling step after another (engine.h); also TaskChannel. Scheduling is in
// scheduler.cc, slot lifecycle in slots.cc, control requests in control.cc.
#include "server/engine.h"

#include <fmt/format.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>

#include "mnemo/check.h"
#include "mnemo/log.h"
#include "server/engine_internal.h"

namespace mnemo::server {
namespace {

// MemAvailable plus SwapFree from /proc/meminfo (Linux's estimate of what can be allocated
// without swapping out others' pages, plus swap); SIZE_MAX where it cannot be read.
size_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  size_t avail = 0, swap = 0;
  bool found = false;
  std::string key;
  size_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") {
      avail = kib * 1024;
      found = true;
    } else if (key == "SwapFree:") {
      swap = kib * 1024;
    }
  }
  return found ? avail + swap : SIZE_MAX;
}

}  // namespace

const char* slot_state_name(SlotState s) {
  switch (s) {
    case SlotState::kIdle:
      return "idle";
    case SlotState::kPrompt:
      return "prompt";
    case SlotState::kGenerating:
      return "generating";
    case SlotState::kPreempted:
      return "preempted";
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
// Engine

Engine::Engine(const Model& model, const Tokenizer& tok, Metrics* metrics)
    : model_(model), tok_(tok), metrics_(metrics) {}

Engine::~Engine() {
  stop();
  // The cache's and the store's threads may still call wake() (a lookup's on_done) until they
  // are gone: before mu_.
  reuse_.reset();
}

Result<std::unique_ptr<Engine>> Engine::create(const Model& model, const Tokenizer& tok,
                                               const EngineParams& params, Metrics* metrics) {
  CHECK(metrics != nullptr);
  std::unique_ptr<Engine> e(new Engine(model, tok, metrics));
  auto ctx = Context::create(model, params.ctx);
  if (!ctx.ok()) return ctx.status();
  e->ctx_ = std::move(ctx).value();
  e->hparams_swa_ = model.hparams().n_swa > 0;
  if (params.draft_model != nullptr) {
    auto d = DraftModel::create(*params.draft_model, *params.draft_tokenizer, tok, params.ctx,
                                params.spec.draft_vocab);
    if (!d.ok()) return d.status().with_context("--model-draft");
    e->drafter_ = std::move(d).value();
  }
  // An -c the machine cannot hold is refused now, not when the cells fill and the kernel kills
  // the server.
  MNEMO_RETURN_IF_ERROR(e->ctx_->reserve(available_memory_bytes()));
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
  Engine* raw = e.get();
  auto reuse = PromptReuse::create(
      *e->ctx_, params.reuse, [raw] { raw->wake(); }, metrics);
  if (!reuse.ok()) return reuse.status();
  e->reuse_ = std::move(reuse).value();
  if (const auto& cache = params.reuse.cache) {
    e->info_.cache_ram_bytes = cache->ram_bytes;
    e->info_.cache_dir = cache->dir;
    e->info_.cache_disk_bytes = cache->dir.empty() ? 0 : cache->disk_bytes;
  }
  for (uint32_t i = 0; i < cp.n_seq_max; ++i) {
    auto s = std::make_unique<Slot>();
    s->id = static_cast<int32_t>(i);
    s->held.seq = static_cast<SeqId>(i);
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
  auto w = std::make_unique<Task>();
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

void Engine::wake() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    wake_ = true;
  }
  cv_.notify_one();
}

void Engine::loop() {
  MNEMO_LOG(kDebug) << "server loop started";
  while (true) {
    bool active = false;
    for (auto& s : slots_) active = active || s->state != SlotState::kIdle;
    // Requests waiting for a disk entry, the store or their slot's stash cannot move until the
    // lookup or the stash wakes the loop.
    bool ready = false;
    const bool stashing = reuse_->stashes_pending();
    for (auto& w : waiting_) {
      ready = ready || (!w->fetch.pending() && !(w->waits_for_stash && stashing));
    }
    reuse_->pace_stashes(active);  // never paced while the loop may sleep
    drain(/*block=*/!active && !ready);
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stop_) break;
    }
    check_cancelled();
    resume_preempted();
    assign_waiting();
    // While slots decode, a stash on the stash thread copies a slice per step (between steps);
    // otherwise it runs freely.
    bool decoding = false;
    for (auto& sl : slots_) decoding = decoding || sl->state != SlotState::kIdle;
    reuse_->pace_stashes(decoding);
    step();
    if (decoding) reuse_->stash_slice();
    apply_policy();
  }
  shut_down();
}

void Engine::shut_down() {
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
  // What every slot holds goes into the prompt cache, and the cache to disk: a restarted server
  // continues these conversations without reading their prompts again.
  reuse_->shut_down(held_seqs());
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
    if (block) cv_.wait(lk, [&] { return stop_ || wake_ || !incoming_.empty(); });
    wake_ = false;
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

}  // namespace mnemo::server
