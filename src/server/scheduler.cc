// Scheduling on the loop thread (engine.h): the waiting queue (cancellation, slot choice),
// admission before any compute (the longest reusable prefix from the slot, another slot or the
// prompt cache, cut where Memory::plan_truncate allows; room checked against Memory::seq_info;
// eviction of idle caches in a shared stream), continuous batching of one step, and generation
// (sampling, log-probabilities, text events). A slot's start, context
// shift and end are in slots.cc.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "mnemo/check.h"
#include "mnemo/log.h"
#include "server/engine.h"
#include "server/engine_internal.h"

namespace mnemo::server {

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

Engine::Slot* Engine::pick_slot(const Task& t) {
  if (t.req.id_slot >= 0) {
    if (t.req.id_slot >= static_cast<int32_t>(slots_.size())) return nullptr;
    Slot* s = slots_[t.req.id_slot].get();
    return s->state == SlotState::kIdle ? s : nullptr;
  }
  Slot* best = nullptr;
  size_t best_lcp = 0;
  for (auto& s : slots_) {
    if (s->state != SlotState::kIdle) continue;
    const size_t lcp = t.req.cache_prompt ? common_prefix(s->held.tokens, t.req.prompt) : 0;
    if (best == nullptr || lcp > best_lcp || (lcp == best_lcp && s->last_used < best->last_used)) {
      best = s.get();
      best_lcp = lcp;
    }
  }
  return best;
}

void Engine::assign_waiting() {
  // First come, first served for the cells of a shared stream: while a preempted request or an
  // earlier one waits for cells, later ones do not take them.
  bool blocked = std::any_of(slots_.begin(), slots_.end(),
                             [](const auto& s) { return s->state == SlotState::kPreempted; });
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Task& t = **it;
    if (t.fetch.pending()) {
      ++it;  // its disk entry or the store's answer is still on its way
      continue;
    }
    if (t.req.id_slot >= static_cast<int32_t>(slots_.size())) {
      CompletionEvent ev;
      ev.kind = CompletionEvent::Kind::kError;
      ev.error_kind = ErrorKind::kInvalidRequest;
      ev.error = fmt::format("id_slot {} does not exist (the server has {} slots)", t.req.id_slot,
                             slots_.size());
      metrics_->count_error(uint8_t(ev.error_kind));
      t.channel->push(std::move(ev));
      it = waiting_.erase(it);
      n_waiting_.fetch_sub(1);
      continue;
    }
    Slot* slot = blocked ? nullptr : pick_slot(t);
    if (slot == nullptr) {
      ++it;  // waits (for its slot, or for any slot); later requests may still find theirs
      continue;
    }
    ErrorKind kind = ErrorKind::kInternal;
    std::string why;
    const Admission a = admit(t, *slot, &kind, &why);
    if (a == Admission::kDeferred || a == Admission::kWait) {
      blocked = blocked || a == Admission::kWait;
      ++it;
      continue;
    }
    if (a == Admission::kFailed) {
      CompletionEvent ev;
      ev.kind = CompletionEvent::Kind::kError;
      ev.error_kind = kind;
      ev.error = std::move(why);
      metrics_->count_error(uint8_t(kind));
      t.channel->push(std::move(ev));
    } else {
      slot->task = std::move(*it);
    }
    it = waiting_.erase(it);
    n_waiting_.fetch_sub(1);
  }
}

namespace {

// A slot's memory goes into the prompt cache before a request drops at least this many of its
// tokens. Fewer is the same conversation continuing (its new prompt re-tokenizes the end of the
// last reply a little differently): storing it would keep a near-copy of what the slot goes on
// holding. Another conversation taking the slot drops its whole last turn, more than this.
constexpr size_t kMinStash = 16;

}  // namespace

std::vector<HeldSeq*> Engine::held_seqs() {
  std::vector<HeldSeq*> all;
  for (auto& s : slots_) all.push_back(&s->held);
  return all;
}

Engine::Admission Engine::admit(Task& t, Slot& slot, ErrorKind* kind, std::string* why) {
  const std::vector<TokenId>& prompt = t.req.prompt;
  const size_t n_prompt = prompt.size();
  if (n_prompt == 0) {
    *kind = ErrorKind::kInvalidRequest;
    *why = "the prompt is empty";
    return Admission::kFailed;
  }
  if (n_prompt >= info_.n_ctx_seq) {
    *kind = ErrorKind::kPromptTooLong;
    *why = fmt::format(
        "request ({} tokens) exceeds the available context size ({} tokens), try increasing it "
        "(n_ctx {}, {} slots, {} KV)",
        n_prompt, info_.n_ctx_seq, info_.n_ctx, info_.n_slots,
        info_.kv_unified ? "unified" : "split");
    return Admission::kFailed;
  }
  // The slot's sequence is still being written into the prompt cache (on the stash thread): it
  // must not change until that is done, and the other slots go on meanwhile.
  t.waits_for_stash = reuse_->stash_pending(slot.held.seq);
  if (t.waits_for_stash) return Admission::kDeferred;
  // A prompt shorter than n_ctx_seq always fits alone: generation ends ("length") or shifts at
  // n_ctx_seq, so the most cells a request may need, min(n_prompt + n_predict - 1, n_ctx_seq),
  // fit a stream of its own or the whole shared one. Past this point the request waits for
  // cells, never fails for lack of them.
  const std::vector<HeldSeq*> others = held_seqs();
  ReuseSource src = reuse_->plan(prompt, t.req.cache_prompt, slot.held, others, &t.fetch);
  if (src.kind == ReuseSource::Kind::kDeferred) return Admission::kDeferred;
  Room room = make_room(slot, src, n_prompt, kind, why);
  const bool running = std::any_of(slots_.begin(), slots_.end(),
                                   [](const auto& s) { return s->state != SlotState::kIdle; });
  if (room == Room::kWait && !running && src.kind != ReuseSource::Kind::kOwn &&
      src.kind != ReuseSource::Kind::kNone) {
    // Nothing runs that could free cells: the prefix source itself (an idle slot whose memory
    // is kept for the copy, or an entry's restored cells) is what does not fit. Read the prompt
    // without it.
    src = ReuseSource{};
    if (t.req.cache_prompt) {
      src.kind = ReuseSource::Kind::kOwn;
      src.keep = reuse_->reusable_prefix(slot.held, prompt, n_prompt - 1);
    }
    room = make_room(slot, src, n_prompt, kind, why);
  }
  if (room == Room::kWait && !running) {
    // Cannot happen (every idle slot's memory can go); refused rather than waiting forever.
    *kind = ErrorKind::kCacheFull;
    *why = fmt::format("KV cache full: {} prompt tokens do not fit the {} cells of the stream",
                       n_prompt, info_.n_ctx);
    return Admission::kFailed;
  }
  if (room == Room::kWait) return Admission::kWait;
  if (room == Room::kFailed) return Admission::kFailed;
  // The slot's own tokens past what it keeps are dropped: into the prompt cache first.
  const size_t own_kept = src.kind == ReuseSource::Kind::kOwn ? src.keep : 0;
  if (slot.held.tokens.size() >= own_kept + kMinStash) reuse_->stash(slot.held);
  // Stashed on the stash thread: admitted once it is written (the request waits in the queue).
  t.waits_for_stash = reuse_->stash_pending(slot.held.seq);
  if (t.waits_for_stash) return Admission::kDeferred;
  const size_t n_cached = reuse_->apply(prompt, t.req.cache_prompt, slot.held, src, t.fetch);
  check_slot(slot);
  reuse_->publish(slot.held);
  begin(t, slot, n_cached);
  return Admission::kAdmitted;
}

Engine::Room Engine::make_room(Slot& slot, const ReuseSource& src, size_t n_prompt, ErrorKind* kind,
                               std::string* why) {
  Memory& mem = ctx_->memory();
  const size_t own_kept = src.kind == ReuseSource::Kind::kOwn ? src.keep : 0;
  const uint32_t need = static_cast<uint32_t>(n_prompt - src.keep);
  auto seq = mem.seq_info(slot.id);
  if (!seq.ok()) {
    *kind = ErrorKind::kInternal;
    *why = "seq_info failed: " + seq.status().to_string();
    return Room::kFailed;
  }
  // A memory without cells (a recurrent state) has room for any prompt.
  if (seq->free_cells == SeqMemoryInfo::kUnbounded) return Room::kFits;
  // The slot's cells past what it keeps of its own are freed; a copied or restored prefix takes
  // cells of its own (in a unified stream a copy shares the source's cells instead). In a shared
  // stream the running requests' next cells are not given away.
  const bool shared = info_.kv_unified;
  const bool shares = src.kind == ReuseSource::Kind::kSeq && shared;
  const int64_t taken = src.kind == ReuseSource::Kind::kOwn || shares ? 0 : int64_t(src.keep);
  const int64_t freed = int64_t(slot.held.tokens.size() - own_kept);
  const int64_t reserved = shared ? reserved_cells(&slot) : 0;
  const int64_t target = std::max<int64_t>(0, int64_t(need) + taken + reserved - freed);
  if (target <= int64_t(seq->free_cells)) return Room::kFits;
  if (shared) {
    // Idle slots' memory can go (stashed first), only when that makes room; otherwise the
    // request waits until running requests end or are preempted.
    const uint32_t t32 = static_cast<uint32_t>(std::min<int64_t>(target, UINT32_MAX));
    return reclaim_idle(t32, &slot, src.from, /*all_or_nothing=*/true) >= t32 ? Room::kFits
                                                                              : Room::kWait;
  }
  *kind = ErrorKind::kCacheFull;
  *why = fmt::format(
      "KV cache full: the prompt needs {} new cells ({} tokens, {} reused) but stream {} has "
      "{} free cells of {}; retry later or start the server with a larger -c",
      need, n_prompt, src.keep, seq->stream,
      std::max<int64_t>(0, int64_t(seq->free_cells) + freed - taken), info_.n_ctx_seq);
  return Room::kFailed;
}

uint32_t Engine::reserved_cells(const Slot* except) const {
  uint32_t n = 0;
  for (const auto& s : slots_) {
    if (s.get() == except) continue;
    if (s->state == SlotState::kGenerating) ++n;
    if (s->state == SlotState::kPrompt) {
      n += static_cast<uint32_t>(s->task->req.prompt.size() - s->held.tokens.size());
    }
  }
  return n;
}

uint32_t Engine::stream_free() const {
  auto seq = ctx_->memory().seq_info(0);
  return seq.ok() ? seq->free_cells : 0;
}

uint32_t Engine::reclaim_idle(uint32_t target, const Slot* except, const HeldSeq* keep,
                              bool all_or_nothing) {
  uint32_t free = stream_free();
  if (free >= target) return free;
  std::vector<Slot*> idle;
  uint64_t evictable = 0;
  for (auto& s : slots_) {
    if (s.get() == except || &s->held == keep || s->state != SlotState::kIdle ||
        s->held.tokens.empty()) {
      continue;
    }
    idle.push_back(s.get());
    evictable += s->held.tokens.size();  // at most: cells shared with another sequence stay
  }
  if (all_or_nothing && free + evictable < target) return free;
  std::sort(idle.begin(), idle.end(),
            [](const Slot* a, const Slot* b) { return a->last_used < b->last_used; });
  for (Slot* s : idle) {
    if (free >= target) break;
    if (reuse_->drop(s->held).ok()) free = stream_free();
  }
  return free;
}

std::vector<TokenId> Engine::draft_for(Slot& s, uint32_t room) {
  std::vector<TokenId> draft;
  const SpecParams& sp = params_.spec;
  if ((!sp.ngram && !drafter_) || !s.forced.empty()) return draft;
  // A sliding-window cache evicts cells judged from each ubatch's start, so a rollback is exact
  // only if a verify batch is one ubatch: its rows must not be split among ubatches with other
  // slots' rows (split KV cuts equal shares per sequence). Such a model drafts while it is the
  // only slot at work (docs/design.md §3.3).
  if (hparams_swa_ && !params_.ctx.swa_full) {
    for (const auto& o : slots_) {
      if (o.get() != &s &&
          (o->state == SlotState::kGenerating || o->state == SlotState::kPrompt)) {
        return draft;
      }
    }
  }
  room = std::min(room, info_.n_ubatch - 1);
  const uint32_t want = std::min(s.draft_len.next(), room);
  if (want == 0) return draft;
  std::vector<TokenId> history = s.held.tokens;
  history.push_back(s.pending);
  s.draft_cost = 0.0f;
  if (sp.ngram) draft = ngram_draft(history, sp.ngram_size_n, want);
  if (draft.empty() && drafter_) {
    auto d = drafter_->draft(s.id, history, want, sp.draft_p_min);
    if (d.ok()) {
      draft = std::move(d).value();
      s.draft_cost = float(drafter_->n_decodes()) * drafter_->cost(model_);
    } else {
      MNEMO_LOG(kWarn) << "slot " << s.id << ": the draft model failed, decoding plainly: "
                          << d.status().to_string();
    }
  }
  if (draft.size() < sp.draft_min) draft.clear();
  if (draft.empty()) s.draft_len.update(0, 0, s.draft_cost);
  return draft;
}

void Engine::fit_step(std::vector<WorkItem>& items) {
  if (!info_.kv_unified || items.empty()) return;
  uint32_t free = stream_free();
  if (free == SeqMemoryInfo::kUnbounded) return;
  auto need = [&] {
    uint32_t n = 0;
    for (const WorkItem& it : items) n += static_cast<uint32_t>(it.tokens.size());
    return n;
  };
  if (need() <= free) return;
  // Drafts go first: they are a bet, not work a request is owed.
  for (WorkItem& it : items) {
    it.tokens.resize(it.tokens.size() - it.n_draft);
    it.n_draft = 0;
  }
  if (need() <= free) return;
  // Finished requests' memory gives way first.
  free = reclaim_idle(need(), nullptr, nullptr, /*all_or_nothing=*/false);
  if (need() <= free) return;
  // Then the younger requests, youngest first. The oldest keeps its work whole: alone it always
  // fits (admission), so every step moves it on.
  std::vector<Slot*> young;
  for (auto& s : slots_) {
    if (s->state == SlotState::kPrompt || s->state == SlotState::kGenerating) {
      young.push_back(s.get());
    }
  }
  std::sort(young.begin(), young.end(),
            [](const Slot* a, const Slot* b) { return a->admitted > b->admitted; });
  if (!young.empty()) young.pop_back();
  // A younger prompt reads fewer tokens this step...
  for (Slot* s : young) {
    auto it = std::find_if(items.begin(), items.end(), [&](const WorkItem& w) {
      return w.slot == s && s->state == SlotState::kPrompt;
    });
    if (it == items.end()) continue;
    const size_t cut = std::min<size_t>(need() - free, it->tokens.size());
    it->tokens.resize(it->tokens.size() - cut);
    it->output = it->output && cut == 0;
    if (it->tokens.empty()) items.erase(it);
    if (need() <= free) return;
  }
  // ... and when the generated tokens still do not fit, a younger request's memory is set
  // aside until cells free up.
  for (Slot* s : young) {
    if (need() <= free) return;
    std::erase_if(items, [&](const WorkItem& w) { return w.slot == s; });
    preempt(*s);
    free = stream_free();
  }
}

void Engine::preempt(Slot& s) {
  const size_t n = s.held.tokens.size();
  auto saved = reuse_->suspend(s.held);
  if (!saved.ok()) {
    MNEMO_LOG(kError) << "slot " << s.id << ": preemption failed: " << saved.status().to_string();
    fail(s, ErrorKind::kInternal, "preempting the request failed: " + saved.status().to_string());
    return;
  }
  s.suspended = std::move(saved).value();
  s.resume_as = s.state;
  s.state = SlotState::kPreempted;
  metrics_->preemptions_total.fetch_add(1, std::memory_order_relaxed);
  MNEMO_LOG(kInfo) << fmt::format(
      "slot {}: preempted ({}), {} tokens set aside until the unified KV cache has room", s.id,
      slot_state_name(s.resume_as), n);
}

bool Engine::resume(Slot& s) {
  const size_t held = s.suspended.tokens.size();
  const size_t next = s.resume_as == SlotState::kGenerating ? 1 : s.task->req.prompt.size() - held;
  const uint32_t target = static_cast<uint32_t>(held + next) + reserved_cells(&s);
  if (reclaim_idle(target, &s, nullptr, /*all_or_nothing=*/true) < target) return false;
  if (Status st = reuse_->resume(s.held, s.suspended); !st.ok()) {
    if (st.code() == StatusCode::kNoSpace) return false;
    MNEMO_LOG(kError) << "slot " << s.id << ": resuming failed: " << st.to_string();
    fail(s, ErrorKind::kInternal, "resuming the preempted request failed: " + st.to_string());
    return true;
  }
  s.suspended = SuspendedSeq{};
  s.state = s.resume_as;
  check_slot(s);
  MNEMO_LOG(kInfo) << fmt::format("slot {}: resumed, {} tokens restored", s.id, held);
  return true;
}

void Engine::resume_preempted() {
  std::vector<Slot*> preempted;
  for (auto& s : slots_) {
    if (s->state == SlotState::kPreempted) preempted.push_back(s.get());
  }
  std::sort(preempted.begin(), preempted.end(),
            [](const Slot* a, const Slot* b) { return a->admitted < b->admitted; });
  for (Slot* s : preempted) {
    if (resume(*s)) continue;
    const bool running = std::any_of(slots_.begin(), slots_.end(), [](const auto& o) {
      return o->state == SlotState::kPrompt || o->state == SlotState::kGenerating;
    });
    if (running) break;  // first come, first served: it goes first once cells free up
    // Nothing runs and every idle slot's memory may go: it can never fit (cannot happen).
    fail(*s, ErrorKind::kCacheFull,
         fmt::format("KV cache full: a preempted request of {} tokens does not fit the {} cells "
                     "of the stream",
                     s->suspended.tokens.size(), info_.n_ctx));
  }
}

void Engine::step() {
  std::vector<WorkItem> items;
  uint32_t budget = info_.n_batch;
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (s.state != SlotState::kGenerating || budget == 0) continue;
    if (s.held.tokens.size() >= info_.n_ctx_seq) {
      if (!params_.context_shift || !context_shift(s)) {
        finish(s, FinishReason::kContext);
        continue;
      }
    }
    WorkItem it;
    it.slot = &s;
    it.pos0 = static_cast<Pos>(s.held.tokens.size());
    it.tokens = {s.pending};
    it.output = true;
    --budget;
    // Row k of a draft of k tokens samples the token at pos0 + k + 1: it must still be wanted
    // (n_predict) and fit the slot (n_ctx), as plain decoding's limits say.
    const int64_t want = int64_t(s.task->req.n_predict) - s.stats.n_generated - 1;
    const int64_t fit = int64_t(info_.n_ctx_seq) - it.pos0 - 2;
    const int64_t room = std::min<int64_t>({want, fit, int64_t(budget)});
    if (room > 0) {
      std::vector<TokenId> draft = draft_for(s, static_cast<uint32_t>(room));
      it.n_draft = draft.size();
      it.tokens.insert(it.tokens.end(), draft.begin(), draft.end());
      budget -= static_cast<uint32_t>(draft.size());
    }
    items.push_back(std::move(it));
  }
  // While some slots generate, prompt chunks are capped at one ubatch so a long prompt delays
  // their next token by one forward pass, not by n_batch / n_ubatch of them.
  if (!items.empty()) budget = std::min(budget, info_.n_ubatch);
  const uint32_t n = static_cast<uint32_t>(slots_.size());
  for (uint32_t k = 0; k < n && budget > 0; ++k) {
    Slot& s = *slots_[(rr_ + k) % n];
    if (s.state != SlotState::kPrompt) continue;
    const std::vector<TokenId>& prompt = s.task->req.prompt;
    const size_t done = s.held.tokens.size();
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
  fit_step(items);
  if (!items.empty()) {
    ++steps_;
    decode_items(items);
  }
}

void Engine::decode_items(std::vector<WorkItem>& items) {
  Batch batch;
  std::vector<uint32_t> out_row(items.size(), UINT32_MAX);
  uint32_t n_out = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const WorkItem& it = items[i];
    const size_t first_out = it.tokens.size() - 1 - it.n_draft;
    for (size_t j = 0; j < it.tokens.size(); ++j) {
      const bool out = it.output && j >= first_out;
      batch.add(it.tokens[j], it.pos0 + static_cast<Pos>(j), {it.slot->id}, out);
    }
    if (it.output) {
      out_row[i] = n_out;
      n_out += static_cast<uint32_t>(it.n_draft) + 1;
    }
  }
  const Status st = ctx_->decode(batch);
  metrics_->decode_steps_total.fetch_add(1, std::memory_order_relaxed);
  metrics_->busy_slots_total.fetch_add(items.size(), std::memory_order_relaxed);
  uint64_t n_drafts = 0;
  for (const WorkItem& it : items) n_drafts += it.n_draft > 0 ? 1 : 0;
  if (n_drafts > 0) metrics_->draft_steps_total.fetch_add(n_drafts, std::memory_order_relaxed);
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
  const ErrorKind kind = error_kind_for(st, ErrorOrigin::kDecode);
  for (WorkItem& it : items) {
    Slot& s = *it.slot;
    if (kind == ErrorKind::kCacheFull) {
      // A shared stream that others fill (fit_step should have made room): the request waits
      // for cells instead of failing.
      const bool others = std::any_of(slots_.begin(), slots_.end(), [&](const auto& o) {
        return o.get() != &s &&
               (o->state == SlotState::kPrompt || o->state == SlotState::kGenerating);
      });
      if (info_.kv_unified && others) {
        preempt(s);
        continue;
      }
      if (s.state == SlotState::kGenerating && params_.context_shift && context_shift(s)) continue;
      fail(s, kind,
           fmt::format("KV cache full while decoding {} tokens for slot {} (it holds {}): {}",
                       it.tokens.size(), s.id, s.held.tokens.size(), st.message()));
    } else {
      MNEMO_LOG(kError) << "decode failed: " << st.to_string();
      fail(s, kind, "decode failed: " + st.to_string());
    }
  }
}

void Engine::commit(WorkItem& item, uint32_t out_row) {
  Slot& s = *item.slot;
  s.held.tokens.insert(s.held.tokens.end(), item.tokens.begin(), item.tokens.end());
  s.last_active = steps_;
  check_slot(s);
  if (s.state == SlotState::kPrompt && s.task->req.return_progress) {
    send_progress(s, *s.task->channel);
  }
  if (!item.output) return;
  if (s.state == SlotState::kPrompt) {
    s.state = SlotState::kGenerating;
    reuse_->publish(s.held);
    s.t_first = now_ms();
    s.stats.prompt_ms = s.t_first - s.t_start;
    if (s.task->req.n_predict == 0) {
      finish(s, FinishReason::kLimit);
      return;
    }
  }
  if (item.n_draft == 0) {
    const std::span<const float> logits = ctx_->logits(out_row);
    TokenId tok = kTokenNull;
    if (s.forced.empty()) {
      tok = s.sampler->sample(logits);
    } else {  // the end of a spent reasoning budget
      tok = s.forced.front();
      s.forced.pop_front();
    }
    on_token(s, tok, logits);
    return;
  }
  // Speculative decoding: row i samples as plain decoding would after the tokens before it; the
  // draft holds while the picks agree with it (include/mnemo/speculative.h). Before each pick
  // the slot is marked as holding positions [0, pos0 + i + 1): if the pick ends the request,
  // finish() drops the drafted rows past that, leaving what plain decoding would.
  const size_t k = item.n_draft;
  size_t accepted = 0;
  // Counted first: a pick that ends the request reports the stats (timings, /metrics) at once.
  s.stats.n_drafted += static_cast<int32_t>(k);
  for (size_t i = 0; i <= k; ++i) {
    const std::span<const float> logits = ctx_->logits(out_row + static_cast<uint32_t>(i));
    TokenId tok = kTokenNull;
    if (s.forced.empty()) {
      tok = s.sampler->sample(logits);
    } else {  // a reasoning budget ran out while the draft was read
      tok = s.forced.front();
      s.forced.pop_front();
    }
    s.spec_end = item.pos0 + static_cast<Pos>(i) + 1;
    const bool agrees = i < k && tok == item.tokens[i + 1];
    if (agrees) {
      ++accepted;
      ++s.stats.n_draft_accepted;
    }
    on_token(s, tok, logits);
    if (s.state != SlotState::kGenerating || !agrees) break;
  }
  s.draft_len.update(static_cast<uint32_t>(k), static_cast<uint32_t>(accepted), s.draft_cost);
  if (s.state == SlotState::kGenerating) {
    // The last pick is the next pending token, decoded at spec_end next step; the rows from
    // there on are rejected drafts.
    drop_unverified(s);
    check_slot(s);
  }
}

void Engine::track_reasoning(Slot& s, const std::string& piece) {
  const CompletionRequest::Reasoning& rb = s.task->req.reasoning;
  if (rb.budget < 0 || s.reasoning_done || rb.end.empty()) return;
  s.reasoning_tail += piece;
  if (!s.in_reasoning) {
    if (!rb.start.empty() && s.reasoning_tail.find(rb.start) != std::string::npos) {
      s.in_reasoning = true;
      s.reasoning_tail.erase(0, s.reasoning_tail.find(rb.start) + rb.start.size());
    }
  } else {
    ++s.n_reasoning;
  }
  if (s.in_reasoning && s.reasoning_tail.find(rb.end) != std::string::npos) {
    s.in_reasoning = false;
    s.reasoning_done = true;
    s.forced.clear();
    return;
  }
  if (s.in_reasoning && s.n_reasoning >= rb.budget && s.forced.empty()) {
    s.forced.assign(rb.end_tokens.begin(), rb.end_tokens.end());
  }
  // Only the tail a marker could still start in is kept.
  const size_t keep = std::max(rb.start.size(), rb.end.size());
  if (s.reasoning_tail.size() > keep) s.reasoning_tail.erase(0, s.reasoning_tail.size() - keep);
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
  s.sampler->accept_generated(tok);
  ++s.stats.n_generated;
  if (!s.task->req.ignore_eos && tok_.is_eog(tok)) {
    finish(s, FinishReason::kEos);
    return;
  }
  s.unsent_tokens.push_back(tok);
  if (s.task->req.n_probs > 0 && s.task->req.post_sampling_probs) {
    TokenProbs p;
    p.id = tok;
    p.post_sampling = true;
    for (const TokenCandidate& c : s.sampler->last_distribution()) {
      if (c.id == tok) p.logprob = c.p;
      if (p.top.size() < size_t(s.task->req.n_probs)) p.top.emplace_back(c.id, c.p);
    }
    s.unsent_probs.push_back(std::move(p));
  } else if (s.task->req.n_probs > 0) {
    s.unsent_probs.push_back(token_probs(logits, tok, s.task->req.n_probs));
  }
  const std::vector<TokenId>& preserved = s.task->req.preserved_tokens;
  const bool special = std::find(preserved.begin(), preserved.end(), tok) != preserved.end();
  const std::string piece = tok_.token_to_piece(tok, special);
  track_reasoning(s, piece);
  std::string text = s.stream.append(piece);
  const bool stopped = s.stream.stopped();
  const bool limit = s.stats.n_generated >= s.task->req.n_predict;
  if (!text.empty() || (!stopped && !limit)) {
    CompletionEvent ev;
    ev.kind = CompletionEvent::Kind::kText;
    s.stats.gen_ms = now_ms() - s.t_first;
    ev.stats = s.stats;
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

}  // namespace mnemo::server
