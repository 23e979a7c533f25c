// Loading a vocabulary: GGUF keys -> VocabSpec -> Tokenizer::Impl, with llama.cpp's defaults and
// its adjustments of special tokens (src/llama-vocab.cpp, llama_vocab::impl::load).
#include <algorithm>
#include <array>
#include <initializer_list>
#include <utility>

#include "mnemo/gguf.h"
#include "mnemo/log.h"
#include "mnemo/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace mnemo {

namespace tok {

int32_t SpecialTrie::child(int32_t node, uint8_t b) const {
  const auto& kids = nodes_[node].kids;
  auto it =
      std::lower_bound(kids.begin(), kids.end(), b,
                       [](const std::pair<uint8_t, int32_t>& k, uint8_t v) { return k.first < v; });
  return (it != kids.end() && it->first == b) ? it->second : -1;
}

void SpecialTrie::insert(std::string_view text, int32_t index) {
  if (nodes_.empty()) nodes_.emplace_back();
  int32_t node = 0;
  for (char ch : text) {
    const auto b = static_cast<uint8_t>(ch);
    int32_t next = child(node, b);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      auto& kids = nodes_[node].kids;
      auto it = std::lower_bound(
          kids.begin(), kids.end(), b,
          [](const std::pair<uint8_t, int32_t>& k, uint8_t v) { return k.first < v; });
      kids.insert(it, {b, next});
    }
    node = next;
  }
  if (nodes_[node].index < 0) nodes_[node].index = index;
}

}  // namespace tok

std::string_view pre_tokenizer_name(PreTokenizer pre) {
  switch (pre) {
    case PreTokenizer::kNone:
      return "none";
    case PreTokenizer::kDefault:
      return "default";
    case PreTokenizer::kGpt2:
      return "gpt2";
    case PreTokenizer::kLlama3:
      return "llama3";
    case PreTokenizer::kQwen2:
      return "qwen2";
    case PreTokenizer::kSmollm:
      return "smollm";
    case PreTokenizer::kQwen35:
      return "qwen35";
    case PreTokenizer::kFalcon:
      return "falcon";
    case PreTokenizer::kDeepseekLlm:
      return "deepseek-llm";
    case PreTokenizer::kDeepseekCoder:
      return "deepseek-coder";
    case PreTokenizer::kGemma4:
      return "gemma4";
  }
  return "?";
}

namespace {

using tok::kAttrByte;
using tok::kAttrControl;
using tok::kAttrNormal;
using tok::kAttrUndefined;
using tok::kAttrUnknown;
using tok::kAttrUnused;
using tok::kAttrUserDefined;

uint16_t attr_from_type(int32_t t) {
  switch (static_cast<TokenType>(t)) {
    case TokenType::kUnknown:
      return kAttrUnknown;
    case TokenType::kUnused:
      return kAttrUnused;
    case TokenType::kNormal:
      return kAttrNormal;
    case TokenType::kControl:
      return kAttrControl;
    case TokenType::kUserDefined:
      return kAttrUserDefined;
    case TokenType::kByte:
      return kAttrByte;
    case TokenType::kUndefined:
      return kAttrUndefined;
  }
  return kAttrUndefined;
}

// tokenizer.ggml.pre -> (pre-tokenizer, clean_spaces, ignore_merges, default add_bos), as
// llama.cpp maps the names we support.
struct PreInfo {
  PreTokenizer pre;
  bool clean_spaces;
  bool ignore_merges;
  bool add_bos;
};

Result<PreInfo> pre_info(const std::string& name) {
  if (name.empty()) {
    MNEMO_LOG(kWarn) << "tokenizer: GGUF has no tokenizer.ggml.pre; using the 'default' "
                        "pre-tokenizer (tokenization may differ from the model's own)";
    return PreInfo{PreTokenizer::kDefault, true, false, false};
  }
  struct Entry {
    std::string_view name;
    PreInfo info;
  };
  static constexpr Entry kEntries[] = {
      {"default", {PreTokenizer::kDefault, true, false, false}},
      {"llama3", {PreTokenizer::kLlama3, true, true, true}},
      {"llama-v3", {PreTokenizer::kLlama3, true, true, true}},
      {"llama-bpe", {PreTokenizer::kLlama3, true, true, true}},
      {"gpt2", {PreTokenizer::kGpt2, true, false, false}},
      {"gpt-2", {PreTokenizer::kGpt2, true, false, false}},
      {"phi-2", {PreTokenizer::kGpt2, true, false, false}},
      {"mpt", {PreTokenizer::kGpt2, true, false, false}},
      {"qwen2", {PreTokenizer::kQwen2, false, false, false}},
      {"deepseek-r1-qwen", {PreTokenizer::kQwen2, false, false, false}},
      {"qwen35", {PreTokenizer::kQwen35, false, false, false}},
      {"smollm", {PreTokenizer::kSmollm, false, false, false}},
      {"starcoder", {PreTokenizer::kSmollm, true, false, false}},
      {"refact", {PreTokenizer::kSmollm, true, false, false}},
      {"codeshell", {PreTokenizer::kSmollm, true, false, false}},
      {"command-r", {PreTokenizer::kSmollm, false, false, false}},
      {"falcon", {PreTokenizer::kFalcon, true, false, false}},
      {"deepseek-llm", {PreTokenizer::kDeepseekLlm, false, false, false}},
      {"deepseek-coder", {PreTokenizer::kDeepseekCoder, false, false, false}},
      {"gemma4", {PreTokenizer::kGemma4, true, false, true}},
  };
  std::string names;
  for (const Entry& e : kEntries) {
    if (e.name == name) return e.info;
    names += names.empty() ? "" : ", ";
    names += e.name;
  }
  return Status::not_supported("unknown BPE pre-tokenizer tokenizer.ggml.pre = '" + name +
                               "' (supported: " + names + ")");
}

// Token texts llama.cpp recognises as end of turn / end of generation / fill-in-the-middle.
// clang-format off
constexpr std::array<std::string_view, 11> kEotTexts = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"};
constexpr std::array<std::string_view, 22> kEogTexts = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~["};
constexpr std::array<std::string_view, 8> kFimPreTexts = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
    "<|code_prefix|>", "<|prefix|>"};
constexpr std::array<std::string_view, 8> kFimSufTexts = {
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
    "<|code_suffix|>", "<|suffix|>"};
constexpr std::array<std::string_view, 8> kFimMidTexts = {
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
    "<|code_middle|>", "<|middle|>"};
constexpr std::array<std::string_view, 5> kFimPadTexts = {
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
constexpr std::array<std::string_view, 5> kFimRepTexts = {
    "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
constexpr std::array<std::string_view, 1> kFimSepTexts = {"<|file_sep|>"};
// clang-format on

template <size_t N>
bool in_list(std::string_view s, const std::array<std::string_view, N>& list) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

// If `id` is unset, sets it to the lowest id whose text is in `list` and marks that token CONTROL.
// (llama.cpp takes the first match in hash-map order; the lowest id is its choice on the models
// we test, e.g. <|endoftext|> before <|im_end|> for SmolLM2, and is deterministic.)
template <size_t N>
void detect_by_text(Tokenizer::Impl& v, TokenId* id, const std::array<std::string_view, N>& list) {
  if (*id != kTokenNull) return;
  for (TokenId t = 0; t < static_cast<TokenId>(v.text.size()); ++t) {
    if (in_list(v.text[t], list)) {
      *id = t;
      if ((v.attr[t] & kAttrControl) == 0) {
        MNEMO_LOG(kDebug) << "tokenizer: token " << t << " '" << v.text[t]
                          << "' looks like a control token; marking it CONTROL";
        v.attr[t] |= kAttrControl;
      }
      return;
    }
  }
}

Result<const gguf::Array*> string_array(const gguf::File& f, std::string_view key) {
  MNEMO_ASSIGN_OR_RETURN(const gguf::Array* arr, f.get_array(key));
  if (arr->elem_type != gguf::ValueType::STRING) {
    return Status::invalid_argument(std::string(key) + " must be an array of strings, not of " +
                                    std::string(gguf::value_type_name(arr->elem_type)));
  }
  return arr;
}

// The optional per-token array `key`: null when absent; else its elements must be of one of
// `types` (named `type_names`), at least n_tokens of them (kInvalidArgument naming the key
// otherwise).
Result<const gguf::Array*> per_token_array(const gguf::File& f, std::string_view key,
                                           size_t n_tokens,
                                           std::initializer_list<gguf::ValueType> types,
                                           std::string_view type_names) {
  if (f.find(key) == nullptr) return nullptr;
  MNEMO_ASSIGN_OR_RETURN(const gguf::Array* arr, f.get_array(key));
  if (std::find(types.begin(), types.end(), arr->elem_type) == types.end()) {
    return Status::invalid_argument(std::string(key) + " must be " + std::string(type_names) +
                                    ", not " + std::string(gguf::value_type_name(arr->elem_type)));
  }
  if (arr->items.size() < n_tokens) {
    return Status::invalid_argument(std::string(key) + " has " + std::to_string(arr->items.size()) +
                                    " entries for " + std::to_string(n_tokens) + " tokens");
  }
  return arr;
}

}  // namespace

Result<Tokenizer> Tokenizer::from_gguf(const gguf::File& f) {
  VocabSpec spec;
  MNEMO_ASSIGN_OR_RETURN(spec.model, f.get_string("tokenizer.ggml.model"));
  if (f.find("tokenizer.ggml.pre") != nullptr) {
    MNEMO_ASSIGN_OR_RETURN(spec.pre, f.get_string("tokenizer.ggml.pre"));
  }
  {
    MNEMO_ASSIGN_OR_RETURN(const gguf::Array* toks, string_array(f, "tokenizer.ggml.tokens"));
    spec.tokens.reserve(toks->items.size());
    for (const gguf::Value& v : toks->items) spec.tokens.push_back(*v.as_string());
  }
  const size_t n = spec.tokens.size();
  MNEMO_ASSIGN_OR_RETURN(
      const gguf::Array* sc,
      per_token_array(f, "tokenizer.ggml.scores", n,
                      {gguf::ValueType::FLOAT32, gguf::ValueType::INT32}, "float32 or int32"));
  if (sc != nullptr) {
    spec.scores.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      spec.scores.push_back(static_cast<float>(sc->items[i].as_double().value_or(0.0)));
    }
  }
  MNEMO_ASSIGN_OR_RETURN(const gguf::Array* tt, per_token_array(f, "tokenizer.ggml.token_type", n,
                                                                {gguf::ValueType::INT32}, "int32"));
  if (tt != nullptr) {
    spec.token_types.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      spec.token_types.push_back(static_cast<int32_t>(tt->items[i].as_int().value_or(0)));
    }
  }
  if (f.find("tokenizer.ggml.merges") != nullptr) {
    MNEMO_ASSIGN_OR_RETURN(const gguf::Array* m, string_array(f, "tokenizer.ggml.merges"));
    spec.merges.reserve(m->items.size());
    for (const gguf::Value& v : m->items) spec.merges.push_back(*v.as_string());
  } else if (spec.model == "gpt2" || spec.model == "gemma4") {
    return Status::not_found("BPE vocabulary without tokenizer.ggml.merges");
  }

  auto read_id = [&](std::string_view key, std::optional<int64_t>* out) -> Status {
    const gguf::Value* v = f.find(key);
    if (v == nullptr) return Status();
    std::optional<int64_t> x = v->as_int();
    if (!x) {
      return Status::invalid_argument(std::string(key) + " must be an integer, not " +
                                      std::string(gguf::value_type_name(v->type)));
    }
    *out = *x;
    return Status();
  };
  MNEMO_RETURN_IF_ERROR(read_id("tokenizer.ggml.bos_token_id", &spec.bos));
  MNEMO_RETURN_IF_ERROR(read_id("tokenizer.ggml.eos_token_id", &spec.eos));
  MNEMO_RETURN_IF_ERROR(read_id("tokenizer.ggml.eot_token_id", &spec.eot));
  MNEMO_RETURN_IF_ERROR(read_id("tokenizer.ggml.eom_token_id", &spec.eom));
  MNEMO_RETURN_IF_ERROR(read_id("tokenizer.ggml.unknown_token_id", &spec.unk));
  MNEMO_RETURN_IF_ERROR(read_id("tokenizer.ggml.seperator_token_id", &spec.sep));
  MNEMO_RETURN_IF_ERROR(read_id("tokenizer.ggml.padding_token_id", &spec.pad));
  MNEMO_RETURN_IF_ERROR(read_id("tokenizer.ggml.mask_token_id", &spec.mask));
  MNEMO_RETURN_IF_ERROR(read_id("tokenizer.ggml.fim_pre_token_id", &spec.fim_pre));
  MNEMO_RETURN_IF_ERROR(read_id("tokenizer.ggml.fim_suf_token_id", &spec.fim_suf));
  MNEMO_RETURN_IF_ERROR(read_id("tokenizer.ggml.fim_mid_token_id", &spec.fim_mid));
  MNEMO_RETURN_IF_ERROR(read_id("tokenizer.ggml.fim_pad_token_id", &spec.fim_pad));
  MNEMO_RETURN_IF_ERROR(read_id("tokenizer.ggml.fim_rep_token_id", &spec.fim_rep));
  MNEMO_RETURN_IF_ERROR(read_id("tokenizer.ggml.fim_sep_token_id", &spec.fim_sep));
  // Deprecated names of the FIM ids (llama.cpp reads them after the new ones).
  MNEMO_RETURN_IF_ERROR(read_id("tokenizer.ggml.prefix_token_id", &spec.fim_pre));
  MNEMO_RETURN_IF_ERROR(read_id("tokenizer.ggml.suffix_token_id", &spec.fim_suf));
  MNEMO_RETURN_IF_ERROR(read_id("tokenizer.ggml.middle_token_id", &spec.fim_mid));

  auto read_flag = [&](std::string_view key, std::optional<bool>* out) -> Status {
    if (f.find(key) == nullptr) return Status();
    MNEMO_ASSIGN_OR_RETURN(bool b, f.get_bool(key));
    *out = b;
    return Status();
  };
  MNEMO_RETURN_IF_ERROR(read_flag("tokenizer.ggml.add_bos_token", &spec.add_bos));
  MNEMO_RETURN_IF_ERROR(read_flag("tokenizer.ggml.add_eos_token", &spec.add_eos));
  MNEMO_RETURN_IF_ERROR(read_flag("tokenizer.ggml.add_space_prefix", &spec.add_space_prefix));
  if (f.find("tokenizer.chat_template") != nullptr) {
    MNEMO_ASSIGN_OR_RETURN(spec.chat_template, f.get_string("tokenizer.chat_template"));
  }
  return from_spec(std::move(spec));
}

namespace {

// A model type's defaults (llama.cpp: special ids per model type, then per pre-tokenizer flags).
struct ModelDefaults {
  TokenId bos = kTokenNull, eos = kTokenNull, unk = kTokenNull;
  bool add_bos = false;
  bool space_prefix = false;
};

// The spec's table sizes, before anything is read from them.
Status check_sizes(const VocabSpec& spec) {
  const size_t n = spec.tokens.size();
  if (n == 0) return Status::invalid_argument("tokenizer.ggml.tokens is empty");
  if (n > static_cast<size_t>(INT32_MAX)) {
    return Status::invalid_argument("tokenizer.ggml.tokens has more than 2^31 entries");
  }
  if (!spec.scores.empty() && spec.scores.size() < n) {
    return Status::invalid_argument("tokenizer.ggml.scores has fewer entries than tokens");
  }
  if (!spec.token_types.empty() && spec.token_types.size() < n) {
    return Status::invalid_argument("tokenizer.ggml.token_type has fewer entries than tokens");
  }
  return Status();
}

// The tokenizer type and pre-tokenizer of spec.model / spec.pre into v; the model's defaults.
Result<ModelDefaults> set_model(const VocabSpec& spec, Tokenizer::Impl& v) {
  ModelDefaults d;
  if (spec.model == "llama") {
    v.type = VocabType::kSpm;
    v.pre = PreTokenizer::kNone;
    d.bos = 1;
    d.eos = 2;
    d.unk = 0;
    d.add_bos = true;
    d.space_prefix = true;
    v.clean_spaces = false;
  } else if (spec.model == "gpt2" || spec.model == "gemma4") {
    v.type = VocabType::kBpe;
    if (spec.model == "gpt2") {
      d.bos = 11;
      d.eos = 11;
    }
    // A "gemma4" vocabulary has Gemma 4's pre-tokenizer whatever tokenizer.ggml.pre says.
    MNEMO_ASSIGN_OR_RETURN(PreInfo pi, pre_info(spec.model == "gemma4" ? "gemma4" : spec.pre));
    v.pre = pi.pre;
    v.clean_spaces = pi.clean_spaces;
    v.ignore_merges = pi.ignore_merges;
    d.add_bos = pi.add_bos;
  } else {
    return Status::not_supported("tokenizer model tokenizer.ggml.model = '" + spec.model +
                                 "' (supported: 'llama' (SentencePiece), 'gpt2' (byte-level BPE), "
                                 "'gemma4' (BPE over '▁'-escaped text))");
  }
  return d;
}

// Tokens, scores, attributes, text -> id; BPE merges and the pre-tokenizer. Moves spec's tokens
// and merges into v.
Status load_tokens(VocabSpec& spec, Tokenizer::Impl& v) {
  const size_t n = spec.tokens.size();
  v.text = std::move(spec.tokens);
  v.score.assign(n, 0.0f);
  v.attr.assign(n, kAttrNormal);
  v.to_id.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (v.text[i].empty()) {
      MNEMO_LOG(kWarn) << "tokenizer: empty token text at id " << i;
      v.text[i] = "[EMPTY_" + std::to_string(i) + "]";
    }
    if (!spec.scores.empty()) v.score[i] = spec.scores[i];
    if (!spec.token_types.empty()) v.attr[i] = attr_from_type(spec.token_types[i]);
  }
  for (size_t i = 0; i < n; ++i) {
    auto [it, inserted] = v.to_id.emplace(std::string_view(v.text[i]), static_cast<TokenId>(i));
    if (!inserted) {
      return Status::corruption("duplicate token text '" + v.text[i] + "' at ids " +
                                std::to_string(it->second) + " and " + std::to_string(i));
    }
  }
  if (v.type == VocabType::kBpe) {
    v.merge_rank.reserve(spec.merges.size());
    for (size_t i = 0; i < spec.merges.size(); ++i) {
      const std::string& m = spec.merges[i];
      // Split at the first space after position 0 (a merge's left part is never empty).
      const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
      if (sp == std::string::npos) continue;  // llama.cpp keeps it as an unmatchable pair
      v.merge_rank.try_emplace(m, static_cast<int32_t>(i));
    }
    v.merges = std::move(spec.merges);
    MNEMO_ASSIGN_OR_RETURN(v.pretok, tok::Pretokenizer::create(v.pre));
  }
  return Status();
}

// Special ids: the default unless the spec names a valid one; the add_bos / add_eos flags.
Status set_special_ids(const VocabSpec& spec, const ModelDefaults& d, Tokenizer::Impl& v) {
  const size_t n = v.text.size();
  auto pick = [&](const char* name, const std::optional<int64_t>& given, TokenId def) {
    TokenId id = (def >= 0 && static_cast<size_t>(def) < n) ? def : kTokenNull;
    if (given) {
      if (*given >= 0 && static_cast<uint64_t>(*given) < n) {
        id = static_cast<TokenId>(*given);
      } else {
        MNEMO_LOG(kWarn) << "tokenizer: " << name << " id " << *given << " is outside the " << n
                         << "-token vocabulary; using " << id;
      }
    }
    return id;
  };
  v.bos = pick("bos", spec.bos, d.bos);
  v.eos = pick("eos", spec.eos, d.eos);
  v.eot = pick("eot", spec.eot, kTokenNull);
  v.eom = pick("eom", spec.eom, kTokenNull);
  v.unk = pick("unknown", spec.unk, d.unk);
  v.sep = pick("separator", spec.sep, kTokenNull);
  v.pad = pick("padding", spec.pad, kTokenNull);
  v.mask = pick("mask", spec.mask, kTokenNull);
  v.fim_pre = pick("fim_pre", spec.fim_pre, kTokenNull);
  v.fim_suf = pick("fim_suf", spec.fim_suf, kTokenNull);
  v.fim_mid = pick("fim_mid", spec.fim_mid, kTokenNull);
  v.fim_pad = pick("fim_pad", spec.fim_pad, kTokenNull);
  v.fim_rep = pick("fim_rep", spec.fim_rep, kTokenNull);
  v.fim_sep = pick("fim_sep", spec.fim_sep, kTokenNull);
  v.add_bos = spec.add_bos.value_or(d.add_bos);
  if (v.pre == PreTokenizer::kGemma4 && !v.add_bos) {
    MNEMO_LOG(kWarn) << "tokenizer: Gemma 4 vocabulary with tokenizer.ggml.add_bos_token false; "
                        "adding BOS anyway, as llama.cpp does";
    v.add_bos = true;
  }
  v.add_eos = spec.add_eos.value_or(false);
  v.add_space_prefix = spec.add_space_prefix.value_or(d.space_prefix);
  if (v.add_bos && v.bos == kTokenNull) {
    return Status::invalid_argument("tokenizer.ggml.add_bos_token is true but there is no BOS id");
  }
  if (v.add_eos && v.eos == kTokenNull) {
    return Status::invalid_argument("tokenizer.ggml.add_eos_token is true but there is no EOS id");
  }
  return Status();
}

// Special tokens found by their text, as llama.cpp finds them, and the end-of-generation set
// (v.eog): FIM pad/rep/sep, every end-of-turn text, EOS, EOT, EOM.
void find_end_of_generation(Tokenizer::Impl& v) {
  const size_t n = v.text.size();
  detect_by_text(v, &v.eot, kEotTexts);
  detect_by_text(v, &v.eom, std::array<std::string_view, 1>{"<|eom_id|>"});
  detect_by_text(v, &v.fim_pre, kFimPreTexts);
  detect_by_text(v, &v.fim_suf, kFimSufTexts);
  detect_by_text(v, &v.fim_mid, kFimMidTexts);
  detect_by_text(v, &v.fim_pad, kFimPadTexts);
  detect_by_text(v, &v.fim_rep, kFimRepTexts);
  detect_by_text(v, &v.fim_sep, kFimSepTexts);
  for (size_t i = 0; i < n; ++i) {
    if ((v.attr[i] & kAttrControl) && v.text[i].find("unused") != std::string::npos) {
      v.attr[i] |= kAttrUnused;
    }
  }
  std::vector<TokenId> eog;
  for (TokenId id : {v.fim_pad, v.fim_rep, v.fim_sep}) {
    if (id != kTokenNull) eog.push_back(id);
  }
  for (size_t i = 0; i < n; ++i) {
    if (in_list(v.text[i], kEogTexts)) {
      eog.push_back(static_cast<TokenId>(i));
      v.attr[i] |= kAttrControl;
    }
  }
  // gpt-oss renders these as text (llama.cpp sets them USER_DEFINED).
  for (std::string_view s : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    const TokenId id = v.find(s);
    if (id != kTokenNull) v.attr[id] = kAttrUserDefined;
  }
  for (TokenId id : {v.eos, v.eot, v.eom}) {
    if (id != kTokenNull) eog.push_back(id);
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  auto eog_has = [&](std::string_view s) {
    return std::any_of(eog.begin(), eog.end(), [&](TokenId t) { return v.text[t] == s; });
  };
  auto eog_drop = [&](std::string_view s, uint16_t new_attr) {
    for (auto it = eog.begin(); it != eog.end(); ++it) {
      if (v.text[*it] == s) {
        v.attr[*it] = new_attr;
        eog.erase(it);
        return;
      }
    }
  };
  // o200k_harmony / solar-open: "<|end|>" is not the end of generation there.
  if ((eog_has("<|return|>") && eog_has("<|call|>") && eog_has("<|end|>")) ||
      (eog_has("<|calls|>") && eog_has("<|flush|>") && eog_has("<|end|>"))) {
    eog_drop("<|end|>", kAttrUserDefined);
  }
  // Gemma 4 / PaddleOCR: "</s>" is a normal token when "<|tool_response>" exists.
  if (eog_has("<|tool_response>") && eog_has("</s>")) eog_drop("</s>", kAttrNormal);
  v.eog = std::move(eog);
}

// The special tokens cut out of the text before tokenizing (longest first, in a trie); the byte
// tokens and the newline token.
void index_special_tokens(Tokenizer::Impl& v) {
  const size_t n = v.text.size();
  for (size_t i = 0; i < n; ++i) {
    if (v.attr[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) {
      v.special_order.push_back(static_cast<TokenId>(i));
    }
  }
  std::stable_sort(v.special_order.begin(), v.special_order.end(),
                   [&](TokenId a, TokenId b) { return v.text[a].size() > v.text[b].size(); });
  for (size_t k = 0; k < v.special_order.size(); ++k) {
    v.special_trie.insert(v.text[v.special_order[k]], static_cast<int32_t>(k));
  }
  // The <0xNN> token of each byte (SentencePiece's byte fallback; also Gemma 4's).
  auto hex_token = [&](int b) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    const char hex[7] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>', 0};
    return v.find(hex);
  };
  if (v.type == VocabType::kSpm) {
    for (int b = 0; b < 256; ++b) {
      TokenId id = hex_token(b);
      if (id == kTokenNull) id = v.find(std::string(1, static_cast<char>(b)));
      v.byte_token[b] = id != kTokenNull ? id : v.unk;
    }
    v.nl = v.byte_token['\n'];
  } else {
    v.byte_token.fill(kTokenNull);
    if (v.escaped_spaces()) {
      for (int b = 0; b < 256; ++b) v.byte_token[b] = hex_token(b);
    }
    std::vector<TokenId> ids;
    v.tokenize_bpe("\n", &ids);
    v.nl = ids.empty() ? v.pad : ids[0];
  }
}

}  // namespace

Result<Tokenizer> Tokenizer::from_spec(VocabSpec spec) {
  MNEMO_RETURN_IF_ERROR(check_sizes(spec));
  auto impl = std::make_unique<Impl>();
  Impl& v = *impl;
  MNEMO_ASSIGN_OR_RETURN(const ModelDefaults defaults, set_model(spec, v));
  MNEMO_RETURN_IF_ERROR(load_tokens(spec, v));
  MNEMO_RETURN_IF_ERROR(set_special_ids(spec, defaults, v));
  find_end_of_generation(v);
  index_special_tokens(v);
  v.chat_template = std::move(spec.chat_template);
  spec.tokens.clear();
  spec.merges.clear();
  v.spec_rest = std::move(spec);
  return Tokenizer(std::move(impl));
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::copy() const {
  VocabSpec spec = impl_->spec_rest;
  spec.tokens = impl_->text;
  spec.merges = impl_->merges;
  spec.chat_template = impl_->chat_template;
  auto r = from_spec(std::move(spec));
  CHECK(r.ok()) << "rebuilding a valid vocabulary failed: " << r.status().to_string();
  return std::move(r).value();
}

int32_t Tokenizer::n_vocab() const { return static_cast<int32_t>(impl_->text.size()); }
VocabType Tokenizer::type() const { return impl_->type; }
PreTokenizer Tokenizer::pre() const { return impl_->pre; }

const std::string& Tokenizer::token_text(TokenId id) const {
  CHECK(impl_->valid(id)) << "token id " << id << " outside [0, " << n_vocab() << ")";
  return impl_->text[id];
}

float Tokenizer::token_score(TokenId id) const {
  CHECK(impl_->valid(id)) << "token id " << id << " outside [0, " << n_vocab() << ")";
  return impl_->score[id];
}

TokenType Tokenizer::token_type(TokenId id) const {
  CHECK(impl_->valid(id)) << "token id " << id << " outside [0, " << n_vocab() << ")";
  const uint16_t a = impl_->attr[id];
  if (a & kAttrControl) return TokenType::kControl;
  if (a & kAttrUserDefined) return TokenType::kUserDefined;
  if (a & kAttrUnknown) return TokenType::kUnknown;
  if (a & kAttrByte) return TokenType::kByte;
  if (a & kAttrNormal) return TokenType::kNormal;
  if (a & kAttrUnused) return TokenType::kUnused;
  return TokenType::kUndefined;
}

TokenId Tokenizer::find_token(std::string_view text) const { return impl_->find(text); }

bool Tokenizer::is_control(TokenId id) const {
  return impl_->valid(id) && (impl_->attr[id] & kAttrControl);
}
bool Tokenizer::is_user_defined(TokenId id) const {
  return impl_->valid(id) && (impl_->attr[id] & kAttrUserDefined);
}
bool Tokenizer::is_byte(TokenId id) const {
  return impl_->valid(id) && (impl_->attr[id] & kAttrByte);
}
bool Tokenizer::is_eog(TokenId id) const {
  return id != kTokenNull && std::binary_search(impl_->eog.begin(), impl_->eog.end(), id);
}
const std::vector<TokenId>& Tokenizer::eog_ids() const { return impl_->eog; }

TokenId Tokenizer::bos() const { return impl_->bos; }
TokenId Tokenizer::eos() const { return impl_->eos; }
TokenId Tokenizer::eot() const { return impl_->eot; }
TokenId Tokenizer::fim_pre() const { return impl_->fim_pre; }
TokenId Tokenizer::fim_suf() const { return impl_->fim_suf; }
TokenId Tokenizer::fim_mid() const { return impl_->fim_mid; }
TokenId Tokenizer::fim_rep() const { return impl_->fim_rep; }
TokenId Tokenizer::fim_sep() const { return impl_->fim_sep; }
TokenId Tokenizer::unk() const { return impl_->unk; }
TokenId Tokenizer::pad() const { return impl_->pad; }
TokenId Tokenizer::sep() const { return impl_->sep; }
TokenId Tokenizer::nl() const { return impl_->nl; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
bool Tokenizer::add_eos() const { return impl_->add_eos; }
bool Tokenizer::add_space_prefix() const { return impl_->add_space_prefix; }
bool Tokenizer::clean_spaces() const { return impl_->clean_spaces; }
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }

}  // namespace mnemo
