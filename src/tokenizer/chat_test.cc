// Chat template detection and rendering (mnemo/chat.h), against hand-written expected prompts.
// (The chatml rendering is also compared with Jinja2 running the model's own template in
// tests/python/test_chat_template.py.)
#include "mnemo/chat.h"

#include <gtest/gtest.h>

#include "mnemo/tokenizer.h"

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
  EXPECT_EQ(ChatTemplate::from_name("vicuna").value().family(), ChatTemplateFamily::kVicuna);
  EXPECT_EQ(ChatTemplate::from_name("alpaca").status().code(), StatusCode::kInvalidArgument);
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

// A small SPM vocabulary whose BOS is added by the tokenizer, with `chat_template`.
Tokenizer tokenizer_with_template(std::string chat_template) {
  VocabSpec spec;
  spec.model = "llama";
  spec.tokens = {"<unk>", "<s>", "</s>", "a"};
  spec.token_types = {2, 3, 3, 1};
  spec.add_bos = true;
  spec.chat_template = std::move(chat_template);
  auto t = Tokenizer::from_spec(std::move(spec));
  EXPECT_TRUE(t.ok()) << t.status().message();
  return std::move(t).value();
}

using Json = nlohmann::ordered_json;

TEST(ChatTemplate, JinjaIsChosenAndRendersWithVariables) {
  const Tokenizer tok = tokenizer_with_template(
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
      "{% if add_generation_prompt %}[assistant:{{ mood | default('') }}{% endif %}");
  auto t = ChatTemplate::choose(tok, "", nullptr, /*jinja=*/true);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_TRUE(t->is_jinja());
  const Json msgs = Json::parse(R"([{"role": "user", "content": [{"type": "text", "text": "x"},
                                    {"type": "text", "text": "y"}]}])");
  // The BOS the template writes is cut: the tokenizer adds its own.
  auto r = t->render(msgs, Json{{"chat_template_kwargs", {{"mood", "calm"}}}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, "[user:x\ny][assistant:calm");
  // A trailing assistant message is continued.
  auto c = t->render(Json::parse(R"([{"role": "user", "content": "q"},
                                     {"role": "assistant", "content": "Sure"}])"),
                     Json::object());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, "[user:q][assistant:Sure");
  // Without jinja the same model renders its family (unknown here: chatml).
  auto fam = ChatTemplate::choose(tok, "", nullptr, /*jinja=*/false);
  ASSERT_TRUE(fam.ok());
  EXPECT_FALSE(fam->is_jinja());
  EXPECT_EQ(*fam->render(Json::parse(R"([{"role": "user", "content": "q"}])"), Json::object()),
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n");
}

// An assistant tool call's arguments reach the template in the form it reads: parsed into an
// object for a template that writes them with `tojson` (or walks their items), as the JSON text
// the client sent for one that prints them as they are.
TEST(ChatTemplate, ToolCallArgumentsInTheFormTheTemplateReads) {
  const Json msgs = Json::parse(R"([{"role": "user", "content": "q"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny"}])");
  auto render = [&](const char* src) {
    auto t = ChatTemplate::from_jinja(src, "", "", false, false);
    EXPECT_TRUE(t.ok()) << t.status().message();
    auto r = t->render(msgs, Json::object());
    EXPECT_TRUE(r.ok()) << r.status().message();
    return std::make_pair(t->object_arguments(), r.ok() ? *r : std::string());
  };
  const char* kLoop = "{% for m in messages %}{% for c in m.tool_calls or [] %}";
  auto [obj, text] = render(
      (std::string(kLoop) + "{{ c.function.arguments | tojson }}{% endfor %}{% endfor %}").c_str());
  EXPECT_TRUE(obj);
  EXPECT_EQ(text, R"({"city": "Paris"})");
  auto [items, text2] =
      render((std::string(kLoop) + "{% for k, v in c.function.arguments | items %}{{ k }}={{ v }}"
                                   "{% endfor %}{% endfor %}{% endfor %}")
                 .c_str());
  EXPECT_TRUE(items);
  EXPECT_EQ(text2, "city=Paris");
  auto [str, text3] =
      render((std::string(kLoop) + "{{ c.function.arguments }}{% endfor %}{% endfor %}").c_str());
  EXPECT_FALSE(str);
  EXPECT_EQ(text3, R"({"city": "Paris"})");
}

TEST(ChatTemplate, TemplateErrorsAreStatuses) {
  const Tokenizer tok = tokenizer_with_template(
      "{% if messages[-1].content == 'boom' %}{{ raise_exception('no boom') }}{% endif %}ok");
  auto t = ChatTemplate::choose(tok, "", nullptr, true);
  ASSERT_TRUE(t.ok());
  auto r = t->render(Json::parse(R"([{"role": "user", "content": "boom"}])"), Json::object());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "chat template: no boom");
  EXPECT_FALSE(t->render(Json::parse(R"([{"role": 3}])"), Json::object()).ok());
  EXPECT_FALSE(t->render(Json::parse(R"([{"role": "user", "content": 3}])"), Json::object()).ok());
  // An operator's template that does not parse is an error naming the line...
  auto bad = ChatTemplate::choose(tok, "x\n{% if %}", nullptr, true);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 2"), std::string::npos) << bad.status().message();
  const std::string file = "{% for %}";
  EXPECT_FALSE(ChatTemplate::choose(tok, "", &file, true).ok());
  // Without Jinja, a text that is neither a built-in name nor of a known format is refused;
  // with Jinja it is a template (llama-server renders "nope" as it stands); a built-in name is
  // its format unless --jinja was given explicitly (then a template, as llama-server).
  EXPECT_FALSE(ChatTemplate::choose(tok, "nope", nullptr, false).ok());
  auto plain = ChatTemplate::choose(tok, "nope", nullptr, true);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(*plain->render(Json::parse(R"([{"role": "user", "content": "q"}])"), Json::object()),
            "nope");
  auto name = ChatTemplate::choose(tok, "llama2", nullptr, true, /*jinja_explicit=*/true);
  ASSERT_TRUE(name.ok());
  EXPECT_TRUE(name->is_jinja());
  auto by_default = ChatTemplate::choose(tok, "llama2", nullptr, true);
  ASSERT_TRUE(by_default.ok());
  EXPECT_FALSE(by_default->is_jinja());
  EXPECT_EQ(by_default->family(), ChatTemplateFamily::kLlama2);
  auto family = ChatTemplate::choose(tok, "llama2", nullptr, false);
  ASSERT_TRUE(family.ok());
  EXPECT_EQ(family->family(), ChatTemplateFamily::kLlama2);
  auto text = ChatTemplate::choose(tok, "{{ '[INST]' }}", nullptr, false);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->family(), ChatTemplateFamily::kLlama2);
  // ... while a model's own broken template falls back to its family.
  const Tokenizer broken = tokenizer_with_template("<|im_start|>{% if %}");
  auto fb = ChatTemplate::choose(broken, "", nullptr, true);
  ASSERT_TRUE(fb.ok());
  EXPECT_FALSE(fb->is_jinja());
  EXPECT_EQ(fb->family(), ChatTemplateFamily::kChatml);
}

}  // namespace
}  // namespace mnemo
