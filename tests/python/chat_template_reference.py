"""Reference rendering of chat templates with Python's jinja2, set up the way Hugging Face
transformers renders `tokenizer.chat_template` (its chat-template rendering settings):

- jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the
  jinja2.ext.loopcontrols extension ({% break %}, {% continue %}) and a `{% generation %}` ...
  `{% endgeneration %}` block tag that only renders its body (transformers uses it to mark the
  assistant's tokens; the text is unchanged);
- keep_trailing_newline left False (a template's final newline is dropped), autoescape off;
- the `tojson` filter replaced by tojson(x, ensure_ascii=False, indent=None, separators=None,
  sort_keys=False) -> json.dumps with those arguments (no HTML escaping; non-ASCII kept unless
  ensure_ascii);
- globals raise_exception(msg), which raises jinja2.exceptions.TemplateError(msg), and
  strftime_now(fmt), which formats `now` (the tests fix it instead of reading the clock).

render_reference raises whatever jinja2 raises (syntax errors, raise_exception, type errors).
"""
import functools
import json
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationBlock(Extension):
    """`{% generation %}body{% endgeneration %}` renders as `body`."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body", []), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


@functools.lru_cache(maxsize=64)
def _compiled(template_text: str, now: datetime):
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[GenerationBlock, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = now.strftime
    return env.from_string(template_text)


def render_reference(template_text: str, context: dict, now: datetime) -> str:
    """`template_text` rendered over `context` (messages, add_generation_prompt, bos_token, ...)
    with strftime_now reading `now`."""
    return _compiled(template_text, now).render(**context)
