// The control and utility endpoints' JSON (llama-server's shapes): /slots and its actions
// (save, restore, erase), /cache/requantize, /props, /v1/models, /tokenize and /detokenize.
// Bodies -> native requests (ControlRequest, ...) and native replies -> bodies; the routes that
// run them are http_control.cc. Runs on HTTP threads; errors are Status values naming the field;
// nothing here throws.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "mnemo/chat.h"
#include "mnemo/server.h"
#include "mnemo/status.h"
#include "mnemo/tokenizer.h"
#include "server/engine.h"
#include "server/request.h"

namespace mnemo::server {

/// A K/V type's name ("f16", "q8_0", ...), or null for nullopt (a slot that holds no K/V).
Json type_json(const std::optional<GgmlType>& t);

/// The {id} of /slots/{id}: decimal digits naming a slot below n_slots. Errors: InvalidArgument
/// "invalid slot id" for empty or non-digit text (the message quotes at most 16 bytes of it),
/// NotFound for a number that names no slot.
Status parse_slot_id(std::string_view text, uint32_t n_slots, int32_t* out);

/// POST /tokenize {"content", "add_special" (false), "parse_special" (true), "with_pieces"
/// (false)} -> {"tokens": [...]} (with_pieces: [{"id", "piece"}], a piece that is not valid
/// UTF-8 is given as an array of byte values).
Status tokenize_json(const Json& body, const Tokenizer& tok, Json* out);
/// POST /detokenize {"tokens": [...]} -> {"content": ...}; ids must be in [0, n_vocab).
Status detokenize_json(const Json& body, const Tokenizer& tok, Json* out);

/// GET /slots: one object per slot; "type_k" / "type_v" are null for a slot that holds no K/V.
Json slots_json(const ControlReply& snap);
/// POST /slots/{id}?action=erase: {"id_slot", "n_erased"}.
Json slot_erased_json(int32_t id, const ControlReply& r);
/// POST /slots/{id}?action=save|restore: {"id_slot", "filename", "n_saved" / "n_restored",
/// "n_written" / "n_read", "timings": {"save_ms" / "restore_ms"}}.
Json slot_file_json(bool save, int32_t id, const std::string& filename, const ControlReply& r);

/// POST /cache/requantize body -> the request. {"ctk": type, "ctv": type, "slot": optional, in
/// [0, n_slots)}. A missing ctk / ctv stays nullopt: the loop keeps that type as the target
/// slot (or slot 0) has it now. Errors: InvalidArgument naming the field.
Status parse_requantize(const Json& body, uint32_t n_slots, ControlRequest* out);
/// Its answer: {"slot", "type_k", "type_v", "bytes_before", "bytes_after", "ms"}.
Json requantized_json(const ControlRequest& creq, const ControlReply& r);

/// What /props and /v1/models say about the server beside the engine's figures.
struct ServerFacts {
  const Model& model;
  const Tokenizer& tok;
  const ChatTemplate& tmpl;
  const ServerParams& params;
  const std::string& model_name;  // "model" in responses (--alias, or the file's name)
};
/// GET /props: model, n_ctx, slots, memory mode, K/V types per slot, the chat template, the
/// default generation settings (as llama-server's), which endpoints are on.
Json props_json(const ServerFacts& s, const EngineInfo& info, const ControlReply& snap);
/// GET /v1/models: the one model, with llama-server's "meta".
Json models_json(const ServerFacts& s);

}  // namespace mnemo::server
