// Scheduling on the loop thread (engine.h): the waiting queue (cancellation, slot choice),
// admission before any compute (prompt cache reuse through Memory::plan_truncate, room checked
// against Memory::seq_info, eviction of idle caches in a shared stream), continuous batching of
// one step, and generation (sampling, log-probabilities, text events). A slot's start, context
// shift and end are in slots.cc.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "mnemo/log.h"
#include "server/engine.h"
#include "server/engine_state.h"

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
  Memory& mem = ctx_->memory();
  size_t n_cached = w.req.cache_prompt ? common_prefix(slot.cache_tokens, prompt) : 0;
  // The last prompt token is always evaluated: its logits give the first generated token.
  if (n_cached == n_prompt) --n_cached;
  // A recurrent memory keeps a prefix only up to a checkpoint (memory.h, plan_truncate): resume
  // from there. Attention-only memories keep every position (keep == n_cached).
  if (auto plan = mem.plan_truncate(slot.id, static_cast<Pos>(n_cached)); plan.ok()) {
    n_cached = static_cast<size_t>(plan->keep);
  }
  const uint32_t need = static_cast<uint32_t>(n_prompt - n_cached);
  auto seq = mem.seq_info(slot.id);
  if (!seq.ok()) {
    *kind = ErrorKind::kInternal;
    *why = "seq_info failed: " + seq.status().to_string();
    return false;
  }
  // A memory without cells (a recurrent state) has room for any prompt.
  if (seq->free_cells != SeqMemoryInfo::kUnbounded) {
    // This slot's cells past the reused prefix are freed by the seq_rm below.
    uint32_t free = seq->free_cells + static_cast<uint32_t>(slot.cache_tokens.size() - n_cached);
    if (need > free) {
      // Idle slots' prompt caches in the same stream (unified mode) are the only cells that can
      // go: least recently used first, and only when that makes the prompt fit.
      std::vector<Slot*> idle;
      uint32_t evictable = 0;
      for (auto& s : slots_) {
        if (s.get() == &slot || s->state != SlotState::kIdle || s->cache_tokens.empty()) continue;
        auto other = mem.seq_info(s->id);
        if (!other.ok() || !other->has_kv || other->stream != seq->stream) continue;
        idle.push_back(s.get());
        evictable += static_cast<uint32_t>(s->cache_tokens.size());
      }
      if (free + evictable >= need) {
        std::sort(idle.begin(), idle.end(),
                  [](const Slot* a, const Slot* b) { return a->last_used < b->last_used; });
        for (Slot* s : idle) {
          if (free >= need) break;
          if (!mem.seq_rm(s->id, -1, -1).ok()) continue;
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
          need, n_prompt, n_cached, seq->stream, free,
          info_.kv_unified ? info_.n_ctx : info_.n_ctx_seq);
      return false;
    }
  }
  if (Status st = mem.seq_rm(slot.id, static_cast<Pos>(n_cached), -1); !st.ok()) {
    *kind = ErrorKind::kInternal;
    *why = "seq_rm failed: " + st.to_string();
    return false;
  }
  begin(w, slot, n_cached);
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
  const ErrorKind kind = error_kind_for(st, ErrorOrigin::kDecode);
  for (WorkItem& it : items) {
    Slot& s = *it.slot;
    if (kind == ErrorKind::kCacheFull) {
      if (s.state == SlotState::kGenerating && params_.context_shift && context_shift(s)) continue;
      fail(s, kind,
           fmt::format("KV cache full while decoding {} tokens for slot {} (it holds {}): {}",
                       it.tokens.size(), s.id, s.cache_tokens.size(), st.message()));
    } else {
      MNEMO_LOG(kError) << "decode failed: " << st.to_string();
      fail(s, kind, "decode failed: " + st.to_string());
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

}  // namespace mnemo::server
