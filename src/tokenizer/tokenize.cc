// Text <-> ids: special-token partition, the SPM and BPE merge loops, pieces and detokenize.
// Each algorithm follows llama.cpp's src/llama-vocab.cpp (named per function below) so that the
// ids are the same; the data structures are our own (byte ranges instead of strings, a trie to
// find special tokens).
#include <algorithm>
#include <cstdio>
#include <queue>

#include "base/utf8.h"
#include "mnemo/check.h"
#include "mnemo/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace mnemo {

using tok::kAttrByte;
using tok::kAttrControl;
using tok::kAttrNormal;
using tok::kAttrUnknown;
using tok::kAttrUserDefined;

namespace {

// One symbol of a merge loop: a byte range of the text, linked to its live neighbours.
struct Symbol {
  int32_t prev;
  int32_t next;
  uint32_t off;
  uint32_t n;  // 0 once merged into its left neighbour
};

// Splits `text` into UTF-8 characters (a truncated last character is kept as is).
std::vector<Symbol> char_symbols(std::string_view text) {
  std::vector<Symbol> syms;
  syms.reserve(text.size());
  size_t off = 0;
  int32_t index = 0;
  while (off < text.size()) {
    const size_t len =
        std::min(utf8::lenient_length(static_cast<uint8_t>(text[off])), text.size() - off);
    syms.push_back({index - 1, off + len == text.size() ? -1 : index + 1,
                    static_cast<uint32_t>(off), static_cast<uint32_t>(len)});
    off += len;
    ++index;
  }
  return syms;
}

// A candidate merge of symbols [left] and [right] in the SPM loop. Highest score first, then
// leftmost (llama.cpp's llm_bigram_spm::comparator).
struct SpmBigram {
  float score;
  int32_t left;
  int32_t right;
  uint32_t size;  // bytes of left + right when proposed

  // Either symbol was merged since (away, or grown).
  bool stale(const Symbol& l, const Symbol& r) const {
    return l.n == 0 || r.n == 0 || l.n + r.n != size;
  }
};
struct SpmLess {
  bool operator()(const SpmBigram& a, const SpmBigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

// A candidate merge in the BPE loop. Lowest rank first, then leftmost (llm_bigram_bpe).
struct BpeBigram {
  int32_t rank;
  int32_t left;
  int32_t right;
  uint32_t left_n;  // sizes when proposed: a merge is stale once either symbol changed
  uint32_t right_n;

  bool stale(const Symbol& l, const Symbol& r) const {
    return l.n == 0 || r.n == 0 || l.n != left_n || r.n != right_n;
  }
};
struct BpeLess {
  bool operator()(const BpeBigram& a, const BpeBigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

// The merge loop of SPM and BPE (llama.cpp's): every adjacent pair of syms is proposed
// (try_add(l, r) pushes a Bigram onto queue when the pair may merge); then the best proposal
// that is not stale is merged, right symbol into left, and the merged symbol's pairs with its
// neighbours are proposed, until no proposal is left.
template <class Bigram, class Less, class TryAdd>
void merge_symbols(std::vector<Symbol>& syms,
                   std::priority_queue<Bigram, std::vector<Bigram>, Less>& queue,
                   const TryAdd& try_add) {
  for (int32_t i = 1; i < static_cast<int32_t>(syms.size()); ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    const Bigram bg = queue.top();
    queue.pop();
    Symbol& l = syms[bg.left];
    Symbol& r = syms[bg.right];
    if (bg.stale(l, r)) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = bg.left;
    try_add(l.prev, bg.left);
    try_add(bg.left, l.next);
  }
}

}  // namespace

// llama.cpp: llm_tokenizer_spm_session::tokenize. Merges adjacent symbols whose concatenation is
// a token, best score first; a leftover symbol that is not a token becomes byte tokens.
void Tokenizer::Impl::tokenize_spm(std::string_view s, std::vector<TokenId>* out) const {
  std::vector<Symbol> syms = char_symbols(s);
  if (syms.empty()) return;
  std::priority_queue<SpmBigram, std::vector<SpmBigram>, SpmLess> queue;
  auto try_add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const TokenId id = find(s.substr(syms[l].off, syms[l].n + syms[r].n));
    if (id == kTokenNull) return;
    queue.push({score[id], l, r, syms[l].n + syms[r].n});
  };
  merge_symbols(syms, queue, try_add);
  for (int32_t i = 0; i != -1; i = syms[i].next) {
    const std::string_view piece = s.substr(syms[i].off, syms[i].n);
    const TokenId id = find(piece);
    if (id != kTokenNull) {
      out->push_back(id);
      continue;
    }
    for (char c : piece) {
      const TokenId b = byte_token[static_cast<uint8_t>(c)];
      if (b != kTokenNull) out->push_back(b);
    }
  }
}

// llama.cpp: llm_tokenizer_bpe_session::tokenize. Per pre-tokenized word, merges the adjacent
// pair of lowest merge rank until none is left; a final symbol that is not a token is emitted
// byte by byte (each byte's token: its 1-byte byte-level string, or Gemma 4's <0xNN>; bytes
// without one are dropped, as llama.cpp does). Gemma 4: spaces are escaped first, words keep
// their raw UTF-8, and a word of newlines only that is a token is taken whole.
void Tokenizer::Impl::tokenize_bpe(std::string_view s, std::vector<TokenId>* out) const {
  const bool escaped = escaped_spaces();
  const std::vector<std::string> words =
      escaped ? pretok->split_raw(tok::escape_spm_spaces(s)) : pretok->split(s);
  std::vector<Symbol> syms;
  std::priority_queue<BpeBigram, std::vector<BpeBigram>, BpeLess> queue;
  std::string key;
  for (const std::string& word : words) {
    if (ignore_merges || (escaped && word.find_first_not_of('\n') == std::string::npos)) {
      const TokenId id = find(word);
      if (id != kTokenNull) {
        out->push_back(id);
        continue;
      }
    }
    syms = char_symbols(word);
    queue = {};
    auto try_add = [&](int32_t l, int32_t r) {
      if (l < 0 || r < 0) return;
      const std::string_view a(word.data() + syms[l].off, syms[l].n);
      const std::string_view b(word.data() + syms[r].off, syms[r].n);
      key.assign(a);
      key.push_back(' ');
      key.append(b);
      auto it = merge_rank.find(std::string_view(key));
      if (it == merge_rank.end()) return;
      queue.push({it->second, l, r, syms[l].n, syms[r].n});
    };
    merge_symbols(syms, queue, try_add);
    if (syms.empty()) continue;
    for (int32_t i = 0; i != -1; i = syms[i].next) {
      const std::string_view piece(word.data() + syms[i].off, syms[i].n);
      const TokenId id = find(piece);
      if (id != kTokenNull) {
        out->push_back(id);
        continue;
      }
      for (char c : piece) {
        const TokenId b =
            escaped ? byte_token[static_cast<uint8_t>(c)] : find(std::string_view(&c, 1));
        if (b != kTokenNull) out->push_back(b);
      }
    }
  }
}

namespace {

// A stretch of the input: plain text [off, off + len), or one special token.
struct Fragment {
  TokenId token;  // kTokenNull for text
  size_t off;
  size_t len;
};

// One pass of detokenize's space clean-up over non-empty s: out starts with s[0], then
// step(s, i, out) handles s[i] for i = 1, 2, ... (it may advance i over what it consumes).
template <class Step>
std::string clean_pass(std::string s, Step step) {
  std::string out;
  out.reserve(s.size());
  out.push_back(s[0]);
  for (size_t i = 1; i < s.size(); ++i) step(s, i, out);
  return out;
}

}  // namespace

// llama.cpp: tokenizer_st_partition, then llama_vocab::impl::tokenize.
std::vector<TokenId> Tokenizer::tokenize(std::string_view text, bool add_special,
                                         bool parse_special) const {
  const Impl& v = *impl_;
  std::vector<Fragment> frags;
  if (!text.empty()) frags.push_back({kTokenNull, 0, text.size()});

  // Cut special tokens out of the text, longest first: each one splits every text fragment at
  // each of its non-overlapping occurrences, left to right. Only tokens that occur in the text
  // at all (found with the trie) need a pass.
  if (!text.empty()) {
    std::vector<uint8_t> present(v.special_order.size(), 0);
    v.special_trie.for_each_occurring(text, [&](int32_t k) { present[k] = 1; });
    std::vector<Fragment> next;
    for (size_t k = 0; k < present.size(); ++k) {
      if (!present[k]) continue;
      const TokenId id = v.special_order[k];
      if (!parse_special && (v.attr[id] & (kAttrControl | kAttrUnknown))) continue;
      const std::string_view tok_text = v.text[id];
      next.clear();
      for (const Fragment& f : frags) {
        if (f.token != kTokenNull) {
          next.push_back(f);
          continue;
        }
        size_t pos = f.off;
        const size_t end = f.off + f.len;
        while (pos < end) {
          const size_t m = text.substr(0, end).find(tok_text, pos);
          if (m == std::string_view::npos) break;
          if (m > pos) next.push_back({kTokenNull, pos, m - pos});
          next.push_back({id, m, tok_text.size()});
          pos = m + tok_text.size();
        }
        if (pos < end) next.push_back({kTokenNull, pos, end - pos});
      }
      frags.swap(next);
    }
  }

  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && v.add_bos) out.push_back(v.bos);
  if (v.type == VocabType::kSpm) {
    bool prev_special = true;  // a leading space is added at the start and after a special token
    std::string buf;
    for (const Fragment& f : frags) {
      if (f.token != kTokenNull) {
        out.push_back(f.token);
        prev_special = true;
        continue;
      }
      buf.clear();
      if (v.add_space_prefix && prev_special) buf.push_back(' ');
      buf.append(text.substr(f.off, f.len));
      v.tokenize_spm(tok::escape_spm_spaces(buf), &out);
      prev_special = false;
    }
  } else {
    for (const Fragment& f : frags) {
      if (f.token != kTokenNull) {
        out.push_back(f.token);
      } else {
        v.tokenize_bpe(text.substr(f.off, f.len), &out);
      }
    }
  }
  if (add_special && v.add_eos) out.push_back(v.eos);
  return out;
}

// llama.cpp: llama_vocab::impl::token_to_piece.
std::string Tokenizer::token_to_piece(TokenId id, bool special) const {
  const Impl& v = *impl_;
  if (!v.valid(id)) return {};
  const uint16_t a = v.attr[id];
  if (!special && (a & (kAttrUnknown | kAttrControl))) return {};
  const std::string& t = v.text[id];
  if (a & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return t;
  if (a & kAttrNormal) {
    std::string out;
    if (v.type == VocabType::kSpm || v.escaped_spaces()) {
      out.reserve(t.size());
      for (size_t i = 0; i < t.size();) {
        if (t.compare(i, tok::kSpmSpace.size(), tok::kSpmSpace) == 0) {
          out.push_back(' ');
          i += tok::kSpmSpace.size();
        } else {
          out.push_back(t[i++]);
        }
      }
      return out;
    }
    // Byte-level BPE: every code point of the text is one byte. One that is not (a damaged
    // vocabulary) is shown as llama.cpp shows it.
    for (uint32_t cpt : utf8::decode_lenient_all(t)) {
      const int b = tok::cpt_to_byte(cpt);
      if (b >= 0) {
        out.push_back(static_cast<char>(b));
      } else {
        std::string utf8;
        utf8::append(cpt, &utf8);
        out += "[UNK_BYTE_0x";
        for (char c : utf8) {
          char hex[3];
          std::snprintf(hex, sizeof(hex), "%02x", static_cast<uint8_t>(c));
          out += hex;
        }
        out += t + "]";
      }
    }
    return out;
  }
  if (a & kAttrByte) {
    // "<0xNN>"
    if (t.size() == 6 && t.compare(0, 3, "<0x") == 0) {
      return std::string(1, static_cast<char>(std::strtol(t.substr(3, 2).c_str(), nullptr, 16)));
    }
    return {};
  }
  return {};  // UNUSED / UNDEFINED tokens render as nothing
}

// llama.cpp: llama_vocab::impl::detokenize.
std::string Tokenizer::detokenize(std::span<const TokenId> ids,
                                  const DetokenizeOptions& opts) const {
  const Impl& v = *impl_;
  bool remove_space = v.add_space_prefix;
  if (opts.remove_special && v.add_bos && !ids.empty() && ids.front() == v.bos) {
    remove_space = false;
    ids = ids.subspan(1);
  }
  if (opts.remove_special && v.add_eos && !ids.empty() && ids.back() == v.eos) {
    ids = ids.first(ids.size() - 1);
  }
  std::string text;
  for (TokenId id : ids) {
    std::string piece = token_to_piece(id, opts.special);
    if (remove_space && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    remove_space = false;
    text += piece;
  }
  if (!(opts.clean_spaces && v.clean_spaces) || text.empty()) return text;

  // Pass 1: no space before ? ! . ,
  text = clean_pass(std::move(text), [](std::string& s, size_t& i, std::string& out) {
    const char x = s[i];
    if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) out.pop_back();
    out.push_back(x);
  });
  // Pass 2: " ' " -> "'"
  text = clean_pass(std::move(text), [](std::string& s, size_t& i, std::string& out) {
    const char x = s[i];
    if (x == '\'' && i + 1 < s.size() && s[i - 1] == ' ' && s[i + 1] == ' ') {
      out.pop_back();
      out.push_back(x);
      s[++i] = '\0';  // drop the space after; llama.cpp then sees no space before the next char
      return;
    }
    out.push_back(x);
  });
  // Pass 3: " 's", " 'm", " 're", " 've" -> no space before the apostrophe.
  return clean_pass(std::move(text), [](std::string& s, size_t& i, std::string& out) {
    const char x = s[i];
    if (s[i - 1] == ' ' && x == '\'' && i + 1 < s.size()) {
      const char x1 = s[i + 1];
      const bool two = i + 2 < s.size();
      if (x1 == 's' || x1 == 'm' ||
          (two && ((x1 == 'r' && s[i + 2] == 'e') || (x1 == 'v' && s[i + 2] == 'e')))) {
        out.pop_back();
      }
    }
    out.push_back(x);
  });
}

}  // namespace mnemo
