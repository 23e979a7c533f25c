// libFuzzer target for the server's request parsers (src/server/api.h, slot_files.h): the first
// byte of an input picks a parser, the rest is what a client sent. Parsers: a JSON body
// (parse_json_body) then each endpoint's parser of it (/completion, /v1/completions,
// /v1/chat/completions: parse_completions, every prompt and choice; /cache/requantize,
// /tokenize, /detokenize), a slot file name, a Content-Length value and a /slots/{id} path
// segment.
//
// Invariants (checked with abort()): no exception but nlohmann's (which the HTTP front answers
// with a 400) leaves a parser; a refusal has a message; an accepted completion has a prompt of
// token ids inside the vocabulary that fits a slot; an accepted slot file name is a plain file in
// the slot directory, short enough for its temporary name; a request's grammar is run through
// the matcher and the vocabulary mask for a few steps, every masked-in token accepted. Seed
// corpus: tests/fuzz/corpus/http/. Run: scripts/fuzz [SECONDS].
#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "mnemo/chat.h"
#include "mnemo/grammar.h"
#include "mnemo/tokenizer.h"
#include "server/api.h"
#include "server/engine.h"
#include "server/slot_files.h"

namespace {

using namespace mnemo;
using namespace mnemo::server;

void require(bool cond) {
  if (!cond) std::abort();
}

// A small SentencePiece vocabulary: control tokens, letters, space, and the 256 byte pieces.
const Tokenizer& tokenizer() {
  static const Tokenizer tok = [] {
    VocabSpec v;
    v.model = "llama";
    v.tokens = {"<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"};
    v.token_types = {2, 3, 3, 3, 3};
    for (char c = 'a'; c <= 'z'; ++c) {
      v.tokens.push_back(std::string(1, c));
      v.token_types.push_back(1);
    }
    v.tokens.push_back("\xe2\x96\x81");  // the SentencePiece space
    v.token_types.push_back(1);
    for (int b = 0; b < 256; ++b) {
      v.tokens.push_back(fmt::format("<0x{:02X}>", b));
      v.token_types.push_back(6);
    }
    v.scores.assign(v.tokens.size(), 0.0f);
    auto t = Tokenizer::from_spec(v);
    require(t.ok());
    return std::move(t).value();
  }();
  return tok;
}

const ApiDefaults& defaults() {
  static const ApiDefaults d = [] {
    ApiDefaults a;
    a.n_slots = 4;
    a.n_ctx_seq = 256;
    a.tok = &tokenizer();
    a.model_name = "fuzz.gguf";
    for (TokenId id = 0; id < tokenizer().n_vocab(); ++id) {
      a.max_token_bytes = std::max(a.max_token_bytes, tokenizer().token_text(id).size());
    }
    return a;
  }();
  return d;
}

void check_completion(const Json& body, Api api) {
  static const ChatTemplate tmpl = ChatTemplate::from_family(ChatTemplateFamily::kChatml);
  std::vector<ParsedCompletion> all;
  const Status st = parse_completions(body, api, tokenizer(), tmpl, defaults(), &all);
  if (!st.ok()) {
    require(!st.message().empty());
    return;
  }
  require(!all.empty() && all.size() <= 64);
  for (size_t i = 0; i < all.size(); ++i) {
    const ParsedCompletion& c = all[i];
    require(c.index == int32_t(i) && c.copy_of < int32_t(i));
    require(!c.req.prompt.empty() && c.req.prompt.size() < defaults().n_ctx_seq);
    for (TokenId id : c.req.prompt) require(id >= 0 && id < tokenizer().n_vocab());
  }
  const ParsedCompletion& p = all.front();
  require(p.top_logprobs >= 0 && p.top_logprobs <= 20);
  // A grammar the request brought: the matcher and the vocabulary mask run on it (no crash, no
  // endless expansion), and every token the mask allows is one the matcher then accepts.
  if (p.req.grammar) {
    static const std::shared_ptr<const grammar::Vocab> vocab = [] {
      std::vector<std::string> pieces;
      for (TokenId id = 0; id < tokenizer().n_vocab(); ++id) {
        pieces.push_back(tokenizer().token_to_piece(id, /*special=*/false));
      }
      return std::make_shared<const grammar::Vocab>(pieces, tokenizer().eog_ids());
    }();
    grammar::Matcher m(p.req.grammar);
    std::vector<uint8_t> mask;
    for (int step = 0; step < 16; ++step) {
      vocab->allowed(m, &mask);
      int32_t pick = -1;
      for (size_t t = 0; t < mask.size(); ++t) {
        if (mask[t] && !vocab->is_eog(int32_t(t))) {
          pick = int32_t(t);
          if ((t + size_t(step)) % 3 == 0) break;
        }
      }
      if (pick < 0) break;
      for (uint32_t cp : vocab->code_points(pick)) require(m.accept(cp));
    }
  }
  // The response shapes of an accepted request serialize (never a throw on a client's text).
  CompletionResult r;
  r.tokens = {p.req.prompt.front()};
  r.text = "x";
  const ResponseIds ids = new_response_ids(api);
  require(!dump(completion_json(p, r, defaults(), ids)).empty());
}

void one(uint8_t which, std::string_view data) {
  switch (which % 9) {
    case 0:
    case 1:
    case 2:
    case 3:
    case 4:
    case 5: {
      Json body;
      const Status st = parse_json_body(data, &body);
      if (!st.ok()) {
        require(!st.message().empty());
        return;
      }
      const uint8_t k = which % 9;
      if (k <= 2) {
        check_completion(body, k == 0 ? Api::kLlama : k == 1 ? Api::kOaiCompletion : Api::kOaiChat);
      } else if (k == 3) {
        ControlRequest c;
        const Status s = parse_requantize(body, 4, &c);
        require(s.ok() ? c.slot >= -1 && c.slot < 4 : !s.message().empty());
      } else {
        Json out;
        const Status s = k == 4 ? tokenize_json(body, tokenizer(), &out)
                                : detokenize_json(body, tokenizer(), &out);
        require(s.ok() ? !dump(out).empty() : !s.message().empty());
      }
      return;
    }
    case 6: {
      const std::string dir = "/srv/mnemo-slots";
      auto path = slot_file_path(dir, data);
      if (!path.ok()) {
        require(!path.status().message().empty());
        require(path.status().message().find(dir) == std::string::npos);
        return;
      }
      require(path->compare(0, dir.size() + 1, dir + "/") == 0);
      const std::string name = path->substr(dir.size() + 1);
      require(!name.empty() && name.size() <= 240 && name.find('/') == std::string::npos);
      require(name != "." && name != "..");
      return;
    }
    case 7: {
      uint64_t n = 0;
      const Status st = parse_content_length(data, &n);
      require(st.ok() == (!data.empty() && data.size() <= 19 &&
                          data.find_first_not_of("0123456789") == std::string_view::npos));
      if (st.ok()) require(std::to_string(n).size() <= data.size());
      return;
    }
    case 8: {
      int32_t id = -1;
      const Status st = parse_slot_id(data, 4, &id);
      require(st.ok() ? id >= 0 && id < 4
                      : st.code() == StatusCode::kNotFound ||
                            st.code() == StatusCode::kInvalidArgument);
      return;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    one(data[0], rest);
  } catch (const Json::exception&) {
    // The HTTP front answers these with a 400 (http_front.cc, Front::wrap).
  }
  return 0;
}
