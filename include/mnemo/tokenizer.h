// Tokenizer: text <-> token ids, with the vocabulary read from a GGUF file.
//
// Two tokenizer models, each matching llama.cpp (src/llama-vocab.cpp) token for token:
//   - SPM ("llama" in tokenizer.ggml.model; Llama 2, Gemma): SentencePiece-style BPE over the
//     UTF-8 characters of the text, spaces escaped as U+2581 '▁'. Adjacent symbol pairs whose
//     concatenation is a vocabulary entry are merged, highest tokenizer.ggml.scores first (ties:
//     leftmost first), until no pair merges; a final symbol that is not a token falls back to
//     its bytes as <0xNN> tokens. Source: the SentencePiece BPE model (Kudo & Richardson 2018,
//     "SentencePiece: A simple and language independent subword tokenizer"), as llama.cpp runs it.
//   - BPE ("gpt2"; GPT-2, Llama 3, Qwen 2 / 3.5, SmolLM, DeepSeek): byte-level BPE (Radford et al.
//     2019, "Language Models are Unsupervised Multitask Learners", and the GPT-2 encoder's
//     bytes_to_unicode). The text is split into words by the pre-tokenizer regexes of
//     tokenizer.ggml.pre (PCRE2, the same patterns llama.cpp uses), each word's UTF-8 bytes are
//     mapped to printable code points, and the pairs of symbols are merged by
//     tokenizer.ggml.merges rank (lowest rank first).
//     Gemma 4 ("gemma4", or pre-tokenizer "gemma4") is BPE in SentencePiece's clothes: spaces are
//     written '▁', the text is split only into lines and runs of newlines, and the merges work on
//     the raw UTF-8 characters (no byte-level alphabet); a symbol left that is not a token falls
//     back to <0xNN> byte tokens, and a run of newlines that is a token is taken whole.
//
// Special tokens: CONTROL (and UNKNOWN) tokens are found as whole strings in the text only when
// parse_special is true; USER_DEFINED tokens always are (llama.cpp's tokenizer_st_partition,
// longest token text first). The text between them is tokenized by the model.
//
// Thread-safety: a Tokenizer is immutable after from_gguf(); every const method may be called
// from many threads at once. Move-only (a vocabulary is up to ~10 MB): copy explicitly with
// copy() if you really need two.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mnemo/status.h"

namespace mnemo {

namespace gguf {
class File;
}  // namespace gguf

/// Token id. kTokenNull marks "no such token" (an absent BOS, EOT, ...).
using TokenId = int32_t;
inline constexpr TokenId kTokenNull = -1;

/// tokenizer.ggml.token_type values (GGUF spec "tokenizer.ggml.token_type"; llama.cpp's
/// llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

/// Tokenizer model (tokenizer.ggml.model).
enum class VocabType : uint8_t {
  kSpm,  // "llama"
  kBpe,  // "gpt2", "gemma4"
};

/// Pre-tokenizer of a BPE vocabulary (tokenizer.ggml.pre). Names accepted for each, as llama.cpp
/// maps them: kDefault "default" (or absent, with a warning); kGpt2 "gpt2", "gpt-2", "phi-2",
/// "mpt"; kLlama3 "llama3", "llama-v3", "llama-bpe"; kQwen2 "qwen2", "deepseek-r1-qwen"; kQwen35
/// "qwen35"; kSmollm "smollm" (also "starcoder", "refact", "codeshell", "command-r": same
/// regexes); kFalcon "falcon"; kDeepseekLlm "deepseek-llm"; kDeepseekCoder "deepseek-coder";
/// kGemma4 "gemma4" (and every vocabulary of tokenizer model "gemma4"). SPM vocabularies use
/// kNone. Any other name is refused (kNotSupported).
enum class PreTokenizer : uint8_t {
  kNone,
  kDefault,
  kGpt2,
  kLlama3,
  kQwen2,
  kSmollm,
  kQwen35,
  kFalcon,
  kDeepseekLlm,
  kDeepseekCoder,
  kGemma4,
};

/// "none", "default", "gpt2", "llama3", "qwen2", "smollm", "qwen35", "falcon", "deepseek-llm",
/// "deepseek-coder", "gemma4".
std::string_view pre_tokenizer_name(PreTokenizer pre);

/// Everything a Tokenizer is built from: the tokenizer.ggml.* keys of a GGUF file. Tests and
/// tools fill one by hand; from_gguf() reads one from a file.
struct VocabSpec {
  std::string model;                 // tokenizer.ggml.model: "llama", "gpt2" or "gemma4"
  std::string pre;                   // tokenizer.ggml.pre ("" = absent)
  std::vector<std::string> tokens;   // [n_vocab] token texts (BPE: byte-level encoded)
  std::vector<float> scores;         // [n_vocab] or empty (all 0)
  std::vector<int32_t> token_types;  // [n_vocab] TokenType values, or empty (all kNormal)
  std::vector<std::string> merges;   // BPE: "left right" pairs, rank = index
  // Special token ids from the file; absent -> llama.cpp's per-model default (SPM: bos 1, eos 2,
  // unk 0; BPE: bos 11, eos 11; gemma4: none) or kTokenNull. An id >= n_vocab is ignored with
  // a warning.
  std::optional<int64_t> bos, eos, eot, eom, unk, sep, pad, mask;
  std::optional<int64_t> fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
  // Flags; absent -> the model's default (SPM: add_bos true, add_space_prefix true; BPE: add_bos
  // false except for the llama3 pre-tokenizer; add_eos false). Gemma 4 always adds BOS (an
  // add_bos of false is overridden with a warning, as llama.cpp does).
  std::optional<bool> add_bos, add_eos, add_space_prefix;
  std::string chat_template;  // tokenizer.chat_template ("" = absent)
};

/// Options of Tokenizer::detokenize (llama.cpp's llama_detokenize arguments).
struct DetokenizeOptions {
  /// Render CONTROL / UNKNOWN tokens as their text (else they render as nothing).
  bool special = false;
  /// Drop a leading BOS when the vocabulary adds one, and a trailing EOS when it adds one.
  bool remove_special = false;
  /// Apply llama.cpp's clean-up of spaces before punctuation (" ," -> ","; " 's" -> "'s")
  /// when the vocabulary asks for it (Tokenizer::clean_spaces()). Off by default: it breaks the
  /// round trip detokenize(tokenize(s)) == s.
  bool clean_spaces = false;
};

/// A vocabulary plus the algorithms that use it. Built once per model, then only read.
class Tokenizer {
 public:
  /// Reads the tokenizer.ggml.* keys (and tokenizer.chat_template) of `file`.
  /// Errors: NotFound for a missing tokenizer.ggml.model / .tokens (BPE: .merges);
  /// InvalidArgument for a key of the wrong type or an array of the wrong length;
  /// NotSupported for a model other than "llama" / "gpt2" / "gemma4" or a BPE pre-tokenizer
  /// not listed at PreTokenizer (the message names it);
  /// Corruption for a duplicate token text.
  static Result<Tokenizer> from_gguf(const gguf::File& file);
  /// Same from an in-memory description (errors as from_gguf).
  static Result<Tokenizer> from_spec(VocabSpec spec);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();
  /// An independent copy (rebuilds the lookup tables: O(n_vocab)).
  Tokenizer copy() const;

  /// Text -> ids. `text` is any bytes (invalid UTF-8 is tokenized as llama.cpp does: BPE maps
  /// each bad byte to U+FFFD, SPM falls back to byte tokens). add_special: prepend BOS / append
  /// EOS when the vocabulary's add_bos / add_eos say so. parse_special: recognise CONTROL tokens
  /// written as text (e.g. "<|im_start|>"). Cost O(n log n) in the text length.
  std::vector<TokenId> tokenize(std::string_view text, bool add_special, bool parse_special) const;

  /// The bytes one token stands for. BPE: byte-level symbols mapped back to bytes; SPM: '▁' ->
  /// ' ', <0xNN> -> the byte. CONTROL / UNKNOWN tokens give "" unless `special`; USER_DEFINED
  /// tokens always give their text. A piece may be part of a UTF-8 character. An id outside
  /// [0, n_vocab) gives "".
  std::string token_to_piece(TokenId id, bool special) const;
  /// Concatenated pieces (llama.cpp's llama_detokenize; see DetokenizeOptions). With the SPM
  /// add_space_prefix flag the leading space of the first piece is dropped. For every valid
  /// UTF-8 s, detokenize(tokenize(s, false, p), {.special = true}) == s, except that with
  /// add_space_prefix the space tokenize() also puts after each special token stays (as in
  /// llama.cpp). Gemma 3 and SmolLM2 round-trip exactly (tests/python/test_tokenizer.py).
  std::string detokenize(std::span<const TokenId> ids, const DetokenizeOptions& opts = {}) const;
  /// Shorthand: detokenize with only `special` set.
  std::string detokenize(std::span<const TokenId> ids, bool special) const {
    DetokenizeOptions o;
    o.special = special;
    return detokenize(ids, o);
  }

  /// Number of tokens (ids are [0, n_vocab)).
  int32_t n_vocab() const;
  /// The tokenizer model (tokenizer.ggml.model).
  VocabType type() const;
  /// The BPE pre-tokenizer (kNone for SPM).
  PreTokenizer pre() const;
  /// Raw token text as stored in the GGUF (BPE: byte-level encoded; SPM: with '▁').
  /// CHECK-fails for an id outside [0, n_vocab).
  const std::string& token_text(TokenId id) const;
  float token_score(TokenId id) const;
  /// The GGUF token type, adjusted as llama.cpp adjusts it (end-of-turn texts such as
  /// "<|im_end|>" become kControl). CHECK-fails outside [0, n_vocab).
  TokenType token_type(TokenId id) const;
  /// Id of an exact token text, or kTokenNull.
  TokenId find_token(std::string_view text) const;

  bool is_control(TokenId id) const;       // CONTROL (false outside the vocabulary)
  bool is_user_defined(TokenId id) const;  // USER_DEFINED
  bool is_byte(TokenId id) const;          // BYTE (<0xNN>)
  /// End of generation: EOS, EOT, EOM and the end-of-turn texts llama.cpp lists
  /// ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|endoftext|>", ...). False for kTokenNull.
  bool is_eog(TokenId id) const;
  /// All end-of-generation ids, ascending.
  const std::vector<TokenId>& eog_ids() const;

  /// Special ids; kTokenNull when the vocabulary has none.
  TokenId bos() const;  // beginning of sequence
  TokenId eos() const;  // end of sequence
  TokenId eot() const;  // end of turn: from the file, or found by text ("<end_of_turn>", ...)
  TokenId unk() const;  // unknown
  TokenId pad() const;  // padding
  TokenId sep() const;  // separator
  /// Fill-in-the-middle markers (GGUF tokenizer.ggml.fim_*_token_id, or found by text as
  /// llama.cpp finds them: "<|fim_prefix|>", "<fim-prefix>", "<PRE>", ...); kTokenNull when
  /// absent. pre / suf / mid: before the prefix, the suffix, and where the middle is generated;
  /// rep / sep: the repository name and file separators of repository-level FIM (Qwen2.5-Coder).
  TokenId fim_pre() const;
  TokenId fim_suf() const;
  TokenId fim_mid() const;
  TokenId fim_rep() const;
  TokenId fim_sep() const;
  TokenId nl() const;   // the token of "\n" (SPM: <0x0A>)
  /// Whether tokenize(..., add_special = true, ...) prepends BOS / appends EOS.
  bool add_bos() const;
  bool add_eos() const;
  /// SPM: whether a space is put before the text (and after each special token) before
  /// tokenizing, and dropped again from the first piece by detokenize.
  bool add_space_prefix() const;
  /// Whether llama.cpp would clean spaces when detokenizing (BPE, except the qwen2, qwen35,
  /// smollm, command-r and deepseek pre-tokenizers).
  bool clean_spaces() const;
  /// tokenizer.chat_template ("" when the file has none).
  const std::string& chat_template() const;

  /// Opaque vocabulary tables (src/tokenizer/tokenizer_impl.h).
  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mnemo
