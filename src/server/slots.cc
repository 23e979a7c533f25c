// Slot lifecycle on the loop thread (engine.h, "Slots"): a slot starts serving an admitted
// request (begin), may shift its context when full, ends (finish: done event and metrics; fail:
// error event) and goes back to idle with its prompt cache kept (release). Also what /slots
// reports of a slot: the memory's answer for its sequence (Memory::seq_info).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "mnemo/check.h"
#include "mnemo/log.h"
#include "server/engine.h"
#include "server/engine_internal.h"

namespace mnemo::server {

void Engine::begin(Task& t, Slot& slot, size_t n_cached) {
  const std::vector<TokenId>& prompt = t.req.prompt;
  const size_t n_prompt = prompt.size();
  slot.held.tokens.resize(n_cached);
  slot.held.cacheable = t.req.cache_prompt;
  SamplingParams sampling = t.req.sampling;
  if (t.req.ignore_eos) {
    // As llama-server: end-of-generation tokens are never sampled (a bias of -infinity).
    for (TokenId id : tok_.eog_ids()) sampling.logit_bias.push_back({id, -INFINITY});
  }
  {
    auto settings = std::make_shared<CompletionRequest>();
    *settings = t.req;
    settings->prompt.clear();
    slot.last_params = std::move(settings);
  }
  slot.sampler = std::make_unique<Sampler>(sampling);
  if (t.req.post_sampling_probs) slot.sampler->set_greedy_candidates(t.req.n_probs);
  if (t.req.grammar && t.req.grammar_triggers.empty()) {
    slot.sampler->set_grammar(t.req.grammar, grammar_vocab(t.req.preserved_tokens));
  } else if (t.req.grammar) {
    slot.sampler->set_lazy_grammar(t.req.grammar, grammar_vocab(t.req.preserved_tokens),
                                   t.req.grammar_triggers);
  }
  const CompletionRequest::Reasoning& rb = t.req.reasoning;
  slot.in_reasoning = rb.budget >= 0 && rb.open;
  slot.reasoning_done = false;
  slot.n_reasoning = 0;
  slot.reasoning_tail.clear();
  slot.forced.clear();
  if (slot.in_reasoning && rb.budget == 0) {
    slot.forced.assign(rb.end_tokens.begin(), rb.end_tokens.end());
  }
  const size_t n_window = static_cast<size_t>(std::max(0, t.req.sampling.repeat_last_n));
  for (size_t i = n_prompt - std::min(n_prompt, n_window); i < n_prompt; ++i) {
    slot.sampler->accept(prompt[i]);
  }
  slot.stream.reset(t.req.stop);
  slot.pending = kTokenNull;
  slot.draft_len = DraftLength(params_.spec.draft_max);
  slot.spec_end = -1;
  slot.unsent_tokens.clear();
  slot.unsent_probs.clear();
  slot.stats = CompletionStats{};
  slot.stats.id_slot = slot.id;
  slot.stats.n_prompt = static_cast<int32_t>(n_prompt);
  slot.stats.n_cached = static_cast<int32_t>(n_cached);
  slot.t_start = now_ms();
  slot.t_first = 0;
  slot.admitted = ++admissions_;
  slot.state = SlotState::kPrompt;
  CompletionEvent ev;
  ev.kind = CompletionEvent::Kind::kAdmitted;
  ev.stats = slot.stats;
  t.channel->push(std::move(ev));
  if (t.req.return_progress) send_progress(slot, *t.channel);
}

void Engine::send_progress(const Slot& s, TaskChannel& channel) {
  CompletionEvent ev;
  ev.kind = CompletionEvent::Kind::kProgress;
  ev.stats = s.stats;
  ev.n_processed = int32_t(s.held.tokens.size());
  ev.progress_ms = now_ms() - s.t_start;
  channel.push(std::move(ev));
}

const std::shared_ptr<const grammar::Vocab>& Engine::grammar_vocab(
    const std::vector<TokenId>& preserved) {
  std::shared_ptr<const grammar::Vocab>& v = grammar_vocabs_[preserved];
  if (!v) {
    std::vector<std::string> pieces(size_t(tok_.n_vocab()));
    for (TokenId id = 0; id < tok_.n_vocab(); ++id) {
      const bool special = std::find(preserved.begin(), preserved.end(), id) != preserved.end();
      pieces[size_t(id)] = tok_.token_to_piece(id, special);
    }
    v = std::make_shared<const grammar::Vocab>(pieces, tok_.eog_ids());
  }
  return v;
}

bool Engine::context_shift(Slot& s) {
  const int32_t n_past = static_cast<int32_t>(s.held.tokens.size());
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
    s.held.tokens.clear();
    return false;
  }
  s.held.tokens.erase(s.held.tokens.begin() + n_keep, s.held.tokens.begin() + n_keep + n_discard);
  reuse_->publish(s.held);
  ++s.stats.n_shifts;
  metrics_->context_shifts_total.fetch_add(1, std::memory_order_relaxed);
  MNEMO_LOG(kInfo) << "slot " << s.id << ": context shift, kept " << n_keep << ", dropped "
                   << n_discard << ", now " << s.held.tokens.size() << " tokens";
  check_slot(s);
  return true;
}

void Engine::drop_unverified(Slot& s) {
  if (s.spec_end < 0) return;
  const Pos end = s.spec_end;
  s.spec_end = -1;
  if (Status st = ctx_->memory().seq_rm(s.id, end, -1); !st.ok()) {
    // Cannot happen (a recurrent memory keeps the state after every drafted row); the slot's
    // memory is then dropped whole rather than left ahead of its tokens.
    MNEMO_LOG(kError) << "slot " << s.id << ": dropping rejected drafts failed: " << st.to_string();
    (void)ctx_->memory().seq_rm(s.id, -1, -1);
    s.held.tokens.clear();
    return;
  }
  s.held.tokens.resize(std::min<size_t>(s.held.tokens.size(), static_cast<size_t>(end)));
}

void Engine::finish(Slot& s, FinishReason reason) {
  drop_unverified(s);
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
  CompletionEvent done;
  done.kind = CompletionEvent::Kind::kDone;
  done.finish = reason;
  done.stop_word = s.stream.stop_word();
  done.stats = s.stats;
  if (reuse_->stashes_every_turn()) {
    // With a shared store, every finished turn is queued for it before the client hears the
    // turn ended: the conversation's next turn may land on another replica. The state is
    // written on the stash thread (split KV), so the other slots do not wait for it.
    reuse_->stash(s.held, [channel = s.task->channel, done = std::move(done)]() mutable {
      channel->push(std::move(done));
    });
  } else {
    s.task->channel->push(std::move(done));
  }

  Metrics& m = *metrics_;
  constexpr auto kRelaxed = std::memory_order_relaxed;
  m.requests_total.fetch_add(1, kRelaxed);
  m.prompt_tokens_total.fetch_add(uint64_t(s.stats.n_prompt - s.stats.n_cached), kRelaxed);
  m.prompt_tokens_cached_total.fetch_add(uint64_t(s.stats.n_cached), kRelaxed);
  m.tokens_predicted_total.fetch_add(uint64_t(s.stats.n_generated), kRelaxed);
  m.draft_tokens_total.fetch_add(uint64_t(s.stats.n_drafted), kRelaxed);
  m.draft_tokens_accepted_total.fetch_add(uint64_t(s.stats.n_draft_accepted), kRelaxed);
  m.prompt_us_total.fetch_add(uint64_t(s.stats.prompt_ms * 1000), kRelaxed);
  const uint64_t n_tokens = uint64_t(s.stats.n_prompt + s.stats.n_generated);
  if (n_tokens > m.n_tokens_max.load(kRelaxed)) m.n_tokens_max.store(n_tokens, kRelaxed);
  m.predicted_us_total.fetch_add(uint64_t(s.stats.gen_ms * 1000), kRelaxed);
  if (reason == FinishReason::kCancelled) m.cancelled_total.fetch_add(1, kRelaxed);
  release(s);
}

void Engine::fail(Slot& s, ErrorKind kind, const std::string& why) {
  drop_unverified(s);
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
  s.suspended = SuspendedSeq{};
  s.resume_as = SlotState::kIdle;
  s.task.reset();
  s.sampler.reset();
  s.pending = kTokenNull;
  s.unsent_tokens.clear();
  s.unsent_probs.clear();
  s.last_used = ++clock_;
  reuse_->publish(s.held);
}

void Engine::check_slot(const Slot& s) const {
  DCHECK(ctx_->memory().seq_pos_max(s.id) == static_cast<Pos>(s.held.tokens.size()) - 1)
      << "slot " << s.id << " holds " << s.held.tokens.size() << " tokens but its sequence ends at "
      << ctx_->memory().seq_pos_max(s.id);
}

SlotInfo Engine::slot_info(const Slot& s) const {
  SlotInfo info;
  info.id = s.id;
  info.state = s.state;
  info.n_ctx = info_.n_ctx_seq;
  info.n_tokens = static_cast<int32_t>(s.held.tokens.size());
  if (s.state != SlotState::kIdle) {
    info.n_prompt = s.stats.n_prompt;
    info.n_cached = s.stats.n_cached;
    info.n_generated = s.stats.n_generated;
    info.n_predict = s.task->req.n_predict;
    info.id_task = s.task->id;
  }
  info.params = s.last_params;
  info.speculative = params_.spec.ngram || drafter_ != nullptr;
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
