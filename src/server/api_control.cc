#include "server/api_control.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

namespace mnemo::server {

Json type_json(const std::optional<GgmlType>& t) {
  return t ? Json(std::string(type_name(*t))) : Json(nullptr);
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
                   {"bytes", s.bytes},
                   // llama-server's fields beside mnemo's own.
                   {"speculative", s.speculative},
                   {"n_prompt_tokens_cache", s.n_cached},
                   {"n_prompt_tokens_processed", s.n_prompt - s.n_cached},
                   {"params", s.params ? generation_settings_json(*s.params) : Json::object()},
                   {"next_token",
                    Json::array({{{"has_next_token", s.state != SlotState::kIdle},
                                  {"has_new_line", false},
                                  {"n_remain", s.state == SlotState::kIdle
                                                   ? -1
                                                   : s.n_predict - s.n_generated},
                                  {"n_decoded", s.n_generated}}})}});
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

Json slot_erased_json(int32_t id, const ControlReply& r) {
  return {{"id_slot", id}, {"n_erased", r.n_tokens}};
}

Json slot_file_json(bool save, int32_t id, const std::string& filename, const ControlReply& r) {
  if (save) {
    return {{"id_slot", id},
            {"filename", filename},
            {"n_saved", r.n_tokens},
            {"n_written", r.bytes},
            {"timings", {{"save_ms", r.ms}}}};
  }
  return {{"id_slot", id},
          {"filename", filename},
          {"n_restored", r.n_tokens},
          {"n_read", r.bytes},
          {"timings", {{"restore_ms", r.ms}}}};
}

Json requantized_json(const ControlRequest& creq, const ControlReply& r) {
  return {{"slot", creq.slot},
          {"type_k", std::string(type_name(r.type_k))},
          {"type_v", std::string(type_name(r.type_v))},
          {"bytes_before", r.bytes_before},
          {"bytes_after", r.bytes_after},
          {"ms", r.ms}};
}

Json props_json(const ServerFacts& s, const EngineInfo& info, const ControlReply& snap) {
  Json slots = Json::array();
  for (const SlotInfo& si : snap.slots) {
    slots.push_back(
        {{"id", si.id}, {"type_k", type_json(si.type_k)}, {"type_v", type_json(si.type_v)}});
  }
  const ServerParams& params = s.params;
  const SamplingParams& sp = params.sampling;
  const Tokenizer& tok = s.tok;
  return {{"model", s.model_name},
          // The file's name: no response shows the server's directories.
          {"model_path", std::filesystem::path(params.model_path).filename().string()},
          {"model_description", s.model.describe()},
          {"n_ctx", info.n_ctx},
          {"n_ctx_slot", info.n_ctx_seq},
          {"total_slots", info.n_slots},
          {"memory_mode", info.kv_unified ? "unified" : "split"},
          {"kv_unified", info.kv_unified},
          {"n_batch", info.n_batch},
          {"n_ubatch", info.n_ubatch},
          {"n_threads", info.n_threads},
          {"context_shift", info.context_shift},
          {"kv_policy", info.kv_policy},
          {"slots", slots},
          {"kv_bytes", snap.breakdown.tensor_bytes},
          // As llama-server: the template's text (a family's name when rendered by a
          // fixed format), and the special tokens it sees.
          {"chat_template", s.tmpl.is_jinja() ? s.tmpl.source() : std::string(s.tmpl.mode_name())},
          {"chat_template_mode", s.tmpl.mode_name()},
          {"bos_token", tok.bos() == kTokenNull ? "" : tok.token_to_piece(tok.bos(), true)},
          {"eos_token", tok.eos() == kTokenNull ? "" : tok.token_to_piece(tok.eos(), true)},
          // As llama-server: the slot's n_ctx and the settings a request gets.
          {"default_generation_settings",
           {{"n_ctx", info.n_ctx_seq},
            {"params",
             {{"n_predict", params.n_predict},
              {"n_predict_max", params.n_predict_max},
              {"n_keep", params.n_keep},
              {"temperature", sp.temp},
              {"top_k", sp.top_k},
              {"top_p", sp.top_p},
              {"min_p", sp.min_p},
              {"repeat_penalty", sp.repeat_penalty},
              {"repeat_last_n", sp.repeat_last_n},
              {"frequency_penalty", sp.frequency_penalty},
              {"presence_penalty", sp.presence_penalty},
              {"seed", sp.seed},
              {"logit_bias", Json::array()},
              {"stream", false},
              {"n_probs", 0},
              {"timings_per_token", false},
              // As llama-server: the speculation kinds in use, and the draft bounds.
              {"speculative.types", std::string("none") +
                                        (params.spec.ngram ? ",ngram-simple" : "") +
                                        (params.draft_model ? ",draft-simple" : "")},
              {"speculative.n_max", params.spec.draft_max},
              {"speculative.n_min", params.spec.draft_min},
              {"speculative.p_min", params.spec.draft_p_min}}}}},
          {"endpoint_slots", params.slots_endpoint},
          {"endpoint_metrics", params.metrics},
          {"build_info", "mnemo 0.1.0"}};
}

Json models_json(const ServerFacts& s) {
  return {{"object", "list"},
          {"data", Json::array({{{"id", s.model_name},
                                 {"object", "model"},
                                 {"created", 0},
                                 {"owned_by", "mnemo"},
                                 {"meta",
                                  {{"n_ctx_train", s.model.hparams().n_ctx_train},
                                   {"n_vocab", s.model.hparams().n_vocab},
                                   {"n_params", s.model.n_params()},
                                   {"size", s.model.n_bytes()}}}}})}};
}

}  // namespace mnemo::server
