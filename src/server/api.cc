#include "server/api.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <random>

#include "mnemo/grammar.h"
#include "mnemo/json_schema.h"

namespace mnemo::server {
namespace {

constexpr int64_t kMaxChoices = 16;  // OpenAI's "n"

// Typed field readers: absent or null leaves *out unchanged; a wrong type or range is an
// InvalidArgument naming the field.
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

template <typename T>
Status get_int_as(const Json& b, const char* key, int64_t lo, int64_t hi, T* out) {
  int64_t v = static_cast<int64_t>(*out);
  MNEMO_RETURN_IF_ERROR(get_int(b, key, lo, hi, &v));
  *out = static_cast<T>(v);
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

// llama.cpp's prompt forms: a string, or an array mixing strings and token ids (one prompt).
// The first string piece gets the vocabulary's BOS; special-token texts are recognised.
Status tokenize_prompt(const Json& prompt, const Tokenizer& tok, std::vector<TokenId>* out) {
  if (prompt.is_string()) {
    *out = tok.tokenize(prompt.get<std::string>(), /*add_special=*/true, /*parse_special=*/true);
    return Status();
  }
  if (!prompt.is_array()) {
    return Status::invalid_argument("'prompt' must be a string or an array of token ids");
  }
  // ["text"] (OpenAI's list form with one prompt) or a mixed list.
  bool first = true;
  for (const Json& e : prompt) {
    if (e.is_string()) {
      auto ids = tok.tokenize(e.get<std::string>(), first, true);
      out->insert(out->end(), ids.begin(), ids.end());
    } else if (e.is_array()) {
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

Status chat_messages(const Json& b, std::vector<ChatMessage>* out) {
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
          return Status::invalid_argument(
              fmt::format("messages[{}].content: only parts of type \"text\" are supported", i));
        }
        msg.content += part["text"].get<std::string>();
      }
    } else {
      return Status::invalid_argument(
          fmt::format("messages[{}].content must be a string or an array of parts", i));
    }
    out->push_back(std::move(msg));
  }
  // As llama-server: one trailing assistant message is a reply to continue; two are a mistake.
  if (out->size() >= 2 && (*out)[out->size() - 1].role == "assistant" &&
      (*out)[out->size() - 2].role == "assistant") {
    return Status::invalid_argument("'messages' ends with two assistant messages");
  }
  return Status();
}

Json timings_json(const CompletionStats& s) {
  const int32_t prompt_n = s.n_prompt - s.n_cached;
  return {
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
}

const char* stop_type_name(FinishReason r) {
  switch (r) {
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kWord:
      return "word";
    case FinishReason::kLimit:
    case FinishReason::kContext:
      return "limit";
    default:
      return "none";
  }
}

// [{"token": id, "bias": b}], a ban's bias null (as llama-server shows them).
Json logit_bias_json(const std::vector<LogitBias>& v) {
  Json a = Json::array();
  for (const LogitBias& lb : v) {
    a.push_back({{"token", lb.token}, {"bias", std::isinf(lb.bias) ? Json() : Json(lb.bias)}});
  }
  return a;
}

Json generation_settings(const CompletionRequest& q) {
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
          {"logit_bias", logit_bias_json(s.logit_bias)}};
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

// llama.cpp's "completion_probabilities" or OpenAI chat's logprobs, for these tokens.
Json probs_json(const ParsedCompletion& p, const std::vector<TokenProbs>& probs,
                const ApiDefaults& d) {
  const bool llama = p.api == Api::kLlama;
  Json arr = Json::array();
  for (const TokenProbs& tp : probs) {
    // post_sampling_probs (llama-server): "prob" and "top_probs" instead of the logs.
    const char* value = tp.post_sampling ? "prob" : "logprob";
    auto entry = [&](TokenId id, float v) {
      Json e = token_entry(id, v, *d.tok, llama);
      if (tp.post_sampling) {
        e.erase("logprob");
        e[value] = v;
      }
      return e;
    };
    Json e = entry(tp.id, tp.logprob);
    Json top = Json::array();
    for (size_t i = 0; i < tp.top.size() && i < size_t(p.top_logprobs); ++i) {
      top.push_back(entry(tp.top[i].first, tp.top[i].second));
    }
    e[tp.post_sampling ? "top_probs" : "top_logprobs"] = std::move(top);
    arr.push_back(std::move(e));
  }
  return llama ? arr : Json{{"content", arr}};
}

Json oai_chunk(const ParsedCompletion& p, const ApiDefaults& d, const ResponseIds& ids) {
  const bool chat = p.api == Api::kOaiChat;
  return {{"id", ids.id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", ids.created},
          {"model", d.model_name},
          {"system_fingerprint", "mnemo-0.1.0"}};
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

}  // namespace

namespace {

// parse_completion with the prompt given apart (nullptr: the body's "prompt").
Status parse_one(const Json& b, const Json* prompt, Api api, const Tokenizer& tok,
                 const ChatTemplate& tmpl, const ApiDefaults& d, ParsedCompletion* out) {
  if (!b.is_object()) return Status::invalid_argument("the request body must be a JSON object");
  ParsedCompletion p;
  p.api = api;
  CompletionRequest& q = p.req;
  q.sampling = d.sampling;
  q.n_keep = d.n_keep;

  // The prompt. Its text is measured first: one that cannot fit is refused before the work of
  // rendering and tokenizing it (a few megabytes of messages take seconds).
  auto check_text_bytes = [&](size_t bytes) -> Status {
    if (d.max_token_bytes == 0) return Status();
    const size_t min_tokens = bytes / d.max_token_bytes;
    if (min_tokens < d.n_ctx_seq) return Status();
    out->n_prompt_tokens = min_tokens;
    return Status::out_of_range(fmt::format(
        "the prompt has at least {} tokens ({} bytes of text); a slot holds at most {} tokens "
        "including the reply",
        min_tokens, bytes, d.n_ctx_seq));
  };
  if (api == Api::kOaiChat) {
    std::vector<ChatMessage> msgs;
    MNEMO_RETURN_IF_ERROR(chat_messages(b, &msgs));
    size_t bytes = 0;
    for (const ChatMessage& m : msgs) bytes += m.content.size();
    MNEMO_RETURN_IF_ERROR(check_text_bytes(bytes));
    std::string text;
    MNEMO_RETURN_IF_ERROR(render_chat_prompt(b, tmpl, d, &text));
    q.prompt = tok.tokenize(text, /*add_special=*/true, /*parse_special=*/true);
  } else {
    auto found = b.find("prompt");
    const Json* it = prompt != nullptr ? prompt : found != b.end() ? &*found : nullptr;
    if (it == nullptr || it->is_null()) return Status::invalid_argument("'prompt' is missing");
    size_t bytes = 0;
    if (it->is_string()) {
      bytes = it->get_ref<const std::string&>().size();
    } else if (it->is_array()) {
      for (const Json& e : *it) bytes += e.is_string() ? e.get_ref<const std::string&>().size() : 0;
    }
    MNEMO_RETURN_IF_ERROR(check_text_bytes(bytes));
    MNEMO_RETURN_IF_ERROR(tokenize_prompt(*it, tok, &q.prompt));
  }
  if (q.prompt.empty()) return Status::invalid_argument("the prompt is empty");

  // How many tokens.
  int64_t n_predict = -1;
  if (api == Api::kLlama) {
    MNEMO_RETURN_IF_ERROR(get_int(b, "n_predict", -1, INT32_MAX, &n_predict));
  } else {
    MNEMO_RETURN_IF_ERROR(get_int(b, "max_tokens", 0, INT32_MAX, &n_predict));
    MNEMO_RETURN_IF_ERROR(get_int(b, "max_completion_tokens", 0, INT32_MAX, &n_predict));
  }
  if (n_predict < 0) n_predict = d.n_predict >= 0 ? d.n_predict : d.n_predict_max;
  if (n_predict > d.n_predict_max) {
    return Status::invalid_argument(fmt::format(
        "{} is {}; this server generates at most {} tokens per request",
        api == Api::kLlama ? "'n_predict'" : "'max_tokens'", n_predict, d.n_predict_max));
  }
  q.n_predict = static_cast<int32_t>(n_predict);

  // Sampling.
  SamplingParams& s = q.sampling;
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
  MNEMO_RETURN_IF_ERROR(parse_structured(b, &q.grammar));
  if (Status st = s.validate(); !st.ok()) return st;

  // The rest.
  MNEMO_RETURN_IF_ERROR(get_stop(b, d, &q.stop));
  MNEMO_RETURN_IF_ERROR(get_bool(b, "stream", &p.stream));
  MNEMO_RETURN_IF_ERROR(get_bool(b, "cache_prompt", &q.cache_prompt));
  MNEMO_RETURN_IF_ERROR(get_bool(b, "ignore_eos", &q.ignore_eos));
  MNEMO_RETURN_IF_ERROR(get_bool(b, "return_tokens", &p.return_tokens));
  MNEMO_RETURN_IF_ERROR(get_bool(b, "timings_per_token", &p.timings_per_token));
  MNEMO_RETURN_IF_ERROR(get_bool(b, "post_sampling_probs", &q.post_sampling_probs));
  MNEMO_RETURN_IF_ERROR(get_bool(b, "return_progress", &q.return_progress));
  if (auto rf = b.find("response_fields"); rf != b.end() && !rf->is_null()) {
    if (!rf->is_array() || rf->size() > 64) {
      return Status::invalid_argument("'response_fields' must be an array of at most 64 names");
    }
    for (const Json& f : *rf) {
      if (!f.is_string()) return Status::invalid_argument("'response_fields' holds a non-string");
      p.response_fields.push_back(f.get<std::string>());
    }
  }
  MNEMO_RETURN_IF_ERROR(get_int_as(b, "n_keep", -1, INT32_MAX, &q.n_keep));
  MNEMO_RETURN_IF_ERROR(get_int_as(b, "id_slot", -1, int64_t(d.n_slots) - 1, &q.id_slot));
  if (api != Api::kLlama) {
    int64_t n = 1;
    MNEMO_RETURN_IF_ERROR(get_int(b, "n", 1, kMaxChoices, &n));
    auto so = b.find("stream_options");
    if (so != b.end() && !so->is_null()) {
      if (!so->is_object()) return Status::invalid_argument("'stream_options' must be an object");
      MNEMO_RETURN_IF_ERROR(get_bool(*so, "include_usage", &p.include_usage));
    }
    bool flag = false;
    MNEMO_RETURN_IF_ERROR(get_bool(b, "echo", &flag));
    if (flag) return Status::invalid_argument("'echo' is not supported");
    if (api == Api::kOaiChat) {
      MNEMO_RETURN_IF_ERROR(get_bool(b, "logprobs", &p.logprobs));
      MNEMO_RETURN_IF_ERROR(get_int_as(b, "top_logprobs", 0, 20, &p.top_logprobs));
      if (p.top_logprobs > 0 && !p.logprobs) {
        return Status::invalid_argument("'top_logprobs' needs 'logprobs': true");
      }
    } else {
      auto lp = b.find("logprobs");
      if (lp != b.end() && !lp->is_null() && !(lp->is_boolean() && !lp->get<bool>())) {
        return Status::invalid_argument(
            "'logprobs' is not supported on /v1/completions (use /v1/chat/completions or "
            "/completion's n_probs)");
      }
    }
  } else {
    MNEMO_RETURN_IF_ERROR(get_int_as(b, "n_probs", 0, 20, &p.top_logprobs));
    p.logprobs = p.top_logprobs > 0;
  }
  q.n_probs = p.logprobs ? std::max(1, p.top_logprobs) : 0;
  p.n_prompt_tokens = q.prompt.size();
  if (q.prompt.size() >= d.n_ctx_seq) {
    out->n_prompt_tokens = q.prompt.size();
    return Status::out_of_range(
        fmt::format("the prompt has {} tokens; a slot holds at most {} tokens including the reply",
                    q.prompt.size(), d.n_ctx_seq));
  }
  *out = std::move(p);
  return Status();
}

constexpr int64_t kMaxCompletions = 64;

// llama-server's rule: an array with no number in it lists several prompts.
bool several_prompts(const Json& prompt) {
  return prompt.is_array() && !prompt.empty() &&
         std::none_of(prompt.begin(), prompt.end(), [](const Json& e) { return e.is_number(); });
}

}  // namespace

Status parse_completion(const Json& b, Api api, const Tokenizer& tok, const ChatTemplate& tmpl,
                        const ApiDefaults& d, ParsedCompletion* out) {
  return parse_one(b, nullptr, api, tok, tmpl, d, out);
}

Status parse_completions(const Json& b, Api api, const Tokenizer& tok, const ChatTemplate& tmpl,
                         const ApiDefaults& d, std::vector<ParsedCompletion>* out) {
  out->clear();
  if (!b.is_object()) return Status::invalid_argument("the request body must be a JSON object");
  int64_t n = 1;
  if (api != Api::kLlama) MNEMO_RETURN_IF_ERROR(get_int(b, "n", 1, kMaxChoices, &n));
  std::vector<const Json*> prompts;
  auto it = b.find("prompt");
  if (api != Api::kOaiChat && it != b.end() && several_prompts(*it)) {
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
    if (Status st = parse_one(b, prompts[i], api, tok, tmpl, d, &first); !st.ok()) {
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

Json stream_progress(const ParsedCompletion& p, const CompletionEvent& ev, int32_t id_slot,
                     const ApiDefaults& d, const ResponseIds& ids) {
  const Json progress = {{"total", ev.stats.n_prompt},
                         {"cache", ev.stats.n_cached},
                         {"processed", ev.n_processed},
                         {"time_ms", ev.progress_ms}};
  if (p.api == Api::kLlama) {
    return {{"index", p.index},
            {"content", ""},
            {"tokens", Json::array()},
            {"stop", false},
            {"id_slot", id_slot},
            {"tokens_predicted", 0},
            {"tokens_evaluated", ev.stats.n_prompt},
            {"prompt_progress", progress}};
  }
  Json j = oai_chunk(p, d, ids);
  if (p.api == Api::kOaiChat) {
    j["choices"] = Json::array({{{"index", p.index},
                                 {"delta", {{"role", "assistant"}, {"content", nullptr}}},
                                 {"logprobs", nullptr},
                                 {"finish_reason", nullptr}}});
  } else {
    j["choices"] = Json::array(
        {{{"index", p.index}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
  }
  j["prompt_progress"] = progress;
  return j;
}

Json usage_json(const CompletionStats& s) {
  return {{"prompt_tokens", s.n_prompt},
          {"completion_tokens", s.n_generated},
          {"total_tokens", s.n_prompt + s.n_generated},
          {"prompt_tokens_details", {{"cached_tokens", s.n_cached}}}};
}

Json stream_usage(const ParsedCompletion& p, const CompletionStats& sum, const ApiDefaults& d,
                  const ResponseIds& ids) {
  Json u = oai_chunk(p, d, ids);
  u["choices"] = Json::array();
  u["usage"] = usage_json(sum);
  u["timings"] = timings_json(sum);
  return u;
}

ResponseIds new_response_ids(Api api) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  ResponseIds ids;
  ids.id = fmt::format("{}{:016x}{:08x}", api == Api::kOaiChat ? "chatcmpl-" : "cmpl-", rng(),
                       static_cast<uint32_t>(rng()));
  ids.created = static_cast<int64_t>(std::time(nullptr));
  return ids;
}

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kLimit:
    case FinishReason::kContext:
      return "length";
    default:
      return "stop";
  }
}

Json completion_json(const ParsedCompletion& p, const CompletionResult& r, const ApiDefaults& d,
                     const ResponseIds& ids) {
  if (p.api == Api::kLlama) {
    Json j = {{"index", p.index},
              {"content", r.text},
              {"id_slot", r.stats.id_slot},
              {"stop", true},
              {"model", d.model_name},
              {"tokens_predicted", r.stats.n_generated},
              {"tokens_evaluated", r.stats.n_prompt},
              // As llama-server: the tokens the slot holds now (the last sampled one is not
              // decoded); the prompt tokens reused are timings.cache_n.
              {"tokens_cached", std::max(0, r.stats.n_prompt + r.stats.n_generated - 1)},
              {"prompt", d.tok->detokenize(p.req.prompt, DetokenizeOptions{true, true})},
              {"has_new_line", r.text.find('\n') != std::string::npos},
              {"truncated", r.finish == FinishReason::kContext},
              {"stop_type", stop_type_name(r.finish)},
              {"stopping_word", r.stop_word},
              {"context_shifts", r.stats.n_shifts},
              {"generation_settings", generation_settings(p.req)},
              {"timings", timings_json(r.stats)}};
    j["tokens"] = p.return_tokens ? Json(r.tokens) : Json::array();
    if (p.logprobs) j["completion_probabilities"] = probs_json(p, r.probs, d);
    if (!p.response_fields.empty()) {
      Json only = Json::object();
      for (const std::string& f : p.response_fields) {
        const Json* v = &j;
        size_t i = 0;
        while (v != nullptr && i <= f.size()) {
          size_t e = f.find('/', i);
          if (e == std::string::npos) e = f.size();
          const std::string key = f.substr(i, e - i);
          v = v->is_object() && v->contains(key) ? &(*v)[key] : nullptr;
          i = e + 1;
        }
        if (v != nullptr) only[f] = *v;
      }
      return only;
    }
    return j;
  }
  Json j = oai_chunk(p, d, ids);
  if (p.api == Api::kOaiChat) {
    j["object"] = "chat.completion";
    j["choices"] = Json::array({{{"index", p.index},
                                 {"message", {{"role", "assistant"}, {"content", r.text}}},
                                 {"logprobs", p.logprobs ? probs_json(p, r.probs, d) : Json()},
                                 {"finish_reason", finish_reason_name(r.finish)}}});
  } else {
    j["choices"] = Json::array({{{"index", p.index},
                                 {"text", r.text},
                                 {"logprobs", nullptr},
                                 {"finish_reason", finish_reason_name(r.finish)}}});
  }
  j["usage"] = usage_json(r.stats);
  j["timings"] = timings_json(r.stats);
  return j;
}

std::vector<Json> stream_begin(const ParsedCompletion& p, const ApiDefaults& d,
                               const ResponseIds& ids) {
  if (p.api != Api::kOaiChat) return {};
  Json j = oai_chunk(p, d, ids);
  j["choices"] = Json::array({{{"index", p.index},
                               {"delta", {{"role", "assistant"}, {"content", nullptr}}},
                               {"logprobs", nullptr},
                               {"finish_reason", nullptr}}});
  return {j};
}

Json stream_delta(const ParsedCompletion& p, const std::string& text,
                  const std::vector<TokenId>& tokens, const std::vector<TokenProbs>& probs,
                  const CompletionStats& stats, int32_t id_slot, const ApiDefaults& d,
                  const ResponseIds& ids) {
  if (p.api == Api::kLlama) {
    Json j = {{"index", p.index},
              {"content", text},
              {"tokens", tokens},
              {"stop", false},
              {"id_slot", id_slot},
              {"tokens_predicted", stats.n_generated},
              {"tokens_evaluated", stats.n_prompt}};
    if (p.logprobs) j["completion_probabilities"] = probs_json(p, probs, d);
    if (p.timings_per_token) j["timings"] = timings_json(stats);
    return j;
  }
  Json j = oai_chunk(p, d, ids);
  if (p.api == Api::kOaiChat) {
    j["choices"] = Json::array({{{"index", p.index},
                                 {"delta", {{"content", text}}},
                                 {"logprobs", p.logprobs ? probs_json(p, probs, d) : Json()},
                                 {"finish_reason", nullptr}}});
  } else {
    j["choices"] = Json::array(
        {{{"index", p.index}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
  }
  if (p.timings_per_token) j["timings"] = timings_json(stats);
  return j;
}

std::vector<Json> stream_end(const ParsedCompletion& p, const CompletionResult& r,
                             const ApiDefaults& d, const ResponseIds& ids) {
  if (p.api == Api::kLlama) {
    ParsedCompletion whole = p;  // response_fields shape only the non-streamed answer
    whole.response_fields.clear();
    Json j = completion_json(whole, r, d, ids);
    j["content"] = "";
    j["tokens"] = Json::array();
    if (p.logprobs) j["completion_probabilities"] = Json::array();
    return {j};
  }
  std::vector<Json> out;
  Json j = oai_chunk(p, d, ids);
  if (p.api == Api::kOaiChat) {
    j["choices"] = Json::array({{{"index", p.index},
                                 {"delta", Json::object()},
                                 {"logprobs", nullptr},
                                 {"finish_reason", finish_reason_name(r.finish)}}});
  } else {
    j["choices"] = Json::array({{{"index", p.index},
                                 {"text", ""},
                                 {"logprobs", nullptr},
                                 {"finish_reason", finish_reason_name(r.finish)}}});
  }
  j["timings"] = timings_json(r.stats);
  out.push_back(std::move(j));
  if (p.include_usage) {
    Json u = oai_chunk(p, d, ids);
    u["choices"] = Json::array();
    u["usage"] = usage_json(r.stats);
    u["timings"] = timings_json(r.stats);
    out.push_back(std::move(u));
  }
  return out;
}

Json error_json(ErrorKind kind, const std::string& message) {
  const HttpError e = http_error(kind);
  return {{"error", {{"code", e.status}, {"message", message}, {"type", e.type}}}};
}

Json type_json(const std::optional<GgmlType>& t) {
  return t ? Json(std::string(type_name(*t))) : Json(nullptr);
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

Status parse_slot_id(std::string_view text, uint32_t n_slots, int32_t* out) {
  const bool digits =
      !text.empty() && text.size() <= 9 &&
      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits) {
    return Status::invalid_argument("invalid slot id '" + std::string(text.substr(0, 16)) + "'");
  }
  const int64_t id = std::stoll(std::string(text));
  if (id >= int64_t(n_slots)) return Status::not_found(fmt::format("slot {} does not exist", id));
  *out = int32_t(id);
  return Status();
}

Status tokenize_json(const Json& b, const Tokenizer& tok, Json* out) {
  if (!b.is_object()) return Status::invalid_argument("the request body must be a JSON object");
  auto it = b.find("content");
  if (it == b.end() || !it->is_string()) {
    return Status::invalid_argument("'content' must be a string");
  }
  bool add_special = false, parse_special = true, with_pieces = false;
  MNEMO_RETURN_IF_ERROR(get_bool(b, "add_special", &add_special));
  MNEMO_RETURN_IF_ERROR(get_bool(b, "parse_special", &parse_special));
  MNEMO_RETURN_IF_ERROR(get_bool(b, "with_pieces", &with_pieces));
  const auto ids = tok.tokenize(it->get<std::string>(), add_special, parse_special);
  Json tokens = Json::array();
  for (TokenId id : ids) {
    if (!with_pieces) {
      tokens.push_back(id);
      continue;
    }
    const std::string piece = tok.token_to_piece(id, true);
    Json jp = piece;
    try {
      (void)jp.dump();
    } catch (const Json::exception&) {  // not valid UTF-8 on its own: give the bytes
      jp = Json::array();
      for (unsigned char c : piece) jp.push_back(c);
    }
    tokens.push_back({{"id", id}, {"piece", jp}});
  }
  *out = {{"tokens", tokens}};
  return Status();
}

Status detokenize_json(const Json& b, const Tokenizer& tok, Json* out) {
  if (!b.is_object()) return Status::invalid_argument("the request body must be a JSON object");
  auto it = b.find("tokens");
  if (it == b.end() || !it->is_array()) {
    return Status::invalid_argument("'tokens' must be an array of token ids");
  }
  std::vector<TokenId> ids;
  for (const Json& t : *it) {
    TokenId id = 0;
    MNEMO_RETURN_IF_ERROR(check_token(t, tok, "tokens", &id));
    ids.push_back(id);
  }
  *out = {{"content", tok.detokenize(ids, /*special=*/true)}};
  return Status();
}

Json slots_json(const ControlReply& snap) {
  Json arr = Json::array();
  for (const SlotInfo& s : snap.slots) {
    arr.push_back({{"id", s.id},
                   {"state", slot_state_name(s.state)},
                   {"is_processing", s.state != SlotState::kIdle},
                   {"id_task", s.id_task},
                   {"n_ctx", s.n_ctx},
                   {"n_tokens", s.n_tokens},
                   {"n_prompt_tokens", s.n_prompt},
                   {"n_decoded", s.n_generated},
                   {"type_k", type_json(s.type_k)},
                   {"type_v", type_json(s.type_v)},
                   {"bytes", s.bytes}});
  }
  return arr;
}

Status parse_requantize(const Json& b, uint32_t n_slots, ControlRequest* out) {
  if (!b.is_object()) return Status::invalid_argument("the request body must be a JSON object");
  ControlRequest r;
  r.kind = ControlKind::kRequantize;
  int64_t slot = -1;
  MNEMO_RETURN_IF_ERROR(get_int(b, "slot", -1, int64_t(n_slots) - 1, &slot));
  r.slot = static_cast<int32_t>(slot);
  for (auto [key, dst] : {std::pair{"ctk", &r.type_k}, std::pair{"ctv", &r.type_v}}) {
    auto it = b.find(key);
    if (it == b.end() || it->is_null()) continue;
    if (!it->is_string())
      return Status::invalid_argument(fmt::format("'{}' must be a string", key));
    auto t = type_from_name(it->get<std::string>());
    if (!t) {
      return Status::invalid_argument(
          fmt::format("'{}': unknown type '{}'", key, it->get<std::string>()));
    }
    *dst = *t;
  }
  if (!b.contains("ctk") && !b.contains("ctv")) {
    return Status::invalid_argument("give 'ctk' and/or 'ctv', the target K / V types");
  }
  *out = r;
  return Status();
}

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace mnemo::server
