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

FormatMarkers format_markers(ChatFormat f) {
  const ThinkTags tags = think_tags(f);
  FormatMarkers m;
  m.think_open = tags.open;
  m.think_close = tags.close;
  auto add = [&](std::initializer_list<const char*> xs) {
    for (const char* x : xs) m.markup.emplace_back(x);
  };
  if (!tags.open.empty()) add({m.think_open.c_str(), m.think_close.c_str()});
  switch (f) {
    case ChatFormat::kHermes:
    case ChatFormat::kQwen3Coder:
      add({"<tool_call>", "</tool_call>"});
      break;
    case ChatFormat::kSeedOss:
      add({"<seed:tool_call>", "</seed:tool_call>"});
      break;
    case ChatFormat::kMiniMaxM2:
      add({"<minimax:tool_call>", "</minimax:tool_call>"});
      break;
    case ChatFormat::kGlm45:
      add({"<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
           "</arg_value>"});
      break;
    case ChatFormat::kLlama3:
    case ChatFormat::kFunctionaryV31:
      add({"<|python_tag|>"});
      break;
    case ChatFormat::kMistralNemo:
      add({"[TOOL_CALLS]"});
      break;
    case ChatFormat::kMistral:
      add({"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"});
      break;
    case ChatFormat::kDeepSeekR1:
    case ChatFormat::kDeepSeekV31:
      add({"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
           "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"});
      break;
    case ChatFormat::kGranite:
      add({"<|tool_call|>", "<response>", "</response>"});
      break;
    case ChatFormat::kKimiK2:
      add({"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
           "<|tool_call_argument_begin|>", "<|tool_call_end|>"});
      break;
    case ChatFormat::kCommandR7B:
      add({"<|START_ACTION|>", "<|END_ACTION|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>",
           "<|START_TEXT|>", "<|END_TEXT|>"});
      break;
    case ChatFormat::kApriel15:
      add({"<tool_calls>", "</tool_calls>"});
      break;
    case ChatFormat::kNemotronV2:
      add({"<TOOLCALL>", "</TOOLCALL>"});
      break;
    case ChatFormat::kGptOss:
      add({"<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|constrain|>", "<|call|>",
           "<|return|>"});
      break;
    default:
      break;
  }
  return m;
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
