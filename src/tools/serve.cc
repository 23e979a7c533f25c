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
  CLI::Option* jinja_opt = nullptr;  // --jinja / --no-jinja: count() > 0 when given
  ServeFlags() {
    model.ctx.n_seq_max = 4;
    server.sampling.temp = 0.8f;
  }
};

// Registers every `mnemo serve` flag into `f` (the command's and the router's loader's).
void add_serve_flags(CLI::App& app, ServeFlags& f);

// Loads the model (and draft model) `f` names: what run_server and the router's loader do
// before serving. Errors name the flag or the file.
Result<server::LoadedServerModel> load_for_serve(ServeFlags& f, bool report) {
  MNEMO_RETURN_IF_ERROR(f.model.resolve());
  MNEMO_RETURN_IF_ERROR(f.server.sampling.validate());
  MNEMO_RETURN_IF_ERROR(f.spec.resolve());
  MNEMO_ASSIGN_OR_RETURN(LoadedModel lm, load_model(f.model));
  if (report) report_loaded("mnemo serve", lm);
  server::LoadedServerModel out;
  if (!f.spec.model_draft.empty()) {
    MNEMO_ASSIGN_OR_RETURN(LoadedModel draft, load_draft_model(f.model, f.spec.model_draft));
    if (report) report_loaded("mnemo serve", draft);
    out.draft = std::move(draft.model);
    out.draft_tok = std::move(draft.tokenizer);
  }
  out.model = std::move(lm.model);
  out.tok = std::move(lm.tokenizer);
  out.params = f.server;
  out.params.jinja_explicit = f.server.jinja && f.jinja_opt != nullptr && f.jinja_opt->count() > 0;
  out.params.draft_model = out.draft.get();
  out.params.draft_tokenizer = out.draft_tok.get();
  out.params.spec = f.spec.spec;
  out.params.model_path = f.model.model_path;
  out.params.ctx = f.model.ctx;
  return out;
}

// The router's loader: `args` parsed as `mnemo serve`'s flags (a later flag wins), then loaded.
Result<server::LoadedServerModel> load_router_model(const std::vector<std::string>& args) {
  CLI::App app{"mnemo serve (a router's model)"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  ServeFlags f;
  add_serve_flags(app, f);
  std::vector<std::string> argv_s = {"mnemo-serve"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  try {
    app.parse(int(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return Status::invalid_argument(std::string("its flags: ") + e.what());
  }
  return load_for_serve(f, /*report=*/true);
}

int serve_main(ServeFlags& f) {
  if (f.model.model_path.empty()) {
    if (f.server.models_dir.empty() && f.server.models_preset.empty()) {
      return fail("mnemo serve",
                  "give -m FILE, or --models-dir DIR / --models-preset FILE (router mode)", 2);
    }
    // Each model is loaded with the router's flags but those only the router reads.
    std::vector<std::string> base;
    const std::vector<std::string>& all = subcommand_args();
    for (size_t i = 0; i < all.size(); ++i) {
      const std::string& a = all[i];
      const bool with_value = a == "--models-dir" || a == "--models-preset" ||
                              a == "--models-max" || a == "--port" || a == "--host";
      const bool alone = a == "--models-autoload" || a == "--no-models-autoload";
      if (with_value) {
        ++i;
        continue;
      }
      if (alone || a.rfind("--models-", 0) == 0 || a.rfind("--port=", 0) == 0 ||
          a.rfind("--host=", 0) == 0) {
        continue;
      }
      base.push_back(a);
    }
    f.server.ctx = f.model.ctx;  // -t: the router's one compute pool
    Status st = server::run_router(f.server, std::move(base), load_router_model);
    if (!st.ok()) return fail("mnemo serve", st.to_string(), 1);
    return 0;
  }
  if (!f.server.media_path.empty()) {
    std::fprintf(stderr,
                 "mnemo serve: --media-path is ignored: mnemo has no vision or audio model (no "
                 "multimodal projector); requests with media parts get an error saying so\n");
  }
  auto loaded = load_for_serve(f, /*report=*/true);
  if (!loaded.ok()) {
    const bool flags = loaded.status().code() == StatusCode::kInvalidArgument;
    return fail("mnemo serve", flags ? loaded.status().message() : loaded.status().to_string(),
                flags ? 2 : 1);
  }
  Status st = server::run_server(*loaded->model, *loaded->tok, loaded->params);
  if (!st.ok()) return fail("mnemo serve", st.to_string(), 1);
  return 0;
}

}  // namespace

namespace {

void add_serve_flags(CLI::App& app, ServeFlags& f) {
  f.model.add_to(app, /*with_parallel=*/true, /*model_optional=*/true);
  f.spec.add_to(app);
  add_sampling_flags(app, &f.server.sampling);
  server::ServerParams& s = f.server;
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
  app.add_option("--media-path", s.media_path,
                 "accepted for llama-server's command lines: mnemo has no vision or audio model, "
                 "so media parts of requests are refused with an error saying so");
  app.add_flag("--webui,--ui,!--no-webui,!--no-ui", s.webui,
               "serve the web page at / (default on; off: / is a 404, the API stays)");
  app.add_option(
      "--chat-template", s.chat_template,
      "chat template instead of the model's: a built-in template's name (" +
          chat_template_names() +
          "); with Jinja (the default) any other text is a Jinja template, used as it stands "
          "even without markup (with --jinja given, a built-in name too, as llama-server); with "
          "--no-jinja a template text of one of those formats");
  app.add_option("--chat-template-file", s.chat_template_file,
                 "file holding a Jinja chat template to use instead of the model's");
  f.jinja_opt = app.add_flag("--jinja,!--no-jinja", s.jinja,
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
  app.add_option("--models-dir", s.models_dir,
                 "router mode (no -m): serve every GGUF file of DIR, named by file stem");
  app.add_option("--models-preset", s.models_preset,
                 "router mode: an INI file, one [NAME] section per model with 'model = PATH' and "
                 "the model's own flags (llama-server's models.ini)");
  app.add_option("--models-max", s.models_max,
                 "router mode: most models loaded at once (default 4; the least recently used "
                 "idle one is unloaded first)");
  app.add_flag("--models-autoload,!--no-models-autoload", s.models_autoload,
               "router mode: load a model on its first request (default on; off: POST "
               "/models/load first)");
}

}  // namespace

RunFn register_serve(CLI::App& app) {
  auto f = std::make_shared<ServeFlags>();
  add_serve_flags(app, *f);
  return [f]() { return serve_main(*f); };
}

namespace {
std::vector<std::string> g_subcommand_args;
}  // namespace

void set_subcommand_args(std::vector<std::string> args) { g_subcommand_args = std::move(args); }
const std::vector<std::string>& subcommand_args() { return g_subcommand_args; }


}  // namespace mnemo::tools
