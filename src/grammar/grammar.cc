// GBNF parser, matcher and token masks (contracts and the format in include/mnemo/grammar.h).
#include "mnemo/grammar.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "base/utf8.h"

namespace mnemo::grammar {

bool Element::matches(uint32_t cp) const {
  bool in = false;
  for (const auto& [lo, hi] : ranges) {
    if (cp >= lo && cp <= hi) {
      in = true;
      break;
    }
  }
  return in != negated;
}

bool decode_utf8(std::string_view s, std::vector<uint32_t>* out) {
  return utf8::decode_strict_all(s, out);
}

// --- parser ------------------------------------------------------------------------------------

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Result<std::shared_ptr<const Grammar>> run() {
    auto g = std::make_shared<Grammar>();
    g_ = g.get();
    skip_space(/*newlines=*/true);
    while (pos_ < s_.size()) {
      MNEMO_RETURN_IF_ERROR(parse_rule());
      skip_space(true);
    }
    for (const auto& [name, index] : names_) {
      if (!defined_.count(name)) {
        return Status::invalid_argument(
            fmt::format("grammar: rule '{}' is used but not defined", name));
      }
      (void)index;
    }
    auto root = names_.find("root");
    if (root == names_.end()) return Status::invalid_argument("grammar: no rule 'root'");
    g->root_ = root->second;
    MNEMO_RETURN_IF_ERROR(check_left_recursion());
    return std::shared_ptr<const Grammar>(std::move(g));
  }

 private:
  static constexpr uint32_t kMaxRepeat = 10000;
  static constexpr size_t kMaxElements = 100000;

  Status error(const std::string& what) const {
    const size_t line =
        size_t(std::count(s_.begin(), s_.begin() + std::min(pos_, s_.size()), '\n')) + 1;
    return Status::invalid_argument(fmt::format("grammar line {}: {}", line, what));
  }

  // Spaces and comments; newlines too when `newlines` (inside groups, after ::= or |).
  void skip_space(bool newlines) {
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++pos_;
      } else {
        break;
      }
    }
  }
  // At a newline outside groups: does the rule go on (the next line starts with `|`)?
  bool continues_on_next_line() {
    size_t p = pos_;
    while (p < s_.size()) {
      const char c = s_[p];
      if (c == '#') {
        while (p < s_.size() && s_[p] != '\n') ++p;
      } else if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        ++p;
      } else {
        break;
      }
    }
    if (p < s_.size() && s_[p] == '|') {
      pos_ = p;
      return true;
    }
    return false;
  }
  static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  }
  std::string parse_name() {
    const size_t b = pos_;
    while (pos_ < s_.size() && is_name_char(s_[pos_])) ++pos_;
    return std::string(s_.substr(b, pos_ - b));
  }
  uint32_t rule_index(const std::string& name) {
    auto it = names_.find(name);
    if (it != names_.end()) return it->second;
    const auto index = uint32_t(g_->rules_.size());
    g_->rules_.push_back(Rule{name, {}});
    names_.emplace(name, index);
    return index;
  }
  uint32_t new_rule(const std::string& base) {
    const std::string name = fmt::format("{}-{}", base, g_->rules_.size());
    defined_.insert(name);
    return rule_index(name);
  }

  Status parse_rule() {
    const std::string name = parse_name();
    if (name.empty()) return error("expected a rule name");
    skip_space(false);
    if (s_.substr(pos_, 3) != "::=") return error("expected '::=' after '" + name + "'");
    pos_ += 3;
    skip_space(true);
    const uint32_t r = rule_index(name);
    if (defined_.count(name)) return error("rule '" + name + "' is defined twice");
    defined_.insert(name);
    current_ = name;
    std::vector<Sequence> alts;
    MNEMO_RETURN_IF_ERROR(parse_alternatives(/*nested=*/false, &alts));
    g_->rules_[r].alts = std::move(alts);
    if (pos_ < s_.size() && s_[pos_] != '\n')
      return error("unexpected '" + std::string(1, s_[pos_]) + "'");
    return Status();
  }

  Status parse_alternatives(bool nested, std::vector<Sequence>* alts) {
    while (true) {
      Sequence seq;
      MNEMO_RETURN_IF_ERROR(parse_sequence(nested, &seq));
      alts->push_back(std::move(seq));
      if (pos_ < s_.size() && s_[pos_] == '|') {
        ++pos_;
        skip_space(true);
        continue;
      }
      return Status();
    }
  }

  Status count_elements(size_t n) {
    n_elements_ += n;
    if (n_elements_ > kMaxElements) return error("the grammar has more than 100000 elements");
    return Status();
  }

  Status parse_sequence(bool nested, Sequence* seq) {
    size_t last_begin = seq->size();  // where the last element (for postfix operators) begins
    bool have_last = false;
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == '"' || c == '\'') {
        last_begin = seq->size();
        MNEMO_RETURN_IF_ERROR(parse_literal(c, seq));
        have_last = true;
      } else if (c == '[') {
        last_begin = seq->size();
        Element e;
        MNEMO_RETURN_IF_ERROR(parse_class(&e));
        seq->push_back(std::move(e));
        have_last = true;
      } else if (c == '.') {
        ++pos_;
        last_begin = seq->size();
        Element e;
        e.negated = true;  // none of no ranges: any code point
        seq->push_back(std::move(e));
        have_last = true;
      } else if (is_name_char(c)) {
        // A name followed by ::= starts the next rule (a rule ended without a newline).
        const size_t save = pos_;
        const std::string name = parse_name();
        size_t p = pos_;
        while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t')) ++p;
        if (s_.substr(p, 3) == "::=") {
          pos_ = save;
          return Status();
        }
        last_begin = seq->size();
        Element e;
        e.kind = Element::Kind::kRule;
        e.rule = rule_index(name);
        seq->push_back(std::move(e));
        have_last = true;
      } else if (c == '(') {
        ++pos_;
        skip_space(true);
        std::vector<Sequence> alts;
        MNEMO_RETURN_IF_ERROR(parse_alternatives(/*nested=*/true, &alts));
        if (pos_ >= s_.size() || s_[pos_] != ')') return error("expected ')'");
        ++pos_;
        const uint32_t r = new_rule(current_);
        g_->rules_[r].alts = std::move(alts);
        last_begin = seq->size();
        Element e;
        e.kind = Element::Kind::kRule;
        e.rule = r;
        seq->push_back(std::move(e));
        have_last = true;
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_last) return error(std::string("'") + c + "' follows nothing");
        MNEMO_RETURN_IF_ERROR(parse_repeat(seq, last_begin));
        have_last = false;
      } else if (c == '|' || c == ')' || c == '\n') {
        if (c == '\n' && nested) {
          skip_space(true);
          continue;
        }
        if (c == '\n' && !nested && continues_on_next_line()) return Status();
        return Status();
      } else {
        return error("unexpected '" + std::string(1, c) + "'");
      }
      MNEMO_RETURN_IF_ERROR(count_elements(1));
      skip_space(nested);
    }
    return Status();
  }

  // One character of a literal or class, with escapes.
  Status parse_char(uint32_t* out) {
    if (pos_ >= s_.size()) return error("unexpected end");
    if (s_[pos_] != '\\') {
      if (!utf8::decode_strict(s_, &pos_, out)) return error("invalid UTF-8");
      return Status();
    }
    ++pos_;
    if (pos_ >= s_.size()) return error("unexpected end after '\\'");
    const char e = s_[pos_++];
    auto hex = [&](int digits) -> Status {
      uint32_t v = 0;
      for (int i = 0; i < digits; ++i) {
        if (pos_ >= s_.size()) return error("short escape");
        const char h = s_[pos_++];
        v <<= 4;
        if (h >= '0' && h <= '9') {
          v |= uint32_t(h - '0');
        } else if (h >= 'a' && h <= 'f') {
          v |= uint32_t(h - 'a' + 10);
        } else if (h >= 'A' && h <= 'F') {
          v |= uint32_t(h - 'A' + 10);
        } else {
          return error("bad hex digit in an escape");
        }
      }
      if (v > 0x10FFFF) return error("escape beyond U+10FFFF");
      *out = v;
      return Status();
    };
    switch (e) {
      case 'n':
        *out = '\n';
        return Status();
      case 'r':
        *out = '\r';
        return Status();
      case 't':
        *out = '\t';
        return Status();
      case 'x':
        return hex(2);
      case 'u':
        return hex(4);
      case 'U':
        return hex(8);
      case '\\':
      case '"':
      case '\'':
      case '[':
      case ']':
      case '-':
      case '^':
        *out = uint32_t(e);
        return Status();
      default:
        return error(std::string("unknown escape '\\") + e + "'");
    }
  }

  Status parse_literal(char quote, Sequence* seq) {
    ++pos_;
    size_t n = 0;
    while (pos_ < s_.size() && s_[pos_] != quote) {
      if (s_[pos_] == '\n') return error("a literal does not end on its line");
      uint32_t cp = 0;
      MNEMO_RETURN_IF_ERROR(parse_char(&cp));
      Element e;
      e.ranges.push_back({cp, cp});
      seq->push_back(std::move(e));
      ++n;
    }
    if (pos_ >= s_.size()) return error("a literal does not end");
    ++pos_;
    return count_elements(n);
  }

  Status parse_class(Element* e) {
    ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '^') {
      e->negated = true;
      ++pos_;
    }
    while (pos_ < s_.size() && s_[pos_] != ']') {
      uint32_t lo = 0, hi = 0;
      MNEMO_RETURN_IF_ERROR(parse_char(&lo));
      hi = lo;
      if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        MNEMO_RETURN_IF_ERROR(parse_char(&hi));
        if (hi < lo) return error("a class range runs backwards");
      }
      e->ranges.push_back({lo, hi});
    }
    if (pos_ >= s_.size()) return error("a class does not end");
    ++pos_;
    return Status();
  }

  Result<uint32_t> parse_number() {
    const size_t b = pos_;
    uint64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      v = v * 10 + uint64_t(s_[pos_] - '0');
      if (v > kMaxRepeat) return error("a repetition count over 10000");
      ++pos_;
    }
    if (pos_ == b) return error("expected a number");
    return uint32_t(v);
  }

  // Applies *, +, ?, {m}, {m,}, {m,n} to seq[last_begin, end).
  Status parse_repeat(Sequence* seq, size_t last_begin) {
    Sequence item(seq->begin() + long(last_begin), seq->end());
    seq->resize(last_begin);
    uint32_t min = 0, max = 0;
    bool unbounded = false;
    const char c = s_[pos_++];
    if (c == '*') {
      unbounded = true;
    } else if (c == '+') {
      min = 1, unbounded = true;
    } else if (c == '?') {
      max = 1;
    } else {
      skip_space(false);
      MNEMO_ASSIGN_OR_RETURN(min, parse_number());
      skip_space(false);
      max = min;
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        skip_space(false);
        if (pos_ < s_.size() && s_[pos_] == '}') {
          unbounded = true;
        } else {
          MNEMO_ASSIGN_OR_RETURN(max, parse_number());
          if (max < min) return error("{m,n} with n < m");
        }
      }
      skip_space(false);
      if (pos_ >= s_.size() || s_[pos_] != '}') return error("expected '}'");
      ++pos_;
    }
    MNEMO_RETURN_IF_ERROR(count_elements(item.size() * (std::max(min, max) + 1)));
    for (uint32_t i = 0; i < min; ++i) seq->insert(seq->end(), item.begin(), item.end());
    auto ref = [](uint32_t r) {
      Element e;
      e.kind = Element::Kind::kRule;
      e.rule = r;
      return e;
    };
    if (unbounded) {  // R ::= item R | ε
      const uint32_t r = new_rule(current_);
      Sequence again = item;
      again.push_back(ref(r));
      g_->rules_[r].alts = {std::move(again), Sequence{}};
      seq->push_back(ref(r));
    } else if (max > min) {  // O_k ::= item O_{k-1} | ε, O_1 ::= item | ε
      uint32_t inner = 0;
      for (uint32_t k = 1; k <= max - min; ++k) {
        const uint32_t r = new_rule(current_);
        Sequence opt = item;
        if (k > 1) opt.push_back(ref(inner));
        g_->rules_[r].alts = {std::move(opt), Sequence{}};
        inner = r;
      }
      seq->push_back(ref(inner));
    }
    return Status();
  }

  // A rule that can reach itself without consuming a character would expand forever.
  Status check_left_recursion() const {
    const auto& rules = g_->rules_;
    std::vector<uint8_t> nullable(rules.size(), 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < rules.size(); ++r) {
        if (nullable[r]) continue;
        for (const Sequence& alt : rules[r].alts) {
          const bool all = std::all_of(alt.begin(), alt.end(), [&](const Element& e) {
            return e.kind == Element::Kind::kRule && nullable[e.rule];
          });
          if (all) {
            nullable[r] = 1;
            changed = true;
            break;
          }
        }
      }
    }
    // Edges r -> s where s can be reached at the start of r.
    std::vector<std::vector<uint32_t>> first(rules.size());
    for (size_t r = 0; r < rules.size(); ++r) {
      for (const Sequence& alt : rules[r].alts) {
        for (const Element& e : alt) {
          if (e.kind != Element::Kind::kRule) break;
          first[r].push_back(e.rule);
          if (!nullable[e.rule]) break;
        }
      }
    }
    std::vector<uint8_t> state(rules.size(), 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<uint32_t, size_t>> path;
    for (uint32_t s = 0; s < rules.size(); ++s) {
      if (state[s]) continue;
      path.push_back({s, 0});
      state[s] = 1;
      while (!path.empty()) {
        auto& [r, i] = path.back();
        if (i < first[r].size()) {
          const uint32_t n = first[r][i++];
          if (state[n] == 1) {
            return Status::invalid_argument(
                fmt::format("grammar: rule '{}' is left-recursive", rules[n].name));
          }
          if (state[n] == 0) {
            state[n] = 1;
            path.push_back({n, 0});
          }
        } else {
          state[r] = 2;
          path.pop_back();
        }
      }
    }
    return Status();
  }

  std::string_view s_;
  size_t pos_ = 0;
  Grammar* g_ = nullptr;
  std::map<std::string, uint32_t> names_;
  std::set<std::string> defined_;
  std::string current_;
  size_t n_elements_ = 0;
};

Result<std::shared_ptr<const Grammar>> Grammar::parse(std::string_view gbnf) {
  return Parser(gbnf).run();
}

// --- matcher -----------------------------------------------------------------------------------

namespace {
// Nesting of rule expansions (a bound that sane grammars never reach).
constexpr int kMaxDepth = 4096;
// Stacks alive at once. A small ambiguous grammar can make exponentially many (20 nested rules
// of two alternatives: a million); past this bound the rest are dropped, so a hostile grammar
// costs bounded time and memory per step (it may then refuse text it would accept).
constexpr size_t kMaxStacks = 20000;

void dedupe(std::vector<Matcher::Stack>* v) {
  std::sort(v->begin(), v->end());
  v->erase(std::unique(v->begin(), v->end()), v->end());
}
}  // namespace

Matcher::Matcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  const Rule& root = g_->rules()[g_->root()];
  for (uint32_t a = 0; a < root.alts.size(); ++a) {
    expand(Stack{{g_->root(), a, 0}}, &stacks_, 0);
  }
  dedupe(&stacks_);
}

void Matcher::expand(Stack s, std::vector<Stack>* out, int depth) const {
  if (depth > kMaxDepth || s.size() > size_t(kMaxDepth) || out->size() >= kMaxStacks) return;
  const auto& rules = g_->rules();
  while (true) {
    if (s.empty()) {
      out->push_back(std::move(s));  // complete
      return;
    }
    const Pos top = s.back();
    const Sequence& seq = rules[top.rule].alts[top.alt];
    if (top.idx == seq.size()) {  // this rule is done: back in its caller, past the reference
      s.pop_back();
      if (!s.empty()) ++s.back().idx;
      continue;
    }
    const Element& e = seq[top.idx];
    if (e.kind == Element::Kind::kChars) {
      out->push_back(std::move(s));
      return;
    }
    // A reference in last position replaces its caller's frame (the caller would end with it).
    Stack base = s;
    if (top.idx + 1 == seq.size()) {
      base.pop_back();
      // The grand-caller's reference to this rule completes when the callee does: keep it.
    }
    const Rule& callee = rules[e.rule];
    for (uint32_t a = 0; a < callee.alts.size(); ++a) {
      Stack t = base;
      t.push_back({e.rule, a, 0});
      expand(std::move(t), out, depth + 1);
    }
    return;
  }
}

std::vector<Matcher::Stack> Matcher::step(const std::vector<Stack>& from, uint32_t cp) const {
  std::vector<Stack> next;
  const auto& rules = g_->rules();
  for (const Stack& s : from) {
    if (s.empty()) continue;
    const Pos& top = s.back();
    const Element& e = rules[top.rule].alts[top.alt][top.idx];
    if (!e.matches(cp)) continue;
    Stack t = s;
    ++t.back().idx;
    expand(std::move(t), &next, 0);
  }
  dedupe(&next);
  return next;
}

bool Matcher::accept(uint32_t cp) {
  std::vector<Stack> next = step(stacks_, cp);
  if (next.empty()) return false;
  stacks_ = std::move(next);
  return true;
}

bool Matcher::accept_text(std::string_view utf8) {
  std::vector<uint32_t> cps;
  if (!decode_utf8(utf8, &cps)) return false;
  std::vector<Stack> cur = stacks_;
  for (uint32_t cp : cps) {
    cur = step(cur, cp);
    if (cur.empty()) return false;
  }
  stacks_ = std::move(cur);
  return true;
}

bool Matcher::can_end() const {
  return std::any_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return s.empty(); });
}

bool Matcher::done() const {
  return std::all_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return s.empty(); });
}

// --- vocabulary trie ---------------------------------------------------------------------------

Vocab::Vocab(const std::vector<std::string>& pieces, const std::vector<int32_t>& eog)
    : eog_(eog), n_tokens_(pieces.size()) {
  std::sort(eog_.begin(), eog_.end());
  nodes_.emplace_back();
  cps_.resize(pieces.size());
  std::vector<std::map<uint32_t, uint32_t>> kids(1);
  for (size_t t = 0; t < pieces.size(); ++t) {
    if (is_eog(int32_t(t))) continue;
    std::vector<uint32_t> cps;
    if (pieces[t].empty() || !decode_utf8(pieces[t], &cps)) continue;
    uint32_t n = 0;
    for (uint32_t cp : cps) {
      auto it = kids[n].find(cp);
      if (it == kids[n].end()) {
        const auto child = uint32_t(nodes_.size());
        nodes_.emplace_back();
        kids.emplace_back();
        kids[n].emplace(cp, child);
        n = child;
      } else {
        n = it->second;
      }
    }
    nodes_[n].tokens.push_back(int32_t(t));
    cps_[t] = std::move(cps);
  }
  for (size_t n = 0; n < nodes_.size(); ++n) {
    nodes_[n].children.assign(kids[n].begin(), kids[n].end());
  }
}

bool Vocab::is_eog(int32_t token) const {
  return std::binary_search(eog_.begin(), eog_.end(), token);
}

void Vocab::walk(uint32_t node, const Matcher& m, const std::vector<Matcher::Stack>& stacks,
                 std::vector<uint8_t>* allowed) const {
  for (const auto& [cp, child] : nodes_[node].children) {
    std::vector<Matcher::Stack> next = m.step(stacks, cp);
    if (next.empty()) continue;  // no token under this prefix fits
    for (int32_t t : nodes_[child].tokens) (*allowed)[size_t(t)] = 1;
    walk(child, m, next, allowed);
  }
}

void Vocab::allowed(const Matcher& m, std::vector<uint8_t>* allowed) const {
  allowed->assign(n_tokens_, 0);
  if (m.can_end()) {
    for (int32_t t : eog_) {
      if (t >= 0 && size_t(t) < n_tokens_) (*allowed)[size_t(t)] = 1;
    }
  }
  walk(0, m, m.stacks(), allowed);
}

}  // namespace mnemo::grammar
