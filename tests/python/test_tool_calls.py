"""Tool calls and reasoning on /v1/chat/completions, end to end with the official openai SDK.

- tool_choice "required" / a named function: the grammar holds the answer to a call whose
  arguments validate against the tool's schema (Python jsonschema), even on SmolLM2-135M, whose
  template has no tool format (the generic JSON answer);
- Qwen2.5-Coder (Hermes format) with tool_choice "auto": its greedy fenced-JSON answer becomes a
  call (the small-model fallback), streamed as OpenAI's tool_call deltas that add up to the
  non-streamed call; the tool result in the next request is rendered by the template and the
  answer reuses the previous prompt from memory;
- reasoning: a template that opens <think> in its generation prompt; reasoning_content split
  from content, streamed and not; --reasoning-format none; reasoning_budget_tokens ends the
  thinking after that many tokens;
- bad requests (a malformed tool schema, a tool result for an unknown id, a tool_choice naming no
  tool, tools with a grammar) are 400s in OpenAI's error shape that change no slot.
"""
import json

import jsonschema
import openai
import pytest
import requests

from helpers.server import Server, stop

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)


def slot_tokens(srv):
    return [s["n_tokens"] for s in requests.get(srv.url + "/slots", timeout=10).json()]


def accumulate(stream):
    """The message an OpenAI chat stream adds up to: content, reasoning_content and tool calls
    (index -> {id, name, arguments}), and the finish reason."""
    content, reasoning, calls, finish = "", "", {}, None
    for chunk in stream:
        if not chunk.choices:
            continue
        c = chunk.choices[0]
        d = c.delta
        content += d.content or ""
        reasoning += getattr(d, "reasoning_content", None) or (d.model_extra or {}).get(
            "reasoning_content") or ""
        for tc in d.tool_calls or []:
            call = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": ""})
            if tc.id:
                assert call["id"] is None, "a call's id comes once"
                call["id"] = tc.id
            if tc.function and tc.function.name:
                assert call["name"] is None, "a call's name comes once"
                call["name"] = tc.function.name
            if tc.function and tc.function.arguments:
                assert call["name"] is not None, "arguments come after the name"
                call["arguments"] += tc.function.arguments
        finish = c.finish_reason or finish
    return content, reasoning, [calls[i] for i in sorted(calls)], finish


@pytest.fixture(scope="module")
def smol(binary, model):
    srv = Server(binary, model, "-c", 2048, "-np", 2)
    yield srv
    stop(srv)


@pytest.mark.parametrize("choice", ["required",
                                    {"type": "function", "function": {"name": "get_weather"}}])
def test_forced_call_validates_even_on_a_tiny_model(smol, choice):
    r = client(smol).chat.completions.create(
        model="m", messages=ASK, tools=[WEATHER], tool_choice=choice, temperature=0,
        max_tokens=120)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", c
    assert c.message.content is None
    (call,) = c.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])


def test_bad_tool_requests_are_400s_that_change_nothing(smol):
    # A conversation in slot 0 first, so there is something to keep.
    client(smol).chat.completions.create(model="m", messages=ASK, max_tokens=4, temperature=0)
    before = slot_tokens(smol)
    answered = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}]
    bad = [
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": "not a schema"}}]},
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 5}}}]},
        {"tools": [{"type": "function", "function": {"name": ""}}]},
        {"tools": [{"type": "web_search"}]},
        {"tools": [WEATHER, WEATHER]},
        {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
        {"tools": [WEATHER], "tool_choice": "sometimes"},
        {"tool_choice": "required"},
        {"tools": [WEATHER], "grammar": "root ::= \"x\""},
        {"messages": ASK + [{"role": "tool", "tool_call_id": "call_404", "content": "sunny"}]},
        {"messages": ASK + answered + [{"role": "tool", "tool_call_id": "call_2",
                                        "content": "sunny"}]},
        {"messages": ASK + answered},  # an unanswered call cannot be continued
        {"messages": ASK + [{"role": "assistant", "tool_calls": [{"id": "c"}]}]},
        {"reasoning_format": "loud"},
    ]
    for fields in bad:
        body = {"messages": ASK, "max_tokens": 4, **fields}
        r = requests.post(smol.url + "/v1/chat/completions", json=body, timeout=60)
        assert r.status_code == 400, (fields, r.text)
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error" and err["message"], (fields, err)
    with pytest.raises(openai.BadRequestError):
        client(smol).chat.completions.create(
            model="m", messages=ASK, tools=[WEATHER], tool_choice="maybe", max_tokens=4)
    assert slot_tokens(smol) == before


# --- Qwen2.5-Coder: the Hermes format ------------------------------------------------------------


@pytest.fixture(scope="module")
def qwen(binary, qwen_coder_05b):
    srv = Server(binary, qwen_coder_05b, "-c", 4096, "-np", 1)
    yield srv
    stop(srv)


def test_auto_call_streamed_and_not_then_the_tool_result(qwen):
    oai = client(qwen)
    r = oai.chat.completions.create(model="m", messages=ASK, tools=[WEATHER], temperature=0,
                                    max_tokens=80)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", c
    (call,) = c.message.tool_calls
    assert call.function.name == "get_weather"
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, WEATHER["function"]["parameters"])
    assert "<tool_call>" not in (c.message.content or "") and "```" not in (c.message.content or "")
    # Streamed: the deltas add up to the same call (its id given once, then argument pieces).
    stream = oai.chat.completions.create(model="m", messages=ASK, tools=[WEATHER], temperature=0,
                                         max_tokens=80, stream=True)
    content, _, calls, finish = accumulate(stream)
    assert finish == "tool_calls" and content == ""
    assert [(x["name"], json.loads(x["arguments"])) for x in calls] == [("get_weather", args)]
    assert calls[0]["id"].startswith("call_")
    # The tool result goes back; the template renders the call and its result, and the prompt
    # up to the call is read from memory.
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": "get_weather", "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": "{\"temp_c\": 21, \"sky\": \"sunny\"}"},
    ]
    r2 = oai.chat.completions.create(model="m", messages=history, tools=[WEATHER], temperature=0,
                                     max_tokens=40)
    assert r2.choices[0].message.content or r2.choices[0].message.tool_calls
    assert r2.usage.prompt_tokens_details.cached_tokens >= r.usage.prompt_tokens - 1, r2.usage


def test_required_call_streams_arguments_in_pieces(qwen):
    stream = client(qwen).chat.completions.create(
        model="m", messages=ASK, tools=[WEATHER], tool_choice="required", temperature=0,
        max_tokens=60, stream=True)
    pieces = []
    content, _, calls, finish = "", "", {}, None
    for chunk in stream:
        for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            if tc.function and tc.function.arguments:
                pieces.append(tc.function.arguments)
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    assert finish == "tool_calls"
    assert len(pieces) > 1, pieces  # the arguments came as they were generated
    jsonschema.validate(json.loads("".join(pieces)), WEATHER["function"]["parameters"])


# --- Reasoning ----------------------------------------------------------------------------------

# ChatML whose generation prompt opens the thinking (as Qwen3's and DeepSeek R1's do).
THINK_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
    "{# a model that thinks writes </think> before its answer #}")


@pytest.fixture(scope="module")
def thinker(binary, model, tmp_path_factory):
    path = tmp_path_factory.mktemp("think") / "think.jinja"
    path.write_text(THINK_TEMPLATE)
    srv = Server(binary, model, "-c", 2048, "--chat-template-file", path)
    yield srv
    stop(srv)


def test_reasoning_budget_ends_the_thinking_and_the_answer_follows(thinker):
    oai = client(thinker)
    r = oai.chat.completions.create(model="m", messages=ASK, temperature=0, max_tokens=40,
                                    extra_body={"reasoning_budget_tokens": 6})
    msg = r.choices[0].message
    reasoning = msg.model_extra["reasoning_content"]
    assert reasoning and "</think>" not in reasoning and "</think>" not in (msg.content or "")
    tok = requests.post(thinker.url + "/tokenize", json={"content": reasoning}, timeout=10).json()
    assert len(tok["tokens"]) <= 6 + 1, reasoning  # the budget, give or take a re-tokenization
    assert msg.content, "the answer follows the forced end of the thinking"
    # Streamed: the same split, reasoning deltas first.
    stream = oai.chat.completions.create(model="m", messages=ASK, temperature=0, max_tokens=40,
                                         stream=True, extra_body={"reasoning_budget_tokens": 6})
    content, streamed_reasoning, calls, _ = accumulate(stream)
    assert (streamed_reasoning, content, calls) == (reasoning, msg.content, [])
    # reasoning_format none: the thinking stays in the content, end marker included.
    r = oai.chat.completions.create(model="m", messages=ASK, temperature=0, max_tokens=40,
                                    extra_body={"reasoning_budget_tokens": 6,
                                                "reasoning_format": "none"})
    msg = r.choices[0].message
    assert "</think>" in msg.content and not msg.model_extra.get("reasoning_content")
