// Tokenizer::Impl: the vocabulary tables behind mnemo::Tokenizer (module-private).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "mnemo/tokenizer.h"
#include "tokenizer/pretokenizer.h"

namespace mnemo {

namespace tok {

/// Token attribute bits (llama.cpp's llama_token_attr values for the ones we use). A token can
/// carry several (a CONTROL token whose text says "unused" is also UNUSED).
enum Attr : uint16_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1 << 1,
  kAttrUnused = 1 << 2,
  kAttrNormal = 1 << 3,
  kAttrControl = 1 << 4,
  kAttrUserDefined = 1 << 5,
  kAttrByte = 1 << 6,
};

/// Heterogeneous hash so maps keyed on strings can be probed with a string_view (no copy).
struct SvHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

/// A byte trie over the texts of the special tokens, to find which of them occur in a text in
/// O(text length x longest match) instead of O(text length x number of special tokens).
class SpecialTrie {
 public:
  void insert(std::string_view text, int32_t index);
  /// Calls found(index) for every inserted text that occurs somewhere in `text` (an index may
  /// be reported more than once).
  template <typename F>
  void for_each_occurring(std::string_view text, F&& found) const {
    if (nodes_.empty()) return;
    for (size_t start = 0; start < text.size(); ++start) {
      int32_t node = 0;
      for (size_t i = start; i < text.size(); ++i) {
        node = child(node, static_cast<uint8_t>(text[i]));
        if (node < 0) break;
        if (nodes_[node].index >= 0) found(nodes_[node].index);
      }
    }
  }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> kids;  // sorted by byte
    int32_t index = -1;                             // a text ends here
  };
  int32_t child(int32_t node, uint8_t b) const;
  std::vector<Node> nodes_;
};

}  // namespace tok

struct Tokenizer::Impl {
  VocabType type = VocabType::kSpm;
  PreTokenizer pre = PreTokenizer::kNone;

  // Per token, [n_vocab] each.
  std::vector<std::string> text;
  std::vector<float> score;
  std::vector<uint16_t> attr;  // tok::Attr bits

  // Text -> id. Keys view the strings in `text` (stable: Impl never moves once built).
  std::unordered_map<std::string_view, TokenId, tok::SvHash, std::equal_to<>> to_id;
  // BPE merges: "left right" -> rank (the first rank wins for a repeated pair).
  std::unordered_map<std::string, int32_t, tok::SvHash, std::equal_to<>> merge_rank;

  TokenId bos = kTokenNull, eos = kTokenNull, eot = kTokenNull, eom = kTokenNull;
  TokenId unk = kTokenNull, sep = kTokenNull, pad = kTokenNull, mask = kTokenNull;
  TokenId nl = kTokenNull;
  TokenId fim_pre = kTokenNull, fim_suf = kTokenNull, fim_mid = kTokenNull;
  TokenId fim_pad = kTokenNull, fim_rep = kTokenNull, fim_sep = kTokenNull;
  bool add_bos = false, add_eos = false, add_space_prefix = false;
  bool clean_spaces = false;   // detokenize clean-up (BPE default; off for qwen2 / smollm)
  bool ignore_merges = false;  // llama3: a word that is a token is not merged
  std::vector<TokenId> eog;    // sorted

  // CONTROL / USER_DEFINED / UNKNOWN tokens, longest text first (ties: lower id first): the
  // order in which tokenize() cuts them out of the text. trie indexes into this vector.
  std::vector<TokenId> special_order;
  tok::SpecialTrie special_trie;

  // SPM: token of byte b (<0xBB>, else the 1-byte text, else unk). Gemma 4's BPE: <0xBB> or
  // kTokenNull. Other BPE: unused (all kTokenNull).
  std::array<TokenId, 256> byte_token{};

  std::unique_ptr<tok::Pretokenizer> pretok;  // BPE only
  std::string chat_template;
  std::vector<std::string> merges;  // as loaded, for copy()
  VocabSpec spec_rest;              // the spec without tokens / merges, for copy()

  TokenId find(std::string_view s) const {
    auto it = to_id.find(s);
    return it == to_id.end() ? kTokenNull : it->second;
  }
  bool valid(TokenId id) const { return id >= 0 && id < static_cast<TokenId>(text.size()); }
  // BPE over '▁'-escaped raw UTF-8 instead of the byte-level alphabet (Gemma 4).
  bool escaped_spaces() const { return pre == PreTokenizer::kGemma4; }

  // Tokenizes one stretch of plain text (no special tokens in it), appending to out.
  void tokenize_spm(std::string_view text, std::vector<TokenId>* out) const;
  void tokenize_bpe(std::string_view text, std::vector<TokenId>* out) const;
};

}  // namespace mnemo
