"""Chat templates in `mnemo serve`: the Jinja engine by default (as llama-server's --jinja),
--no-jinja, --chat-template-file, --chat-template-kwargs, a request's chat_template_kwargs and
tools, raise_exception as a 400, the BOS a template writes cut when the tokenizer adds one,
a trailing assistant message continued. The reference for rendered text is Python's jinja2 set
up as transformers sets it up (helpers/chat_templates.py); where llama-server's own handling
decides (text parts, continuation), the expected strings are what llama-server (llama.cpp
build 11669) returns for the same request on the same model.
"""
import subprocess
from datetime import datetime

import pytest
import requests

from helpers.chat_templates import gguf_template, render_reference
from helpers.paths import GEMMA3 as GEMMA
from helpers.server import Server

# Written for this test: every variable the server passes, and an error for a system message
# unless the request allows it.
TEMPLATE = """{#- a template written for mnemo's tests -#}
{%- if messages[0].role == 'system' and not allow_system|default(false) -%}
  {{- raise_exception('this template takes no system message') -}}
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
                     {"messages": CONVERSATIONS[1], "chat_template_kwargs": {"allow_system": True,
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
        assert r.status_code == 400 and "this template takes no system message" in r.text, r.text
        r = requests.post(s.url + "/v1/chat/completions", timeout=30,
                          json={"messages": CONVERSATIONS[1], "max_tokens": 2})
        assert r.status_code == 400 and "this template takes no system message" in r.text, r.text
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
    (["--chat-template", "nope"], "unknown chat template name 'nope'"),
    (["--chat-template", "{% if %}"], "line 1"),
    (["--chat-template-file", "/nonexistent/t.jinja"], "cannot read"),
    (["--chat-template-kwargs", "[1]"], "must be a JSON object"),
])
def test_bad_template_flags_stop_the_server(binary, smollm2_model, flags, words):
    r = subprocess.run([str(binary), "serve", "-m", str(smollm2_model), "--port", "0", *flags],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and words in r.stderr, r.stderr
