// `mnemo serve`: the HTTP server (llama-server's flag names where it has them). The server
// itself lives in src/server/ (include/mnemo/server.h); this file only parses flags.
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>

#include "mnemo/chat.h"
#include "mnemo/server.h"
#include "tools/commands.h"
#include "tools/common.h"

namespace mnemo::tools {
namespace {

struct ServeFlags {
  ModelFlags model;
  SpecFlags spec;
  server::ServerParams server;
};

int serve_main(ServeFlags& f) {
  if (Status st = f.model.resolve(); !st.ok()) return fail("mnemo serve", st.message(), 2);
  if (Status st = f.server.sampling.validate(); !st.ok()) {
    return fail("mnemo serve", st.message(), 2);
  }
  if (Status st = f.spec.resolve(); !st.ok()) return fail("mnemo serve", st.message(), 2);
  auto lm = load_model(f.model);
  if (!lm.ok()) return fail("mnemo serve", lm.status().to_string(), 1);
  report_loaded("mnemo serve", *lm);
  LoadedModel draft;
  if (!f.spec.model_draft.empty()) {
    auto d = load_draft_model(f.model, f.spec.model_draft);
    if (!d.ok()) return fail("mnemo serve", d.status().message(), 1);
    draft = std::move(d).value();
    report_loaded("mnemo serve", draft);
    f.server.draft_model = draft.model.get();
    f.server.draft_tokenizer = draft.tokenizer.get();
  }
  f.server.spec = f.spec.spec;
  f.server.model_path = f.model.model_path;
  f.server.ctx = f.model.ctx;
  Status st = server::run_server(*lm->model, *lm->tokenizer, f.server);
  if (!st.ok()) return fail("mnemo serve", st.to_string(), 1);
  return 0;
}

}  // namespace

RunFn register_serve(CLI::App& app) {
  auto f = std::make_shared<ServeFlags>();
  f->model.ctx.n_seq_max = 4;
  f->server.sampling.temp = 0.8f;
  f->model.add_to(app, /*with_parallel=*/true);
  f->spec.add_to(app);
  add_sampling_flags(app, &f->server.sampling);
  server::ServerParams& s = f->server;
  app.add_option("--host", s.host, "address to listen on (default 127.0.0.1: loopback only)");
  app.add_option("--port", s.port, "port to listen on (0: any free port, printed)");
  app.add_option("-a,--alias", s.model_alias, "model name in responses (default: the file name)");
  app.add_option("-n,--n-predict", s.n_predict, "default tokens per request (-1: --n-predict-max)");
  app.add_option("--n-predict-max", s.n_predict_max, "most tokens one request may ask for");
  app.add_option("--keep", s.n_keep, "tokens a context shift keeps (-1: the whole prompt)");
  app.add_flag("--context-shift", s.context_shift,
               "when a slot's context fills, drop the oldest half after --keep and go on");
  app.add_option("--slot-save-path", s.slot_save_path,
                 "directory for slot files (enables /slots/{id}?action=save|restore|erase)");
  app.add_option("--kv-policy", s.kv_policy, "KV precision policy, e.g. f16,q8_0@0.75,q4_0@0.90");
  app.add_option("--cache-ram", s.cache_ram_mib,
                 "prompt cache in RAM, MiB (0: off, -1: no limit; default: min(8192, a quarter "
                 "of the machine's memory))");
  app.add_option("--cache-dir", s.cache_dir,
                 "prompt cache on disk: entries survive restarts (default: none)");
  app.add_option("--cache-disk", s.cache_disk_mib, "the disk tier's budget, MiB (default 10240)");
  app.add_option("--cache-block", s.cache_block,
                 "tokens per hashed block of the prompt cache's index (default 64)");
  app.add_option("--prompt-cache-type-k", s.cache_type_k,
                 "K type of prompt-cache entries, e.g. q8_0 (default: the slot's own)");
  app.add_option("--prompt-cache-type-v", s.cache_type_v,
                 "V type of prompt-cache entries (default: the slot's own)");
  app.add_option("--cache-store", s.cache_store,
                 "shared prompt cache for replicas: redis://[[user]:password@]host[:port][/db] "
                 "(Redis or Valkey)");
  app.add_option("--cache-store-timeout", s.cache_store_timeout_ms,
                 "ms a whole store lookup or write may take, connecting included, before it "
                 "counts as a miss or a drop (default 500)");
  app.add_option("--kv-events", s.kv_events,
                 "publish KV events (vLLM's format) on this ZeroMQ endpoint, e.g. "
                 "tcp://127.0.0.1:5557");
  app.add_option("--kv-events-replay", s.kv_events_replay,
                 "answer vLLM's replay requests for missed KV-event batches on this ZeroMQ "
                 "endpoint, e.g. tcp://127.0.0.1:5558");
  app.add_option("--kv-events-format", s.kv_events_format,
                 "KV-event wire form: vllm (today's vLLM: maps, KV-cache groups; default) or "
                 "legacy (older vLLM's positional arrays)");
  app.add_option("--api-key", s.api_key,
                 "require 'Authorization: Bearer KEY' or 'X-Api-Key: KEY' (not on /health, "
                 "/models)");
  app.add_option("--allowed-origins", s.allowed_origins,
                 "origins whose web pages may call the API (CORS), comma-separated; * = any");
  app.add_flag("--slots,!--no-slots", s.slots_endpoint, "enable GET /slots (default on)");
  app.add_option(
      "--chat-template", s.chat_template,
      "chat template instead of the model's: with Jinja (the default) a Jinja template's text, "
      "used as it stands even without markup or when it is a built-in name (as "
      "llama-server); with --no-jinja a built-in template's name (" +
          chat_template_names() + ") or a template text of one of those formats");
  app.add_option("--chat-template-file", s.chat_template_file,
                 "file holding a Jinja chat template to use instead of the model's");
  app.add_flag("--jinja,!--no-jinja", s.jinja,
               "render chat templates with the Jinja engine (default on; off: the fixed format "
               "of the template's family)");
  app.add_option("--chat-template-kwargs", s.chat_template_kwargs,
                 "JSON object of extra chat template variables, e.g. '{\"enable_thinking\": "
                 "false}'");
  app.add_option("--reasoning-format", s.reasoning_format,
                 "none: a model's thinking stays in the content; deepseek or auto (default): it "
                 "goes to reasoning_content")
      ->check(CLI::IsMember({"none", "deepseek", "auto"}));
  app.add_option("--reasoning-budget", s.reasoning_budget,
                 "tokens of thinking before the end-of-thinking marker is forced (-1: no limit)")
      ->check(CLI::Range(-1, INT32_MAX));
  app.add_flag("--metrics", s.metrics, "enable GET /metrics (Prometheus text)");
  app.add_option("--timeout", s.timeout_s,
                 "seconds for socket reads/writes and for waiting for a free slot");
  app.add_option("--read-timeout", s.read_timeout_s,
                 "longest pause in seconds while a client sends a request (default 30)");
  app.add_option("--threads-http", s.n_threads_http,
                 "HTTP threads (0: max(16, 4 x slots)); a streaming response holds one");
  app.add_option("--threads-http-max", s.n_threads_http_max,
                 "most HTTP threads when all are busy (0: 16 x --threads-http)");
  app.add_option("--max-body", s.max_body_bytes, "largest request body in bytes");
  app.add_option("--max-queue", s.max_queue, "most requests waiting for a slot");
  app.add_option("--responses-max", s.responses_max,
                 "responses of /v1/responses kept for previous_response_id (default 1000)");
  app.add_option("--responses-max-mb", s.responses_max_mb,
                 "MiB of responses of /v1/responses kept at most (default 256)");
  return [f]() { return serve_main(*f); };
}

}  // namespace mnemo::tools
