// parse_chat_output: the reasoning split, then the format family's parser, then the small-model
// fallback (contracts in chat_parse.h; the shared steps in engine.h).
#include "chat_parse/engine.h"

namespace mnemo::chat_parse {

ThinkTags think_tags(ChatFormat f) {
  switch (f) {
    case ChatFormat::kSeedOss:
      return {"<seed:think>", "</seed:think>"};
    case ChatFormat::kMistral:
      return {"[THINK]", "[/THINK]"};
    case ChatFormat::kCommandR7B:
      return {"<|START_THINKING|>", "<|END_THINKING|>"};
    case ChatFormat::kApriel15:
      return {"<thinking>", "</thinking>"};
    case ChatFormat::kGeneric:
    case ChatFormat::kLlama3:
    case ChatFormat::kFunctionaryV31:
    case ChatFormat::kFirefunctionV2:
    case ChatFormat::kMistralNemo:
    case ChatFormat::kGptOss:
      return {};
    default:
      return {"<think>", "</think>"};
  }
}

bool prompt_opens_thinking(ChatFormat format, std::string_view prompt) {
  const ThinkTags tags = think_tags(format);
  if (tags.open.empty()) return false;
  while (!prompt.empty() && (prompt.back() == ' ' || prompt.back() == '\n' ||
                             prompt.back() == '\t' || prompt.back() == '\r')) {
    prompt.remove_suffix(1);
  }
  return prompt.ends_with(tags.open);
}

ChatMsg parse_chat_output(std::string_view text, const ParseOptions& opt) {
  Ctx ctx(text, opt);
  ChatMsg msg;
  if (opt.format == ChatFormat::kGptOss) {
    msg = parse_gpt_oss(ctx);
  } else {
    const size_t pos = split_reasoning(ctx, 0, think_tags(opt.format));
    switch (opt.format) {
      case ChatFormat::kGeneric:
      case ChatFormat::kGenericThink:
        parse_generic(ctx, pos);
        break;
      case ChatFormat::kHermes:
      case ChatFormat::kGranite:
      case ChatFormat::kFirefunctionV2:
      case ChatFormat::kApriel15:
      case ChatFormat::kNemotronV2:
      case ChatFormat::kCommandR7B:
        parse_json_family(ctx, pos);
        break;
      case ChatFormat::kMistral:
      case ChatFormat::kMistralNemo:
      case ChatFormat::kDeepSeekR1:
      case ChatFormat::kDeepSeekV31:
      case ChatFormat::kKimiK2:
      case ChatFormat::kFunctionaryV31:
        parse_tagged_family(ctx, pos);
        break;
      case ChatFormat::kQwen3Coder:
      case ChatFormat::kSeedOss:
      case ChatFormat::kMiniMaxM2:
      case ChatFormat::kGlm45:
        parse_xml_family(ctx, pos);
        break;
      case ChatFormat::kLlama3:
        parse_llama3(ctx, pos);
        break;
      case ChatFormat::kGptOss:
        break;
    }
    msg = finish(ctx);
  }
  if (opt.bare_json_calls && opt.parse_tool_calls && opt.format != ChatFormat::kGptOss) {
    apply_bare_json_fallback(opt, &msg);
  }
  return msg;
}

}  // namespace mnemo::chat_parse
