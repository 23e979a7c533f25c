#include "server/request.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <random>

#include "mnemo/grammar.h"
#include "mnemo/json_schema.h"

namespace mnemo::server {
namespace {

Status get_stop(const Json& b, const ApiDefaults& d, std::vector<std::string>* out) {
  auto it = b.find("stop");
  if (it == b.end() || it->is_null()) return Status();
  std::vector<std::string> stop;
  if (it->is_string()) {
    stop.push_back(it->get<std::string>());
  } else if (it->is_array()) {
    for (const Json& s : *it) {
      if (!s.is_string()) return Status::invalid_argument("'stop' must be a string or strings");
      stop.push_back(s.get<std::string>());
    }
  } else {
    return Status::invalid_argument("'stop' must be a string or an array of strings");
  }
  if (stop.size() > d.max_stop) {
    return Status::invalid_argument(
        fmt::format("'stop' has {} strings; at most {}", stop.size(), d.max_stop));
  }
  for (const auto& s : stop) {
    if (s.size() > d.max_stop_bytes) {
      return Status::invalid_argument(
          fmt::format("a stop string is {} bytes; at most {}", s.size(), d.max_stop_bytes));
    }
  }
  *out = std::move(stop);
  return Status();
}

// llama.cpp's prompt forms: a string, an array mixing strings and token ids (one prompt), or
// an object {"prompt_string": ..., "multimodal_data": [...]} (media refused: no vision model).
// The first string piece gets the vocabulary's BOS; special-token texts are recognised.
Status tokenize_prompt(const Json& prompt, const Tokenizer& tok, std::vector<TokenId>* out) {
  if (prompt.is_object()) {
    auto media = prompt.find("multimodal_data");
    if (media != prompt.end() && !media->is_null() && !(media->is_array() && media->empty())) {
      return Status::invalid_argument(
          std::string("'multimodal_data' is not supported: ") + std::string(kNoMediaModel));
    }
    auto text = prompt.find("prompt_string");
    if (text == prompt.end() || !text->is_string()) {
      return Status::invalid_argument("a prompt object needs 'prompt_string', a string");
    }
    *out = tok.tokenize(text->get<std::string>(), /*add_special=*/true, /*parse_special=*/true);
    return Status();
  }
  if (prompt.is_string()) {
    *out = tok.tokenize(prompt.get<std::string>(), /*add_special=*/true, /*parse_special=*/true);
    return Status();
  }
  if (!prompt.is_array()) {
    return Status::invalid_argument(
        "'prompt' must be a string, an array of token ids and strings, or an object with "
        "'prompt_string'");
  }
  // ["text"] (OpenAI's list form with one prompt) or a mixed list.
  bool first = true;
  for (const Json& e : prompt) {
    if (e.is_string()) {
      auto ids = tok.tokenize(e.get<std::string>(), first, true);
      out->insert(out->end(), ids.begin(), ids.end());
    } else if (e.is_array() || e.is_object()) {
      return Status::invalid_argument(
          "'prompt' holds several prompts; send one prompt per request");
    } else {
      TokenId id = 0;
      MNEMO_RETURN_IF_ERROR(check_token(e, tok, "prompt", &id));
      out->push_back(id);
    }
    first = false;
  }
  if (prompt.size() > 1 && prompt[0].is_string() && prompt[1].is_string()) {
    return Status::invalid_argument("'prompt' holds several prompts; send one prompt per request");
  }
  return Status();
}

// A prompt of `bytes` bytes of text has at least bytes / max_token_bytes tokens: one that cannot
// fit is refused before the work of rendering and tokenizing it (a few megabytes of messages
// take seconds).
Status check_text_bytes(size_t bytes, const ApiDefaults& d, size_t* n_prompt_tokens) {
  if (d.max_token_bytes == 0 || d.context_shift) return Status();
  const size_t min_tokens = bytes / d.max_token_bytes;
  if (min_tokens < d.n_ctx_seq) return Status();
  *n_prompt_tokens = min_tokens;
  return Status::out_of_range(fmt::format(
      "request (at least {} tokens, {} bytes of text) exceeds the available context size ({} "
      "tokens), try increasing it",
      min_tokens, bytes, d.n_ctx_seq));
}

Status add_id(int64_t id, float bias, const Tokenizer& tok, std::vector<LogitBias>* out) {
  if (id < 0 || id >= tok.n_vocab()) {
    return Status::invalid_argument(
        fmt::format("'logit_bias' has token id {}; ids are in [0, {})", id, tok.n_vocab()));
  }
  out->push_back({TokenId(id), bias});
  return Status();
}

// logit_bias in llama-server's and OpenAI's forms: [[id, bias], ...], [["text", bias], ...]
// (every token of the text), {"id": bias, ...} (OpenAI; a key that is not a number is a text);
// a bias of false bans the token (-infinity). At most 4096 entries.
Status parse_logit_bias(const Json& v, const Tokenizer& tok, std::vector<LogitBias>* out) {
  constexpr size_t kMaxEntries = 4096;
  auto bias_of = [](const Json& x, float* f) -> Status {
    if (x.is_boolean() && !x.get<bool>()) {
      *f = -INFINITY;
      return Status();
    }
    if (!x.is_number() || !std::isfinite(x.get<double>()) || std::fabs(x.get<double>()) > 1e6) {
      return Status::invalid_argument(
          "'logit_bias' values must be numbers in [-1e6, 1e6] or false (banned)");
    }
    *f = x.get<float>();
    return Status();
  };
  auto add = [&](const Json& key, float bias, bool key_text_may_be_id) -> Status {
    if (key.is_string()) {
      const std::string& text = key.get_ref<const std::string&>();
      const bool digits = key_text_may_be_id && !text.empty() && text.size() <= 10 &&
                          text.find_first_not_of("0123456789") == std::string::npos;
      if (digits) return add_id(std::stoll(text), bias, tok, out);
      for (TokenId id : tok.tokenize(text, /*add_special=*/false, /*parse_special=*/false)) {
        out->push_back({id, bias});
      }
      return Status();
    }
    if (!key.is_number_integer()) {
      return Status::invalid_argument("'logit_bias' keys must be token ids or texts");
    }
    return add_id(key.is_number_unsigned()
                      ? int64_t(std::min<uint64_t>(key.get<uint64_t>(), INT64_MAX))
                      : key.get<int64_t>(),
                  bias, tok, out);
  };
  if (v.is_object()) {
    if (v.size() > kMaxEntries)
      return Status::invalid_argument("'logit_bias' has too many entries");
    for (const auto& [k, x] : v.items()) {
      float f = 0;
      MNEMO_RETURN_IF_ERROR(bias_of(x, &f));
      MNEMO_RETURN_IF_ERROR(add(Json(k), f, /*key_text_may_be_id=*/true));
    }
  } else if (v.is_array()) {
    if (v.size() > kMaxEntries)
      return Status::invalid_argument("'logit_bias' has too many entries");
    for (const Json& e : v) {
      if (!e.is_array() || e.size() != 2) {
        return Status::invalid_argument(
            "'logit_bias' entries must be [token id or text, bias] pairs");
      }
      float f = 0;
      MNEMO_RETURN_IF_ERROR(bias_of(e[1], &f));
      MNEMO_RETURN_IF_ERROR(add(e[0], f, /*key_text_may_be_id=*/false));
    }
  } else {
    return Status::invalid_argument("'logit_bias' must be an object or an array of pairs");
  }
  if (out->size() > kMaxEntries)
    return Status::invalid_argument("'logit_bias' has too many entries");
  return Status();
}

// Structured output: "grammar" (GBNF), "json_schema" (llama-server), or "response_format"
// (OpenAI: {"type": "text" | "json_object" | "json_schema", "json_schema": {"schema": ...}};
// llama-server also takes json_object with a "schema"). At most one of them.
Status parse_structured(const Json& b, std::shared_ptr<const grammar::Grammar>* out) {
  std::string gbnf;
  std::string from;
  auto set = [&](std::string text, const std::string& field) -> Status {
    if (!from.empty()) {
      return Status::invalid_argument(
          fmt::format("'{}' and '{}' both constrain the output; send one", from, field));
    }
    gbnf = std::move(text);
    from = field;
    return Status();
  };
  auto schema = [&](const Json& s, const std::string& field) -> Status {
    auto g = grammar::json_schema_to_gbnf(s.dump());
    if (!g.ok())
      return Status::invalid_argument(fmt::format("'{}': {}", field, g.status().message()));
    return set(std::move(g).value(), field);
  };
  if (auto it = b.find("grammar"); it != b.end() && !it->is_null()) {
    if (!it->is_string()) return Status::invalid_argument("'grammar' must be a string (GBNF)");
    if (!it->get_ref<const std::string&>().empty())
      MNEMO_RETURN_IF_ERROR(set(it->get<std::string>(), "grammar"));
  }
  if (auto it = b.find("json_schema"); it != b.end() && !it->is_null()) {
    MNEMO_RETURN_IF_ERROR(schema(*it, "json_schema"));
  }
  if (auto it = b.find("response_format"); it != b.end() && !it->is_null()) {
    const Json& rf = *it;
    const auto type = rf.is_object() ? rf.find("type") : rf.end();
    if (!rf.is_object() || type == rf.end() || !type->is_string()) {
      return Status::invalid_argument("'response_format' must be an object with a 'type'");
    }
    const std::string t = type->get<std::string>();
    if (t == "json_object") {
      if (auto s = rf.find("schema"); s != rf.end() && !s->is_null()) {
        MNEMO_RETURN_IF_ERROR(schema(*s, "response_format.schema"));
      } else {
        MNEMO_RETURN_IF_ERROR(set(grammar::json_object_gbnf(), "response_format"));
      }
    } else if (t == "json_schema") {
      const auto js = rf.find("json_schema");
      const Json* s = nullptr;
      if (js != rf.end() && js->is_object() && js->contains("schema")) s = &(*js)["schema"];
      if (s == nullptr) {
        return Status::invalid_argument(
            "'response_format' of type json_schema needs 'json_schema': {'schema': ...}");
      }
      MNEMO_RETURN_IF_ERROR(schema(*s, "response_format.json_schema.schema"));
    } else if (t != "text") {
      return Status::invalid_argument(fmt::format(
          "'response_format.type' is '{}'; it must be text, json_object or json_schema", t));
    }
  }
  if (gbnf.empty()) return Status();
  auto g = grammar::Grammar::parse(gbnf);
  if (!g.ok()) return Status::invalid_argument(fmt::format("'{}': {}", from, g.status().message()));
  *out = std::move(g).value();
  return Status();
}

// llama-server's rule: an array with no number in it lists several prompts.
bool several_prompts(const Json& prompt) {
  return prompt.is_array() && !prompt.empty() &&
         std::none_of(prompt.begin(), prompt.end(), [](const Json& e) { return e.is_number(); });
}

Json byte_values(const std::string& s) {
  Json a = Json::array();
  for (unsigned char c : s) a.push_back(c);
  return a;
}

// One token's entry; llama: {"id", "token", "logprob", "bytes"}, chat: without "id".
Json token_entry(TokenId id, float logprob, const Tokenizer& tok, bool with_id) {
  const std::string piece = tok.token_to_piece(id, /*special=*/true);
  Json j = {{"token", piece}, {"logprob", logprob}, {"bytes", byte_values(piece)}};
  if (with_id) j["id"] = id;
  return j;
}

}  // namespace

ResponseIds new_response_ids(std::string_view prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  ResponseIds ids;
  ids.id = fmt::format("{}{:016x}{:08x}", prefix, rng(), static_cast<uint32_t>(rng()));
  ids.created = static_cast<int64_t>(std::time(nullptr));
  return ids;
}

Status get_bool(const Json& b, const char* key, bool* out) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return Status();
  if (!it->is_boolean())
    return Status::invalid_argument(fmt::format("'{}' must be a boolean", key));
  *out = it->get<bool>();
  return Status();
}

Status get_int(const Json& b, const char* key, int64_t lo, int64_t hi, int64_t* out) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return Status();
  bool ok = it->is_number_integer();
  int64_t v = 0;
  if (ok) {
    v = it->is_number_unsigned()
            ? static_cast<int64_t>(std::min<uint64_t>(it->get<uint64_t>(), uint64_t(INT64_MAX)))
            : it->get<int64_t>();
  } else if (it->is_number_float()) {
    // 16.0 is accepted as 16 (some clients send every number as a float).
    // A double outside int64's range is not converted (that would be undefined behaviour).
    const double d = it->get<double>();
    ok = std::isfinite(d) && std::fabs(d) < 9.2e18 && d == std::floor(d);
    v = ok ? static_cast<int64_t>(d) : 0;
  }
  if (!ok) return Status::invalid_argument(fmt::format("'{}' must be an integer", key));
  if (v < lo || v > hi) {
    return Status::invalid_argument(
        fmt::format("'{}' is {}; it must be in [{}, {}]", key, v, lo, hi));
  }
  *out = v;
  return Status();
}

Status get_float(const Json& b, const char* key, double lo, double hi, float* out) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return Status();
  if (!it->is_number()) return Status::invalid_argument(fmt::format("'{}' must be a number", key));
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi)) {
    return Status::invalid_argument(
        fmt::format("'{}' is {}; it must be in [{}, {}]", key, v, lo, hi));
  }
  *out = static_cast<float>(v);
  return Status();
}

Status check_token(const Json& t, const Tokenizer& tok, const char* field, TokenId* out) {
  if (!t.is_number_integer()) {
    return Status::invalid_argument(fmt::format("'{}' token ids must be integers", field));
  }
  const int64_t id = t.is_number_unsigned()
                         ? static_cast<int64_t>(std::min<uint64_t>(t.get<uint64_t>(), INT64_MAX))
                         : t.get<int64_t>();
  if (id < 0 || id >= tok.n_vocab()) {
    return Status::invalid_argument(
        fmt::format("'{}' has token id {}; ids are in [0, {})", field, id, tok.n_vocab()));
  }
  *out = static_cast<TokenId>(id);
  return Status();
}

ParsedCompletion new_completion(const WireApi& wire, const ApiDefaults& d) {
  ParsedCompletion p;
  p.wire = &wire;
  p.req.sampling = d.sampling;
  p.req.n_keep = d.n_keep;
  return p;
}

Status parse_text_prompt(const Json& b, const Json* prompt, const Tokenizer& tok,
                         const ApiDefaults& d, std::vector<TokenId>* ids, size_t* n_prompt_tokens) {
  auto found = b.find("prompt");
  const Json* it = prompt != nullptr ? prompt : found != b.end() ? &*found : nullptr;
  if (it == nullptr || it->is_null()) return Status::invalid_argument("'prompt' is missing");
  size_t bytes = 0;
  if (it->is_string()) {
    bytes = it->get_ref<const std::string&>().size();
  } else if (it->is_object() && it->contains("prompt_string") &&
             (*it)["prompt_string"].is_string()) {
    bytes = (*it)["prompt_string"].get_ref<const std::string&>().size();
  } else if (it->is_array()) {
    for (const Json& e : *it) bytes += e.is_string() ? e.get_ref<const std::string&>().size() : 0;
  }
  MNEMO_RETURN_IF_ERROR(check_text_bytes(bytes, d, n_prompt_tokens));
  MNEMO_RETURN_IF_ERROR(tokenize_prompt(*it, tok, ids));
  if (ids->empty()) return Status::invalid_argument("the prompt is empty");
  return Status();
}

Status parse_chat_prompt(const Json& b, const Tokenizer& tok, const ChatTemplate& tmpl,
                         const ApiDefaults& d, std::vector<TokenId>* ids, size_t* n_prompt_tokens,
                         std::string* text_out) {
  std::vector<ChatMessage> msgs;
  MNEMO_RETURN_IF_ERROR(chat_messages(b, &msgs));
  size_t bytes = 0;
  for (const ChatMessage& m : msgs) bytes += m.content.size();
  MNEMO_RETURN_IF_ERROR(check_text_bytes(bytes, d, n_prompt_tokens));
  std::string text;
  MNEMO_RETURN_IF_ERROR(render_chat_prompt(b, tmpl, d, &text));
  *ids = tok.tokenize(text, /*add_special=*/true, /*parse_special=*/true);
  if (ids->empty()) return Status::invalid_argument("the prompt is empty");
  if (text_out != nullptr) *text_out = std::move(text);
  return Status();
}

Status set_n_predict(int64_t n, const char* field, const ApiDefaults& d, CompletionRequest* q) {
  if (n < 0) n = d.n_predict >= 0 ? d.n_predict : d.n_predict_max;
  if (n > d.n_predict_max) {
    return Status::invalid_argument(
        fmt::format("{} is {}; this server generates at most {} tokens per request", field, n,
                    d.n_predict_max));
  }
  q->n_predict = static_cast<int32_t>(n);
  return Status();
}

Status parse_sampling(const Json& b, const Tokenizer& tok, CompletionRequest* q) {
  SamplingParams& s = q->sampling;
  MNEMO_RETURN_IF_ERROR(get_float(b, "temperature", -1e9, 1e9, &s.temp));
  MNEMO_RETURN_IF_ERROR(get_float(b, "top_p", 0.0, 1.0, &s.top_p));
  MNEMO_RETURN_IF_ERROR(get_float(b, "min_p", 0.0, 1.0, &s.min_p));
  MNEMO_RETURN_IF_ERROR(get_int_as(b, "top_k", INT32_MIN, INT32_MAX, &s.top_k));
  MNEMO_RETURN_IF_ERROR(get_float(b, "frequency_penalty", -2.0, 2.0, &s.frequency_penalty));
  MNEMO_RETURN_IF_ERROR(get_float(b, "presence_penalty", -2.0, 2.0, &s.presence_penalty));
  MNEMO_RETURN_IF_ERROR(get_float(b, "repeat_penalty", 0.0, 1e6, &s.repeat_penalty));
  MNEMO_RETURN_IF_ERROR(get_int_as(b, "repeat_last_n", 0, 1 << 20, &s.repeat_last_n));
  int64_t seed = -1;
  MNEMO_RETURN_IF_ERROR(get_int(b, "seed", INT64_MIN, INT64_MAX, &seed));
  if (b.contains("seed") && !b["seed"].is_null()) {
    s.seed = seed < 0 ? SamplingParams::kRandomSeed : static_cast<uint64_t>(seed);
  }
  if (auto lb = b.find("logit_bias"); lb != b.end() && !lb->is_null()) {
    MNEMO_RETURN_IF_ERROR(parse_logit_bias(*lb, tok, &s.logit_bias));
  }
  MNEMO_RETURN_IF_ERROR(parse_structured(b, &q->grammar));
  return s.validate();
}

Status parse_options(const Json& b, const ApiDefaults& d, ParsedCompletion* p) {
  CompletionRequest& q = p->req;
  MNEMO_RETURN_IF_ERROR(get_stop(b, d, &q.stop));
  MNEMO_RETURN_IF_ERROR(get_bool(b, "stream", &p->stream));
  MNEMO_RETURN_IF_ERROR(get_bool(b, "cache_prompt", &q.cache_prompt));
  MNEMO_RETURN_IF_ERROR(get_bool(b, "ignore_eos", &q.ignore_eos));
  MNEMO_RETURN_IF_ERROR(get_bool(b, "return_tokens", &p->return_tokens));
  MNEMO_RETURN_IF_ERROR(get_bool(b, "timings_per_token", &p->timings_per_token));
  MNEMO_RETURN_IF_ERROR(get_bool(b, "post_sampling_probs", &q.post_sampling_probs));
  MNEMO_RETURN_IF_ERROR(get_bool(b, "return_progress", &q.return_progress));
  if (auto rf = b.find("response_fields"); rf != b.end() && !rf->is_null()) {
    if (!rf->is_array() || rf->size() > 64) {
      return Status::invalid_argument("'response_fields' must be an array of at most 64 names");
    }
    for (const Json& f : *rf) {
      if (!f.is_string()) return Status::invalid_argument("'response_fields' holds a non-string");
      p->response_fields.push_back(f.get<std::string>());
    }
  }
  MNEMO_RETURN_IF_ERROR(get_int_as(b, "n_keep", -1, INT32_MAX, &q.n_keep));
  MNEMO_RETURN_IF_ERROR(get_int_as(b, "id_slot", -1, int64_t(d.n_slots) - 1, &q.id_slot));
  return Status();
}

void truncate_prompt(std::vector<TokenId>* prompt, int32_t n_keep, uint32_t n_ctx) {
  const int64_t n_prompt = int64_t(prompt->size());
  if (n_prompt < int64_t(n_ctx)) return;
  int64_t keep = n_keep < 0 ? n_prompt : n_keep;
  keep = std::min<int64_t>(keep, int64_t(n_ctx) - 4);
  const int64_t block = (int64_t(n_ctx) - keep) / 2;
  const int64_t erased_blocks = (n_prompt - keep - block) / block;
  prompt->erase(prompt->begin() + keep, prompt->begin() + keep + erased_blocks * block);
}

Status finish_completion(ParsedCompletion p, const ApiDefaults& d, ParsedCompletion* out) {
  CompletionRequest& q = p.req;
  q.n_probs = p.logprobs ? std::max(1, p.top_logprobs) : 0;
  p.n_prompt_tokens = q.prompt.size();
  if (q.prompt.size() >= d.n_ctx_seq && d.context_shift && d.n_ctx_seq >= 8) {
    truncate_prompt(&q.prompt, q.n_keep, d.n_ctx_seq);
    p.truncated = true;
  }
  if (q.prompt.size() >= d.n_ctx_seq) {
    out->n_prompt_tokens = q.prompt.size();
    // llama-server's text, word for word.
    return Status::out_of_range(fmt::format(
        "request ({} tokens) exceeds the available context size ({} tokens), try increasing it",
        q.prompt.size(), d.n_ctx_seq));
  }
  *out = std::move(p);
  return Status();
}

Status expand_completions(const Json& b, int64_t n, bool prompt_lists, const ParseOne& one,
                          std::vector<ParsedCompletion>* out) {
  std::vector<const Json*> prompts;
  auto it = b.find("prompt");
  if (prompt_lists && it != b.end() && several_prompts(*it)) {
    for (const Json& e : *it) prompts.push_back(&e);
  } else {
    prompts.push_back(nullptr);
  }
  if (int64_t(prompts.size()) * n > kMaxCompletions) {
    return Status::invalid_argument(
        fmt::format("the request asks for {} completions ({} prompts x n {}); at most {}",
                    int64_t(prompts.size()) * n, prompts.size(), n, kMaxCompletions));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    ParsedCompletion first;
    if (Status st = one(prompts[i], &first); !st.ok()) {
      out->assign(1, std::move(first));
      return prompts.size() > 1 ? st.with_context(fmt::format("prompt {}", i)) : st;
    }
    first.index = int32_t(out->size());
    const bool seeded = b.contains("seed") && !b["seed"].is_null() &&
                        first.req.sampling.seed != SamplingParams::kRandomSeed;
    for (int64_t j = 0; j < n; ++j) {
      ParsedCompletion c = first;
      c.index = int32_t(out->size());
      c.copy_of = j == 0 ? -1 : first.index;
      if (seeded) c.req.sampling.seed = first.req.sampling.seed + uint64_t(j);
      out->push_back(std::move(c));
    }
  }
  return Status();
}

namespace {

// An assistant message's tool_calls (OpenAI's shape: {"id", "type": "function", "function":
// {"name", "arguments": JSON text or object}}), whose ids go into *ids; a tool message's
// tool_call_id must be one of the ids of an earlier call.
Status check_tool_calls(const Json& m, size_t i, std::vector<std::string>* ids) {
  const std::string& role = m["role"].get_ref<const std::string&>();
  if (role == "tool") {
    auto id = m.find("tool_call_id");
    if (id == m.end() || !id->is_string()) {
      return Status::invalid_argument(fmt::format("messages[{}].tool_call_id must be a string", i));
    }
    if (std::find(ids->begin(), ids->end(), id->get<std::string>()) == ids->end()) {
      return Status::invalid_argument(
          fmt::format("messages[{}].tool_call_id '{}' answers no tool call of an earlier "
                      "assistant message",
                      i, id->get<std::string>().substr(0, 64)));
    }
    return Status();
  }
  auto calls = m.find("tool_calls");
  if (calls == m.end() || calls->is_null()) return Status();
  if (role != "assistant" || !calls->is_array()) {
    return Status::invalid_argument(
        fmt::format("messages[{}].tool_calls must be an array of an assistant message", i));
  }
  for (size_t k = 0; k < calls->size(); ++k) {
    const Json& c = (*calls)[k];
    const Json* fn = c.is_object() && c.contains("function") ? &c["function"] : nullptr;
    const bool ok = fn != nullptr && c.contains("id") && c["id"].is_string() && fn->is_object() &&
                    fn->contains("name") && (*fn)["name"].is_string() &&
                    !(*fn)["name"].get_ref<const std::string&>().empty() &&
                    (!fn->contains("arguments") || (*fn)["arguments"].is_string() ||
                     (*fn)["arguments"].is_object());
    if (!ok) {
      return Status::invalid_argument(fmt::format(
          "messages[{}].tool_calls[{}] must be {{\"id\": string, \"type\": \"function\", "
          "\"function\": {{\"name\": string, \"arguments\": JSON text}}}}",
          i, k));
    }
    ids->push_back(c["id"].get<std::string>());
  }
  return Status();
}

}  // namespace

Status chat_messages(const Json& b, std::vector<ChatMessage>* out) {
  std::vector<std::string> call_ids;
  auto it = b.find("messages");
  if (it == b.end() || !it->is_array() || it->empty()) {
    return Status::invalid_argument("'messages' must be a non-empty array");
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& m = (*it)[i];
    if (!m.is_object()) {
      return Status::invalid_argument(fmt::format("messages[{}] must be an object", i));
    }
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return Status::invalid_argument(fmt::format("messages[{}].role must be a string", i));
    }
    ChatMessage msg;
    msg.role = role->get<std::string>();
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      // An assistant turn may have no content (tool calls); treat as empty.
    } else if (content->is_string()) {
      msg.content = content->get<std::string>();
    } else if (content->is_array()) {
      for (const Json& part : *content) {
        auto type = part.is_object() ? part.find("type") : part.end();
        if (!part.is_object() || type == part.end() || !type->is_string() ||
            type->get<std::string>() != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
          if (type != part.end() && type->is_string() && type->get<std::string>() != "text") {
            return Status::invalid_argument(
                fmt::format("messages[{}].content: parts of type '{}' are not supported: {}", i,
                            type->get<std::string>().substr(0, 40), kNoMediaModel));
          }
          return Status::invalid_argument(
              fmt::format("messages[{}].content: only parts of type \"text\" are supported", i));
        }
        msg.content += part["text"].get<std::string>();
      }
    } else {
      return Status::invalid_argument(
          fmt::format("messages[{}].content must be a string or an array of parts", i));
    }
    MNEMO_RETURN_IF_ERROR(check_tool_calls(m, i, &call_ids));
    out->push_back(std::move(msg));
  }
  // As llama-server: one trailing assistant message is a reply to continue; two are a mistake,
  // and so is continuing a tool-call turn.
  if (out->size() >= 2 && (*out)[out->size() - 1].role == "assistant" &&
      (*out)[out->size() - 2].role == "assistant") {
    return Status::invalid_argument("'messages' ends with two assistant messages");
  }
  if (const Json& last = it->back(); last["role"] == "assistant" && last.contains("tool_calls") &&
                                     last["tool_calls"].is_array() && !last["tool_calls"].empty()) {
    return Status::invalid_argument(
        "'messages' ends with an assistant message with tool_calls: send their results "
        "(role \"tool\") first");
  }
  return Status();
}

Status render_chat_prompt(const Json& body, const ChatTemplate& tmpl, const ApiDefaults& d,
                          std::string* out) {
  if (!body.is_object()) return Status::invalid_argument("the request body must be a JSON object");
  std::vector<ChatMessage> msgs;
  MNEMO_RETURN_IF_ERROR(chat_messages(body, &msgs));
  Json vars = Json::object();
  Json kwargs = d.chat_template_kwargs.is_object() ? d.chat_template_kwargs : Json::object();
  if (auto it = body.find("chat_template_kwargs"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) {
      return Status::invalid_argument("'chat_template_kwargs' must be an object");
    }
    for (auto kv = it->begin(); kv != it->end(); ++kv) kwargs[kv.key()] = kv.value();
  }
  vars["chat_template_kwargs"] = std::move(kwargs);
  if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) return Status::invalid_argument("'tools' must be an array");
    vars["tools"] = *it;
  }
  auto text = tmpl.render(body["messages"], vars);
  // A template error is about this request's messages (or the operator's template), never a
  // capacity outcome: a 400 naming it.
  if (!text.ok()) return Status::invalid_argument(text.status().message());
  *out = std::move(text).value();
  return Status();
}

Status parse_json_body(std::string_view body, Json* out) {
  // Depth of [ and { outside strings (RFC 8259 §7: a string ends at an unescaped quote).
  size_t depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        return Status::invalid_argument(
            fmt::format("malformed JSON: nested deeper than {} levels", kMaxJsonDepth));
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  try {
    *out = Json::parse(body);
  } catch (const Json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    return Status::invalid_argument(std::string("malformed JSON: ") + e.what());
  }
  return Status();
}

Status parse_content_length(std::string_view text, uint64_t* out) {
  if (text.empty() || text.size() > 19 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return Status::invalid_argument("Content-Length is not a byte count");
  }
  uint64_t v = 0;
  for (char c : text) v = v * 10 + uint64_t(c - '0');  // 19 digits cannot overflow
  *out = v;
  return Status();
}

Json timings_json(const CompletionStats& s) {
  const int32_t prompt_n = s.n_prompt - s.n_cached;
  Json t = {
      {"cache_n", s.n_cached},
      {"prompt_n", prompt_n},
      {"prompt_ms", s.prompt_ms},
      {"prompt_per_token_ms", prompt_n > 0 ? s.prompt_ms / prompt_n : 0.0},
      {"prompt_per_second", s.prompt_ms > 0 ? prompt_n * 1000.0 / s.prompt_ms : 0.0},
      {"predicted_n", s.n_generated},
      {"predicted_ms", s.gen_ms},
      {"predicted_per_token_ms", s.n_generated > 0 ? s.gen_ms / s.n_generated : 0.0},
      {"predicted_per_second", s.gen_ms > 0 ? s.n_generated * 1000.0 / s.gen_ms : 0.0},
  };
  // As llama-server: present when the request drafted.
  if (s.n_drafted > 0) {
    t["draft_n"] = s.n_drafted;
    t["draft_n_accepted"] = s.n_draft_accepted;
  }
  return t;
}

// [{"token": id, "bias": b}], a ban's bias null (as llama-server shows them).
static Json logit_bias_json(const std::vector<LogitBias>& v) {
  Json a = Json::array();
  for (const LogitBias& lb : v) {
    a.push_back({{"token", lb.token}, {"bias", std::isinf(lb.bias) ? Json() : Json(lb.bias)}});
  }
  return a;
}

Json generation_settings_json(const CompletionRequest& q) {
  const SamplingParams& s = q.sampling;
  return {{"n_predict", q.n_predict},
          {"temperature", s.temp},
          {"top_k", s.top_k},
          {"top_p", s.top_p},
          {"min_p", s.min_p},
          {"repeat_penalty", s.repeat_penalty},
          {"repeat_last_n", s.repeat_last_n},
          {"frequency_penalty", s.frequency_penalty},
          {"presence_penalty", s.presence_penalty},
          {"seed", s.seed},
          {"n_keep", q.n_keep},
          {"stop", q.stop},
          {"ignore_eos", q.ignore_eos},
          {"cache_prompt", q.cache_prompt},
          {"n_probs", q.n_probs},
          {"post_sampling_probs", q.post_sampling_probs},
          {"logit_bias", logit_bias_json(s.logit_bias)}};
}

Json token_probs_json(const std::vector<TokenProbs>& probs, int32_t top_n, const Tokenizer& tok,
                      bool with_id) {
  Json arr = Json::array();
  for (const TokenProbs& tp : probs) {
    // post_sampling_probs (llama-server): "prob" and "top_probs" instead of the logs.
    const char* value = tp.post_sampling ? "prob" : "logprob";
    auto entry = [&](TokenId id, float v) {
      Json e = token_entry(id, v, tok, with_id);
      if (tp.post_sampling) {
        e.erase("logprob");
        e[value] = v;
      }
      return e;
    };
    Json e = entry(tp.id, tp.logprob);
    Json top = Json::array();
    for (size_t i = 0; i < tp.top.size() && i < size_t(top_n); ++i) {
      top.push_back(entry(tp.top[i].first, tp.top[i].second));
    }
    e[tp.post_sampling ? "top_probs" : "top_logprobs"] = std::move(top);
    arr.push_back(std::move(e));
  }
  return arr;
}

Json prompt_progress_json(const CompletionEvent& ev) {
  return {{"total", ev.stats.n_prompt},
          {"cache", ev.stats.n_cached},
          {"processed", ev.n_processed},
          {"time_ms", ev.progress_ms}};
}

Json error_json(ErrorKind kind, const std::string& message) {
  const HttpError e = http_error(kind);
  return {{"error", {{"code", e.status}, {"message", message}, {"type", e.type}}}};
}

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace mnemo::server
