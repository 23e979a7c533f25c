// `mnemo template`: renders a Jinja chat template with the engine the server uses
// (include/mnemo/jinja.h), to check a template or compare mnemo with another renderer.
//
//   mnemo template (--file T.jinja | --model FILE.gguf) --context CTX.json [--time SECONDS]
//
// CTX.json is a JSON object (the template's variables: messages, add_generation_prompt, ...),
// or a JSON array of such objects. For one object the rendered text is written to stdout as it
// is (no newline added), exit 1 with the error on stderr when rendering fails. For an array a
// JSON array comes out, one {"ok": true, "text": ...} or {"ok": false, "error": ...} per
// context. With --model the template is the file's tokenizer.chat_template and bos_token /
// eos_token default to the texts of its BOS / EOS tokens. Nothing is cut or added: this is the
// template's own output (the server then cuts a BOS the tokenizer adds; include/mnemo/chat.h).
// --time fixes strftime_now's clock (seconds since the epoch, UTC) for reproducible output.
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "mnemo/gguf.h"
#include "mnemo/jinja.h"
#include "mnemo/tokenizer.h"
#include "tools/commands.h"

namespace mnemo::tools {
namespace {

using Json = nlohmann::ordered_json;

struct TemplateFlags {
  std::string file;
  std::string model;
  std::string context;
  int64_t time = -1;
};

bool read_text(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  *out = s.str();
  return static_cast<bool>(in);
}

int template_main(const TemplateFlags& f) {
  std::string source, bos, eos;
  if (f.file.empty() == f.model.empty()) {
    fmt::print(stderr, "mnemo template: give exactly one of --file and --model\n");
    return 2;
  }
  if (!f.file.empty()) {
    if (!read_text(f.file, &source)) {
      fmt::print(stderr, "mnemo template: cannot read '{}'\n", f.file);
      return 1;
    }
  } else {
    auto file = gguf::File::open(f.model);
    if (!file.ok()) {
      fmt::print(stderr, "mnemo template: {}\n", file.status().to_string());
      return 1;
    }
    auto tok = Tokenizer::from_gguf(*file);
    if (!tok.ok()) {
      fmt::print(stderr, "mnemo template: {}\n", tok.status().to_string());
      return 1;
    }
    source = tok->chat_template();
    if (source.empty()) {
      fmt::print(stderr, "mnemo template: the model has no tokenizer.chat_template\n");
      return 1;
    }
    if (tok->bos() != kTokenNull) bos = tok->token_to_piece(tok->bos(), /*special=*/true);
    if (tok->eos() != kTokenNull) eos = tok->token_to_piece(tok->eos(), /*special=*/true);
  }
  std::string ctx_text;
  if (!read_text(f.context, &ctx_text)) {
    fmt::print(stderr, "mnemo template: cannot read '{}'\n", f.context);
    return 1;
  }
  const Json ctx = Json::parse(ctx_text, nullptr, /*allow_exceptions=*/false);
  if (!ctx.is_object() && !ctx.is_array()) {
    fmt::print(stderr, "mnemo template: the context must be a JSON object or array\n");
    return 2;
  }
  auto tmpl = jinja::Template::parse(source);
  if (!tmpl.ok()) {
    fmt::print(stderr, "mnemo template: {}\n", tmpl.status().message());
    return 1;
  }
  jinja::RenderOptions opt;
  opt.now_unix = f.time;
  auto render = [&](Json c) {
    if (c.is_object() && !f.model.empty()) {
      if (!c.contains("bos_token")) c["bos_token"] = bos;
      if (!c.contains("eos_token")) c["eos_token"] = eos;
    }
    return tmpl->render(c, opt);
  };
  if (ctx.is_object()) {
    auto out = render(ctx);
    if (!out.ok()) {
      fmt::print(stderr, "mnemo template: {}\n", out.status().message());
      return 1;
    }
    fwrite(out->data(), 1, out->size(), stdout);
    return 0;
  }
  Json results = Json::array();
  for (const Json& c : ctx) {
    auto out = render(c);
    results.push_back(out.ok() ? Json{{"ok", true}, {"text", *out}}
                               : Json{{"ok", false}, {"error", out.status().message()}});
  }
  const std::string text = results.dump(-1, ' ', false, Json::error_handler_t::replace);
  fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace

RunFn register_template(CLI::App& app) {
  auto f = std::make_shared<TemplateFlags>();
  app.add_option("--file", f->file, "a Jinja template file");
  app.add_option("--model", f->model, "a GGUF file: its tokenizer.chat_template");
  app.add_option("--context", f->context, "JSON file: the variables (an object, or an array)")
      ->required();
  app.add_option("--time", f->time, "strftime_now's clock, seconds since the epoch (UTC)");
  return [f]() { return template_main(*f); };
}

}  // namespace mnemo::tools
