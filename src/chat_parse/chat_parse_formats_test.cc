// Each format's markup, written from its published description (llama.cpp's
// docs/function-calling.md and tests, the model cards): content only, reasoning and content, one
// call, two calls, a call after text, malformed and unfinished calls; every well-formed output is
// also streamed one byte at a time (testing::check).
#include "chat_parse/chat_parse_test_util.h"

namespace mnemo::chat_parse {
namespace {

using namespace testing;  // NOLINT(build/namespaces): chat_parse_test_util.h's helpers

const ToolCall kParis = call("get_weather", "{\"city\": \"Paris\"}");
const ToolCall kCode = call("python", "{\"code\": \"print(1)\"}");
// XML formats build compact arguments.
const ToolCall kParisXml = call("get_weather", "{\"city\":\"Paris\",\"days\":3}");

// A call (kParis, kCode) under the id the format gives it.
ToolCall with_id(ToolCall c, std::string id) {
  c.id = std::move(id);
  return c;
}

ParseOptions forced(ChatFormat f) {
  ParseOptions o = options(f);
  o.thinking_forced_open = true;
  return o;
}

TEST(QwenFormatsTest, Qwen3Coder) {
  const ParseOptions o = options(ChatFormat::kQwen3Coder);
  const std::string one =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
  check("Hello", o, msg("Hello"));
  check("<think>\nLet me see.\n</think>\n\n" + one, o, msg("", "Let me see.", {kParisXml}));
  check(one, o, msg("", "", {kParisXml}));
  check("I will check.\n" + one + "\n" + one, o, msg("I will check.", "", {kParisXml, kParisXml}));
  // The first call may come without <tool_call>.
  check("<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
        o, msg("", "", {call("get_weather", "{\"city\":\"Paris\"}")}));
  // A string parameter keeps its text (even digits, quotes, newlines, markup); others are JSON.
  check(
      "<tool_call>\n<function=python>\n<parameter=code>\ndef f():\n    return \"<b>\"\n\n"
      "</parameter>\n</function>\n</tool_call>",
      o, msg("", "", {call("python", "{\"code\":\"def f():\\n    return \\\"<b>\\\"\\n\"}")}));
  check(
      "<tool_call>\n<function=get_weather>\n<parameter=city>\n123\n</parameter>\n"
      "<parameter=extra>\n{\"a\": [1, 2]}\n</parameter>\n<parameter=note>\nnot json\n"
      "</parameter>\n</function>\n</tool_call>",
      o,
      msg("", "",
          {call("get_weather",
                "{\"city\":\"123\",\"extra\":{\"a\":[1,2]},\"note\":\"not json\"}")}));
  // Hermes' JSON in the block (small models of the family write it): taken too.
  check(
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
      "</tool_call>",
      o, msg("", "", {kParis}));
  // No parameters; the closers left out at the end.
  check("<tool_call>\n<function=get_time>\n</function>\n</tool_call>", o,
        msg("", "", {call("get_time", "{}")}));
  check("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n", o,
        msg("", "", {call("get_weather", "{\"city\":\"Paris\"}")}));
  // Malformed: content; unfinished at the end: dropped.
  const std::string bad = "<tool_call>\n<function=get weather>\n</function>\n</tool_call>";
  check(bad, o, msg(bad), /*stream=*/false);
  check("<tool_call>\n<function=get_weather>\n<parameter=city>\nPar", o, msg(""), false);
}

TEST(QwenFormatsTest, SeedOss) {
  const ParseOptions o = options(ChatFormat::kSeedOss);
  check("<seed:think>I'm thinking</seed:think>\nHello", o, msg("Hello", "I'm thinking"));
  const std::string one =
      "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n"
      "<parameter=days>3</parameter>\n</function>\n</seed:tool_call>";
  check(one, o, msg("", "", {kParisXml}));
  check("Checking.\n" + one + "\n" + one, o, msg("Checking.", "", {kParisXml, kParisXml}));
}

TEST(QwenFormatsTest, MiniMaxM2) {
  const ParseOptions o = options(ChatFormat::kMiniMaxM2);
  check("<think>hm</think>\nHello", o, msg("Hello", "hm"));
  check(
      "<think>hm</think>\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n"
      "<parameter name=\"city\">Paris</parameter>\n<parameter name=\"days\">3</parameter>\n"
      "</invoke>\n<invoke name=\"python\">\n<parameter name=\"code\">print(1)</parameter>\n"
      "</invoke>\n</minimax:tool_call>",
      o, msg("", "hm", {kParisXml, call("python", "{\"code\":\"print(1)\"}")}));
}

TEST(QwenFormatsTest, Glm45) {
  const ParseOptions o = options(ChatFormat::kGlm45);
  const std::string one =
      "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
      "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>";
  check("\n<think>I'm thinking</think>Hello", o, msg("Hello", "I'm thinking"));
  check(one, o, msg("", "", {kParisXml}));
  check("Let me look.\n" + one + "\n" + one, o, msg("Let me look.", "", {kParisXml, kParisXml}));
  // GLM 4.7 writes no newlines; its prompt opens the reasoning.
  check(
      "Need it.</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris"
      "</arg_value><arg_key>days</arg_key><arg_value>3</arg_value></tool_call>",
      forced(ChatFormat::kGlm45), msg("", "Need it.", {kParisXml}));
  check("<tool_call>get_time</tool_call>", o, msg("", "", {call("get_time", "{}")}));
  const std::string bad = "<tool_call>get_weather\n<arg_key>city</arg_key>\nParis</tool_call>";
  check(bad, o, msg(bad), /*stream=*/false);
  // Unfinished at the end: dropped.
  check("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Pa", o, msg(""), false);
}

TEST(HermesFormatsTest, Granite) {
  const ParseOptions o = options(ChatFormat::kGranite);
  check("Hello", o, msg("Hello"));
  check("<think>I'm thinking</think><response>Hello</response>", o, msg("Hello", "I'm thinking"));
  check(
      "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
      "{\"name\": \"python\", \"arguments\": {\"code\": \"print(1)\"}}]",
      o, msg("", "", {kParis, kCode}));
  check("Sure.<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]", o,
        msg("Sure.", "", {kParis}));
  const std::string bad = "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {]";
  check(bad, o, msg(bad), false);
}

TEST(HermesFormatsTest, NemotronAprielCommandR) {
  const std::string arr =
      "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
      "{\"name\": \"python\", \"arguments\": {\"code\": \"print(1)\"}}]";
  check("<think>hm</think><TOOLCALL>" + arr + "</TOOLCALL>", options(ChatFormat::kNemotronV2),
        msg("", "hm", {kParis, kCode}));
  check("<thinking>hm</thinking><tool_calls>" + arr + "</tool_calls>",
        options(ChatFormat::kApriel15), msg("", "hm", {kParis, kCode}));
  const ParseOptions r = options(ChatFormat::kCommandR7B);
  check(
      "<|START_THINKING|>Plan: look it up.<|END_THINKING|><|START_ACTION|>[\n"
      "    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": "
      "{\"city\": \"Paris\"}},\n"
      "    {\"tool_call_id\": \"1\", \"tool_name\": \"python\", \"parameters\": "
      "{\"code\": \"print(1)\"}}\n]<|END_ACTION|>",
      r, msg("", "Plan: look it up.", {with_id(kParis, "0"), with_id(kCode, "1")}));
  check("<|START_THINKING|>Easy.<|END_THINKING|><|START_RESPONSE|>Hello<|END_RESPONSE|>", r,
        msg("Hello", "Easy."));
  check("<|START_TEXT|>Hello<|END_TEXT|>", r, msg("Hello"));
}

TEST(HermesFormatsTest, FirefunctionV2) {
  const ParseOptions o = options(ChatFormat::kFirefunctionV2);
  check("Hello", o, msg("Hello"));
  check(" functools[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]", o,
        msg("", "", {kParis}));
}

TEST(LlamaFormatsTest, Llama3) {
  const ParseOptions o = options(ChatFormat::kLlama3);
  check("Hello, world!", o, msg("Hello, world!"));
  const std::string one = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}";
  check(one, o, msg("", "", {kParis}));
  check(
      "{\"type\": \"function\", \"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
      o, msg("", "", {kParis}));
  check(one + "; {\"name\": \"python\", \"arguments\": {\"code\": \"print(1)\"}}", o,
        msg("", "", {kParis, kCode}));
  // JSON that is not a call, and a call that is not first: content.
  check("{\"city\": \"Paris\"}", o, msg("{\"city\": \"Paris\"}"), false);
  check("Here: " + one, o, msg("Here: " + one), false);
  check("{\"type\": \"object\", \"name\": \"x\", \"parameters\": {}}", o,
        msg("{\"type\": \"object\", \"name\": \"x\", \"parameters\": {}}"), false);
  // Built-in tools and code after <|python_tag|>.
  check("<|python_tag|>brave_search.call(query=\"weather in Paris\")", o,
        msg("", "", {call("brave_search", "{\"query\":\"weather in Paris\"}")}));
  check(
      "Let me compute.<|python_tag|>wolfram_alpha.call(query=\"2+2\", units=\"si\")", o,
      msg("Let me compute.", "", {call("wolfram_alpha", "{\"query\":\"2+2\",\"units\":\"si\"}")}));
  check("<|python_tag|>print(\"hi\")\nx = 1", o,
        msg("", "", {call("python", "{\"code\":\"print(\\\"hi\\\")\\nx = 1\"}")}));
  ParseOptions ipython = o;
  ipython.tools = {{"ipython", nullptr}};
  check("<|python_tag|>print(1)<|eom_id|>", ipython,
        msg("", "", {call("ipython", "{\"code\":\"print(1)\"}")}));
  const std::string bad = "{\"name\": \"get_weather\", \"parameters\": {\"city\": }}";
  check(bad, o, msg(bad), false);
  check("{\"name\": \"get_weather\", \"parameters\": {", o,
        msg("{\"name\": \"get_weather\", \"parameters\": {"), false);
}

TEST(LlamaFormatsTest, FunctionaryV31) {
  const ParseOptions o = options(ChatFormat::kFunctionaryV31);
  check("Hello", o, msg("Hello"));
  check("<function=get_weather>{\"city\": \"Paris\"}</function>", o, msg("", "", {kParis}));
  check(
      "Sure.<function=get_weather>{\"city\": \"Paris\"}</function>"
      "<function=python>{\"code\": \"print(1)\"}</function>",
      o, msg("Sure.", "", {kParis, kCode}));
  check("<|python_tag|>print(1)", o, msg("", "", {call("python", "{\"code\":\"print(1)\"}")}));
  const std::string bad = "<function=get_weather>{\"city\": Paris}</function>";
  check(bad, o, msg(bad), false);
}

TEST(MistralFormatsTest, Nemo) {
  const ParseOptions o = options(ChatFormat::kMistralNemo);
  check("Hello", o, msg("Hello"));
  check(
      "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, "
      "\"id\": \"abcdefghi\"}, {\"name\": \"python\", \"arguments\": {\"code\": \"print(1)\"}, "
      "\"id\": \"123456789\"}]",
      o, msg("", "", {with_id(kParis, "abcdefghi"), with_id(kCode, "123456789")}));
  check(
      "Sure. [TOOL_CALLS][{\"id\": \"abcdefghi\", \"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Paris\"}}]",
      o, msg("Sure.", "", {with_id(kParis, "abcdefghi")}));
  const std::string bad = "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\"}]";
  check(bad, o, msg(bad), false);
}

TEST(MistralFormatsTest, NamedForm) {
  const ParseOptions o = options(ChatFormat::kMistral);
  check("[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}", o, msg("", "", {kParis}));
  check(
      "[TOOL_CALLS]get_weather[CALL_ID]abcdefghi[ARGS]{\"city\": \"Paris\"}"
      "[TOOL_CALLS]python[CALL_ID]123456789[ARGS]{\"code\": \"print(1)\"}",
      o, msg("", "", {with_id(kParis, "abcdefghi"), with_id(kCode, "123456789")}));
  check("[THINK]I'm\nthinking[/THINK]Hello, world!", o, msg("Hello, world!", "I'm\nthinking"));
  check("[THINK]Call it.[/THINK]Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}", o,
        msg("Sure.", "Call it.", {kParis}));
  // The Nemo array also parses here, and markup quoted in the reasoning is reasoning.
  check(
      "[THINK]maybe [TOOL_CALLS]x[ARGS]{}[/THINK][TOOL_CALLS][{\"name\": \"python\", "
      "\"arguments\": {\"code\": \"print(1)\"}}]",
      o, msg("", "maybe [TOOL_CALLS]x[ARGS]{}", {kCode}));
  for (const std::string bad :
       {"[TOOL_CALLS]get weather[ARGS]{}", "[TOOL_CALLS]get_weather[ARGS]{\"city\": Paris}"}) {
    check(bad, o, msg(bad), false);
  }
  check("[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Pa", o, msg(""), false);  // unfinished
}

TEST(DeepSeekFormatsTest, R1) {
  const ParseOptions o = forced(ChatFormat::kDeepSeekR1);
  const std::string one =
      "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```"
      "<｜tool▁call▁end｜>";
  check("I'm\nthinking</think>\n\nHello, world!", o, msg("Hello, world!", "I'm\nthinking"));
  check("Need it.</think>\n\n<｜tool▁calls▁begin｜>" + one + "<｜tool▁calls▁end｜>", o,
        msg("", "Need it.", {kParis}));
  check(
      "</think>Let me see.<｜tool▁calls▁begin｜>" + one + "\n" +
          "<｜tool▁call▁begin｜>function<｜tool▁sep｜>python\n```json\n{\"code\": \"print(1)\"}```"
          "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      o, msg("Let me see.", "", {kParis, kCode}));
  const std::string bad =
      "</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
      "get_weather\n```json\n{\"city\": ";
  check(bad, o, msg(""), false);  // unfinished at the end: dropped
}

TEST(DeepSeekFormatsTest, V31) {
  const ParseOptions o = forced(ChatFormat::kDeepSeekV31);
  const std::string two =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}"
      "<｜tool▁call▁end｜><｜tool▁call▁begin｜>python<｜tool▁sep｜>{\"code\": \"print(1)\"}"
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  check("REASONING</think>CONTENT" + two, o, msg("CONTENT", "REASONING", {kParis, kCode}));
  ParseOptions no_think = options(ChatFormat::kDeepSeekV31);
  check("CONTENT", no_think, msg("CONTENT"));
  check(
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}"
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      no_think, msg("", "", {kParis}));
  const std::string bad =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>oops"
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  check(bad, no_think, msg(bad), false);
}

TEST(KimiFormatsTest, K2) {
  const ParseOptions o = options(ChatFormat::kKimiK2);
  check("Hello, world!", o, msg("Hello, world!"));
  check(
      "<think>I need two calls</think><|tool_calls_section_begin|>"
      "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}"
      "<|tool_call_end|><|tool_call_begin|>functions.python:1<|tool_call_argument_begin|>"
      "{\"code\": \"print(1)\"}<|tool_call_end|><|tool_calls_section_end|>",
      o,
      msg("", "I need two calls",
          {with_id(kParis, "functions.get_weather:0"), with_id(kCode, "functions.python:1")}));
  check(
      "Sure.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
      "<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|>"
      "<|tool_calls_section_end|>",
      o, msg("Sure.", "", {with_id(kParis, "functions.get_weather:0")}));
  const std::string bad =
      "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
      "<|tool_call_argument_begin|>{\"city\"}<|tool_call_end|>"
      "<|tool_calls_section_end|>";
  check(bad, o, msg(bad), false);
}

TEST(GptOssFormatTest, Harmony) {
  const ParseOptions o = options(ChatFormat::kGptOss);
  check("<|channel|>final<|message|>Hello, world!", o, msg("Hello, world!"));
  check(
      "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final"
      "<|message|>Hello<|return|>",
      o, msg("Hello", "I'm\nthinking"));
  check(
      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>",
      o, msg("", "Need weather.", {kParis}));
  check(" to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}", o,
        msg("", "", {kParis}));
  check(
      "<|channel|>commentary<|message|>Checking both.<|end|><|start|>assistant<|channel|>"
      "commentary to=functions.get_weather<|message|>{\"city\": \"Paris\"}<|call|><|start|>"
      "assistant<|channel|>commentary to=functions.python<|message|>{\"code\": \"print(1)\"}",
      o, msg("Checking both.", "", {kParis, kCode}));
  // A built-in recipient is dropped; "to=assistant" is no recipient.
  check(
      "<|channel|>analysis<|message|>Run it.<|end|><|start|>assistant<|channel|>commentary "
      "to=python <|constrain|>code<|message|>print(1)<|call|>",
      o, msg("", "Run it."));
  check(
      "<|channel|>commentary to=assistant<|channel|>analysis<|message|>hm<|end|><|start|>"
      "assistant<|channel|>final<|message|>Hi",
      o, msg("Hi", "hm"));
  ParseOptions none = o;
  none.reasoning = ReasoningFormat::kNone;
  check(
      "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final"
      "<|message|>Hello",
      none, msg("<|channel|>analysis<|message|>I'm\nthinking<|end|>Hello"), false);
  check("plain text", o, msg("plain text"));
}

TEST(GenericFormatTest, Json) {
  const ParseOptions o = options(ChatFormat::kGeneric);
  check("{\"response\": \"Hello, \\u00e9\\n world!\"}", o, msg("Hello, é\n world!"));
  check("{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}", o,
        msg("", "", {kParis}));
  check(
      "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, "
      "\"id\": \"call_1\"}, {\"name\": \"python\", \"arguments\": {\"code\": \"print(1)\"}, "
      "\"id\": \"call_2\"}]}",
      o, msg("", "", {with_id(kParis, "call_1"), with_id(kCode, "call_2")}));
  check("```json\n{\"response\": \"Hi\"}\n```", o, msg("Hi"));
  check("Just text.", o, msg("Just text."));
  check("{\"answer\": 1}", o, msg("{\"answer\": 1}"), false);
  check("<think>hm</think>{\"response\": \"Hi\"}", options(ChatFormat::kGenericThink),
        msg("Hi", "hm"));
  // A cut answer keeps what was written.
  check("{\"response\": \"Hello, wor", o, msg("Hello, wor"));
  ParseOptions off = o;
  off.parse_tool_calls = false;
  check("{\"response\": \"Hi\"}", off, msg("{\"response\": \"Hi\"}"), false);
  const std::string bad = "{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {\"city\"}}}";
  check(bad, o, msg(bad), false);
}

}  // namespace
}  // namespace mnemo::chat_parse
