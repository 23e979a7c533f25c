// The routes of the control and utility endpoints: glue between httplib's requests and the
// JSON of api_control.h (and the engine's control requests, each answered by the loop thread
// between two decode steps).
#include <fmt/format.h>

#include <algorithm>

#include "server/http_front.h"
#include "server/slot_files.h"

namespace mnemo::server {

// The web page's bytes (generated from src/server/webui/index.html at build time).
extern const unsigned char kWebIndex[];
extern const size_t kWebIndexSize;

void Front::health(const Request&, Response& res, RequestLog&) {
  reply_json(res, {{"status", "ok"}});
}

void Front::web_page(const Request&, Response& res, RequestLog&) {
  if (!params_.webui) {  // --no-webui: as llama-server, the page is not there
    reply_error(res, ErrorKind::kNotFound, "File Not Found");
    return;
  }
  res.status = 200;
  res.set_content(reinterpret_cast<const char*>(kWebIndex), kWebIndexSize,
                  "text/html; charset=utf-8");
}

void Front::props(const Request&, Response& res, RequestLog&) {
  ControlReply snap;
  if (!run_control({}, res, &snap)) return;
  reply_json(res, props_json(facts(), engine_.info(), snap));
}

// The disabled-endpoint texts are llama-server's own, word for word (clients match them).
void Front::slots(const Request& req, Response& res, RequestLog&) {
  if (!params_.slots_endpoint) {
    reply_error(res, ErrorKind::kNotSupported,
                "This server does not support slots endpoint. Start it with `--slots`");
    return;
  }
  ControlReply snap;
  if (!run_control({}, res, &snap)) return;
  const std::string fail = req.get_param_value("fail_on_no_slot");
  if (!fail.empty() && fail != "0" && fail != "false" &&
      std::none_of(snap.slots.begin(), snap.slots.end(),
                   [](const SlotInfo& s) { return s.state == SlotState::kIdle; })) {
    reply_error(res, ErrorKind::kQueueFull, "no slot available");
    return;
  }
  reply_json(res, slots_json(snap));
}

void Front::slot_action(const Request& req, Response& res, RequestLog& log) {
  if (params_.slot_save_path.empty()) {
    reply_error(res, ErrorKind::kNotSupported,
                "This server does not support slots action. Start it with `--slot-save-path`");
    return;
  }
  const std::string id_text = req.matches.size() > 1 ? std::string(req.matches[1]) : "";
  int32_t id = -1;
  if (Status st = parse_slot_id(id_text, engine_.info().n_slots, &id); !st.ok()) {
    reply_error(
        res, st.code() == StatusCode::kNotFound ? ErrorKind::kNotFound : ErrorKind::kInvalidRequest,
        st.message());
    return;
  }
  const std::string action = req.get_param_value("action");
  log.extra = fmt::format(" | slot {} | {}", id, action);
  ControlRequest creq;
  creq.slot = id;
  if (action == "erase") {
    creq.kind = ControlKind::kSlotErase;
    ControlReply r;
    if (!run_control(std::move(creq), res, &r)) return;
    reply_json(res, slot_erased_json(id, r));
    return;
  }
  if (action != "save" && action != "restore") {
    reply_error(res, ErrorKind::kInvalidRequest,
                "'action' must be save, restore or erase (got '" + action + "')");
    return;
  }
  Json body;
  if (!parse_body(req, res, &body)) return;
  if (!body.is_object() || !body.contains("filename") || !body["filename"].is_string()) {
    reply_error(res, ErrorKind::kInvalidRequest, "'filename' must be a string");
    return;
  }
  const std::string filename = body["filename"].get<std::string>();
  auto path = slot_file_path(params_.slot_save_path, filename);
  if (!path.ok()) {
    reply_error(res, error_kind_for(path.status(), ErrorOrigin::kRequest),
                "bad 'filename': " + path.status().message());
    return;
  }
  creq.kind = action == "save" ? ControlKind::kSlotSave : ControlKind::kSlotRestore;
  creq.path = *path;
  ControlReply r;
  if (!run_control(std::move(creq), res, &r)) return;
  log.extra += fmt::format(" | {} tokens, {} bytes, {:.1f} ms", r.n_tokens, r.bytes, r.ms);
  reply_json(res, slot_file_json(action == "save", id, filename, r));
}

void Front::requantize(const Request& req, Response& res, RequestLog& log) {
  Json body;
  if (!parse_body(req, res, &body)) return;
  ControlRequest creq;
  if (Status st = parse_requantize(body, engine_.info().n_slots, &creq); !st.ok()) {
    reply_error(res, error_kind_for(st, ErrorOrigin::kRequest), st.message());
    return;
  }
  ControlReply r;
  if (!run_control(creq, res, &r)) return;
  log.extra =
      fmt::format(" | slot {} -> {}/{} | {} -> {} bytes | {:.1f} ms", creq.slot,
                  type_name(r.type_k), type_name(r.type_v), r.bytes_before, r.bytes_after, r.ms);
  reply_json(res, requantized_json(creq, r));
}

void Front::models(const Request&, Response& res, RequestLog&) {
  reply_json(res, models_json(facts()));
}

void Front::tokenize(const Request& req, Response& res, RequestLog&) {
  Json body, out;
  if (!parse_body(req, res, &body)) return;
  if (Status st = tokenize_json(body, tok_, &out); !st.ok()) {
    reply_error(res, error_kind_for(st, ErrorOrigin::kRequest), st.message());
    return;
  }
  reply_json(res, out);
}

void Front::apply_template(const Request& req, Response& res, RequestLog&) {
  Json body;
  if (!parse_body(req, res, &body)) return;
  std::string prompt;
  if (Status st = render_chat_prompt(body, tmpl_, defaults_, &prompt); !st.ok()) {
    reply_error(res, ErrorKind::kInvalidRequest, st.message());
    return;
  }
  reply_json(res, {{"prompt", prompt}});
}

void Front::detokenize(const Request& req, Response& res, RequestLog&) {
  Json body, out;
  if (!parse_body(req, res, &body)) return;
  if (Status st = detokenize_json(body, tok_, &out); !st.ok()) {
    reply_error(res, error_kind_for(st, ErrorOrigin::kRequest), st.message());
    return;
  }
  reply_json(res, out);
}

void Front::metrics(const Request&, Response& res, RequestLog&) {
  if (!params_.metrics) {
    reply_error(res, ErrorKind::kNotSupported,
                "This server does not support metrics endpoint. Start it with `--metrics`");
    return;
  }
  ControlReply snap;
  if (!run_control({}, res, &snap)) return;
  res.status = 200;
  res.set_content(
      prometheus_text(metrics_, engine_.info(), snap, response_store_metrics(responses_.stats())),
      "text/plain; version=0.0.4; charset=utf-8");
}

void Front::response_entry(const Request& req, Response& res, RequestLog&) {
  Json body;
  const int status =
      stored_response(responses_, req.matches[1].str(), req.method == "DELETE", &body);
  if (status != 200) metrics_.count_error(uint8_t(ErrorKind::kNotFound));
  reply_json(res, body, status);
}

}  // namespace mnemo::server
