// libFuzzer target for the Jinja engine (include/mnemo/jinja.h): the input is a template (a
// GGUF's tokenizer.chat_template or an operator's file is outside input), parsed and, when it
// parses, rendered over a conversation with tools, under small limits.
//
// Invariants (checked with abort()): a refusal has a message; a render stays within its output
// limit; rendering twice gives the same result (no state leaks between renders). Crashes,
// hangs and sanitizer reports are libFuzzer's to find. Seed corpus: tests/fuzz/corpus/jinja/
// (the test templates of tests/fixtures/chat_templates/). Run: scripts/fuzz [SECONDS].
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "mnemo/jinja.h"

namespace {

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi é 日本"}]},
      {"role": "assistant", "content": null, "reasoning_content": "think",
       "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]},
      {"role": "tool", "content": "42", "tool_call_id": "abc"},
      {"role": "user", "content": "  and then? </think> {{ x }} "}
    ],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
               "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
    "enable_thinking": false, "numbers": [1, 2.5, -3, 1e300]
  })");
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  auto t = mnemo::jinja::Template::parse(source);
  if (!t.ok()) {
    if (t.status().message().empty()) abort();
    return 0;
  }
  mnemo::jinja::RenderOptions opt;
  opt.now_unix = 1772712000;
  opt.max_output_bytes = 1 << 20;
  opt.max_steps = 200000;
  auto a = t->render(context(), opt);
  if (!a.ok()) {
    if (a.status().message().empty()) abort();
  } else if (a->size() > opt.max_output_bytes) {
    abort();
  }
  auto b = t->render(context(), opt);
  if (a.ok() != b.ok() || (a.ok() && *a != *b)) abort();
  return 0;
}
