"""Agent loops on the real Qwen2.5-Coder-1.5B: the prompt cache across tool-call turns.

An agent resends the whole conversation every turn: the previous prompt, the model's tool call
and the tool's result. mnemo must read only what is new. Each loop below runs 8 tool-call turns
(tool_choice forces one call, so every turn is one) and asserts, for every turn after the first,
that the tokens decoded for the prompt are at most the new tokens (the prompt's growth beyond
what the slot held: the previous prompt plus the tokens generated) plus one cache block (64
tokens: where the template's rendering of the model's own call differs from what it generated).

The three APIs: chat completions, Anthropic's /v1/messages and OpenAI's /v1/responses (with
previous_response_id, and resending the whole input). Also the OpenAI Agents SDK (openai-agents) running an agent with one function tool against the
server: it must call the tool with valid arguments and finish.
"""
import asyncio
import json

import jsonschema
import pytest
import requests

from helpers.server import Server, stop

BLOCK = 64
TURNS = 8
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers and return the sum",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


@pytest.fixture(scope="module")
def qwen(binary, qwen_coder_15b):
    srv = Server(binary, qwen_coder_15b, "-c", 8192, "-np", 1, "--metrics")
    yield srv
    stop(srv)


def check_growth(turns):
    """turns: (n_prompt, n_decoded, n_generated) per turn; every turn after the first decodes at
    most its new tokens plus one block."""
    for k in range(1, len(turns)):
        n_prompt, decoded, _ = turns[k]
        held = turns[k - 1][0] + turns[k - 1][2]
        new = max(0, n_prompt - held)
        assert decoded <= new + BLOCK, (k, turns)


def test_chat_completions_loop_reads_only_the_new_tokens(qwen):
    messages = [{"role": "user", "content": "Add 1 and 2, then add 3 to the result, and so on: "
                                            "call the add tool once per step."}]
    turns = []
    total = 1
    for k in range(TURNS):
        r = requests.post(qwen.url + "/v1/chat/completions", json={
            "messages": messages, "tools": [ADD], "tool_choice": "required",
            "parallel_tool_calls": False, "temperature": 0, "max_tokens": 48}, timeout=300)
        assert r.status_code == 200, r.text
        j = r.json()
        msg = j["choices"][0]["message"]
        (call,) = msg["tool_calls"]
        args = json.loads(call["function"]["arguments"])
        jsonschema.validate(args, ADD["function"]["parameters"])
        t = j["timings"]
        turns.append((j["usage"]["prompt_tokens"], t["prompt_n"], j["usage"]["completion_tokens"]))
        total = args["a"] + args["b"]
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": json.dumps({"sum": total})},
        ]
    check_growth(turns)


ADD_ANTHROPIC = {"name": "add", "description": ADD["function"]["description"],
                 "input_schema": ADD["function"]["parameters"]}
ADD_RESPONSES = {"type": "function", "name": "add", "description": ADD["function"]["description"],
                 "parameters": ADD["function"]["parameters"]}
TASK = "Add 1 and 2, then add 3 to the result, and so on: call the add tool once per step."


def test_messages_loop_reads_only_the_new_tokens(qwen):
    messages = [{"role": "user", "content": TASK}]
    turns = []
    for k in range(TURNS):
        r = requests.post(qwen.url + "/v1/messages", json={
            "model": "qwen", "max_tokens": 48, "messages": messages, "tools": [ADD_ANTHROPIC],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
            "temperature": 0}, timeout=300)
        assert r.status_code == 200, r.text
        j = r.json()
        uses = [b for b in j["content"] if b["type"] == "tool_use"]
        assert uses and j["stop_reason"] == "tool_use", j
        jsonschema.validate(uses[0]["input"], ADD_ANTHROPIC["input_schema"])
        u = j["usage"]
        turns.append((u["input_tokens"] + u["cache_read_input_tokens"], u["input_tokens"],
                      u["output_tokens"]))
        messages += [{"role": "assistant", "content": j["content"]},
                     {"role": "user", "content": [{"type": "tool_result",
                                                   "tool_use_id": uses[0]["id"],
                                                   "content": json.dumps({"sum": k + 3})}]}]
    check_growth(turns)


@pytest.mark.parametrize("chained", [True, False], ids=["previous_response_id", "full_input"])
def test_responses_loop_reads_only_the_new_tokens(qwen, chained):
    items = [{"role": "user", "content": TASK}]
    previous = None
    turns = []
    for k in range(TURNS):
        body = {"model": "qwen", "input": items, "tools": [ADD_RESPONSES],
                "tool_choice": "required", "parallel_tool_calls": False, "temperature": 0,
                "max_output_tokens": 48, "store": chained}
        if previous:
            body["previous_response_id"] = previous
        r = requests.post(qwen.url + "/v1/responses", json=body, timeout=300)
        assert r.status_code == 200, r.text
        j = r.json()
        calls = [o for o in j["output"] if o["type"] == "function_call"]
        assert calls, j
        jsonschema.validate(json.loads(calls[0]["arguments"]), ADD_RESPONSES["parameters"])
        u = j["usage"]
        turns.append((u["input_tokens"], u["input_tokens"] - u["input_tokens_details"]["cached_tokens"],
                      u["output_tokens"]))
        result = {"type": "function_call_output", "call_id": calls[0]["call_id"],
                  "output": json.dumps({"sum": k + 3})}
        if chained:
            previous, items = j["id"], [result]
        else:
            items = items + j["output"] + [result]
    check_growth(turns)


def test_openai_agents_sdk_calls_the_tool_and_finishes(qwen):
    agents = pytest.importorskip("agents")
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)
    calls = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Get the current weather for a city."""
        calls.append(city)
        return f"It is sunny and 21 degrees Celsius in {city}."

    model = agents.OpenAIChatCompletionsModel(
        model="qwen", openai_client=AsyncOpenAI(base_url=qwen.url + "/v1", api_key="none"))
    agent = agents.Agent(name="weather",
                         instructions="You are a helpful assistant. Call get_weather to look up "
                                      "the weather, then answer the user in one sentence.",
                         model=model, tools=[get_weather],
                         model_settings=agents.ModelSettings(temperature=0, max_tokens=96))
    result = asyncio.run(agents.Runner.run(agent, "What is the weather in Paris?", max_turns=4))
    assert calls == ["Paris"], calls
    assert "sunny" in result.final_output, result.final_output
