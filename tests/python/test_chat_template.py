"""mnemo's chat templates against Jinja2 running the model's own template.

SmolLM2's GGUF carries a chatml template with a default system message; mnemo recognises the
family and renders it natively (include/mnemo/chat.h). Here Jinja2 renders the template string
read from the GGUF (as Hugging Face transformers does: sandboxed, trim_blocks,
lstrip_blocks) and the two texts must be identical. A chatml template written here (with the
default-system idiom spelled with escapes) is checked the same way. Gemma 3 270M has no template:
mnemo warns and falls back to chatml. The gemma and llama3 families are compared with
hand-written prompts (also in src/tokenizer/chat_test.cc).
"""
import json
import subprocess

import pytest

jinja2 = pytest.importorskip("jinja2")
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

from helpers.chat_templates import gguf_template  # noqa: E402
from helpers.paths import GEMMA3, SMOLLM2  # noqa: E402

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}],
    [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "  And 3+3?\n\n"},
    ],
    [
        {"role": "system", "content": "Line one\nLine two"},
        {"role": "user", "content": "café 你好 🦙 <b>tags</b> {{ not jinja }}"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "\tindented\r\nCRLF"},
    ],
    [{"role": "assistant", "content": "I speak first."}, {"role": "user", "content": "ok"}],
]

# Our own chatml template in the style of Qwen 2's: a constant system turn when the conversation
# has none, newlines written as Jinja escapes, whitespace control with '-'.
OWN_CHATML = (
    "{%- if messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a careful assistant.<|im_end|>\\n' }}"
    "{%- endif %}\n"
    "{%- for m in messages %}\n"
    "    {{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def _jinja(template, messages, add_generation_prompt):
    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(
        messages=messages, add_generation_prompt=add_generation_prompt,
        bos_token="", eos_token="")


def _tool(build_dir):
    exe = build_dir / "tests" / "tools" / "tokenize_tool"
    if not exe.exists():
        pytest.fail(f"{exe} not built")
    return exe


def _ours(build_dir, args, messages, add_generation_prompt):
    out = subprocess.run(
        [str(_tool(build_dir)), "--chat", *args,
         "--add-generation-prompt", "1" if add_generation_prompt else "0"],
        input=json.dumps(messages).encode(), capture_output=True, check=True)
    return json.loads(out.stdout), out.stderr.decode()


def _model(models_dir, name):
    path = models_dir / name
    if not path.exists():
        pytest.skip(f"model {name} absent (run scripts/fetch-model)")
    return path


@pytest.mark.parametrize("add_gen", [True, False])
@pytest.mark.parametrize("conv", range(len(CONVERSATIONS)))
def test_smollm2_template_matches_jinja2(build_dir, models_dir, conv, add_gen):
    model = _model(models_dir, SMOLLM2)
    template = gguf_template(model)
    assert template and "<|im_start|>" in template
    messages = CONVERSATIONS[conv]
    ours, _ = _ours(build_dir, [str(model)], messages, add_gen)
    assert ours["family"] == "chatml" and ours["recognized"]
    assert ours["default_system"].startswith("You are a helpful AI assistant named SmolLM")
    assert ours["text"] == _jinja(template, messages, add_gen)


@pytest.mark.parametrize("add_gen", [True, False])
@pytest.mark.parametrize("conv", range(len(CONVERSATIONS)))
def test_own_chatml_template_matches_jinja2(build_dir, tmp_path, conv, add_gen):
    path = tmp_path / "chatml.jinja"
    path.write_text(OWN_CHATML, encoding="utf-8")
    messages = CONVERSATIONS[conv]
    ours, _ = _ours(build_dir, ["--template", str(path)], messages, add_gen)
    assert ours["default_system"] == "You are a careful assistant."
    assert ours["text"] == _jinja(OWN_CHATML, messages, add_gen)


def test_missing_template_warns_and_uses_chatml(build_dir, models_dir):
    model = _model(models_dir, GEMMA3)
    assert gguf_template(model) is None
    ours, err = _ours(build_dir, [str(model)], CONVERSATIONS[0], True)
    assert ours["family"] == "chatml" and not ours["recognized"]
    assert "no tokenizer.chat_template" in err
    assert ours["text"] == "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n"


def test_gemma_and_llama3_by_name(build_dir):
    conv = CONVERSATIONS[2]
    gemma, _ = _ours(build_dir, ["--name", "gemma"], conv, True)
    assert gemma["text"] == (
        "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n"
        "<start_of_turn>model\n4<end_of_turn>\n"
        "<start_of_turn>user\nAnd 3+3?<end_of_turn>\n"
        "<start_of_turn>model\n")
    llama3, _ = _ours(build_dir, ["--name", "llama3"], conv, False)
    assert llama3["text"] == (
        "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nAnd 3+3?<|eot_id|>")


def test_rendered_prompt_tokenizes_to_control_tokens(build_dir, models_dir):
    """The rendered SmolLM2 prompt, tokenized with parse_special, uses <|im_start|>/<|im_end|>."""
    model = _model(models_dir, SMOLLM2)
    ours, _ = _ours(build_dir, [str(model)], CONVERSATIONS[0], True)
    out = subprocess.run([str(_tool(build_dir)), str(model), "--add-special", "1",
                          "--parse-special", "1"], input=ours["text"].encode(),
                         capture_output=True, check=True)
    ids = json.loads(out.stdout)["ids"]
    assert ids[0] == 1  # <|im_start|>
    assert ids.count(1) == 3 and ids.count(2) == 2  # 3 turns opened, 2 closed
