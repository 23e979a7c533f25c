// Drafting for speculative decoding: prompt lookup, the adaptive draft length and the draft
// model. Contract: include/mnemo/speculative.h.

#include "mnemo/speculative.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/kernels.h"
#include "mnemo/batch.h"
#include "mnemo/sampling.h"

namespace mnemo {

Status SpecParams::validate() const {
  if (draft_max < 1 || draft_max > 256) {
    return Status::invalid_argument("--draft-max " + std::to_string(draft_max) +
                                    " is outside [1, 256]");
  }
  if (draft_min > draft_max) {
    return Status::invalid_argument("--draft-min " + std::to_string(draft_min) +
                                    " exceeds --draft-max " + std::to_string(draft_max));
  }
  if (ngram_size_n < 1 || ngram_size_n > 16) {
    return Status::invalid_argument("--spec-ngram-size-n " + std::to_string(ngram_size_n) +
                                    " is outside [1, 16]");
  }
  if (!(draft_p_min >= 0.0f && draft_p_min <= 1.0f)) {
    return Status::invalid_argument("--draft-p-min must be in [0, 1]");
  }
  return Status();
}

std::vector<TokenId> ngram_draft(std::span<const TokenId> history, uint32_t n_max,
                                 uint32_t n_draft) {
  std::vector<TokenId> out;
  const size_t h = history.size();
  if (n_draft == 0 || h < 2) return out;
  for (size_t n = std::min<size_t>(n_max, h - 1); n >= 1; --n) {
    const std::span<const TokenId> key = history.subspan(h - n, n);
    // The most recent earlier occurrence: a start i < h - n with history[i, i + n) == key.
    for (size_t i = h - n; i-- > 0;) {
      if (!std::equal(key.begin(), key.end(), history.begin() + i)) continue;
      const size_t from = i + n;
      const size_t take = std::min<size_t>(n_draft, h - from);
      out.assign(history.begin() + from, history.begin() + from + take);
      return out;
    }
  }
  return out;
}

uint32_t DraftLength::next() {
  if (pause_ > 0) {
    --pause_;
    return 0;
  }
  return cur_;
}

void DraftLength::update(uint32_t drafted, uint32_t accepted, float cost) {
  if (drafted == 0 && cost <= 0.0f) return;
  if (drafted > 0 && accepted == drafted) {
    cur_ = std::min(max_, std::max<uint32_t>(1, cur_ * 2));
  } else if (drafted > 0) {
    cur_ = std::min(max_, accepted + 1);
  }
  const float gain = float(accepted) - cost - float(drafted) * kRowCost;
  gain_ = 0.75f * gain_ + 0.25f * gain;
  if (gain_ >= 0.0f) {
    if (gain_ > 0.5f) backoff_ = 4;  // paying clearly again
    return;
  }
  pause_ = backoff_;
  backoff_ = std::min<uint32_t>(64, backoff_ * 2);
  gain_ = 0.0f;  // after a pause one losing step pauses again, for twice as long
  cur_ = std::max<uint32_t>(1, std::min(max_, 4u));
}

// --- draft model -------------------------------------------------------------------------------

DraftModel::DraftModel(std::unique_ptr<Context> ctx)
    : ctx_(std::move(ctx)), held_(ctx_->params().n_seq_max) {}

Result<std::unique_ptr<DraftModel>> DraftModel::create(const Model& draft,
                                                       const Tokenizer& draft_tok,
                                                       const Tokenizer& target_tok,
                                                       const ContextParams& params,
                                                       uint32_t n_head) {
  const size_t n = static_cast<size_t>(draft_tok.n_vocab());
  if (draft_tok.n_vocab() != target_tok.n_vocab()) {
    return Status::invalid_argument("the draft model's vocabulary has " + std::to_string(n) +
                                    " tokens, the target's " +
                                    std::to_string(target_tok.n_vocab()) +
                                    ": a draft model must share the target's vocabulary");
  }
  for (size_t i = 0; i < n; ++i) {
    if (i == 1000 && n > 2000) i = n - 1000;
    const TokenId id = static_cast<TokenId>(i);
    if (draft_tok.token_text(id) != target_tok.token_text(id)) {
      return Status::invalid_argument("the draft model's token " + std::to_string(i) +
                                      " differs from the target's: a draft model must share "
                                      "the target's vocabulary");
    }
  }
  MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<Context> ctx, Context::create(draft, params));
  std::unique_ptr<DraftModel> dm(new DraftModel(std::move(ctx)));
  const uint32_t n_rows = draft.hparams().n_vocab;  // output rows (logits per token)
  if (n_head > 0 && n_head < n_rows) {
    dm->n_head_ = n_head;
    dm->scored_.assign(n_rows - n_head, 0);
    MNEMO_RETURN_IF_ERROR(dm->ctx_->set_output_subset(n_head, {}));
  }
  return dm;
}

Status DraftModel::score_history(std::span<const TokenId> history) {
  if (n_head_ == 0) return Status();
  auto add = [&](TokenId t) {  // an id above the head, not yet scored, joins extra_
    if (t < TokenId(n_head_) || uint32_t(t - n_head_) >= scored_.size()) return;
    if (scored_[t - n_head_] == 0) {
      scored_[t - n_head_] = 1;
      extra_.push_back(t);
    }
  };
  // Once the set has overflowed, only the most recent kMaxExtra / 2 tokens are read: the restart
  // below scored all of their ids, so the next restart waits for as many new ones (reading the
  // whole history again would bring the dropped ids back and restart at every call).
  const size_t window = kMaxExtra / 2;
  const size_t from = overflowed_ && history.size() > window ? history.size() - window : 0;
  const size_t n_before = extra_.size();
  for (size_t i = from; i < history.size(); ++i) add(history[i]);
  if (extra_.size() == n_before) return Status();
  if (extra_.size() > kMaxExtra) {  // restart from this history's most recent ids
    overflowed_ = true;
    for (TokenId t : extra_) scored_[t - n_head_] = 0;
    extra_.clear();
    for (size_t i = history.size(); i-- > 0 && extra_.size() < window;) add(history[i]);
  }
  return ctx_->set_output_subset(n_head_, extra_);
}

float DraftModel::cost(const Model& target) const {
  const double t = double(target.n_decode_bytes());
  if (t <= 0) return 1.0f;
  double d = double(ctx_->model().n_decode_bytes());
  const Weight& out = ctx_->model().output();
  if (n_head_ > 0 && out.ne1 > 0) {  // the output rows that are not scored are not read
    const double out_bytes = out.packed != nullptr ? double(out.packed->packed_bytes())
                                                   : double(out.row_bytes) * double(out.ne1);
    const double scored = std::min(1.0, double(n_head_ + extra_.size()) / double(out.ne1));
    d -= out_bytes * (1.0 - scored);
  }
  return float(d / t);
}

void DraftModel::forget(SeqId seq) {
  if (seq < 0 || static_cast<size_t>(seq) >= held_.size()) return;
  (void)ctx_->memory().seq_rm(seq, -1, -1);
  held_[seq].clear();
}

Result<std::vector<TokenId>> DraftModel::draft(SeqId seq, std::span<const TokenId> history,
                                               uint32_t n_max, float p_min) {
  std::vector<TokenId> out;
  n_decodes_ = 0;
  if (seq < 0 || static_cast<size_t>(seq) >= held_.size()) {
    return Status::invalid_argument("draft: seq_id " + std::to_string(seq) + " is out of range");
  }
  if (history.empty() || n_max == 0) return out;
  MNEMO_RETURN_IF_ERROR(score_history(history));
  std::vector<TokenId>& held = held_[seq];
  const uint32_t n_ctx_seq = ctx_->n_ctx_seq();
  if (history.size() + n_max > n_ctx_seq) {
    // The draft context is as long as the target's: near its end there is no room to draft.
    if (history.size() + 1 >= n_ctx_seq) return out;
    n_max = static_cast<uint32_t>(n_ctx_seq - history.size() - 1);
  }
  // Keep the common prefix (at least one token is decoded, for its logits).
  size_t keep = 0;
  while (keep < held.size() && keep + 1 < history.size() && held[keep] == history[keep]) ++keep;
  Memory& mem = ctx_->memory();
  MNEMO_ASSIGN_OR_RETURN(TruncatePlan plan, mem.plan_truncate(seq, static_cast<Pos>(keep)));
  keep = static_cast<size_t>(plan.keep);
  auto fail = [&](const Status& st) {
    forget(seq);
    return st;
  };
  if (Status st = mem.seq_rm(seq, static_cast<Pos>(keep), -1); !st.ok()) return fail(st);
  held.resize(keep);
  Batch batch;
  const size_t chunk = ctx_->params().n_batch;
  for (size_t i = keep; i < history.size(); i += chunk) {
    const size_t end = std::min(history.size(), i + chunk);
    batch.clear();
    for (size_t j = i; j < end; ++j) {
      batch.add(history[j], static_cast<Pos>(j), {seq}, j + 1 == history.size());
    }
    if (Status st = ctx_->decode(batch); !st.ok()) return fail(st);
    ++n_decodes_;
    held.insert(held.end(), history.begin() + i, history.begin() + end);
  }
  for (uint32_t k = 0; k < n_max; ++k) {
    const std::span<const float> logits = ctx_->logits(0);
    int32_t best = 0;
    float p_best = 1.0f;
    if (n_head_ == 0) {
      best = sampling::argmax(logits);
      if (p_min > 0.0f) {
        // The pick's probability, by the SIMD softmax (a scalar double exp over a 150k
        // vocabulary takes about 1 ms per drafted token). It only decides where the draft stops.
        probs_.assign(logits.begin(), logits.end());
        kernels::softmax(probs_.data(), 1, static_cast<int64_t>(probs_.size()));
        p_best = probs_[best];
      }
    } else {
      // Only the scored ids are finite: the pick and its probability come from them alone
      // (the other ids' exp is 0), the head then extra_ gathered into probs_.
      probs_.assign(logits.begin(), logits.begin() + n_head_);
      for (TokenId t : extra_) probs_.push_back(logits[static_cast<size_t>(t)]);
      size_t at = static_cast<size_t>(sampling::argmax(std::span<const float>(probs_)));
      // Ties go to the lowest id, as argmax over the whole row.
      for (size_t j = n_head_; j < probs_.size(); ++j) {
        if (probs_[j] == probs_[at] && at >= n_head_ &&
            extra_[j - n_head_] < extra_[at - n_head_]) {
          at = j;
        }
      }
      best = at < n_head_ ? static_cast<int32_t>(at) : extra_[at - n_head_];
      if (p_min > 0.0f) {
        kernels::softmax(probs_.data(), 1, static_cast<int64_t>(probs_.size()));
        p_best = probs_[at];
      }
    }
    if (p_best < p_min) break;
    out.push_back(best);
    if (k + 1 == n_max) break;
    batch.clear();
    batch.add(best, static_cast<Pos>(held.size()), {seq}, true);
    if (Status st = ctx_->decode(batch); !st.ok()) return fail(st);
    ++n_decodes_;
    held.push_back(best);
  }
  return out;
}

}  // namespace mnemo
