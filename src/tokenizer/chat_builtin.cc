// llama.cpp's built-in chat template formats (the names llama-server accepts for
// --no-jinja --chat-template NAME), rendered by fixed code. Each format was learnt from what
// llama-server (llama.cpp build 11669) returns from /apply-template for the conversations in
// tests/fixtures/builtin_chat_templates.json, which chat_builtin_test.cc compares with.
// In the comments: {c} is a message's content as given, {t} the content trimmed of leading and
// trailing whitespace; "gen" is what add_generation_prompt appends.
#include <array>
#include <cctype>

#include "mnemo/chat.h"

namespace mnemo {

namespace {

using F = ChatTemplateFamily;

struct NamedFamily {
  F family;
  std::string_view name;
};

// In llama-server's --help order.
constexpr std::array<NamedFamily, 54> kFamilies = {{
    {F::kBailing, "bailing"},
    {F::kBailingThink, "bailing-think"},
    {F::kBailing2, "bailing2"},
    {F::kChatglm3, "chatglm3"},
    {F::kChatglm4, "chatglm4"},
    {F::kChatml, "chatml"},
    {F::kCommandR, "command-r"},
    {F::kDeepseek, "deepseek"},
    {F::kDeepseekOcr, "deepseek-ocr"},
    {F::kDeepseek2, "deepseek2"},
    {F::kDeepseek3, "deepseek3"},
    {F::kExaoneMoe, "exaone-moe"},
    {F::kExaone3, "exaone3"},
    {F::kExaone4, "exaone4"},
    {F::kFalcon3, "falcon3"},
    {F::kGemma, "gemma"},
    {F::kGigachat, "gigachat"},
    {F::kGlmedge, "glmedge"},
    {F::kGptOss, "gpt-oss"},
    {F::kGranite, "granite"},
    {F::kGranite40, "granite-4.0"},
    {F::kGranite41, "granite-4.1"},
    {F::kGrok2, "grok-2"},
    {F::kHunyuanDense, "hunyuan-dense"},
    {F::kHunyuanMoe, "hunyuan-moe"},
    {F::kHunyuanVl, "hunyuan-vl"},
    {F::kKimiK2, "kimi-k2"},
    {F::kLlama2, "llama2"},
    {F::kLlama2Sys, "llama2-sys"},
    {F::kLlama2SysBos, "llama2-sys-bos"},
    {F::kLlama2SysStrip, "llama2-sys-strip"},
    {F::kLlama3, "llama3"},
    {F::kLlama4, "llama4"},
    {F::kMegrez, "megrez"},
    {F::kMinicpm, "minicpm"},
    {F::kMistralV1, "mistral-v1"},
    {F::kMistralV3, "mistral-v3"},
    {F::kMistralV3Tekken, "mistral-v3-tekken"},
    {F::kMistralV7, "mistral-v7"},
    {F::kMistralV7Tekken, "mistral-v7-tekken"},
    {F::kMonarch, "monarch"},
    {F::kOpenchat, "openchat"},
    {F::kOrion, "orion"},
    {F::kPanguEmbedded, "pangu-embedded"},
    {F::kPhi3, "phi3"},
    {F::kPhi4, "phi4"},
    {F::kRwkvWorld, "rwkv-world"},
    {F::kSeedOss, "seed_oss"},
    {F::kSmolvlm, "smolvlm"},
    {F::kSolarOpen, "solar-open"},
    {F::kVicuna, "vicuna"},
    {F::kVicunaOrca, "vicuna-orca"},
    {F::kYandex, "yandex"},
    {F::kZephyr, "zephyr"},
}};

// Leading and trailing ASCII whitespace removed.
std::string trim(std::string_view s) {
  size_t a = 0;
  size_t b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return std::string(s.substr(a, b - a));
}

bool is_system(const ChatMessage& m) { return m.role == "system"; }
bool is_user(const ChatMessage& m) { return m.role == "user"; }
bool is_assistant(const ChatMessage& m) { return m.role == "assistant"; }

// "<open>{role}<mid>{c or t}<close>" per message, gen "<open>assistant<mid><gen_tail>".
std::string role_turns(const std::vector<ChatMessage>& msgs, bool gen, std::string_view open,
                       std::string_view mid, std::string_view close, bool trimmed,
                       std::string_view gen_tail = "") {
  std::string out;
  for (const ChatMessage& m : msgs) {
    out.append(open).append(m.role).append(mid);
    out += trimmed ? trim(m.content) : m.content;
    out.append(close);
  }
  if (gen) out.append(open).append("assistant").append(mid).append(gen_tail);
  return out;
}

// The [INST] formats of llama2 and mistral v1 / v3: a turn is opened by `open` ("<s>" before
// it, after the first turn, when `bos`) when a message comes and none is open; a system message
// writes `sys_open` + {c} + `sys_close` into it, a user message {c} + `user_close`, which leaves
// the turn open for what follows; any other message is a reply, `reply_lead` + {c} + "</s>",
// which closes the turn. Contents trimmed when `strip`; replies when `strip_reply`.
struct InstFormat {
  std::string_view open, sys_open, sys_close, user_close, reply_lead;
  bool bos = false, strip = false, strip_reply = false;
};

std::string inst_turns(const std::vector<ChatMessage>& msgs, const InstFormat& f) {
  std::string out;
  bool need_open = true;
  bool first = true;
  for (const ChatMessage& m : msgs) {
    if (need_open) {
      if (f.bos && !first) out += "<s>";
      out.append(f.open);
      need_open = false;
    }
    first = false;
    const std::string c = f.strip ? trim(m.content) : m.content;
    if (is_system(m)) {
      out.append(f.sys_open).append(c).append(f.sys_close);
    } else if (is_user(m)) {
      out.append(c).append(f.user_close);
    } else {
      out.append(f.reply_lead).append(f.strip_reply ? trim(m.content) : c).append("</s>");
      need_open = true;
    }
  }
  return out;
}

// "user" -> "User".
std::string capitalized(std::string_view role) {
  std::string out(role);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

// "tool" -> "TOOL".
std::string upper(std::string_view role) {
  std::string out(role);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::string_view chat_template_family_name(ChatTemplateFamily family) {
  for (const NamedFamily& n : kFamilies) {
    if (n.family == family) return n.name;
  }
  return "?";
}

std::vector<ChatTemplateFamily> chat_template_families() {
  std::vector<ChatTemplateFamily> out;
  for (const NamedFamily& n : kFamilies) out.push_back(n.family);
  return out;
}

std::string chat_template_names() {
  std::string out;
  for (const NamedFamily& n : kFamilies) {
    if (!out.empty()) out += ", ";
    out.append(n.name);
  }
  return out;
}

std::string render_chat_family(ChatTemplateFamily family, const std::vector<ChatMessage>& msgs,
                               bool gen) {
  std::string out;
  // Role names picked per message: system, user, assistant, other.
  auto pick = [](const ChatMessage& m, std::string_view sys, std::string_view user,
                 std::string_view asst, std::string_view other) {
    return std::string(is_system(m) ? sys : is_user(m) ? user : is_assistant(m) ? asst : other);
  };
  switch (family) {
    case F::kChatml:  // <|im_start|>{role}\n{c}<|im_end|>\n
      return role_turns(msgs, gen, "<|im_start|>", "\n", "<|im_end|>\n", false);
    case F::kLlama3:  // <|start_header_id|>{role}<|end_header_id|>\n\n{t}<|eot_id|>
      return role_turns(msgs, gen, "<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>",
                        true);
    case F::kLlama4:  // <|header_start|>{role}<|header_end|>\n\n{t}<|eot|>
      return role_turns(msgs, gen, "<|header_start|>", "<|header_end|>\n\n", "<|eot|>", true);
    case F::kGemma: {
      // <start_of_turn>{user|model}\n{t}<end_of_turn>\n; a system message's {t} + "\n\n" opens
      // the next user turn.
      std::string system;
      for (const ChatMessage& m : msgs) {
        if (is_system(m)) {
          system += trim(m.content);
          continue;
        }
        const std::string role = is_assistant(m) ? "model" : m.role;
        out += "<start_of_turn>" + role + "\n";
        if (!system.empty() && role != "model") {
          out += system + "\n\n";
          system.clear();
        }
        out += trim(m.content) + "<end_of_turn>\n";
      }
      if (gen) out += "<start_of_turn>model\n";
      return out;
    }
    case F::kPhi3:  // <|{role}|>\n{c}<|end|>\n
      return role_turns(msgs, gen, "<|", "|>\n", "<|end|>\n", false);
    case F::kZephyr:  // <|{role}|>\n{c}<|endoftext|>\n
      return role_turns(msgs, gen, "<|", "|>\n", "<|endoftext|>\n", false);
    case F::kFalcon3:  // <|{role}|>\n{c}\n
      return role_turns(msgs, gen, "<|", "|>\n", "\n", false);
    case F::kGlmedge:  // <|{role}|>\n{c}, gen <|assistant|>
      return role_turns(msgs, false, "<|", "|>\n", "", false) + (gen ? "<|assistant|>" : "");
    case F::kChatglm3:  // [gMASK]sop <|{role}|>\n {c}, gen <|assistant|>
      return "[gMASK]sop" + role_turns(msgs, false, "<|", "|>\n ", "", false) +
             (gen ? "<|assistant|>" : "");
    case F::kChatglm4:  // [gMASK]<sop> <|{role}|>\n{c}, gen <|assistant|>\n
      return "[gMASK]<sop>" + role_turns(msgs, gen, "<|", "|>\n", "", false);
    case F::kExaoneMoe:  // <|{role}|>\n{t}<|endofturn|>\n
      return role_turns(msgs, gen, "<|", "|>\n", "<|endofturn|>\n", true);
    case F::kMegrez:  // <|role_start|>{role}<|role_end|>{c}<|turn_end|>
      return role_turns(msgs, gen, "<|role_start|>", "<|role_end|>", "<|turn_end|>", false);
    case F::kGranite:
    case F::kGranite40:
    case F::kGranite41:  // <|start_of_role|>{role}<|end_of_role|>{c}<|end_of_text|>\n
      return role_turns(msgs, gen, "<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>\n",
                        false);
    case F::kPhi4:  // <|im_start|>{role}<|im_sep|>{c}<|im_end|>
      return role_turns(msgs, gen, "<|im_start|>", "<|im_sep|>", "<|im_end|>", false);
    case F::kSolarOpen:  // <|begin|>{role}<|content|>{c}<|end|>, gen <|begin|>assistant
      return role_turns(msgs, false, "<|begin|>", "<|content|>", "<|end|>", false) +
             (gen ? "<|begin|>assistant" : "");
    case F::kGptOss:  // <|start|>{role}<|message|>{c}<|end|> (<|return|> for assistant)
      for (const ChatMessage& m : msgs) {
        out += "<|start|>" + m.role + "<|message|>" + m.content +
               (is_assistant(m) ? "<|return|>" : "<|end|>");
      }
      if (gen) out += "<|start|>assistant";
      return out;
    case F::kKimiK2:  // <|im_{system|user|assistant}|>{role}<|im_middle|>{c}<|im_end|>
      for (const ChatMessage& m : msgs) {
        out += pick(m, "<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>") +
               m.role + "<|im_middle|>" + m.content + "<|im_end|>";
      }
      if (gen) out += "<|im_assistant|>assistant<|im_middle|>";
      return out;
    case F::kSeedOss:  // <seed:bos>{role}\n{c}<seed:eos> (assistant: {t})
      for (const ChatMessage& m : msgs) {
        out += "<seed:bos>" + m.role + "\n" + (is_assistant(m) ? trim(m.content) : m.content) +
               "<seed:eos>";
      }
      if (gen) out += "<seed:bos>assistant\n";
      return out;
    case F::kMonarch:  // {role}\n{c}</s>\n, each turn after the first opened by <s>
      for (size_t i = 0; i < msgs.size(); ++i) {
        out += (i > 0 ? "<s>" : "") + msgs[i].role + "\n" + msgs[i].content + "</s>\n";
      }
      if (gen) out += "<s>assistant\n";
      return out;
    case F::kCommandR:
      // <|START_OF_TURN_TOKEN|><|{SYSTEM|USER|CHATBOT}_TOKEN|>{t}<|END_OF_TURN_TOKEN|>
      // (other roles are left out)
      for (const ChatMessage& m : msgs) {
        if (!is_system(m) && !is_user(m) && !is_assistant(m)) continue;
        out += "<|START_OF_TURN_TOKEN|>" +
               pick(m, "<|SYSTEM_TOKEN|>", "<|USER_TOKEN|>", "<|CHATBOT_TOKEN|>", "") +
               trim(m.content) + "<|END_OF_TURN_TOKEN|>";
      }
      if (gen) out += "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>";
      return out;
    case F::kBailing:
    case F::kBailingThink:
    case F::kBailing2: {
      // <role>{SYSTEM|HUMAN|ASSISTANT|other role in capitals}</role>{c}, bailing2 closes each with
      // <|role_end|> and starts with a fixed system message when the conversation has none.
      const std::string end = family == F::kBailing2 ? "<|role_end|>" : "";
      if (family == F::kBailing2 && (msgs.empty() || !is_system(msgs[0]))) {
        out += "<role>SYSTEM</role>detailed thinking off" + end;
      }
      for (const ChatMessage& m : msgs) {
        out += "<role>" + pick(m, "SYSTEM", "HUMAN", "ASSISTANT", upper(m.role)) + "</role>" +
               m.content + end;
      }
      if (gen) out += "<role>ASSISTANT</role>";
      if (gen && family == F::kBailingThink) out += "<think>";
      return out;
    }
    case F::kExaone3:
    case F::kExaone4:
      // [|system|]{t}[|endofturn|]\n, [|user|]{t}\n, [|assistant|]{t}[|endofturn|]\n; other
      // roles like assistant (exaone4) or left out (exaone3)
      for (const ChatMessage& m : msgs) {
        if (family == F::kExaone3 && !is_system(m) && !is_user(m) && !is_assistant(m)) continue;
        if (is_user(m)) {
          out += "[|user|]" + trim(m.content) + "\n";
        } else {
          out += "[|" + m.role + "|]" + trim(m.content) + "[|endofturn|]\n";
        }
      }
      if (gen) out += "[|assistant|]";
      return out;
    case F::kDeepseek:
      // {c}, ### Instruction:\n{c}\n, ### Response:\n{c}\n<|EOT|>\n; gen ### Response:\n
      for (const ChatMessage& m : msgs) {
        if (!is_system(m) && !is_user(m) && !is_assistant(m)) continue;  // other roles left out
        if (is_system(m)) {
          out += m.content;
        } else if (is_assistant(m)) {
          out += "### Response:\n" + m.content + "\n<|EOT|>\n";
        } else {
          out += "### Instruction:\n" + m.content + "\n";
        }
      }
      if (gen) out += "### Response:\n";
      return out;
    case F::kDeepseekOcr:  // the contents, one after the other
      for (const ChatMessage& m : msgs) out += m.content;
      return out;
    case F::kDeepseek2:  // {c}\n\n, User: {c}\n\n, Assistant: {c}<｜end▁of▁sentence｜>
      for (const ChatMessage& m : msgs) {
        if (!is_system(m) && !is_user(m) && !is_assistant(m)) continue;  // other roles left out
        if (is_system(m)) {
          out += m.content + "\n\n";
        } else if (is_assistant(m)) {
          out += "Assistant: " + m.content + "<｜end▁of▁sentence｜>";
        } else {
          out += "User: " + m.content + "\n\n";
        }
      }
      if (gen) out += "Assistant:";
      return out;
    case F::kDeepseek3:  // {c}\n\n, <｜User｜>{c}, <｜Assistant｜>{c}<｜end▁of▁sentence｜>
      for (const ChatMessage& m : msgs) {
        if (!is_system(m) && !is_user(m) && !is_assistant(m)) continue;  // other roles left out
        if (is_system(m)) {
          out += m.content + "\n\n";
        } else if (is_assistant(m)) {
          out += "<｜Assistant｜>" + m.content + "<｜end▁of▁sentence｜>";
        } else {
          out += "<｜User｜>" + m.content;
        }
      }
      if (gen) out += "<｜Assistant｜>";
      return out;
    case F::kGigachat:
      // <s>; system {c}<|message_sep|>; user user<|role_sep|>{c}<|message_sep|>available
      // functions<|role_sep|>[]<|message_sep|>; assistant assistant<|role_sep|>{c}<|message_sep|>
      // (a system message only as the first message; other roles left out)
      out += "<s>";
      for (size_t i = 0; i < msgs.size(); ++i) {
        const ChatMessage& m = msgs[i];
        if (is_system(m)) {
          if (i == 0) out += m.content + "<|message_sep|>";
        } else if (is_assistant(m)) {
          out += "assistant<|role_sep|>" + m.content + "<|message_sep|>";
        } else if (is_user(m)) {
          out += "user<|role_sep|>" + m.content +
                 "<|message_sep|>available functions<|role_sep|>[]<|message_sep|>";
        }
      }
      if (gen) out += "assistant<|role_sep|>";
      return out;
    case F::kGrok2:  // System: {t} / Human: {t} / Assistant: {c}, each + <|separator|>\n\n
      for (const ChatMessage& m : msgs) {
        if (!is_system(m) && !is_user(m) && !is_assistant(m)) continue;  // other roles left out
        if (is_system(m)) {
          out += "System: " + trim(m.content);
        } else if (is_assistant(m)) {
          out += "Assistant: " + m.content;
        } else {
          out += "Human: " + trim(m.content);
        }
        out += "<|separator|>\n\n";
      }
      if (gen) out += "Assistant:";
      return out;
    case F::kHunyuanDense:
      // {c}<｜hy_place▁holder▁no▁3｜>, <｜hy_User｜>{c}<｜hy_Assistant｜>,
      // <｜hy_Assistant｜>{c}<｜hy_place▁holder▁no▁2｜>; nothing more for gen; a system message
      // only as the first message, other roles left out
      for (size_t i = 0; i < msgs.size(); ++i) {
        const ChatMessage& m = msgs[i];
        if (is_system(m)) {
          if (i == 0) out += m.content + "<｜hy_place▁holder▁no▁3｜>";
        } else if (is_assistant(m)) {
          out += "<｜hy_Assistant｜>" + m.content + "<｜hy_place▁holder▁no▁2｜>";
        } else if (is_user(m)) {
          out += "<｜hy_User｜>" + m.content + "<｜hy_Assistant｜>";
        }
      }
      return out;
    case F::kHunyuanMoe:
      // <|startoftext|>{c}<|extra_4|>, <|startoftext|>{c}<|extra_0|> (user and other roles),
      // {c}<|eos|>
      for (const ChatMessage& m : msgs) {
        if (is_system(m)) {
          out += "<|startoftext|>" + m.content + "<|extra_4|>";
        } else if (is_assistant(m)) {
          out += m.content + "<|eos|>";
        } else {
          out += "<|startoftext|>" + m.content + "<|extra_0|>";
        }
      }
      return out;
    case F::kHunyuanVl:
      // <｜hy_begin▁of▁sentence｜>, then {c} closed by <｜hy_place▁holder▁no▁3｜> (system),
      // <｜hy_User｜> (user), <｜hy_Assistant｜> (assistant); a system message only as the first
      // message, other roles left out
      out += "<｜hy_begin▁of▁sentence｜>";
      for (size_t i = 0; i < msgs.size(); ++i) {
        const ChatMessage& m = msgs[i];
        if (is_system(m) && i == 0) {
          out += m.content + "<｜hy_place▁holder▁no▁3｜>";
        } else if (is_user(m)) {
          out += m.content + "<｜hy_User｜>";
        } else if (is_assistant(m)) {
          out += m.content + "<｜hy_Assistant｜>";
        }
      }
      return out;
    // [INST] formats; see inst_turns.
    case F::kLlama2:
      return inst_turns(msgs, {"[INST] ", "", "\n", " [/INST]", ""});
    case F::kLlama2Sys:
      return inst_turns(msgs, {"[INST] ", "<<SYS>>\n", "\n<</SYS>>\n\n", " [/INST]", ""});
    case F::kLlama2SysBos:
      return inst_turns(msgs, {"[INST] ", "<<SYS>>\n", "\n<</SYS>>\n\n", " [/INST]", "", true});
    case F::kLlama2SysStrip:
      return inst_turns(msgs,
                        {"[INST] ", "<<SYS>>\n", "\n<</SYS>>\n\n", " [/INST]", "", false, true});
    case F::kMistralV1:
      return inst_turns(msgs, {" [INST] ", "", "\n\n", " [/INST]", " "});
    case F::kMistralV3:
      return inst_turns(msgs, {"[INST] ", "", "\n\n", "[/INST]", " ", false, false, true});
    case F::kMistralV3Tekken:
      return inst_turns(msgs, {"[INST]", "", "\n\n", "[/INST]", ""});
    case F::kMistralV7:
    case F::kMistralV7Tekken: {
      // [SYSTEM_PROMPT]{c}[/SYSTEM_PROMPT], [INST]{c}[/INST], any other message {c}</s>; v7 puts
      // a space after the openings and before a reply.
      const std::string sp = family == F::kMistralV7 ? " " : "";
      for (const ChatMessage& m : msgs) {
        if (is_system(m)) {
          out += "[SYSTEM_PROMPT]" + sp + m.content + "[/SYSTEM_PROMPT]";
        } else if (is_user(m)) {
          out += "[INST]" + sp + m.content + "[/INST]";
        } else {
          out += sp + m.content + "</s>";
        }
      }
      return out;
    }
    case F::kMinicpm:  // {t}, <用户>{t}<AI>, {t}
      for (const ChatMessage& m : msgs) {
        out += is_user(m) ? "<用户>" + trim(m.content) + "<AI>" : trim(m.content);
      }
      return out;
    case F::kOpenchat:
      // {c}<|end_of_turn|> (system), GPT4 Correct {Role}: {c}<|end_of_turn|>
      for (const ChatMessage& m : msgs) {
        if (!is_system(m)) out += "GPT4 Correct " + capitalized(m.role) + ": ";
        out += m.content + "<|end_of_turn|>";
      }
      if (gen) out += "GPT4 Correct Assistant:";
      return out;
    case F::kOrion: {
      // Human: {system}\n\n{c}\n\nAssistant: </s> (user), {c}</s> (any other role)
      std::string system;
      for (const ChatMessage& m : msgs) {
        if (is_system(m)) {
          system += m.content + "\n\n";
        } else if (!is_user(m)) {
          out += m.content + "</s>";
        } else {
          out += "Human: " + system + m.content + "\n\nAssistant: </s>";
          system.clear();
        }
      }
      return out;
    }
    case F::kPanguEmbedded:
      // [unused9]{系统|用户|助手}：{c}[unused10], an empty system turn when there is none
      if (msgs.empty() || !is_system(msgs[0])) out += "[unused9]系统：[unused10]";
      for (const ChatMessage& m : msgs) {
        out +=
            "[unused9]" + pick(m, "系统", "用户", "助手", "工具") + "：" + m.content + "[unused10]";
      }
      if (gen) out += "[unused9]助手：";
      return out;
    case F::kRwkvWorld:  // System: / User: / Assistant: {t}\n\n (other roles left out)
      for (const ChatMessage& m : msgs) {
        if (!is_system(m) && !is_user(m) && !is_assistant(m)) continue;
        out += pick(m, "System: ", "User: ", "Assistant: ", "") + trim(m.content) + "\n\n";
      }
      if (gen) out += "Assistant:";
      return out;
    case F::kSmolvlm:
      // <|im_start|>; {c}\n\n (system), User: {c}<end_of_utterance>\n (user), Assistant:
      // {c}<end_of_utterance>\n (any other role)
      out += "<|im_start|>";
      for (const ChatMessage& m : msgs) {
        if (is_system(m)) {
          out += m.content + "\n\n";
        } else {
          out += (is_user(m) ? "User: " : "Assistant: ") + m.content + "<end_of_utterance>\n";
        }
      }
      if (gen) out += "Assistant:";
      return out;
    case F::kVicuna:
    case F::kVicunaOrca:
      // {c}\n\n (vicuna) or SYSTEM: {c}\n (orca); USER: {c}\n; ASSISTANT: {c}</s>\n; other
      // roles left out
      for (const ChatMessage& m : msgs) {
        if (is_system(m)) {
          out += family == F::kVicuna ? m.content + "\n\n" : "SYSTEM: " + m.content + "\n";
        } else if (is_assistant(m)) {
          out += "ASSISTANT: " + m.content + "</s>\n";
        } else if (is_user(m)) {
          out += "USER: " + m.content + "\n";
        }
      }
      if (gen) out += "ASSISTANT:";
      return out;
    case F::kYandex:
      // only user and assistant messages:  Пользователь: {c}\n\n /  Ассистент: {c}\n\n; gen
      //  Ассистент:[SEP]
      for (const ChatMessage& m : msgs) {
        if (!is_user(m) && !is_assistant(m)) continue;
        out += (is_assistant(m) ? " Ассистент: " : " Пользователь: ") + m.content + "\n\n";
      }
      if (gen) out += " Ассистент:[SEP]";
      return out;
  }
  return out;
}

}  // namespace mnemo
