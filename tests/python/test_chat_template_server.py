"""Chat templates in `mnemo serve`: the Jinja engine by default (as llama-server's --jinja),
--no-jinja, --chat-template-file, --chat-template-kwargs, a request's chat_template_kwargs and
tools, raise_exception as a 400, the BOS a template writes cut when the tokenizer adds one,
a trailing assistant message continued. The reference for rendered text is Python's jinja2 set
up as transformers sets it up (helpers/chat_templates.py); where llama-server's own handling
decides (text parts, continuation), the expected strings are what llama-server (llama.cpp
build 11669) returns for the same request on the same model.
"""
import json
import subprocess
from datetime import datetime

import pytest
import requests

from helpers.chat_templates import gguf_template, render_reference
from helpers.paths import GEMMA3 as GEMMA
from helpers.paths import REPO_ROOT
from helpers.server import Server

# Written for this test: every variable the server passes, and an error for a conversation that
# starts with "Be brief." unless the request allows it (an error on any system message would
# make the server fold the system text into the user turn instead, as llama-server does).
TEMPLATE = """{#- a template written for mnemo's tests -#}
{%- if messages[0].content == 'Be brief.' and not allow_brief|default(false) -%}
  {{- raise_exception('this template refuses to be brief') -}}
{%- endif -%}
{{- bos_token -}}
{%- if tools %}[TOOLS {{ tools|map(attribute='function')|map(attribute='name')|join(',') }}]
{% endif -%}
{%- for m in messages %}
<{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>
{%- endfor %}
{%- if add_generation_prompt %}
<assistant>{% if think is defined %}[think={{ think }}]{% endif %}
{%- endif -%}
"""

CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi\n"},
     {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "2+2? é 日本"}],
]


def apply(srv, body):
    return requests.post(srv.url + "/apply-template", json=body, timeout=30)


@pytest.fixture(scope="module")
def smol(binary, smollm2_model):
    s = Server(binary, smollm2_model, "-np", 1, "-c", 512, "--temp", 0)
    yield s
    assert s.stop() == 0, s.log()


@pytest.mark.parametrize("conv", range(len(CONVERSATIONS)))
def test_default_renders_the_models_template_with_jinja(smol, smollm2_model, conv):
    template = gguf_template(smollm2_model)
    msgs = CONVERSATIONS[conv]
    want = render_reference(template, {"messages": msgs, "add_generation_prompt": True,
                                       "bos_token": "<|im_start|>",
                                       "eos_token": "<|im_end|>"}, datetime.now())
    r = apply(smol, {"messages": msgs})
    assert r.status_code == 200, r.text
    assert r.json()["prompt"] == want
    props = requests.get(smol.url + "/props", timeout=10).json()
    assert props["chat_template"] == template
    assert props["chat_template_mode"] == "jinja"


def test_text_parts_and_continuation_as_llama_server(smol):
    """Text parts are joined with "\\n"; a trailing assistant message is continued (its parts
    joined with "\\n\\n"): llama-server's answers to these requests on this model."""
    system = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
              "Hugging Face<|im_end|>\n")
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    r = apply(smol, {"messages": [{"role": "user", "content": parts},
                                  {"role": "assistant", "content": "pre"}]})
    assert r.json()["prompt"] == (system + "<|im_start|>user\na\nb<|im_end|>\n"
                                  "<|im_start|>assistant\npre")
    three = [{"type": "text", "text": t} for t in ("p1", "p2", "p3")]
    r = apply(smol, {"messages": [{"role": "user", "content": "hi"},
                                  {"role": "assistant", "content": three}]})
    assert r.json()["prompt"] == (system + "<|im_start|>user\nhi<|im_end|>\n"
                                  "<|im_start|>assistant\np1\n\np2\n\np3")


def test_template_file_kwargs_tools_and_errors(binary, smollm2_model, tmp_path):
    path = tmp_path / "t.jinja"
    path.write_text(TEMPLATE, encoding="utf-8")
    s = Server(binary, smollm2_model, "-np", 1, "-c", 512, "--temp", 0,
               "--chat-template-file", path, "--chat-template-kwargs", '{"think": "low"}')
    try:
        tools = [{"type": "function", "function": {"name": "get_time", "parameters": {}}},
                 {"type": "function", "function": {"name": "add", "parameters": {}}}]
        for body in ({"messages": CONVERSATIONS[0]},
                     {"messages": CONVERSATIONS[0], "tools": tools},
                     {"messages": CONVERSATIONS[1], "chat_template_kwargs": {"allow_brief": True,
                                                                             "think": "high"}}):
            ctx = {"messages": body["messages"], "add_generation_prompt": True,
                   "bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "think": "low"}
            ctx.update(body.get("chat_template_kwargs", {}))
            if "tools" in body:
                ctx["tools"] = body["tools"]
            want = render_reference(TEMPLATE, ctx, datetime.now())
            r = apply(s, body)
            assert r.status_code == 200, r.text
            assert r.json()["prompt"] == want
        assert "[TOOLS get_time,add]" in apply(
            s, {"messages": CONVERSATIONS[0], "tools": tools}).json()["prompt"]
        # raise_exception is a 400 with the template's words, on both endpoints.
        r = apply(s, {"messages": CONVERSATIONS[1]})
        assert r.status_code == 400 and "this template refuses to be brief" in r.text, r.text
        r = requests.post(s.url + "/v1/chat/completions", timeout=30,
                          json={"messages": CONVERSATIONS[1], "max_tokens": 2})
        assert r.status_code == 400 and "this template refuses to be brief" in r.text, r.text
        r = requests.post(s.url + "/v1/chat/completions", timeout=30,
                          json={"messages": CONVERSATIONS[0], "max_tokens": 2})
        assert r.status_code == 200, r.text
        assert str(tmp_path) not in requests.get(s.url + "/props", timeout=10).text
    finally:
        assert s.stop() == 0, s.log()


def test_no_jinja_uses_the_family_format(binary, smollm2_model):
    s = Server(binary, smollm2_model, "-np", 1, "-c", 256, "--no-jinja")
    try:
        props = requests.get(s.url + "/props", timeout=10).json()
        assert props["chat_template"] == "chatml" and props["chat_template_mode"] == "chatml"
        r = apply(s, {"messages": CONVERSATIONS[0]})
        assert r.json()["prompt"].endswith("<|im_start|>user\nHi<|im_end|>\n"
                                           "<|im_start|>assistant\n")
    finally:
        assert s.stop() == 0


def test_bos_written_by_the_template_is_not_doubled(binary, models_dir, tmp_path):
    """Gemma's tokenizer adds <bos> itself: the template's own copy is cut (as llama-server), so
    the prompt holds one BOS."""
    model = models_dir / GEMMA
    if not model.exists():
        pytest.skip("Gemma 3 not fetched")
    path = tmp_path / "t.jinja"
    path.write_text(TEMPLATE, encoding="utf-8")
    s = Server(binary, model, "-np", 1, "-c", 512, "--chat-template-file", path)
    try:
        props = requests.get(s.url + "/props", timeout=10).json()
        assert props["bos_token"] == "<bos>"
        text = apply(s, {"messages": CONVERSATIONS[0]}).json()["prompt"]
        full = render_reference(TEMPLATE, {"messages": CONVERSATIONS[0],
                                           "add_generation_prompt": True, "bos_token": "<bos>",
                                           "eos_token": "<eos>"}, datetime.now())
        assert full.startswith("<bos>") and text == full[len("<bos>"):], (text, full)
        toks = requests.post(s.url + "/tokenize", timeout=10, json={
            "content": text, "add_special": True, "parse_special": True}).json()["tokens"]
        bos = requests.post(s.url + "/tokenize", timeout=10, json={
            "content": "<bos>", "add_special": False, "parse_special": True}).json()["tokens"]
        assert toks[0] == bos[0] and bos[0] not in toks[1:]
        chat = requests.post(s.url + "/v1/chat/completions", timeout=60, json={
            "messages": CONVERSATIONS[0], "max_tokens": 1}).json()
        assert chat["usage"]["prompt_tokens"] == len(toks)
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("flags,words", [
    (["--no-jinja", "--chat-template", "nope"], "unknown chat template name 'nope'"),
    (["--chat-template", "{% if %}"], "line 1"),
    (["--chat-template-file", "/nonexistent/t.jinja"], "cannot read"),
    (["--chat-template-kwargs", "[1]"], "must be a JSON object"),
])
def test_bad_template_flags_stop_the_server(binary, smollm2_model, flags, words):
    r = subprocess.run([str(binary), "serve", "-m", str(smollm2_model), "--port", "0", *flags],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and words in r.stderr, r.stderr


# llama-server's renderings (tests/fixtures/make_builtin_templates.py records them).
BUILTIN = json.loads((REPO_ROOT / "tests" / "fixtures" / "builtin_chat_templates.json")
                     .read_text(encoding="utf-8"))


def all_prompts(srv, conversations):
    """{conversation id: /apply-template's prompt, or {"status": code} when not 200}.

    Known difference (docs/api.md): mnemo's server asks a tool message for its tool_call_id (a
    400 without one), where llama-server renders it; such a conversation must be a 400 here and
    is left out (the built-in formats' rendering of it is compared in chat_builtin_test.cc)."""
    out = {}
    for cid, msgs in conversations.items():
        r = apply(srv, {"messages": msgs})
        if any(m["role"] == "tool" and "tool_call_id" not in m for m in msgs):
            assert r.status_code == 400 and "tool_call_id" in r.text, r.text
            continue
        out[cid] = r.json()["prompt"] if r.status_code == 200 else {"status": r.status_code}
    return out


def recorded(cases, conversations):
    """The recorded answers for the conversations all_prompts compares."""
    return {cid: w for cid, w in cases.items() if cid in conversations and not any(
        m["role"] == "tool" and "tool_call_id" not in m for m in conversations[cid])}


@pytest.mark.parametrize("name", ["llama2-sys-bos", "mistral-v7", "command-r", "deepseek3"])
def test_builtin_name_renders_as_llama_server(binary, smollm2_model, name):
    """--no-jinja --chat-template NAME: llama.cpp's built-in format, byte for byte as
    llama-server's /apply-template (every name is compared in chat_builtin_test.cc)."""
    s = Server(binary, smollm2_model, "-np", 1, "-c", 256, "--no-jinja", "--chat-template", name)
    try:
        convs = BUILTIN["conversations"]
        assert all_prompts(s, convs) == recorded(BUILTIN["templates"][name], convs)
        props = requests.get(s.url + "/props", timeout=10).json()
        assert props["chat_template_mode"] == name
    finally:
        assert s.stop() == 0, s.log()


@pytest.mark.parametrize("flags,rule", [
    (["--chat-template", "hello"], "jinja_raw_text"),
    (["--jinja", "--chat-template", "llama2"], "jinja_builtin_name"),
])
def test_jinja_takes_any_text_as_the_template(binary, smollm2_model, flags, rule):
    """With Jinja (the default) --chat-template is the template's text, even without markup;
    with --jinja given, a built-in name too: llama-server renders it as it stands."""
    s = Server(binary, smollm2_model, "-np", 1, "-c", 256, *flags)
    try:
        convs = BUILTIN["conversations"]
        assert all_prompts(s, convs) == recorded(BUILTIN["rules"][rule], convs)
    finally:
        assert s.stop() == 0, s.log()


def test_builtin_name_without_jinja_flag_is_the_builtin_format(binary, smollm2_model):
    """--chat-template vicuna with Jinja on by default: the built-in format (what
    llama-server renders with --no-jinja), not the name's text (llama-server's rendering,
    recorded as default_builtin_name: a documented difference)."""
    s = Server(binary, smollm2_model, "-np", 1, "-c", 256, "--chat-template", "vicuna")
    try:
        convs = BUILTIN["conversations"]
        got = all_prompts(s, convs)
        assert got == recorded(BUILTIN["templates"]["vicuna"], convs)
        assert got != recorded(BUILTIN["rules"]["default_builtin_name"], convs)
    finally:
        assert s.stop() == 0, s.log()


def test_no_jinja_refuses_an_unknown_text(binary, smollm2_model):
    """llama-server --no-jinja --chat-template hello exits at start; so does mnemo."""
    assert "error" in BUILTIN["rules"]["no_jinja_raw_text"]
    r = subprocess.run([str(binary), "serve", "-m", str(smollm2_model), "--port", "0",
                        "--no-jinja", "--chat-template", "hello"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "unknown chat template name 'hello'" in r.stderr, r.stderr


@pytest.mark.parametrize("which", ["no_system", "drop_system"])
def test_system_folded_into_the_next_message_as_llama_server(binary, smollm2_model, which):
    """A template that raises on a system message (Gemma 2's style) or writes none: the first
    system message is folded into the next message, as llama-server does, not a 400."""
    rules = BUILTIN["rules"]
    s = Server(binary, smollm2_model, "-np", 1, "-c", 256,
               "--chat-template", rules[which + "_template"])
    try:
        got = all_prompts(s, rules["fold_conversations"])
        want = recorded(rules[which + "_jinja"], rules["fold_conversations"])
        for cid, w in want.items():
            if isinstance(w, dict):  # the peer answered 400 too: the template still raised
                want[cid] = {"status": 400}
        if which == "no_system":
            # Known difference (docs/api.md): a lone system message leaves no messages, and this
            # template's messages[0]['role'] is an error in mnemo's engine (as in jinja2), where
            # llama-server renders the generation prompt alone.
            assert got.pop("sys_only") == {"status": 400}
            want.pop("sys_only")
        assert got == want
    finally:
        assert s.stop() == 0, s.log()
