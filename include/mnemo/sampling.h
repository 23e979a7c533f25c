// Sampler chain: logits of one output row -> the next token.
//
// Order (as llama.cpp's default chain): logit bias -> penalties -> top-k -> top-p -> min-p ->
// temperature -> draw. temp <= 0 means greedy (argmax after penalties). Each stage is a plain
// function over a candidate list so tests can check it against a direct formula.
//
// Sources: nucleus (top-p) sampling, Holtzman et al. 2019 "The Curious Case of Neural Text
// Degeneration"; min-p, Nguyen et al. 2024 "Turning Up the Heat: Min-p Sampling"; repetition
// penalty, Keskar et al. 2019 "CTRL" (divide positive logits, multiply negative ones);
// frequency/presence penalties as the OpenAI API documents them
// (logit -= count * frequency_penalty + (count > 0) * presence_penalty).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "mnemo/grammar.h"
#include "mnemo/status.h"

namespace mnemo {

/// A bias added to one token's logit before every other stage (OpenAI's and llama.cpp's
/// logit_bias). -infinity bans the token.
struct LogitBias {
  int32_t token = 0;  // in [0, n_vocab)
  float bias = 0.0f;
};

/// Sampling settings (names as llama.cpp's CLI and server use them).
struct SamplingParams {
  float temp = 0.8f;            // <= 0: greedy
  int32_t top_k = 40;           // <= 0: off
  float top_p = 0.95f;          // >= 1: off
  float min_p = 0.05f;          // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off
  int32_t repeat_last_n = 64;   // window of recent tokens the penalties look at; 0: off
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  uint64_t seed = 0xFFFFFFFFull;  // kDefaultSeed draws a random seed
  /// Added to the logits first (a token listed twice gets both); ids must be < n_vocab of the
  /// logits sample() sees (others are ignored there).
  std::vector<LogitBias> logit_bias;

  static constexpr uint64_t kRandomSeed = 0xFFFFFFFFull;

  /// InvalidArgument naming the field for out-of-range values (negative temp is allowed: greedy).
  Status validate() const;
};

/// One candidate token with its (possibly adjusted) logit and probability.
struct TokenCandidate {
  int32_t id;
  float logit;
  float p;
};

/// Stateful sampler for one sequence: keeps the recent-token window for the penalties and its own
/// random generator (so parallel sequences are independent and reproducible per seed).
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  /// Picks the next token from `logits` (n_vocab floats). Does not call accept(). With a
  /// grammar: the chain's pick is checked against the grammar; a token it refuses is banned and
  /// the chain runs again (up to 8 times, as llama.cpp samples first and constrains only when
  /// needed), then the chain runs on the logits of the allowed tokens only (Vocab::allowed). When
  /// the grammar allows no token, returns the first end-of-generation token.
  int32_t sample(std::span<const float> logits);
  /// Records a token (prompt or generated) for the penalty window.
  void accept(int32_t token);
  /// Records a generated token: accept(), and the grammar's text advances by the token's text.
  void accept_generated(int32_t token);
  /// Constrains what sample() picks to the texts `g` accepts (null: none). `vocab` gives the
  /// token texts; both outlive the sampler or are shared with it.
  void set_grammar(std::shared_ptr<const grammar::Grammar> g,
                   std::shared_ptr<const grammar::Vocab> vocab);
  /// A lazy grammar (tool calls under tool_choice "auto", as llama.cpp's lazy grammars): the
  /// sampler is unconstrained until the generated text contains one of `triggers` (non-empty
  /// strings, e.g. a tool-call format's opener); from then on the text from the trigger's first
  /// character on must match `g`. Text generated before the trigger is not constrained. When the
  /// text from the trigger cannot match `g` (a token that carried the trigger also carried
  /// characters the grammar refuses), the grammar is dropped and sampling stays unconstrained.
  void set_lazy_grammar(std::shared_ptr<const grammar::Grammar> g,
                        std::shared_ptr<const grammar::Vocab> vocab,
                        std::vector<std::string> triggers);
  /// The grammar's state (null without a grammar, and for a lazy one before its trigger).
  const grammar::Matcher* grammar_state() const { return matcher_.get(); }
  /// The distribution the last sample() drew from, after every stage (llama-server's
  /// post-sampling probabilities): candidates best first with their probability p; only the
  /// tokens the stages kept. Greedy: the picked token alone, p = 1; or, after
  /// set_greedy_candidates(n) with n > 1, the n best tokens (logit bias and penalties applied)
  /// with p the softmax over those n, as llama.cpp's greedy sampling reports probabilities (a
  /// top-k of n_probs, then a softmax; the pick is the first).
  std::span<const TokenCandidate> last_distribution() const {
    if (!last_greedy_) return std::span<const TokenCandidate>(cands_);
    if (!greedy_top_.empty()) return std::span<const TokenCandidate>(greedy_top_);
    return std::span<const TokenCandidate>(&greedy_, 1);
  }
  /// How many candidates last_distribution() keeps after a greedy pick (0 or 1: the pick alone;
  /// the server sets a request's n_probs when it asks for post-sampling probabilities).
  void set_greedy_candidates(int32_t n) { greedy_n_ = n; }
  /// Forgets the penalty window and re-seeds.
  void reset();

  const SamplingParams& params() const { return params_; }
  /// The seed actually used (a drawn one when params.seed == kRandomSeed).
  uint64_t seed() const { return seed_; }

 private:
  SamplingParams params_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  std::deque<int32_t> recent_;         // last repeat_last_n accepted tokens
  std::vector<TokenCandidate> cands_;  // scratch, n_vocab
  // last_distribution(): the greedy pick, or cands_ as the last chain left it (not copied).
  TokenCandidate greedy_{0, 0.0f, 1.0f};
  bool last_greedy_ = true;
  int32_t greedy_n_ = 0;                     // set_greedy_candidates
  std::vector<TokenCandidate> greedy_top_;  // the greedy_n_ best after a greedy pick, or empty
  // Fills greedy_top_ from `logits` (bias and penalties applied) when greedy_n_ > 1.
  void keep_greedy_top(std::span<const TokenCandidate> cands);
  // The chain without the grammar: penalties, top-k, top-p, min-p, temperature, draw.
  int32_t sample_chain(std::span<const float> logits);
  bool grammar_allows(int32_t token) const;
  std::shared_ptr<const grammar::Grammar> grammar_;
  std::shared_ptr<const grammar::Vocab> vocab_;
  std::unique_ptr<grammar::Matcher> matcher_;
  // Lazy grammar: the triggers as code points, and the generated text so far (code points) while
  // no trigger has been seen; the matcher is made when one appears.
  std::vector<std::vector<uint32_t>> triggers_;
  std::vector<uint32_t> pending_text_;
  std::vector<float> work_;    // logits with refused tokens at -inf
  std::vector<uint8_t> mask_;  // Vocab::allowed
};

namespace sampling {
/// Index of the largest logit (the lowest index among ties). n >= 1.
int32_t argmax(std::span<const float> logits);
/// Applies repetition / frequency / presence penalties for the tokens in `recent` in place.
void apply_penalties(std::vector<TokenCandidate>& c, std::span<const int32_t> recent,
                     float repeat_penalty, float frequency_penalty, float presence_penalty);
/// Sorts by logit descending and keeps the k best (k <= 0 or k >= size: keep all, sorted).
void top_k(std::vector<TokenCandidate>& c, int32_t k);
/// Computes p = softmax(logit / 1) over the candidates (sorted descending expected).
void softmax(std::vector<TokenCandidate>& c);
/// Keeps the smallest prefix whose probability mass reaches p (at least min_keep). Needs softmax.
void top_p(std::vector<TokenCandidate>& c, float p, size_t min_keep = 1);
/// Keeps candidates with p >= min_p * p_max (at least min_keep). Needs softmax.
void min_p(std::vector<TokenCandidate>& c, float min_p, size_t min_keep = 1);
}  // namespace sampling

}  // namespace mnemo
