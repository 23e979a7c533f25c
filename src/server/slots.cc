// Slot lifecycle on the loop thread (engine.h, "Slots"): a slot starts serving an admitted
// request (begin), may shift its context when full, ends (finish: done event and metrics; fail:
// error event) and goes back to idle with its prompt cache kept (release). Also what /slots
// reports of a slot: the memory's answer for its sequence (Memory::seq_info).
#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "mnemo/check.h"
#include "mnemo/log.h"
#include "mnemo/state.h"
#include "mnemo/state_io.h"
#include "prompt_cache/block_hash.h"
#include "server/engine.h"
#include "server/engine_state.h"

namespace mnemo::server {

void Engine::begin(Waiting& w, Slot& slot, size_t n_cached) {
  const std::vector<TokenId>& prompt = w.req.prompt;
  const size_t n_prompt = prompt.size();
  slot.cache_tokens.resize(n_cached);
  slot.cacheable = w.req.cache_prompt;
  slot.sampler = std::make_unique<Sampler>(w.req.sampling);
  if (w.req.grammar) slot.sampler->set_grammar(w.req.grammar, grammar_vocab());
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
  if (w.req.return_progress) send_progress(slot, *w.channel);
}

void Engine::send_progress(const Slot& s, TaskChannel& channel) {
  CompletionEvent ev;
  ev.kind = CompletionEvent::Kind::kProgress;
  ev.stats = s.stats;
  ev.n_processed = int32_t(s.cache_tokens.size()) - s.stats.n_cached;
  ev.progress_ms = now_ms() - s.t_start;
  channel.push(std::move(ev));
}

const std::shared_ptr<const grammar::Vocab>& Engine::grammar_vocab() {
  if (!grammar_vocab_) {
    std::vector<std::string> pieces(size_t(tok_.n_vocab()));
    for (TokenId id = 0; id < tok_.n_vocab(); ++id) {
      pieces[size_t(id)] = tok_.token_to_piece(id, /*special=*/false);
    }
    grammar_vocab_ = std::make_shared<const grammar::Vocab>(pieces, tok_.eog_ids());
  }
  return grammar_vocab_;
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
  publish(s);
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
    ev.stats = s.stats;
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
  // With a shared store, every finished turn is queued for it before the client hears the turn
  // ended: the conversation's next turn may land on another replica.
  if (store_) stash(s);
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
  publish(s);
}

void Engine::publish(const Slot& s) {
  if (events_) events_->hold("slot:" + std::to_string(s.id), s.cache_tokens, "CPU");
}

void Engine::stash(Slot& s) {
  if ((!cache_ && !store_) || !s.cacheable || s.cache_tokens.size() < cache_block_) return;
  // These very tokens went into the cache and to the store already (a turn's end, then its slot
  // taken): nothing to do.
  const uint64_t key = prompt_cache::entry_key(s.cache_tokens, root_);
  if (key == s.stashed_key) return;
  // An entry of these tokens needs no second copy locally; the store is written anyway.
  const bool have = cache_ && cache_->contains(s.cache_tokens);
  if (have && !store_) return;
  const double t0 = now_ms();
  StateWriteSpec spec;
  spec.scope = state_format::Scope::kSequence;
  spec.seq = s.id;
  spec.k_type = params_.cache_type_k;
  spec.v_type = params_.cache_type_v;
  const Memory& mem = ctx_->memory();
  // The exact size first (O(metadata)), so the one copy of the rows is written without regrowth.
  CountingSink count;
  Status st = state_write(mem, fp_, &count, spec, s.cache_tokens);
  auto bytes = std::make_shared<std::vector<uint8_t>>();
  if (st.ok()) {
    bytes->reserve(count.bytes());
    VectorSink sink(bytes.get());
    st = state_write(mem, fp_, &sink, spec, s.cache_tokens);
  }
  if (!st.ok()) {
    MNEMO_LOG(kWarn) << "slot " << s.id << ": not stored in the prompt cache: " << st.to_string();
    return;
  }
  const size_t n_bytes = bytes->size();
  s.stashed_key = key;
  if (store_) store_->put(s.cache_tokens, bytes);
  // An entry holding a prefix of these tokens is redundant once this one can be cut back to it.
  if (cache_ && !have) {
    cache_->insert(s.cache_tokens, std::move(bytes), [&](uint32_t n) {
      auto plan = mem.plan_truncate(s.id, static_cast<Pos>(n));
      return plan.ok() && plan->keep == static_cast<Pos>(n);
    });
  }
  MNEMO_LOG(kDebug) << fmt::format(
      "slot {}: {} tokens stored in the prompt cache ({} bytes, {:.1f} ms)", s.id,
      s.cache_tokens.size(), n_bytes, now_ms() - t0);
}

void Engine::check_slot(const Slot& s) const {
  DCHECK(ctx_->memory().seq_pos_max(s.id) == static_cast<Pos>(s.cache_tokens.size()) - 1)
      << "slot " << s.id << " holds " << s.cache_tokens.size()
      << " tokens but its sequence ends at " << ctx_->memory().seq_pos_max(s.id);
}

SlotInfo Engine::slot_info(const Slot& s) const {
  SlotInfo info;
  info.id = s.id;
  info.state = s.state;
  info.n_ctx = info_.n_ctx_seq;
  info.n_tokens = static_cast<int32_t>(s.cache_tokens.size());
  if (s.state != SlotState::kIdle) {
    info.n_prompt = s.stats.n_prompt;
    info.n_generated = s.stats.n_generated;
    info.id_task = s.task->id;
  }
  auto seq = ctx_->memory().seq_info(s.id);
  CHECK(seq.ok()) << "slot " << s.id << ": " << seq.status().to_string();
  if (seq->has_kv) {
    info.type_k = seq->k_type;
    info.type_v = seq->v_type;
  }
  info.bytes = seq->bytes;
  return info;
}

}  // namespace mnemo::server
