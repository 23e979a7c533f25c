// `mnemo run`: generate text from a prompt, streaming tokens to stdout (llama-cli's flags).
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "base/utf8.h"
#include "kernels/kernels.h"
#include "mnemo/chat.h"
#include "mnemo/speculative.h"
#include "tools/commands.h"
#include "tools/common.h"

namespace mnemo::tools {
namespace {

struct RunFlags {
  ModelFlags model;
  SpecFlags spec;
  SamplingParams sampling;
  std::string prompt;
  std::string system;
  std::string chat_template;  // a family name or Jinja text overriding the model's template
  bool jinja = true;          // render the chat template with the Jinja engine
  CLI::Option* jinja_opt = nullptr;  // --jinja / --no-jinja: count() > 0 when given
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
  if (Status st = f.spec.resolve(); !st.ok()) return fail("mnemo run", st.message(), 2);
  // Recurrent memories keep the state after each drafted token, so a rejected tail is a copy.
  if (f.spec.enabled()) f.model.ctx.rs_n_spec = f.spec.spec.draft_max;
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
  LoadedModel draft_lm;
  std::unique_ptr<DraftModel> drafter;
  if (!f.spec.model_draft.empty()) {
    auto d = load_draft_model(f.model, f.spec.model_draft);
    if (!d.ok()) return fail("mnemo run", d.status().message(), 1);
    draft_lm = std::move(d).value();
    auto dm = DraftModel::create(*draft_lm.model, *draft_lm.tokenizer, tok, f.model.ctx,
                                 f.spec.spec.draft_vocab);
    if (!dm.ok()) return fail("mnemo run", "--model-draft: " + dm.status().to_string(), 1);
    drafter = std::move(dm).value();
  }

  std::string text = f.prompt;
  if (f.chat) {
    nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
    if (!f.system.empty()) msgs.push_back({{"role", "system"}, {"content", f.system}});
    msgs.push_back({{"role", "user"}, {"content", f.prompt}});
    auto tmpl = ChatTemplate::choose(tok, f.chat_template, nullptr, f.jinja,
                                     f.jinja && f.jinja_opt->count() > 0);
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
  uint64_t n_drafted = 0, n_accepted = 0;
  Pos pos = Pos(prompt.size());
  std::vector<TokenId> history = prompt;  // every token of the sequence, the next one included
  DraftLength draft_len(f.spec.spec.draft_max);
  // The first token comes from the prompt's logits; each step then decodes `next` (sampled, not
  // yet decoded) at `pos`, followed by the drafted tokens when speculating, and samples from
  // every row in order while the samples agree with the draft (include/mnemo/speculative.h).
  if (f.n_predict > 0 && uint32_t(pos) < n_ctx_seq) {
    TokenId next = sampler.sample(ctx.logits(0));
    sampler.accept(next);
    ++n_gen;
    history.push_back(next);
    while (!tok.is_eog(next)) {
      out.write(tok.token_to_piece(next, f.show_special));
      if (n_gen >= f.n_predict || uint32_t(pos) + 1 >= n_ctx_seq) break;
      std::vector<TokenId> draft;
      float draft_cost = 0.0f;  // target steps per drafted token (prompt lookup: free)
      if (f.spec.enabled()) {
        // Room: row k samples the token at pos + k + 1, which must be generated (n_predict)
        // and fit (n_ctx), as plain decoding's limits say.
        // A verify batch stays one ubatch: a sliding-window cache's rollback needs that.
        const uint32_t room =
            std::min<uint32_t>({uint32_t(f.n_predict - n_gen) - 1, n_ctx_seq - uint32_t(pos) - 2,
                                ctx.params().n_ubatch - 1});
        const uint32_t want = std::min(draft_len.next(), room);
        if (want > 0 && f.spec.spec.ngram) {
          draft = ngram_draft(history, f.spec.spec.ngram_size_n, want);
        }
        if (want > 0 && draft.empty() && drafter) {
          auto d = drafter->draft(0, history, want, f.spec.spec.draft_p_min);
          if (!d.ok()) {
            fmt::print(stderr, "\nmnemo run: draft model failed: {}\n", d.status().to_string());
            return 1;
          }
          draft = std::move(d).value();
          draft_cost = float(drafter->n_decodes()) * drafter->cost(model);
        }
        if (draft.size() < f.spec.spec.draft_min) draft.clear();
        if (draft.empty()) draft_len.update(0, 0, draft_cost);
      }
      batch.clear();
      batch.add(next, pos, {0}, true);
      for (size_t i = 0; i < draft.size(); ++i) batch.add(draft[i], pos + Pos(i + 1), {0}, true);
      if (Status st = ctx.decode(batch); !st.ok()) {
        fmt::print(stderr, "\nmnemo run: decode failed: {}\n", st.to_string());
        return 1;
      }
      uint32_t accepted = 0;
      for (uint32_t i = 0;; ++i) {
        next = sampler.sample(ctx.logits(i));
        sampler.accept(next);
        ++n_gen;
        history.push_back(next);
        if (i == draft.size() || next != draft[i] || tok.is_eog(next) || n_gen >= f.n_predict) {
          break;
        }
        out.write(tok.token_to_piece(next, f.show_special));
        ++accepted;
      }
      n_drafted += draft.size();
      n_accepted += accepted;
      if (!draft.empty()) {
        draft_len.update(static_cast<uint32_t>(draft.size()), accepted, draft_cost);
      }
      // Rows past the last accepted draft token are removed (recurrent memories: a copy of the
      // state kept after that row).
      pos += Pos(accepted) + 1;
      if (accepted < draft.size()) {
        if (Status st = ctx.memory().seq_rm(0, pos, -1); !st.ok()) {
          fmt::print(stderr, "\nmnemo run: rollback failed: {}\n", st.to_string());
          return 1;
        }
      }
    }
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
  if (f.spec.enabled()) {
    fmt::print(stderr, "mnemo run: speculative: draft_n {} draft_n_accepted {} ({:.1f} %)\n",
               n_drafted, n_accepted, n_drafted > 0 ? 100.0 * n_accepted / n_drafted : 0.0);
  }
  return 0;
}

}  // namespace

RunFn register_run(CLI::App& app) {
  auto f = std::make_shared<RunFlags>();
  f->sampling.temp = 0.8f;
  f->model.add_to(app, false);
  f->spec.add_to(app);
  add_sampling_flags(app, &f->sampling);
  app.add_option("-p,--prompt", f->prompt, "prompt text")->required();
  app.add_option("-n,--n-predict", f->n_predict, "tokens to generate");
  app.add_flag("--chat", f->chat, "wrap the prompt in the model's chat template");
  app.add_option("--system", f->system, "system message (with --chat)");
  app.add_option(
      "--chat-template", f->chat_template,
      "chat template overriding the model's: a built-in template's name (" +
          chat_template_names() +
          "); with Jinja (the default) any other text is a Jinja template, used as it stands "
          "even without markup (with --jinja given, a built-in name too, as llama-server); with "
          "--no-jinja a template text of one of those formats");
  f->jinja_opt = app.add_flag("--jinja,!--no-jinja", f->jinja,
               "render the chat template with the Jinja engine (default on; off: the fixed "
               "format of its family)");
  app.add_flag("--special", f->show_special, "print special tokens");
  return [f]() { return run_main(*f); };
}

}  // namespace mnemo::tools
