// `mnemo run`: generate text from a prompt, streaming tokens to stdout (llama-cli's flags).
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "base/utf8.h"
#include "kernels/kernels.h"
#include "mnemo/chat.h"
#include "tools/commands.h"
#include "tools/common.h"

namespace mnemo::tools {
namespace {

struct RunFlags {
  ModelFlags model;
  SamplingParams sampling;
  std::string prompt;
  std::string system;
  std::string chat_template;  // a family name or Jinja text overriding the model's template
  bool jinja = true;          // render the chat template with the Jinja engine
  int32_t n_predict = 128;
  bool chat = false;
  bool show_special = false;
};

// Prints UTF-8 bytes as they come; a piece can end inside a character, so bytes are held back
// until the character is complete (keeps terminals from showing replacement glyphs).
class Utf8Stream {
 public:
  void write(const std::string& piece) {
    pending_ += piece;
    size_t keep = utf8::incomplete_tail(pending_);
    std::fwrite(pending_.data(), 1, pending_.size() - keep, stdout);
    std::fflush(stdout);
    pending_.erase(0, pending_.size() - keep);
  }
  void flush() {
    std::fwrite(pending_.data(), 1, pending_.size(), stdout);
    std::fflush(stdout);
    pending_.clear();
  }

 private:
  std::string pending_;
};

int run_main(RunFlags& f) {
  if (Status st = f.model.resolve(); !st.ok()) return fail("mnemo run", st.message(), 2);
  if (Status st = f.sampling.validate(); !st.ok()) return fail("mnemo run", st.message(), 2);
  auto lm = load_model(f.model);
  if (!lm.ok()) return fail("mnemo run", lm.status().to_string(), 1);
  const Model& model = *lm->model;
  const Tokenizer& tok = *lm->tokenizer;
  report_loaded("mnemo run", *lm);

  if (f.model.ctx.n_ctx > model.hparams().n_ctx_train && model.hparams().n_ctx_train > 0) {
    fmt::print(stderr, "mnemo run: note: n_ctx {} exceeds the model's training context {}\n",
               f.model.ctx.n_ctx, model.hparams().n_ctx_train);
  }
  auto ctx_r = Context::create(model, f.model.ctx);
  if (!ctx_r.ok()) return fail("mnemo run", ctx_r.status().to_string(), 1);
  Context& ctx = **ctx_r;

  std::string text = f.prompt;
  if (f.chat) {
    nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
    if (!f.system.empty()) msgs.push_back({{"role", "system"}, {"content", f.system}});
    msgs.push_back({{"role", "user"}, {"content", f.prompt}});
    auto tmpl = ChatTemplate::choose(tok, f.chat_template, nullptr, f.jinja);
    if (!tmpl.ok()) {
      fmt::print(stderr, "mnemo run: --chat-template: {}\n", tmpl.status().message());
      return 2;
    }
    auto rendered = tmpl->render(msgs, nlohmann::ordered_json::object());
    if (!rendered.ok()) return fail("mnemo run", rendered.status().message(), 1);
    text = std::move(rendered).value();
  }
  std::vector<TokenId> prompt = tok.tokenize(text, /*add_special=*/true, /*parse_special=*/f.chat);
  if (prompt.empty()) return fail("mnemo run", "the prompt is empty", 2);
  const uint32_t n_ctx_seq = ctx.n_ctx_seq();
  if (prompt.size() + 1 > n_ctx_seq) {
    fmt::print(stderr, "mnemo run: prompt of {} tokens does not fit in n_ctx {}\n", prompt.size(),
               n_ctx_seq);
    return 1;
  }

  Sampler sampler(f.sampling);
  for (TokenId t : prompt) sampler.accept(t);

  // Prompt processing one forward pass (n_ubatch tokens, at most n_batch) per decode call: the
  // same ubatches decode() would cut from one big batch of this sequence, with a progress line
  // after each when the prompt takes more than one.
  const double t_pp0 = now_ms();
  const size_t chunk = std::min(ctx.params().n_batch, ctx.params().n_ubatch);
  const bool progress = prompt.size() > chunk;
  Batch batch;
  for (size_t i = 0; i < prompt.size(); i += chunk) {
    const size_t end = std::min(prompt.size(), i + chunk);
    batch.clear();
    for (size_t j = i; j < end; ++j) batch.add(prompt[j], Pos(j), {0}, j + 1 == prompt.size());
    if (Status st = ctx.decode(batch); !st.ok()) {
      fmt::print(stderr, "\nmnemo run: prompt decode failed: {}\n", st.to_string());
      return 1;
    }
    if (progress) fmt::print(stderr, "\rprompt: {}/{} tokens", end, prompt.size());
  }
  if (progress) fmt::print(stderr, "\n");
  const double t_pp = now_ms() - t_pp0;

  Utf8Stream out;
  if (!f.chat) out.write(f.prompt);
  const double t_tg0 = now_ms();
  int32_t n_gen = 0;
  Pos pos = Pos(prompt.size());
  std::span<const float> logits = ctx.logits(0);
  while (n_gen < f.n_predict && uint32_t(pos) < n_ctx_seq) {
    const TokenId next = sampler.sample(logits);
    sampler.accept(next);
    ++n_gen;
    if (tok.is_eog(next)) break;
    out.write(tok.token_to_piece(next, f.show_special));
    batch.clear();
    batch.add(next, pos++, {0}, true);
    if (Status st = ctx.decode(batch); !st.ok()) {
      fmt::print(stderr, "\nmnemo run: decode failed: {}\n", st.to_string());
      return 1;
    }
    logits = ctx.logits(0);
  }
  out.flush();
  const double t_tg = now_ms() - t_tg0;
  fmt::print("\n");
  fmt::print(stderr,
             "\nmnemo run: load {:.0f} ms | prompt {} tokens, {:.1f} ms, {:.2f} tok/s | "
             "generation {} tokens, {:.1f} ms, {:.2f} tok/s | {} threads, simd {}\n",
             lm->load_ms, prompt.size(), t_pp, prompt.size() * 1000.0 / t_pp, n_gen, t_tg,
             n_gen > 0 ? n_gen * 1000.0 / t_tg : 0.0, ctx.params().n_threads,
             kernels::simd_target());
  return 0;
}

}  // namespace

RunFn register_run(CLI::App& app) {
  auto f = std::make_shared<RunFlags>();
  f->sampling.temp = 0.8f;
  f->model.add_to(app, false);
  add_sampling_flags(app, &f->sampling);
  app.add_option("-p,--prompt", f->prompt, "prompt text")->required();
  app.add_option("-n,--n-predict", f->n_predict, "tokens to generate");
  app.add_flag("--chat", f->chat, "wrap the prompt in the model's chat template");
  app.add_option("--system", f->system, "system message (with --chat)");
  app.add_option("--chat-template", f->chat_template,
                 "chat template overriding the model's: chatml, llama3, gemma, or (with --jinja) "
                 "a Jinja template's text");
  app.add_flag("--jinja,!--no-jinja", f->jinja,
               "render the chat template with the Jinja engine (default on; off: the fixed "
               "format of its family)");
  app.add_flag("--special", f->show_special, "print special tokens");
  return [f]() { return run_main(*f); };
}

}  // namespace mnemo::tools
