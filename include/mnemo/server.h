// mnemo's HTTP server (`mnemo serve`): llama.cpp's and OpenAI's completion APIs over slots
// with continuous batching, per-slot prompt caches, slot save / restore and live KV
// requantization. Design: src/server/engine.h (the loop thread that owns the memory) and
// src/server/http_front.h (transport: auth, body limits, SSE), src/server/api.h (the wire
// APIs). Endpoints: docs in src/server/http.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mnemo/context.h"
#include "mnemo/model.h"
#include "mnemo/sampling.h"
#include "mnemo/speculative.h"
#include "mnemo/status.h"
#include "mnemo/tokenizer.h"

namespace mnemo::server {

/// ServerParams::cache_ram_mib's default: min(8192 MiB, a quarter of physical memory).
inline constexpr int64_t kCacheRamAuto = -2;

/// Everything `mnemo serve` is configured with (flag names as llama-server's where it has them).
struct ServerParams {
  std::string host = "127.0.0.1";  // --host: loopback unless told otherwise
  int port = 8080;                 // --port: 0 picks a free port (printed when listening)
  std::string model_path;          // -m (for /props)
  std::string model_alias;         // -a / --alias: "model" in responses ("" = file name)
  ContextParams ctx;               // -c -b -ub -t -ctk -ctv -kvu -np (n_seq_max = slots)
  SamplingParams sampling;         // defaults for fields a request leaves out
  /// Speculative decoding in every slot (--spec-type, --draft-max, ...; mnemo/speculative.h)
  /// and the draft model (-md) with its tokenizer: not owned, null for none.
  SpecParams spec;
  const Model* draft_model = nullptr;
  const Tokenizer* draft_tokenizer = nullptr;
  int32_t n_predict = -1;          // -n: default tokens per request (-1: n_predict_max)
  int32_t n_predict_max = 4096;    // --n-predict-max: requests asking for more get 400
  int32_t n_keep = 0;              // --keep: tokens a context shift keeps (-1: the prompt)
  bool context_shift = false;      // --context-shift
  std::string slot_save_path;      // --slot-save-path: enables /slots/{id}?action=...
  std::string kv_policy;           // --kv-policy ladder (include/mnemo/kv_policy.h; "" = none)
  /// --cache-ram: the prompt cache's RAM tier in MiB; 0 disables it, -1 means no limit; the
  /// default (kCacheRamAuto) is min(8192, a quarter of the machine's memory).
  int64_t cache_ram_mib = kCacheRamAuto;
  std::string cache_dir;           // --cache-dir: the prompt cache's disk tier ("" = none)
  int64_t cache_disk_mib = 10240;  // --cache-disk: its budget in MiB
  uint32_t cache_block = 64;       // --cache-block: tokens per hashed block of the index
  std::string cache_type_k;        // --prompt-cache-type-k: K type of stored entries ("" = slot's)
  std::string cache_type_v;        // --prompt-cache-type-v
  std::string cache_store;         // --cache-store redis://[[user]:pw@]host[:port][/db] ("" = none)
  int cache_store_timeout_ms = 500;  // --cache-store-timeout: bound of every store command, ms
  std::string kv_events;             // --kv-events tcp://host:port: publish KV events ("" = none)
  /// --kv-events-replay tcp://host:port: vLLM's replay socket (ZeroMQ ROUTER) that resends the
  /// buffered event batches from a sequence number on ("" = none; needs --kv-events).
  std::string kv_events_replay;
  /// --kv-events-format: "vllm" (today's vLLM: tagged maps with KV-cache groups) or "legacy"
  /// (older vLLM's positional arrays). docs/deployment.md "KV events".
  std::string kv_events_format = "vllm";
  std::string api_key;  // --api-key: 'Authorization: Bearer KEY' or 'X-Api-Key: KEY'
  /// --allowed-origins: the browser origins (scheme://host[:port], comma-separated) whose pages
  /// may call the API (CORS); "*" (the default, as llama-server) allows every origin.
  std::string allowed_origins = "*";
  bool slots_endpoint = true;  // --slots / --no-slots: GET /slots
  bool webui = true;           // --webui / --no-webui (also --ui / --no-ui): the web page at /
  std::string media_path;      // --media-path: accepted and ignored (no vision model)
  /// --chat-template: a template family ("chatml", "llama3", "gemma") or, with jinja, a Jinja
  /// template's text, instead of the model's tokenizer.chat_template ("" = the model's).
  /// ChatTemplate::choose (include/mnemo/chat.h) says which wins.
  std::string chat_template;
  /// --chat-template-file: a file holding a Jinja template ("" = none).
  std::string chat_template_file;
  /// --jinja / --no-jinja: render chat templates with the Jinja engine (default, as
  /// llama-server) or with the fixed format of their family.
  bool jinja = true;
  bool jinja_explicit = false;  // --jinja given: a built-in name is then a template's text
  /// --chat-template-kwargs: a JSON object of extra template variables for every request (a
  /// request's own chat_template_kwargs add to and override them).
  std::string chat_template_kwargs;
  /// --reasoning-format: "none" keeps a model's thinking in the answer's content; "deepseek" or
  /// "auto" (the default) split it into reasoning_content (docs/api.md).
  std::string reasoning_format = "auto";
  /// --reasoning-budget: tokens a model may think before its end-of-thinking marker is generated
  /// for it (-1: no limit; 0: the thinking ends at once). A request's reasoning_budget_tokens
  /// overrides it.
  int reasoning_budget = -1;
  bool metrics = false;  // --metrics: enables GET /metrics
  int timeout_s = 600;   // --timeout: socket read/write and queue-wait limit, seconds
  /// --read-timeout: the longest pause, in seconds, while a client sends a request (line,
  /// headers or body); the whole body must also arrive within --timeout.
  int read_timeout_s = 30;
  int n_threads_http = 0;  // --threads-http: 0 = max(16, 4 * slots)
  /// --threads-http-max: HTTP threads started beyond --threads-http while all are busy (held
  /// by slow clients or streams); 0 = 16 x --threads-http. Extra threads end after 10 s idle.
  int n_threads_http_max = 0;
  size_t max_body_bytes = 8u << 20;  // --max-body: larger request bodies get 413
  uint32_t max_queue = 256;          // --max-queue: waiting requests beyond this get 503
  /// --responses-max / --responses-max-mb: the responses of POST /v1/responses kept for
  /// previous_response_id and GET /v1/responses/{id} ("store": true), at most this many and
  /// this many MiB of them (their JSON text), least recently used out first (0: none kept).
  size_t responses_max = 1000;
  size_t responses_max_mb = 256;
  /// Called once with the bound port when the server starts listening (tests, scripts/run).
  std::function<void(int port)> on_listening;

  /// Router mode (no -m): the models are every GGUF file of --models-dir (named by file stem)
  /// and the sections of --models-preset (an INI file: [NAME], then the model's own server
  /// flags as keys, `model = PATH` among them; llama-server's models.ini). --models-max: most
  /// models loaded at once (least recently used unloaded first); --no-models-autoload: a
  /// request for an unloaded model is refused until POST /models/load.
  std::string models_dir;
  std::string models_preset;
  int models_max = 4;
  bool models_autoload = true;
};

/// A model of a router loaded with its own flags: what run_server takes, owned. params'
/// draft_model / draft_tokenizer point into draft / draft_tok.
struct LoadedServerModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<Model> draft;
  std::unique_ptr<Tokenizer> draft_tok;
  ServerParams params;
};

/// Loads one model of a router from `args`: `mnemo serve`'s flags (the router's own, then the
/// preset's for this model, then `-m PATH`; a later flag wins). Errors: the flag parser's
/// (InvalidArgument) or the loader's (a missing or malformed file).
using ModelLoader = std::function<Result<LoadedServerModel>(const std::vector<std::string>& args)>;

/// Router mode: serves every model params.models_dir and params.models_preset name, on one port,
/// in this process: a request's "model" field (or ?model= on GET routes) picks the model, which
/// is loaded on first use by `loader` (with `base_args`, then the preset's flags, then -m), and
/// the least recently used idle model is unloaded beyond params.models_max (its slots go into
/// its prompt cache; with --cache-dir, to disk under the model's fingerprint). GET /models and
/// /v1/models list every model with its status; POST /models/load and /models/unload. Runs until
/// SIGINT / SIGTERM / stop_server(). Errors: no model found, an unreadable preset
/// (InvalidArgument), a port that cannot be bound (IOError).
Status run_router(const ServerParams& params, std::vector<std::string> base_args,
                  ModelLoader loader);

/// Runs the server until SIGINT or SIGTERM (or until stop_server() from another thread).
/// `model` and `tok` must outlive the call. Errors: the context's creation (bad params, no
/// memory), a port that cannot be bound (IOError naming host and port), a bad --kv-policy or an
/// --slot-save-path that is not a writable directory (InvalidArgument), a bad prompt-cache flag
/// (InvalidArgument). A --cache-dir that cannot be used is not an error: the server starts and
/// logs it (the prompt cache then works from RAM).
Status run_server(const Model& model, const Tokenizer& tok, const ServerParams& params);

/// Asks a running run_server() to return (thread-safe; also what SIGINT / SIGTERM do).
void stop_server();

}  // namespace mnemo::server
