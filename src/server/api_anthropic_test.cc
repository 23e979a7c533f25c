// Unit tests of Anthropic's Messages API (api_anthropic.cc) over a tiny synthetic vocabulary and
// a small Jinja template that shows every part of a message: a messages body renders the prompt
// of its OpenAI chat equivalent, errors name Anthropic's fields, responses and streams have
// Anthropic's blocks and events. tests/python/test_anthropic_api.py runs the official SDK
// against the real binary.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "server/api.h"
#include "server/chat_output.h"
#include "server/test_tokenizer.h"

namespace mnemo::server {
namespace {

// Every field the translation fills, in the rendered text.
constexpr const char* kTemplate =
    "{%- for t in tools %}[tool {{ t.function.name }} {{ t.function.parameters | tojson }}]"
    "{%- endfor %}"
    "{%- for m in messages %}<{{ m.role }}>"
    "{%- if m.reasoning_content %}[think {{ m.reasoning_content }}]{% endif %}"
    "{%- if m.content %}{{ m.content }}{% endif %}"
    "{%- for c in m.tool_calls %}[call {{ c.id }} {{ c.function.name }} "
    "{{ c.function.arguments | tojson }}]{% endfor %}"
    "{%- if m.tool_call_id %}[for {{ m.tool_call_id }}]{% endif %}"
    "{%- endfor %}"
    "{%- if enable_thinking is defined %}[thinking {{ enable_thinking }}]{% endif %}"
    "{%- if add_generation_prompt %}<assistant>{% endif %}";

class AnthropicTest : public ::testing::Test {
 protected:
  AnthropicTest() : tok_(tiny_tokenizer()), tmpl_(make_template()) {
    d_.n_slots = 2;
    d_.n_ctx_seq = 4096;
    d_.n_predict_max = 100;
    d_.model_name = "tiny";
    d_.tok = &tok_;
    d_.chat.format = chat_parse::ChatFormat::kHermes;
    d_.chat.markers = chat_parse::format_markers(d_.chat.format);
  }
  static ChatTemplate make_template() {
    auto t = ChatTemplate::from_jinja(kTemplate, "<s>", "</s>", false, false);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    return std::move(t).value();
  }
  Status parse(const std::string& body, ParsedCompletion* out) {
    return anthropic_messages_api().parse_one(Json::parse(body), nullptr, tok_, tmpl_, d_, out);
  }
  Status parse_openai(const std::string& body, ParsedCompletion* out) {
    return openai_chat_api().parse_one(Json::parse(body), nullptr, tok_, tmpl_, d_, out);
  }
  std::string text_of(const ParsedCompletion& p) {
    return tok_.detokenize(p.req.prompt, /*special=*/true);
  }
  Tokenizer tok_;
  ChatTemplate tmpl_;
  ApiDefaults d_;
};

TEST_F(AnthropicTest, RendersTheOpenAiEquivalent) {
  ParsedCompletion a, o;
  ASSERT_TRUE(parse(R"({
    "model": "any", "max_tokens": 20,
    "system": [{"type": "text", "text": "x-anthropic-billing-header: cch=1;"},
               {"type": "text", "text": "be brief"}, {"type": "text", "text": "and kind"}],
    "tools": [{"name": "get", "description": "d", "input_schema": {"type": "object"}}],
    "messages": [
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "hm", "signature": "s"},
        {"type": "redacted_thinking", "data": "xx"},
        {"type": "text", "text": "calling"},
        {"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"city": "paris"}}]},
      {"role": "user", "content": [
        {"type": "text", "text": "then"},
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text",
         "text": "sunny"}], "is_error": false}]},
      {"role": "user", "content": "and?"}]})",
                    &a)
                  .ok());
  ASSERT_TRUE(parse_openai(R"({
    "max_tokens": 20,
    "tools": [{"type": "function", "function": {"name": "get", "description": "d",
               "parameters": {"type": "object"}}}],
    "messages": [
      {"role": "system", "content": "be brief\nand kind"},
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": "calling", "reasoning_content": "hm", "tool_calls": [
        {"id": "toolu_1", "type": "function", "function": {"name": "get",
         "arguments": "{\"city\":\"paris\"}"}}]},
      {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
      {"role": "user", "content": "then\nand?"}]})",
                           &o)
                  .ok());
  EXPECT_EQ(text_of(a), text_of(o));
  EXPECT_EQ(a.req.prompt, o.req.prompt);
  EXPECT_EQ(a.req.n_predict, 20);
  EXPECT_TRUE(a.chat.parse);
}

TEST_F(AnthropicTest, BillingHeaderBlockIsDropped) {
  auto body = [](const std::string& cch) {
    return R"({"system": [{"type": "text", "text": "x-anthropic-billing-header: cch=)" + cch +
           R"(;"}, {"type": "text", "text": "sys"}],
              "messages": [{"role": "user", "content": "hi"}]})";
  };
  ParsedCompletion a, b;
  ASSERT_TRUE(parse(body("1"), &a).ok());
  ASSERT_TRUE(parse(body("2"), &b).ok());
  EXPECT_EQ(a.req.prompt, b.req.prompt);
  EXPECT_NE(text_of(a).find("<system>sys<user>hi<assistant>"), std::string::npos) << text_of(a);
  EXPECT_EQ(text_of(a).find("billing"), std::string::npos) << text_of(a);
}

TEST_F(AnthropicTest, OptionsTranslate) {
  ParsedCompletion p;
  ASSERT_TRUE(parse(R"({"max_tokens": 32000, "stop_sequences": ["zz"], "temperature": 0.5,
                       "top_k": 7, "top_p": 0.9, "metadata": {"user_id": "u"}, "stream": true,
                       "thinking": {"type": "enabled", "budget_tokens": 5},
                       "tools": [{"name": "f", "input_schema": {"type": "object"}}],
                       "tool_choice": {"type": "auto", "disable_parallel_tool_use": true},
                       "messages": [{"role": "user", "content": "hi"}]})",
                    &p)
                  .ok());
  EXPECT_EQ(p.req.n_predict, 100);  // lowered to --n-predict-max
  EXPECT_EQ(p.req.stop, std::vector<std::string>{"zz"});
  EXPECT_EQ(p.req.sampling.temp, 0.5f);
  EXPECT_EQ(p.req.sampling.top_k, 7);
  EXPECT_FLOAT_EQ(p.req.sampling.top_p, 0.9f);
  EXPECT_TRUE(p.stream);
  EXPECT_EQ(p.req.reasoning.budget, 5);
  EXPECT_FALSE(p.chat.opt.parallel_tool_calls);
  EXPECT_NE(text_of(p).find("[thinking True]"), std::string::npos) << text_of(p);
  ASSERT_TRUE(parse(R"({"thinking": {"type": "disabled"},
                       "messages": [{"role": "user", "content": "hi"}]})",
                    &p)
                  .ok());
  EXPECT_NE(text_of(p).find("[thinking False]"), std::string::npos) << text_of(p);
  // "any" and a named tool force a call with the grammar from the first token.
  for (const char* choice : {R"({"type": "any"})", R"({"type": "tool", "name": "f"})"}) {
    ASSERT_TRUE(parse(fmt::format(R"({{"tools": [{{"name": "f", "input_schema": {{"type":
                         "object"}}}}], "tool_choice": {},
                         "messages": [{{"role": "user", "content": "hi"}}]}})",
                                  choice),
                      &p)
                    .ok());
    EXPECT_NE(p.req.grammar, nullptr) << choice;
    EXPECT_TRUE(p.req.grammar_triggers.empty()) << choice;
  }
}

TEST_F(AnthropicTest, RejectsBadFieldsNamingThem) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"max_tokens": 5})", "'messages'"},
      {R"({"messages": [{"role": "system", "content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]})",
       "image blocks are not supported"},
      {R"({"messages": [{"role": "user", "content": [{"type": "document"}]}]})", "document blocks"},
      {R"({"messages": [{"role": "user", "content": [{"type": "tool_result",
           "tool_use_id": "toolu_9", "content": "x"}]}]})",
       "tool_use_id 'toolu_9'"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "tools": [{"type": "web_search_20250305", "name": "web_search"}]})",
       "web_search_20250305"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "tools": [{"name": "f", "input_schema": "object"}]})",
       "tools[0].input_schema"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "tools": [{"name": "f", "input_schema": {"type": "object", "properties": 3}}]})",
       "tools[0].input_schema"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "any"}})",
       "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "maybe"}})",
       "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop_sequences": "zz"})",
       "stop_sequences"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop_sequences": [1]})",
       "stop_sequences"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": "9"})", "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "thinking": {"type": "enabled",
           "budget_tokens": -3}})",
       "budget_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "system": 5})", "'system'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "system": [{"type": "image"}]})",
       "system[0]"},
      {R"({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a",
           "name": "f", "input": {}}]}]})",
       "assistant"},
      {R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": [
           {"type": "tool_use", "id": "a", "name": "f", "input": {}}]}]})",
       "tool_result"},
      {R"({"messages": [{"role": "user", "content": [{"type": "server_tool_use"}]}]})",
       "server_tool_use"},
  };
  for (const auto& [body, field] : cases) {
    ParsedCompletion p;
    Status st = parse(body, &p);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << body;
    EXPECT_NE(st.message().find(field), std::string::npos) << body << " -> " << st.message();
  }
}

TEST_F(AnthropicTest, ResponseHasBlocksStopReasonAndUsage) {
  ParsedCompletion p;
  ASSERT_TRUE(parse(R"({"tools": [{"name": "get", "input_schema": {"type": "object"}}],
                       "messages": [{"role": "user", "content": "hi"}]})",
                    &p)
                  .ok());
  CompletionResult r;
  r.text =
      "<think>hm</think>ok<tool_call>{\"name\": \"get\", \"arguments\": {\"a\": 1}}</tool_call>";
  r.finish = FinishReason::kEos;
  r.stats.n_prompt = 30;
  r.stats.n_cached = 20;
  r.stats.n_generated = 9;
  const Json j = completion_json(p, r, d_, new_response_ids("msg_"));
  EXPECT_EQ(j["type"], "message");
  EXPECT_EQ(j["role"], "assistant");
  EXPECT_EQ(j["id"].get<std::string>().rfind("msg_", 0), 0u);
  ASSERT_EQ(j["content"].size(), 3u) << j.dump();
  EXPECT_EQ(j["content"][0]["type"], "thinking");
  EXPECT_EQ(j["content"][0]["thinking"], "hm");
  EXPECT_EQ(j["content"][1], Json({{"type", "text"}, {"text", "ok"}}));
  EXPECT_EQ(j["content"][2]["type"], "tool_use");
  EXPECT_EQ(j["content"][2]["id"].get<std::string>().rfind("toolu_", 0), 0u);
  EXPECT_EQ(j["content"][2]["input"], Json({{"a", 1}}));
  EXPECT_EQ(j["stop_reason"], "tool_use");
  EXPECT_TRUE(j["stop_sequence"].is_null());
  EXPECT_EQ(j["usage"]["input_tokens"], 10);
  EXPECT_EQ(j["usage"]["cache_read_input_tokens"], 20);
  EXPECT_EQ(j["usage"]["output_tokens"], 9);

  ASSERT_TRUE(parse(R"({"messages": [{"role": "user", "content": "hi"}]})", &p).ok());
  r = CompletionResult();
  r.text = "abc";
  r.finish = FinishReason::kWord;
  r.stop_word = "zz";
  Json s = completion_json(p, r, d_, new_response_ids("msg_"));
  EXPECT_EQ(s["stop_reason"], "stop_sequence");
  EXPECT_EQ(s["stop_sequence"], "zz");
  r.finish = FinishReason::kLimit;
  EXPECT_EQ(completion_json(p, r, d_, new_response_ids("msg_"))["stop_reason"], "max_tokens");
}

TEST_F(AnthropicTest, StreamEventsComeInBlockOrder) {
  ParsedCompletion p;
  ASSERT_TRUE(parse(R"({"stream": true, "tools": [{"name": "get", "input_schema":
                       {"type": "object"}}], "messages": [{"role": "user", "content": "hi"}]})",
                    &p)
                  .ok());
  const WireApi& api = anthropic_messages_api();
  const ResponseIds ids = new_response_ids("msg_");
  CompletionResult r;
  r.stats.n_prompt = 12;
  r.stats.n_cached = 4;
  std::vector<SseEvent> events = api.stream_begin(p, r, d_, ids);
  const std::string text =
      "<think>hm</think>ok<tool_call>{\"name\": \"get\", \"arguments\": {\"a\": [1, 2]}}"
      "</tool_call>";
  for (char c : text) {
    r.text += c;
    for (SseEvent& e : api.stream_delta(p, CompletionEvent(), r, 0, d_, ids)) events.push_back(e);
  }
  r.finish = FinishReason::kEos;
  r.stats.n_generated = 7;
  for (SseEvent& e : api.stream_end(p, r, d_, ids)) events.push_back(e);

  std::vector<std::string> kinds;  // event names, deltas by their type
  std::string json_input;
  for (const SseEvent& e : events) {
    const Json data = Json::parse(e.data);
    EXPECT_EQ(data["type"], e.name);
    if (e.name == "content_block_delta") {
      const std::string type = data["delta"]["type"];
      if (kinds.back() != type) kinds.push_back(type);
      if (type == "input_json_delta") json_input += data["delta"]["partial_json"];
    } else {
      kinds.push_back(e.name);
    }
    if (e.name == "content_block_start") {
      EXPECT_EQ(data["index"], std::count(kinds.begin(), kinds.end(), "content_block_start") - 1);
    }
    if (e.name == "message_start") {
      EXPECT_EQ(data["message"]["usage"]["input_tokens"], 8);
      EXPECT_EQ(data["message"]["usage"]["cache_read_input_tokens"], 4);
    }
    if (e.name == "message_delta") {
      EXPECT_EQ(data["delta"]["stop_reason"], "tool_use");
      EXPECT_EQ(data["usage"]["output_tokens"], 7);
    }
  }
  const std::vector<std::string> want = {"message_start",       "ping",
                                         "content_block_start", "thinking_delta",
                                         "signature_delta",     "content_block_stop",
                                         "content_block_start", "text_delta",
                                         "content_block_stop",  "content_block_start",
                                         "input_json_delta",    "content_block_stop",
                                         "message_delta",       "message_stop"};
  EXPECT_EQ(kinds, want);
  EXPECT_EQ(Json::parse(json_input), Json::parse(R"({"a": [1, 2]})"));
  EXPECT_EQ(api.keep_alive(), "event: ping\ndata: {\"type\":\"ping\"}\n\n");
}

TEST(AnthropicErrors, ShapeAndStatuses) {
  const WireApi& api = anthropic_messages_api();
  const struct {
    ErrorKind kind;
    int status;
    const char* type;
  } want[] = {
      {ErrorKind::kInvalidRequest, 400, "invalid_request_error"},
      {ErrorKind::kUnauthorized, 401, "authentication_error"},
      {ErrorKind::kNotFound, 404, "not_found_error"},
      {ErrorKind::kBusy, 429, "rate_limit_error"},
      {ErrorKind::kPromptTooLong, 400, "invalid_request_error"},
      {ErrorKind::kCacheFull, 529, "overloaded_error"},
      {ErrorKind::kQueueFull, 529, "overloaded_error"},
      {ErrorKind::kTimeout, 529, "overloaded_error"},
      {ErrorKind::kNotSupported, 400, "invalid_request_error"},
      {ErrorKind::kInternal, 500, "api_error"},
      {ErrorKind::kBodyTooLarge, 413, "request_too_large"},
  };
  static_assert(std::size(want) == size_t(ErrorKind::kCount));
  for (const auto& w : want) {
    EXPECT_EQ(api.http_status(w.kind), w.status) << error_kind_name(w.kind);
    const Json j = api.error_body({w.kind, "m", std::nullopt});
    EXPECT_EQ(j, Json({{"type", "error"}, {"error", {{"type", w.type}, {"message", "m"}}}}));
  }
  const Json too_long =
      api.error_body({ErrorKind::kPromptTooLong, "m", WireError::PromptSize{5000, 4096}});
  EXPECT_EQ(too_long["error"]["message"].get<std::string>().rfind(
                "prompt is too long: 5000 tokens > 4095 maximum", 0),
            0u);
  const std::vector<SseEvent> ev = api.stream_error({ErrorKind::kInternal, "m", std::nullopt});
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].name, "error");
  EXPECT_EQ(message_token_count_json(42), Json({{"input_tokens", 42}}));
}

}  // namespace
}  // namespace mnemo::server
