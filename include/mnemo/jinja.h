// Jinja templates, as chat templates use them: the template language of Jinja2
// (https://jinja.palletsprojects.com/en/3.1.x/templates/), rendered the way Hugging Face
// transformers renders a model's tokenizer.chat_template (apply_chat_template): trim_blocks and
// lstrip_blocks on, no autoescaping, the loopcontrols extension ({% break %}, {% continue %}),
// a `generation` block that renders its body, `tojson` as Python's json.dumps(x,
// ensure_ascii=False, indent, separators, sort_keys), and the globals raise_exception(message)
// and strftime_now(format). Output equals Python jinja2 3.1's for the same template and context,
// byte for byte (tests/python/test_chat_template_jinja.py checks it).
//
// What is supported:
//   - text, {{ expression }}, {% statement %}, {# comment #}, whitespace control (-, +),
//     {% raw %}; the source's line ends normalized to \n and one trailing newline dropped (as
//     jinja2's keep_trailing_newline=False).
//   - statements: if/elif/else, for (tuple targets, `if` filter, else, the loop variable:
//     index, index0, revindex, revindex0, first, last, length, previtem, nextitem, depth,
//     depth0, cycle()), break, continue, set (names, tuples, namespace attributes, blocks with
//     filters), macro (positional, keyword and default arguments), filter blocks, with,
//     generation.
//   - expressions: literals (strings with Python escapes, integers, floats, true/false/none in
//     either case, lists, tuples, dicts), attribute and item access, slices, calls, filters,
//     tests (`is`, `is not`), arithmetic (+ - * / // % **), `~`, comparisons (chained), in,
//     not in, and/or/not (returning operands, as Python), conditional expressions.
//   - the filters, tests, string/dict methods and globals listed in src/jinja/builtins.h.
// Not supported (a parse or render error naming it): include, import, extends, block, call,
// recursive loops, other methods of Python objects.
//
// Values print as Python's str() does: None, True, 1.0, 1e+20, ['a', 1], {'k': 'v'}; an
// undefined variable prints as "" and is an error when an attribute of it is read (jinja2's
// default Undefined).
//
// Limits, so a hostile template (a GGUF's or a --chat-template-file's) cannot crash, hang or
// exhaust the server: blocks nested at most 256 deep and expression trees at most 256 high (long
// chains such as 1+1+...+1 included); rendering recurses at most 1000 levels (statements,
// expressions and macro calls together; macro calls at most 64); values nest at most 256 deep
// and a namespace cannot hold itself; no value and no output grows past max_output_bytes; work
// is counted in steps (RenderOptions::max_steps; loops inside filters count per item). Past a
// limit, parse() or render() returns an error.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "mnemo/status.h"

namespace mnemo::jinja {

/// How the source is split into text and tags (jinja2's Environment options of the same names).
struct ParseOptions {
  /// Drop the first newline after a block tag or comment ({% ... %}\n).
  bool trim_blocks = true;
  /// Drop the spaces and tabs from the start of a line up to a block tag or comment.
  bool lstrip_blocks = true;
};

/// Bounds and clock for one render.
struct RenderOptions {
  /// strftime_now's clock: seconds since the Unix epoch, formatted in UTC. -1: the current
  /// time, in the local time zone (as Python's datetime.now()).
  int64_t now_unix = -1;
  /// The output may not exceed this many bytes.
  size_t max_output_bytes = size_t{64} << 20;
  /// Evaluation steps before the render stops: one per expression evaluated and statement
  /// run, plus one per 1024 bytes of every string value produced (copies of long strings are
  /// work too). About a second of rendering on a 2020s server core.
  uint64_t max_steps = 5'000'000;
};

class Program;  // the parsed form (src/jinja/syntax.h)

/// A parsed template. Immutable; cheap to copy; render() may run on many threads at once.
class Template {
 public:
  /// Parses `source`. Errors: InvalidArgument "line N: <problem>" (a syntax error, an unknown
  /// statement, an unclosed block, nesting deeper than 256).
  static Result<Template> parse(std::string_view source, const ParseOptions& options = {});

  /// Renders with the variables of `context` (a JSON object: each member a variable; JSON
  /// objects become dicts keeping their key order, arrays lists). Errors: InvalidArgument with
  /// the message of raise_exception() or "line N: <problem>" (a type error, an undefined
  /// variable's attribute, an unknown filter), OutOfRange when a limit of `options` is reached.
  Result<std::string> render(const nlohmann::ordered_json& context,
                             const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const Program> program_;
};

}  // namespace mnemo::jinja
