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
#include "mnemo/state.h"
#include "mnemo/state_io.h"
#include "prompt_cache/block_hash.h"
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
    if (w.pending()) {
      ++it;  // its disk entry is still being read
      continue;
    }
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
    const Admission a = admit(w, *slot, &kind, &why);
    if (a == Admission::kDeferred) {
      ++it;
      continue;
    }
    if (a == Admission::kFailed) {
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

namespace {

// A source must give this many more prompt tokens than the slot's own before its copy or
// restore (which moves the whole prefix's rows) is preferred.
constexpr size_t kMinGain = 16;
// A slot's memory goes into the prompt cache before a request drops at least this many of its
// tokens. Fewer is the same conversation continuing (its new prompt re-tokenizes the end of the
// last reply a little differently): storing it would keep a near-copy of what the slot goes on
// holding. Another conversation taking the slot drops its whole last turn, more than this.
constexpr size_t kMinStash = 16;

}  // namespace

Engine::Source Engine::choose_source(const Waiting& w, const Slot& slot) const {
  Source best;
  if (!w.req.cache_prompt) return best;  // kNone: bypasses every tier
  const std::vector<TokenId>& prompt = w.req.prompt;
  // The last prompt token is always evaluated: its logits give the first generated token.
  const size_t limit = prompt.size() - 1;
  const Memory& mem = ctx_->memory();
  // What a copy of s's sequence cut at the common prefix keeps: a recurrent memory only returns
  // to a checkpoint, a sliding window only where the window is still held (plan_truncate).
  auto keep_of = [&](const Slot& s) -> size_t {
    const size_t lcp = std::min(common_prefix(s.cache_tokens, prompt), limit);
    if (lcp == 0) return 0;
    auto plan = mem.plan_truncate(s.id, static_cast<Pos>(lcp));
    return plan.ok() ? static_cast<size_t>(plan->keep) : 0;
  };
  best.kind = Source::Kind::kOwn;
  best.keep = keep_of(slot);
  for (const auto& o : slots_) {
    if (o.get() == &slot || o->cache_tokens.size() < best.keep + kMinGain) continue;
    const size_t k = keep_of(*o);
    if (k >= best.keep + kMinGain) {
      best.kind = Source::Kind::kSlot;
      best.keep = k;
      best.slot = o.get();
    }
  }
  if (cache_) {
    if (auto m = cache_->lookup(prompt)) {
      const size_t k = std::min<size_t>(m->n_match, limit);
      if (k >= best.keep + kMinGain) {
        best.kind = Source::Kind::kEntry;
        best.keep = k;
        best.slot = nullptr;
        best.match = *m;
      }
    }
  }
  return best;
}

Engine::Admission Engine::admit(Waiting& w, Slot& slot, ErrorKind* kind, std::string* why) {
  const std::vector<TokenId>& prompt = w.req.prompt;
  const size_t n_prompt = prompt.size();
  if (n_prompt == 0) {
    *kind = ErrorKind::kInvalidRequest;
    *why = "the prompt is empty";
    return Admission::kFailed;
  }
  if (n_prompt >= info_.n_ctx_seq) {
    *kind = ErrorKind::kPromptTooLong;
    *why = fmt::format(
        "the prompt has {} tokens; a slot holds at most {} tokens including the reply "
        "(n_ctx {}, {} slots, {} KV)",
        n_prompt, info_.n_ctx_seq, info_.n_ctx, info_.n_slots,
        info_.kv_unified ? "unified" : "split");
    return Admission::kFailed;
  }
  Source src = choose_source(w, slot);
  // The shared store may hold a longer prefix (another replica's conversation): asked once per
  // request, while it waits, when the prompt goes a block or more past what is here.
  const size_t limit = n_prompt - 1;
  const size_t min_store = src.keep + kMinGain;
  if (store_ && w.req.cache_prompt && !w.store_fetch && n_prompt >= cache_block_ &&
      limit >= min_store) {
    w.store_fetch = store_->lookup(prompt, static_cast<uint32_t>(min_store), [this] { wake(); });
    return Admission::kDeferred;
  }
  if (w.store_fetch && w.store_fetch->status.ok() && w.store_fetch->bytes &&
      std::min<size_t>(w.store_fetch->n_match, limit) >= min_store) {
    const prompt_cache::StoreFetch& f = *w.store_fetch;
    src = Source{};
    src.kind = Source::Kind::kEntry;
    src.keep = std::min<size_t>(f.n_match, limit);
    src.bytes = f.bytes;
    src.match.key = prompt_cache::entry_key(f.tokens, root_);
    src.match.n_match = f.n_match;
    src.match.n_tokens = static_cast<uint32_t>(f.tokens.size());
    src.match.in_ram = true;
    // Kept in the local tiers too: the next turn here needs no store.
    if (cache_) cache_->insert(f.tokens, f.bytes, nullptr);
  }
  if (src.kind == Source::Kind::kEntry && !src.match.in_ram) {
    // A disk entry: read by the cache's thread while the request waits (once per request).
    const bool have = w.fetch && w.fetch->key == src.match.key && w.fetch->status.ok();
    if (!have && !w.fetch) {
      w.fetch = cache_->fetch(src.match.key, [this] { wake(); });
      if (w.pending()) return Admission::kDeferred;
    }
    if (!(w.fetch && w.fetch->key == src.match.key && w.fetch->status.ok())) {
      src.kind = Source::Kind::kOwn;  // the entry went away; the slot's own prefix then
      src.keep = std::min(common_prefix(slot.cache_tokens, prompt), n_prompt - 1);
      if (auto plan = ctx_->memory().plan_truncate(slot.id, static_cast<Pos>(src.keep));
          plan.ok()) {
        src.keep = static_cast<size_t>(plan->keep);
      }
    }
  }
  Memory& mem = ctx_->memory();
  const size_t own_kept = src.kind == Source::Kind::kOwn ? src.keep : 0;
  const uint32_t need = static_cast<uint32_t>(n_prompt - src.keep);
  auto seq = mem.seq_info(slot.id);
  if (!seq.ok()) {
    *kind = ErrorKind::kInternal;
    *why = "seq_info failed: " + seq.status().to_string();
    return Admission::kFailed;
  }
  // A memory without cells (a recurrent state) has room for any prompt.
  if (seq->free_cells != SeqMemoryInfo::kUnbounded) {
    // The slot's cells past what it keeps of its own are freed; a copied or restored prefix
    // takes cells of its own (in a unified stream a copy shares the source's cells instead).
    const bool shares = src.kind == Source::Kind::kSlot && info_.kv_unified;
    const uint32_t taken =
        static_cast<uint32_t>(src.kind == Source::Kind::kOwn || shares ? 0 : src.keep);
    uint32_t free = seq->free_cells + static_cast<uint32_t>(slot.cache_tokens.size() - own_kept);
    free = free >= taken ? free - taken : 0;
    if (need > free) {
      // Idle slots' prompt caches in the same stream (unified mode) are the only cells that can
      // go: least recently used first, and only when that makes the prompt fit. They go into
      // the prompt cache first.
      std::vector<Slot*> idle;
      uint32_t evictable = 0;
      for (auto& s : slots_) {
        if (s.get() == &slot || s.get() == src.slot || s->state != SlotState::kIdle ||
            s->cache_tokens.empty()) {
          continue;
        }
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
          stash(*s);
          if (!mem.seq_rm(s->id, -1, -1).ok()) continue;
          free += static_cast<uint32_t>(s->cache_tokens.size());
          s->cache_tokens.clear();
          publish(*s);
        }
      }
    }
    if (need > free) {
      *kind = ErrorKind::kCacheFull;
      *why = fmt::format(
          "KV cache full: the prompt needs {} new cells ({} tokens, {} reused) but stream {} has "
          "{} free cells of {}; retry later or start the server with a larger -c",
          need, n_prompt, src.keep, seq->stream, free,
          info_.kv_unified ? info_.n_ctx : info_.n_ctx_seq);
      return Admission::kFailed;
    }
  }
  // The slot's own tokens past what it keeps are dropped: into the prompt cache first.
  if (slot.cache_tokens.size() >= own_kept + kMinStash) stash(slot);
  const size_t n_cached = apply_source(w, slot, src);
  check_slot(slot);
  publish(slot);
  if (w.req.cache_prompt) {
    Metrics& m = *metrics_;
    if (n_cached == 0) {
      m.prompt_cache_misses_total.fetch_add(1, std::memory_order_relaxed);
    } else {
      // 0: a slot (its own or another's), 1: the RAM tier, 2: the disk tier, 3: the store.
      const bool fetched = w.fetch && w.fetch->key == src.match.key;
      const size_t tier = src.kind != Source::Kind::kEntry ? 0 : src.bytes ? 3 : fetched ? 2 : 1;
      m.prompt_cache_hits_total[tier].fetch_add(1, std::memory_order_relaxed);
    }
  }
  begin(w, slot, n_cached);
  return Admission::kAdmitted;
}

size_t Engine::apply_source(Waiting& w, Slot& slot, const Source& src) {
  Memory& mem = ctx_->memory();
  const std::vector<TokenId>& prompt = w.req.prompt;
  // The slot keeps [0, keep) of its own sequence; the rest goes.
  auto keep_own = [&](size_t keep) -> size_t {
    if (Status st = mem.seq_rm(slot.id, static_cast<Pos>(keep), -1); !st.ok()) {
      MNEMO_LOG(kError) << "slot " << slot.id << ": seq_rm failed: " << st.to_string();
      CHECK(mem.seq_rm(slot.id, -1, -1).ok());
      keep = 0;
    }
    slot.cache_tokens.resize(keep);
    return keep;
  };
  auto own_prefix = [&]() -> size_t {
    const size_t lcp = w.req.cache_prompt
                           ? std::min(common_prefix(slot.cache_tokens, prompt), prompt.size() - 1)
                           : 0;
    auto plan = mem.plan_truncate(slot.id, static_cast<Pos>(lcp));
    return plan.ok() ? static_cast<size_t>(plan->keep) : 0;
  };
  switch (src.kind) {
    case Source::Kind::kNone:
      return keep_own(0);
    case Source::Kind::kOwn:
      return keep_own(src.keep);
    case Source::Kind::kSlot: {
      // Another slot's prefix: copied (split KV: its rows; unified KV: shared cells).
      keep_own(0);
      const Pos keep = static_cast<Pos>(src.keep);
      if (Status st = mem.seq_cp(src.slot->id, slot.id, 0, keep);
          !st.ok() || mem.seq_pos_max(slot.id) != keep - 1) {
        MNEMO_LOG(kWarn) << "slot " << slot.id << ": copying slot " << src.slot->id
                         << "'s prefix failed: " << st.to_string();
        return keep_own(0);
      }
      slot.cache_tokens.assign(src.slot->cache_tokens.begin(),
                               src.slot->cache_tokens.begin() + src.keep);
      return src.keep;
    }
    case Source::Kind::kEntry:
      break;
  }
  // A prompt-cache entry: its state is restored over the slot's sequence, then cut back to the
  // shared prefix. Its token list must be the slot's positions 0..n-1 and start with the prompt's
  // matched tokens; anything else (damage, another model) fails the validation pass, which
  // changes nothing, and the entry is dropped.
  std::shared_ptr<const std::vector<uint8_t>> bytes =
      src.bytes                                                          ? src.bytes
      : w.fetch && w.fetch->key == src.match.key && w.fetch->status.ok() ? w.fetch->bytes
      : cache_ ? cache_->get(src.match.key)
               : nullptr;
  if (!bytes) return keep_own(own_prefix());  // evicted meanwhile
  const uint32_t n_vocab = ctx_->model().hparams().n_vocab;
  const size_t n_match = src.match.n_match;
  auto check = [&](std::span<const int32_t> t, const StateSeqSummary& s) -> Status {
    const Pos n = static_cast<Pos>(t.size());
    if (s.set && !(n == 0 ? s.pos_max < 0 : (s.pos_min == 0 && s.pos_max == n - 1))) {
      return Status::invalid_argument(
          fmt::format("{} tokens but cells at positions [{}, {}]", t.size(), s.pos_min, s.pos_max));
    }
    if (t.size() < n_match || !std::equal(prompt.begin(), prompt.begin() + n_match, t.begin())) {
      return Status::invalid_argument("its tokens do not match the index");
    }
    for (int32_t id : t) {
      if (id < 0 || static_cast<uint32_t>(id) >= n_vocab) {
        return Status::invalid_argument(fmt::format("token id {} is outside the vocabulary", id));
      }
    }
    return Status();
  };
  SpanSource source(*bytes);
  auto tokens = state_read(mem, fp_, &source, state_format::Scope::kSequence, slot.id, check);
  if (!tokens.ok()) {
    const StatusCode c = tokens.status().code();
    // No room (a unified stream, or an entry of a longer context) is not the entry's fault.
    if (c != StatusCode::kNoSpace && cache_) {
      cache_->discard(src.match.key, tokens.status().message());
    }
    // Only a source that changed between the passes empties the sequence; the slot then
    // starts from nothing.
    if (mem.seq_pos_max(slot.id) != static_cast<Pos>(slot.cache_tokens.size()) - 1) {
      return keep_own(0);
    }
    return keep_own(own_prefix());
  }
  if (mem.seq_pos_max(slot.id) != static_cast<Pos>(tokens->size()) - 1) {
    // A memory whose parts report no positions: checked after the apply.
    if (cache_) cache_->discard(src.match.key, "its positions do not match its tokens");
    slot.cache_tokens.clear();
    CHECK(mem.seq_rm(slot.id, -1, -1).ok());
    return 0;
  }
  slot.cache_tokens = std::move(tokens).value();
  auto plan = mem.plan_truncate(slot.id, static_cast<Pos>(src.keep));
  return keep_own(plan.ok() ? static_cast<size_t>(plan->keep) : 0);
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
  if (s.state == SlotState::kPrompt && s.task->req.return_progress) {
    send_progress(s, *s.task->channel);
  }
  if (!item.output) return;
  if (s.state == SlotState::kPrompt) {
    s.state = SlotState::kGenerating;
    publish(s);
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
  std::string text = s.stream.append(tok_.token_to_piece(tok, /*special=*/false));
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
