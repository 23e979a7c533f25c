// Chat template detection and rendering (mnemo/chat.h), against hand-written expected prompts.
// (The chatml rendering is also compared with Jinja2 running the model's own template in
// tests/python/test_chat_template.py.)
#include "mnemo/chat.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mnemo {
namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "  Be brief.\n"},
    {"user", "Hi there! "},
    {"assistant", "\nHello.\n"},
    {"user", "What is 2+2?"},
};

TEST(ChatTemplate, DetectsFamilies) {
  EXPECT_EQ(ChatTemplate::detect("{{ '<|im_start|>' + role }}").family(),
            ChatTemplateFamily::kChatml);
  EXPECT_EQ(ChatTemplate::detect("{{ bos_token }}<start_of_turn>user").family(),
            ChatTemplateFamily::kGemma);
  EXPECT_EQ(ChatTemplate::detect("<|start_header_id|>{{ role }}<|end_header_id|>").family(),
            ChatTemplateFamily::kLlama3);
  EXPECT_TRUE(ChatTemplate::detect("<start_of_turn>").recognized());
  // Names work too.
  EXPECT_EQ(ChatTemplate::detect("llama3").family(), ChatTemplateFamily::kLlama3);
  EXPECT_EQ(ChatTemplate::from_name("gemma").value().family(), ChatTemplateFamily::kGemma);
  EXPECT_EQ(ChatTemplate::from_name("vicuna").status().code(), StatusCode::kInvalidArgument);
}

TEST(ChatTemplate, UnknownOrMissingFallsBackToChatml) {
  const ChatTemplate none = ChatTemplate::detect("");
  EXPECT_FALSE(none.recognized());
  EXPECT_EQ(none.family(), ChatTemplateFamily::kChatml);
  const ChatTemplate odd = ChatTemplate::detect("### Human: {{ content }}");
  EXPECT_FALSE(odd.recognized());
  EXPECT_EQ(odd.apply({{"user", "x"}}, true),
            "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, Gemma) {
  const ChatTemplate t = ChatTemplate::from_family(ChatTemplateFamily::kGemma);
  EXPECT_EQ(t.apply(kConversation, true),
            "<start_of_turn>user\nBe brief.\n\nHi there!<end_of_turn>\n"
            "<start_of_turn>model\nHello.<end_of_turn>\n"
            "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n"
            "<start_of_turn>model\n");
  EXPECT_EQ(t.apply({{"user", "a"}}, false), "<start_of_turn>user\na<end_of_turn>\n");
  EXPECT_EQ(t.apply({}, true), "<start_of_turn>model\n");
}

TEST(ChatTemplate, Llama3) {
  const ChatTemplate t = ChatTemplate::from_family(ChatTemplateFamily::kLlama3);
  EXPECT_EQ(t.apply(kConversation, true),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi there!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(t.apply({{"user", "x"}}, false),
            "<|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>");
}

TEST(ChatTemplate, ChatmlKeepsContentVerbatim) {
  const ChatTemplate t = ChatTemplate::from_family(ChatTemplateFamily::kChatml);
  EXPECT_EQ(t.apply(kConversation, false),
            "<|im_start|>system\n  Be brief.\n<|im_end|>\n"
            "<|im_start|>user\nHi there! <|im_end|>\n"
            "<|im_start|>assistant\n\nHello.\n<|im_end|>\n"
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n");
}

TEST(ChatTemplate, ChatmlDefaultSystemFromTemplate) {
  // A template in the style of SmolLM2's / Qwen 2's: a constant system turn when none is given
  // (written with a raw newline here, and with the escape \n below).
  const std::string raw =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
      "{{ '<|im_start|>system\nYou are a bot.<|im_end|>\n' }}{% endif %}"
      "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
      "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
  const ChatTemplate t = ChatTemplate::detect(raw);
  EXPECT_EQ(t.default_system(), "You are a bot.");
  EXPECT_EQ(t.apply({{"user", "hi"}}, true),
            "<|im_start|>system\nYou are a bot.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
            "<|im_start|>assistant\n");
  // A conversation with its own system message gets no second one; an empty one gets none.
  EXPECT_EQ(t.apply({{"system", "S"}, {"user", "hi"}}, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n");
  EXPECT_EQ(t.apply({}, false), "");
  const ChatTemplate esc =
      ChatTemplate::detect(R"({{ '<|im_start|>system\nYou are \'Q\'.<|im_end|>\n' }})");
  EXPECT_EQ(esc.default_system(), "");  // a quote inside: not a plain constant
  const ChatTemplate esc2 =
      ChatTemplate::detect(R"({{ '<|im_start|>system\nLine one\nLine two<|im_end|>\n' }})");
  EXPECT_EQ(esc2.default_system(), "Line one\nLine two");
  // The role itself, not a constant: no default.
  EXPECT_EQ(ChatTemplate::detect("{{ '<|im_start|>' + message['role'] }}").default_system(), "");
}

}  // namespace
}  // namespace mnemo
