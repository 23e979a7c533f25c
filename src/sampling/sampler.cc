#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "mnemo/sampling.h"

namespace mnemo {

Status SamplingParams::validate() const {
  auto bad = [](const char* field, double v, const char* want) {
    return Status::invalid_argument(std::string(field) + " = " + std::to_string(v) +
                                    " is out of range (" + want + ")");
  };
  if (!std::isfinite(temp)) return bad("temperature", temp, "a finite number");
  if (!(top_p >= 0.0f && top_p <= 1.0f)) return bad("top_p", top_p, "0..1");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return bad("min_p", min_p, "0..1");
  if (!(repeat_penalty > 0.0f) || !std::isfinite(repeat_penalty)) {
    return bad("repeat_penalty", repeat_penalty, "> 0");
  }
  if (repeat_last_n < -1) return bad("repeat_last_n", repeat_last_n, ">= -1");
  if (!std::isfinite(frequency_penalty) || std::fabs(frequency_penalty) > 2.0f) {
    return bad("frequency_penalty", frequency_penalty, "-2..2");
  }
  if (!std::isfinite(presence_penalty) || std::fabs(presence_penalty) > 2.0f) {
    return bad("presence_penalty", presence_penalty, "-2..2");
  }
  return Status();
}

namespace sampling {

int32_t argmax(std::span<const float> logits) {
  CHECK(!logits.empty());
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

void apply_penalties(std::vector<TokenCandidate>& c, std::span<const int32_t> recent,
                     float repeat_penalty, float frequency_penalty, float presence_penalty) {
  if (recent.empty()) return;
  if (repeat_penalty == 1.0f && frequency_penalty == 0.0f && presence_penalty == 0.0f) return;
  std::unordered_map<int32_t, int> counts;
  for (int32_t t : recent) ++counts[t];
  // Candidates are indexed by id when unsorted (c[i].id == i); fall back to a search otherwise.
  const bool by_index = !c.empty() && c.front().id == 0 && c.back().id == int32_t(c.size()) - 1;
  for (const auto& [id, count] : counts) {
    TokenCandidate* cand = nullptr;
    if (by_index) {
      if (id >= 0 && size_t(id) < c.size()) cand = &c[id];
    } else {
      auto it = std::find_if(c.begin(), c.end(),
                             [id = id](const TokenCandidate& x) { return x.id == id; });
      if (it != c.end()) cand = &*it;
    }
    if (cand == nullptr) continue;
    cand->logit = cand->logit > 0 ? cand->logit / repeat_penalty : cand->logit * repeat_penalty;
    cand->logit -= float(count) * frequency_penalty + presence_penalty;
  }
}

void top_k(std::vector<TokenCandidate>& c, int32_t k) {
  auto desc = [](const TokenCandidate& a, const TokenCandidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  if (k <= 0 || size_t(k) >= c.size()) {
    std::sort(c.begin(), c.end(), desc);
    return;
  }
  std::partial_sort(c.begin(), c.begin() + k, c.end(), desc);
  c.resize(k);
}

void softmax(std::vector<TokenCandidate>& c) {
  if (c.empty()) return;
  float max_logit = -std::numeric_limits<float>::infinity();
  for (const auto& x : c) max_logit = std::max(max_logit, x.logit);
  double sum = 0.0;
  for (auto& x : c) {
    x.p = std::exp(x.logit - max_logit);
    sum += x.p;
  }
  for (auto& x : c) x.p = float(x.p / sum);
}

void top_p(std::vector<TokenCandidate>& c, float p, size_t min_keep) {
  if (p >= 1.0f) return;
  double cum = 0.0;
  size_t keep = c.size();
  for (size_t i = 0; i < c.size(); ++i) {
    cum += c[i].p;
    if (cum >= p && i + 1 >= min_keep) {
      keep = i + 1;
      break;
    }
  }
  c.resize(keep);
}

void min_p(std::vector<TokenCandidate>& c, float mp, size_t min_keep) {
  if (mp <= 0.0f || c.empty()) return;
  float p_max = 0.0f;
  for (const auto& x : c) p_max = std::max(p_max, x.p);
  const float threshold = mp * p_max;
  size_t keep = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    if (c[i].p >= threshold || keep < min_keep) c[keep++] = c[i];
  }
  c.resize(keep);
}

}  // namespace sampling

Sampler::Sampler(const SamplingParams& params) : params_(params) {
  seed_ = params.seed == SamplingParams::kRandomSeed ? std::random_device{}() : params.seed;
  rng_.seed(seed_);
}

void Sampler::reset() {
  recent_.clear();
  rng_.seed(seed_);
}

void Sampler::accept(int32_t token) {
  const int32_t window = params_.repeat_last_n;
  if (window == 0) return;
  recent_.push_back(token);
  if (window > 0) {
    while (recent_.size() > size_t(window)) recent_.pop_front();
  } else if (recent_.size() > (1u << 16)) {
    recent_.pop_front();  // -1 = "whole context": bounded so memory cannot grow without limit
  }
}

void Sampler::set_grammar(std::shared_ptr<const grammar::Grammar> g,
                          std::shared_ptr<const grammar::Vocab> vocab) {
  grammar_ = std::move(g);
  vocab_ = std::move(vocab);
  matcher_ = grammar_ ? std::make_unique<grammar::Matcher>(grammar_) : nullptr;
  triggers_.clear();
  pending_text_.clear();
}

void Sampler::set_lazy_grammar(std::shared_ptr<const grammar::Grammar> g,
                               std::shared_ptr<const grammar::Vocab> vocab,
                               std::vector<std::string> triggers) {
  grammar_ = std::move(g);
  vocab_ = std::move(vocab);
  matcher_.reset();
  triggers_.clear();
  pending_text_.clear();
  for (const std::string& t : triggers) {
    std::vector<uint32_t> cps;
    if (!t.empty() && grammar::decode_utf8(t, &cps)) triggers_.push_back(std::move(cps));
  }
  if (triggers_.empty()) grammar_.reset();
}

void Sampler::accept_generated(int32_t token) {
  accept(token);
  if (!grammar_ || vocab_->is_eog(token)) return;
  const std::vector<uint32_t>& cps = vocab_->code_points(token);
  if (matcher_) {
    for (uint32_t cp : cps) {
      if (!matcher_->accept(cp)) break;  // sample() only picks what the grammar allows
    }
    return;
  }
  // A lazy grammar waiting for its trigger: the earliest trigger in the text so far starts it.
  pending_text_.insert(pending_text_.end(), cps.begin(), cps.end());
  size_t start = pending_text_.size();
  for (const std::vector<uint32_t>& t : triggers_) {
    auto it = std::search(pending_text_.begin(), pending_text_.end(), t.begin(), t.end());
    start = std::min(start, size_t(it - pending_text_.begin()));
  }
  if (start == pending_text_.size()) {
    // Only the tail a trigger could still start in is kept (bounded memory).
    size_t longest = 0;
    for (const std::vector<uint32_t>& t : triggers_) longest = std::max(longest, t.size());
    if (pending_text_.size() >= longest) {
      pending_text_.erase(pending_text_.begin(), pending_text_.end() - (longest - 1));
    }
    return;
  }
  matcher_ = std::make_unique<grammar::Matcher>(grammar_);
  for (size_t i = start; i < pending_text_.size(); ++i) {
    if (!matcher_->accept(pending_text_[i])) {
      matcher_.reset();  // the text from the trigger already leaves the grammar: unconstrained
      grammar_.reset();
      break;
    }
  }
  pending_text_.clear();
  triggers_.clear();
}

bool Sampler::grammar_allows(int32_t token) const {
  if (token < 0 || size_t(token) >= vocab_->n_tokens()) return false;
  if (vocab_->is_eog(token)) return matcher_->can_end();
  const std::vector<uint32_t>& cps = vocab_->code_points(token);
  if (cps.empty()) return false;
  std::vector<grammar::Matcher::Stack> stacks = matcher_->stacks();
  for (uint32_t cp : cps) {
    stacks = matcher_->step(stacks, cp);
    if (stacks.empty()) return false;
  }
  return true;
}

int32_t Sampler::sample(std::span<const float> logits) {
  CHECK(!logits.empty());
  if (!matcher_) return sample_chain(logits);
  constexpr int kTries = 8;
  work_.assign(logits.begin(), logits.end());
  for (int i = 0; i < kTries; ++i) {
    const int32_t t = sample_chain(work_);
    if (grammar_allows(t)) return t;
    work_[size_t(t)] = -INFINITY;
  }
  vocab_->allowed(*matcher_, &mask_);
  bool any = false;
  for (size_t i = 0; i < work_.size(); ++i) {
    if (i >= mask_.size() || !mask_[i]) {
      work_[i] = -INFINITY;
    } else if (work_[i] != -INFINITY) {
      any = true;
    }
  }
  if (!any) {
    for (size_t i = 0; i < mask_.size(); ++i) {
      if (vocab_->is_eog(int32_t(i))) return int32_t(i);
    }
    return sampling::argmax(logits);
  }
  return sample_chain(work_);
}

void Sampler::keep_greedy_top(std::span<const TokenCandidate> cands) {
  const size_t n = std::min(size_t(greedy_n_), cands.size());
  greedy_top_.assign(cands.begin(), cands.end());
  // Best first; ties to the lower id, as the greedy pick breaks them.
  std::partial_sort(greedy_top_.begin(), greedy_top_.begin() + ptrdiff_t(n), greedy_top_.end(),
                    [](const TokenCandidate& a, const TokenCandidate& b) {
                      return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
                    });
  greedy_top_.resize(n);
  sampling::softmax(greedy_top_);
}

int32_t Sampler::sample_chain(std::span<const float> logits) {
  const bool penalize =
      !recent_.empty() && (params_.repeat_penalty != 1.0f || params_.frequency_penalty != 0.0f ||
                           params_.presence_penalty != 0.0f);
  const bool bias = !params_.logit_bias.empty();
  greedy_top_.clear();
  if (params_.temp <= 0.0f && !penalize && !bias && greedy_n_ <= 1) {
    const int32_t t = sampling::argmax(logits);
    greedy_ = {t, logits[size_t(t)], 1.0f};
    last_greedy_ = true;
    return t;
  }

  cands_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) cands_[i] = {int32_t(i), logits[i], 0.0f};
  for (const LogitBias& lb : params_.logit_bias) {
    if (lb.token >= 0 && size_t(lb.token) < cands_.size())
      cands_[size_t(lb.token)].logit += lb.bias;
  }
  if (penalize) {
    std::vector<int32_t> recent(recent_.begin(), recent_.end());
    sampling::apply_penalties(cands_, recent, params_.repeat_penalty, params_.frequency_penalty,
                              params_.presence_penalty);
  }
  if (params_.temp <= 0.0f) {
    auto best = std::max_element(cands_.begin(), cands_.end(), [](const auto& a, const auto& b) {
      return a.logit < b.logit || (a.logit == b.logit && a.id > b.id);
    });
    greedy_ = {best->id, best->logit, 1.0f};
    last_greedy_ = true;
    if (greedy_n_ > 1) keep_greedy_top(cands_);
    return best->id;
  }
  sampling::top_k(cands_, params_.top_k);
  sampling::softmax(cands_);
  sampling::top_p(cands_, params_.top_p);
  sampling::min_p(cands_, params_.min_p);
  for (auto& x : cands_) x.logit /= params_.temp;
  sampling::softmax(cands_);
  last_greedy_ = false;
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  const double r = uni(rng_);
  double cum = 0.0;
  for (const auto& x : cands_) {
    cum += x.p;
    if (r < cum) return x.id;
  }
  return cands_.back().id;
}

}  // namespace mnemo
