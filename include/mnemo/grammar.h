// Constrained generation: a grammar in llama.cpp's GBNF, a matcher that follows the text
// generated so far, and the set of tokens that may come next (a mask over the vocabulary).
//
// GBNF (as llama.cpp's grammars/README.md describes it): rules `name ::= alternatives`, the
// start rule `root`; alternatives separated by `|`; elements are "literals" (escapes \n \r \t
// \\ \" \' \[ \] \xHH \uHHHH \UHHHHHHHH), character classes [a-z0-9_] and [^...], `.` (any
// character), rule names and ( groups ); each may be followed by `*`, `+`, `?`, `{m}`, `{m,}` or
// `{m,n}`; `#` starts a comment. A rule ends at the end of its line unless the next line starts
// with `|` or a group is open.
//
// Matching is a pushdown recognizer over Unicode code points (as llama.cpp's: a set of stacks of
// positions in the rules, each stack's top a character element). Repetitions become
// right-recursive rules and a rule reference in last position replaces its caller's frame, so
// a stack does not grow with the length of a repetition. Left recursion is refused when the
// grammar is parsed. At most 20000 stacks are kept at once (an ambiguous grammar can ask for
// exponentially many); past that, the parse may refuse text the grammar accepts.
//
// Token masks (Vocab::allowed) walk a trie of the vocabulary's token texts once per step: a
// subtree whose prefix no stack accepts is skipped whole, so a step costs what the grammar
// allows at that point, not the size of the vocabulary. A token whose text is not whole UTF-8
// (a byte piece of a multi-byte character) is never allowed under a grammar.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mnemo/status.h"

namespace mnemo::grammar {

/// One element of a sequence: a set of code points, or a reference to a rule.
struct Element {
  enum class Kind : uint8_t { kChars, kRule };
  Kind kind = Kind::kChars;
  bool negated = false;                               // kChars: none of the ranges
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // kChars: inclusive [lo, hi]
  uint32_t rule = 0;                                  // kRule: index into Grammar::rules()
  bool matches(uint32_t cp) const;
};
using Sequence = std::vector<Element>;

/// A rule: its name (generated rules are "name-N") and its alternatives (an empty one is ε).
struct Rule {
  std::string name;
  std::vector<Sequence> alts;
};

/// A parsed grammar. Immutable; shared by every matcher of it.
class Grammar {
 public:
  /// Parses GBNF text (see the file comment). Errors: InvalidArgument naming the line and the
  /// problem (syntax, an undefined rule, no `root`, left recursion, a repetition count over
  /// 10000, more than 100000 elements).
  static Result<std::shared_ptr<const Grammar>> parse(std::string_view gbnf);

  const std::vector<Rule>& rules() const { return rules_; }
  uint32_t root() const { return root_; }

 private:
  std::vector<Rule> rules_;
  uint32_t root_ = 0;
  friend class Parser;
};

/// The state of a parse: the stacks still alive after the code points accepted so far.
class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> g);

  /// Takes one code point. false (and no change) when the grammar does not allow it here.
  bool accept(uint32_t cp);
  /// Takes a UTF-8 string: all of it or (false) nothing; invalid UTF-8 is refused.
  bool accept_text(std::string_view utf8);
  /// The text so far is a whole sentence of the grammar (end of generation allowed).
  bool can_end() const;
  /// Nothing more can be added (every stack is complete).
  bool done() const;

  /// A position in a rule: rule, alternative, index of the next element.
  struct Pos {
    uint32_t rule, alt, idx;
    auto operator<=>(const Pos&) const = default;
  };
  using Stack = std::vector<Pos>;
  const std::vector<Stack>& stacks() const { return stacks_; }
  const Grammar& grammar() const { return *g_; }
  /// The stacks after `cp` from `from` (empty: refused). Used by Vocab::allowed.
  std::vector<Stack> step(const std::vector<Stack>& from, uint32_t cp) const;

 private:
  void expand(Stack s, std::vector<Stack>* out, int depth) const;
  std::shared_ptr<const Grammar> g_;
  std::vector<Stack> stacks_;
};

/// The vocabulary's token texts as a trie of code points, for masks.
class Vocab {
 public:
  /// pieces[i]: token i's text as generated (Tokenizer::token_to_piece, special false); eog: the
  /// end-of-generation tokens (allowed exactly when the matcher can_end()).
  Vocab(const std::vector<std::string>& pieces, const std::vector<int32_t>& eog);

  /// allowed[i] = 1 when token i may come next after `m`'s text (resized to the vocabulary).
  void allowed(const Matcher& m, std::vector<uint8_t>* allowed) const;

  size_t n_tokens() const { return n_tokens_; }
  const std::vector<uint32_t>& code_points(int32_t token) const { return cps_[size_t(token)]; }
  bool is_eog(int32_t token) const;

 private:
  struct Node {
    std::vector<std::pair<uint32_t, uint32_t>> children;  // (code point, node), sorted
    std::vector<int32_t> tokens;                          // tokens whose text ends here
  };
  void walk(uint32_t node, const Matcher& m, const std::vector<Matcher::Stack>& stacks,
            std::vector<uint8_t>* allowed) const;
  std::vector<Node> nodes_;
  std::vector<std::vector<uint32_t>> cps_;  // per token; empty when not whole UTF-8
  std::vector<int32_t> eog_;
  size_t n_tokens_ = 0;
};

/// Decodes UTF-8 into code points by RFC 3629 (strictly: a truncated sequence, an overlong form, a
/// surrogate or a value past U+10FFFF is invalid); false for invalid input.
bool decode_utf8(std::string_view s, std::vector<uint32_t>* out);

}  // namespace mnemo::grammar
