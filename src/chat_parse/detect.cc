// Choosing a ChatFormat from a chat template's source, by the markers each family's template
// writes (as llama-server chooses its chat format; the rules and their order are ours).
#include <algorithm>
#include <initializer_list>

#include "chat_parse/chat_parse.h"

namespace mnemo::chat_parse {
namespace {

struct Rule {
  ChatFormat format;
  std::initializer_list<std::string_view> all;   // markers the source must hold
  std::initializer_list<std::string_view> none;  // markers it must not hold
};

// First match wins: more specific families come before the ones whose markers they share
// (Qwen3-Coder, GLM and Seed-OSS write <tool_call> too; R1 and V3.1 share their markers).
const Rule kRules[] = {
    {ChatFormat::kGptOss, {"<|channel|>"}, {}},
    {ChatFormat::kKimiK2, {"<|tool_calls_section_begin|>", "<|tool_call_begin|>"}, {}},
    {ChatFormat::kDeepSeekR1, {"<｜tool▁calls▁begin｜>", "```json"}, {}},
    {ChatFormat::kDeepSeekV31, {"<｜tool▁calls▁begin｜>"}, {}},
    {ChatFormat::kMistral, {"[TOOL_CALLS]", "[ARGS]"}, {}},
    {ChatFormat::kMistralNemo, {"[TOOL_CALLS]"}, {}},
    {ChatFormat::kCommandR7B, {"<|START_ACTION|>", "<|START_THINKING|>"}, {}},
    {ChatFormat::kGlm45, {"<arg_key>", "<arg_value>"}, {}},
    {ChatFormat::kSeedOss, {"<seed:tool_call>"}, {}},
    {ChatFormat::kMiniMaxM2, {"<minimax:tool_call>"}, {}},
    {ChatFormat::kQwen3Coder, {"<tool_call>", "<function=", "<parameter="}, {}},
    {ChatFormat::kGranite, {"<|tool_call|>"}, {}},
    {ChatFormat::kNemotronV2, {"<TOOLCALL>"}, {}},
    {ChatFormat::kApriel15, {"<tool_calls>[", "<thinking>"}, {}},
    {ChatFormat::kHermes, {"<tool_call>"}, {"<invoke name="}},
    {ChatFormat::kFirefunctionV2, {"functools["}, {}},
    {ChatFormat::kFunctionaryV31, {"<|start_header_id|>", "<function="}, {}},
    {ChatFormat::kLlama3, {"<|start_header_id|>ipython<|end_header_id|>"}, {}},
    {ChatFormat::kGenericThink, {"</think>"}, {}},
};

}  // namespace

ChatFormat detect_chat_format(std::string_view src) {
  auto has = [&](std::string_view m) { return src.find(m) != std::string_view::npos; };
  for (const Rule& r : kRules) {
    if (std::all_of(r.all.begin(), r.all.end(), has) &&
        std::none_of(r.none.begin(), r.none.end(), has)) {
      return r.format;
    }
  }
  return ChatFormat::kGeneric;
}

std::string_view chat_format_name(ChatFormat f) {
  switch (f) {
    case ChatFormat::kGeneric:
      return "generic";
    case ChatFormat::kGenericThink:
      return "generic-think";
    case ChatFormat::kHermes:
      return "hermes";
    case ChatFormat::kQwen3Coder:
      return "qwen3-coder";
    case ChatFormat::kSeedOss:
      return "seed-oss";
    case ChatFormat::kMiniMaxM2:
      return "minimax-m2";
    case ChatFormat::kGlm45:
      return "glm-4.5";
    case ChatFormat::kLlama3:
      return "llama-3";
    case ChatFormat::kFunctionaryV31:
      return "functionary-v3.1";
    case ChatFormat::kFirefunctionV2:
      return "firefunction-v2";
    case ChatFormat::kMistralNemo:
      return "mistral-nemo";
    case ChatFormat::kMistral:
      return "mistral";
    case ChatFormat::kDeepSeekR1:
      return "deepseek-r1";
    case ChatFormat::kDeepSeekV31:
      return "deepseek-v3.1";
    case ChatFormat::kGranite:
      return "granite";
    case ChatFormat::kKimiK2:
      return "kimi-k2";
    case ChatFormat::kCommandR7B:
      return "command-r7b";
    case ChatFormat::kApriel15:
      return "apriel-1.5";
    case ChatFormat::kNemotronV2:
      return "nemotron-v2";
    case ChatFormat::kGptOss:
      return "gpt-oss";
  }
  return "unknown";
}

}  // namespace mnemo::chat_parse
