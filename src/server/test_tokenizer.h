// A tiny synthetic tokenizer for the server's unit tests (server_test.cc, api_anthropic_test.cc):
// no model file needed to parse request bodies into prompts.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "mnemo/tokenizer.h"

namespace mnemo::server {

/// An SPM vocabulary of <unk>, <s>, </s>, the letters a-z, '▁' and the 256 byte tokens: any text
/// tokenizes (what is not a letter or a space by byte fallback). A byte-level BPE vocabulary
/// would be overkill for prompts.
inline Tokenizer tiny_tokenizer() {
  VocabSpec v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.token_types = {2, 3, 3};
  for (char c = 'a'; c <= 'z'; ++c) {
    v.tokens.push_back(std::string(1, c));
    v.token_types.push_back(1);
  }
  v.tokens.push_back("\xe2\x96\x81");  // '▁'
  v.token_types.push_back(1);
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(fmt::format("<0x{:02X}>", b));
    v.token_types.push_back(6);
  }
  v.scores.assign(v.tokens.size(), 0.0f);
  auto t = Tokenizer::from_spec(v);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return std::move(t).value();
}

}  // namespace mnemo::server
