"""OpenAI's Responses API (POST /v1/responses, GET / DELETE /v1/responses/{id}), end to end with
the official openai SDK.

- SmolLM2: a string input, input items (developer as system, text parts) and instructions give
  the prompt chat completions gives the same messages; max_output_tokens ends a response as
  "incomplete"; a stored response is read back and deleted; unknown ids are 404s in OpenAI's
  shape (previous_response_not_found); store: false keeps nothing; a continuation by
  previous_response_id sends only its new input, does not inherit the instructions, and reads
  the previous prompt and output from memory; malformed items are 400s naming the field
  ("param") that change no slot;
- Qwen2.5-Coder-0.5B (Hermes tool calls): a function_call item whose arguments validate; its
  function_call_output alone continues the stored conversation from memory; streamed, the SDK's
  events come in OpenAI's order, numbered, and add up to the non-streamed response's structure;
  a streamed stored response is continued too;
- --responses-max 2: the least recently used response is dropped; /metrics counts the store.
"""
import json

import jsonschema
import openai
import pytest
import requests

from helpers.server import Server, metric, stop

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
}
ASK = "What is the weather in Paris?"


def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)


def slot_tokens(srv):
    return [s["n_tokens"] for s in requests.get(srv.url + "/slots", timeout=10).json()]


def chat_prompt_tokens(srv, messages, **fields):
    """The prompt length chat completions gives `messages` (one token generated)."""
    r = requests.post(srv.url + "/v1/chat/completions", timeout=60,
                      json={"messages": messages, "max_tokens": 1, "temperature": 0, **fields})
    assert r.status_code == 200, r.text
    return r.json()["usage"]["prompt_tokens"]


def assert_continued_from_memory(prev, cont):
    """`cont` continued `prev`: the previous prompt was read from memory, and what was decoded is
    the new input (the prompt's growth beyond the previous prompt and output) and at most one
    64-token block more (a tool call the template renders otherwise than the model wrote it)."""
    cached = cont.usage.input_tokens_details.cached_tokens
    decoded = cont.usage.input_tokens - cached
    new_input = cont.usage.input_tokens - prev.usage.input_tokens - prev.usage.output_tokens
    assert cached >= prev.usage.input_tokens, (prev.usage, cont.usage)
    assert decoded <= max(new_input, 0) + 64, (prev.usage, cont.usage)


@pytest.fixture(scope="module")
def smol(binary, model):
    srv = Server(binary, model, "-c", 2048, "-np", 2, "--metrics")
    yield srv
    stop(srv)


def test_string_input_items_and_instructions(smol):
    oai = client(smol)
    r = oai.responses.create(model="m", input="Say hi", max_output_tokens=8, temperature=0)
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.status in ("completed", "incomplete") and r.error is None
    (msg,) = r.output
    assert msg.type == "message" and msg.role == "assistant" and msg.id.startswith("msg_")
    assert msg.content[0].type == "output_text" and msg.content[0].text == r.output_text
    assert r.output_text
    u = r.usage
    assert u.input_tokens == chat_prompt_tokens(smol, [{"role": "user", "content": "Say hi"}])
    assert u.total_tokens == u.input_tokens + u.output_tokens and 0 < u.output_tokens <= 8
    assert r.store is True and r.previous_response_id is None and r.tools == []
    assert r.tool_choice == "auto" and r.truncation == "disabled" and r.temperature == 0
    # Items: developer is system, text parts are text; the instructions come first.
    r = oai.responses.create(
        model="m", instructions="Answer in English.", max_output_tokens=4, temperature=0,
        input=[{"role": "developer", "content": "Be terse."},
               {"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "Say hi"}]}])
    assert r.instructions == "Answer in English."
    assert r.usage.input_tokens == chat_prompt_tokens(smol, [
        {"role": "system", "content": "Answer in English."},
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Say hi"}])


def test_max_output_tokens_makes_an_incomplete_response(smol):
    r = client(smol).responses.create(model="m", input="Count to one hundred.",
                                      max_output_tokens=3, temperature=0)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3 and r.max_output_tokens == 3
    assert r.output[-1].status == "incomplete"


def test_get_delete_and_unknown_ids(smol):
    oai = client(smol)
    r = oai.responses.create(model="m", input="Say hi", max_output_tokens=4, temperature=0,
                             metadata={"k": "v"})
    got = oai.responses.retrieve(r.id)
    assert got.model_dump() == r.model_dump() and got.metadata == {"k": "v"}
    deleted = requests.delete(f"{smol.url}/v1/responses/{r.id}", timeout=10)
    assert deleted.status_code == 200
    assert deleted.json() == {"id": r.id, "object": "response", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        oai.responses.delete(r.id)
    # An unknown previous_response_id: 404 in OpenAI's shape.
    with pytest.raises(openai.NotFoundError) as e:
        oai.responses.create(model="m", input="hi", previous_response_id=r.id)
    assert e.value.body == {"message": f"Previous response with id '{r.id}' not found.",
                            "type": "invalid_request_error", "param": "previous_response_id",
                            "code": "previous_response_not_found"}
    # store: false keeps nothing: neither readable nor continuable.
    r = oai.responses.create(model="m", input="Say hi", max_output_tokens=2, store=False)
    assert r.store is False
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        oai.responses.create(model="m", input="hi", previous_response_id=r.id)


def test_continuation_sends_only_the_new_input(smol):
    oai = client(smol)
    first = [{"role": "user", "content": "My name is Ada. Say hi."}]
    r1 = oai.responses.create(model="m", instructions="Be brief.", input=first,
                              max_output_tokens=12, temperature=0)
    # With the same instructions again, the previous prompt and output are read from memory.
    r2 = oai.responses.create(model="m", instructions="Be brief.", previous_response_id=r1.id,
                              input="What is my name?", max_output_tokens=6, temperature=0)
    assert_continued_from_memory(r1, r2)
    # Without them, the conversation goes on without the first instructions (OpenAI does not
    # carry them over).
    r3 = oai.responses.create(model="m", previous_response_id=r1.id,
                              input="What is my name?", max_output_tokens=6, temperature=0)
    assert r3.previous_response_id == r1.id and r3.instructions is None
    assert r3.usage.input_tokens == chat_prompt_tokens(smol, first + [
        {"role": "assistant", "content": r1.output_text},
        {"role": "user", "content": "What is my name?"}])


def test_bad_items_are_400s_naming_the_field(smol):
    client(smol).responses.create(model="m", input="Say hi", max_output_tokens=2)
    before = slot_tokens(smol)
    user = {"role": "user", "content": "hi"}
    bad = [
        ({"input": [{"content": "no type, no role"}]}, "input[0]"),
        ({"input": [{"type": "banana"}]}, "input[0].type"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
         "input[0].content[0].type"),
        ({"input": [user, {"type": "function_call", "name": "f", "arguments": "{}"}]},
         "input[1].call_id"),
        ({"input": [user, {"type": "function_call", "call_id": "c1", "arguments": "{}"}]},
         "input[1].name"),
        ({"input": [user, {"type": "function_call_output", "call_id": "c9", "output": "x"}]},
         "input[1].call_id"),
        ({"input": []}, "input"),
        ({"input": None}, "input"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"tools": [{"type": "function", "name": ""}]}, "tools[0].name"),
        ({"tools": [{"type": "function", "name": "f", "parameters": {"type": 5}}]},
         "tools[0].parameters"),
        ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
        ({"text": {"format": {"type": "xml"}}}, "text.format.type"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"temperature": "hot"}, "temperature"),
        ({"reasoning": {"effort": "extreme"}}, "reasoning.effort"),
        ({"background": True}, "background"),
    ]
    for fields, param in bad:
        body = {"model": "m", "input": [user], "max_output_tokens": 4, **fields}
        r = requests.post(smol.url + "/v1/responses", json=body, timeout=60)
        assert r.status_code == 400, (fields, r.text)
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error" and err["message"], (fields, err)
        assert err["param"] == param and err["code"] is None, (fields, err)
    assert "web_search" in requests.post(
        smol.url + "/v1/responses", timeout=60,
        json={"input": "hi", "tools": [{"type": "web_search"}]}).json()["error"]["message"]
    with pytest.raises(openai.BadRequestError):
        client(smol).responses.create(model="m", input=[{"type": "function_call_output",
                                                         "call_id": "nope", "output": "x"}])
    assert slot_tokens(smol) == before


# --- Qwen2.5-Coder: function tools -----------------------------------------------------------


@pytest.fixture(scope="module")
def qwen(binary, qwen_coder_05b):
    srv = Server(binary, qwen_coder_05b, "-c", 4096, "-np", 1)
    yield srv
    stop(srv)


def the_call(r):
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1, r.output
    return calls[0]


def call_output(call):
    return [{"type": "function_call_output", "call_id": call.call_id,
             "output": json.dumps({"temp_c": 21, "sky": "sunny"})}]


def test_function_call_then_its_output_continues_from_memory(qwen):
    oai = client(qwen)
    r = oai.responses.create(model="m", input=ASK, tools=[WEATHER], temperature=0,
                             max_output_tokens=80)
    assert r.status == "completed", r
    call = the_call(r)
    assert call.name == "get_weather" and call.status == "completed"
    assert call.id.startswith("fc_") and call.call_id.startswith("call_")
    jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])
    assert r.tools[0].name == "get_weather" and r.tools[0].parameters == WEATHER["parameters"]
    # Only the call's output is sent: the stored conversation is the rest.
    r2 = oai.responses.create(model="m", previous_response_id=r.id, input=call_output(call),
                              tools=[WEATHER], temperature=0, max_output_tokens=40)
    assert r2.output and r2.status in ("completed", "incomplete")
    assert_continued_from_memory(r, r2)
    # A client that keeps nothing on the server sends the whole conversation, the previous
    # output items included: the same prompt, so it is read from memory as well.
    replay = ([{"role": "user", "content": ASK}]
              + [o.model_dump(exclude_none=True) for o in r.output] + call_output(call))
    r3 = oai.responses.create(model="m", input=replay, tools=[WEATHER], temperature=0,
                              max_output_tokens=1, store=False)
    assert r3.usage.input_tokens == r2.usage.input_tokens
    assert r3.usage.input_tokens_details.cached_tokens >= r2.usage.input_tokens - 1


def test_streamed_call_matches_the_non_streamed_one_and_continues(qwen):
    oai = client(qwen)
    ask = "What is the weather in Tokyo?"
    plain = oai.responses.create(model="m", input=ask, tools=[WEATHER], temperature=0,
                                 max_output_tokens=80)
    events = list(oai.responses.create(model="m", input=ask, tools=[WEATHER], temperature=0,
                                       max_output_tokens=80, stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"], types
    assert types[-1] == "response.completed", types
    # Each item: added, its pieces, their end, done; a call's arguments add up.
    i = 2
    while i < len(types) - 1:
        added = events[i]
        assert added.type == "response.output_item.added", types[i:]
        j = i + 1
        while events[j].type != "response.output_item.done":
            j += 1
        inner = types[i + 1:j]
        if added.item.type == "function_call":
            assert inner[-1] == "response.function_call_arguments.done", inner
            assert set(inner[:-1]) <= {"response.function_call_arguments.delta"}, inner
            pieces = "".join(e.delta for e in events[i + 1:j - 1])
            assert pieces == events[j - 1].arguments == events[j].item.arguments
        else:
            assert inner[0] == "response.content_part.added", inner
            assert inner[-2:] == ["response.output_text.done", "response.content_part.done"], inner
        assert events[j].item.id == added.item.id
        i = j + 1
    done = events[-1].response
    strip = lambda r: [(o.type, getattr(o, "name", None), getattr(o, "status", None),
                        json.loads(o.arguments) if o.type == "function_call" else None)
                       for o in r.output]
    assert strip(done) == strip(plain)
    assert done.usage.output_tokens == plain.usage.output_tokens
    assert oai.responses.retrieve(done.id).model_dump() == done.model_dump()
    # The streamed response was stored: its call's output continues it, streamed too.
    events = list(oai.responses.create(model="m", previous_response_id=done.id,
                                       input=call_output(the_call(done)), tools=[WEATHER],
                                       temperature=0, max_output_tokens=30, stream=True))
    last = events[-1]
    assert last.type in ("response.completed", "response.incomplete"), last
    assert last.response.output and last.response.previous_response_id == done.id
    assert_continued_from_memory(done, last.response)


# --- Reasoning ----------------------------------------------------------------------------------

# ChatML whose generation prompt opens the thinking (as Qwen3's and DeepSeek R1's do).
THINK_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
    "{# a model that thinks writes </think> before its answer #}")


def test_reasoning_item_comes_first_streamed_and_not(binary, model, tmp_path):
    path = tmp_path / "think.jinja"
    path.write_text(THINK_TEMPLATE)
    srv = Server(binary, model, "-c", 2048, "--chat-template-file", path)
    try:
        oai = client(srv)
        ask = dict(model="m", input=ASK, temperature=0, max_output_tokens=24,
                   extra_body={"reasoning_budget_tokens": 6})
        r = oai.responses.create(**ask)
        assert [o.type for o in r.output] == ["reasoning", "message"], r.output
        thought = r.output[0]
        assert thought.id.startswith("rs_") and thought.summary == []
        assert thought.content[0].type == "reasoning_text" and thought.content[0].text
        assert "</think>" not in thought.content[0].text + r.output_text
        assert 0 < r.usage.output_tokens_details.reasoning_tokens <= 7
        events = list(oai.responses.create(**ask, stream=True))
        types = [e.type for e in events]
        start = types.index("response.reasoning_text.delta")
        assert types[start - 2:start] == ["response.output_item.added",
                                          "response.content_part.added"]
        end = types.index("response.reasoning_text.done")
        assert set(types[start:end]) == {"response.reasoning_text.delta"}
        assert "".join(e.delta for e in events[start:end]) == events[end].text
        assert types[end + 1:end + 3] == ["response.content_part.done",
                                          "response.output_item.done"]
        assert types.index("response.output_text.delta") > end
        final = events[-1].response
        assert [(o.type, o.id[:3]) for o in final.output] == [("reasoning", "rs_"),
                                                               ("message", "msg")]
        assert final.output[0].content[0].text == events[end].text
    finally:
        stop(srv)


# --- The store's bounds and figures ------------------------------------------------------------


def test_the_least_recently_used_response_goes_first(binary, model):
    srv = Server(binary, model, "-c", 1024, "--responses-max", 2, "--metrics")
    try:
        oai = client(srv)
        ids = [oai.responses.create(model="m", input=f"Say {w}", max_output_tokens=1).id
               for w in ("one", "two", "three")]
        with pytest.raises(openai.NotFoundError):
            oai.responses.retrieve(ids[0])
        assert oai.responses.retrieve(ids[1]).id == ids[1]
        assert oai.responses.retrieve(ids[2]).id == ids[2]
        assert metric(srv, "responses_stored") == 2
        assert metric(srv, "responses_evicted_total") == 1
        assert metric(srv, "responses_stored_total") == 3
        assert metric(srv, "responses_hits_total") == 2
        assert metric(srv, "responses_misses_total") == 1
        assert metric(srv, "responses_bytes") > 0 and metric(srv, "responses_max") == 2
    finally:
        stop(srv)
