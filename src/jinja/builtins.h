// The built-ins of the Jinja engine (module-private), with the semantics of jinja2 3.1
// (jinja2/filters.py, jinja2/tests.py) and of the Python str, dict and list methods templates
// call; and the interface through which they reach the renderer.
//
// Filters (filters.cc: text and numbers; sequence_filters.cc: lists and dicts): abs, batch,
//   capitalize, center, count, d, default, dictsort, e, escape, first, float, format, groupby,
//   indent, int, items, join, last, length, list, lower, map, max, min, reject, rejectattr,
//   replace, reverse, round, safe, select, selectattr, slice, sort, string, sum, title, tojson,
//   trim, unique, upper, wordcount.
// Tests (tests.cc): boolean, callable, defined, divisibleby, eq, equalto, escaped, even, false,
//   float, ge, greaterthan, gt, in, integer, iterable, le, lessthan, lower, lt, mapping, ne,
//   none, number, odd, sameas, sequence, string, true, undefined, upper, and == != < <= > >=.
// Methods (methods.cc): str: capitalize, count, endswith, find, isalnum, isalpha, isdigit,
//   islower, isspace, isupper, format, join, lower, lstrip, removeprefix, removesuffix, replace,
//   rfind, rsplit, rstrip, split, splitlines, startswith, strip, title, upper. dict: get,
//   items, keys, values. list: count, index.
// Globals (globals.cc): range (at most 100000 items, as jinja2's sandbox), namespace, dict,
//   raise_exception, strftime_now.
// String formatting (format.cc): `fmt % args` and str.format; JSON (json.cc): tojson.
// Case mapping (upper, lower, title, capitalize, and the case folding of sort/unique) covers
// Latin-1, Latin Extended-A, Greek and Cyrillic; letters of other scripts keep their case
// (Python maps every cased letter): py_str.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "jinja/value.h"

namespace mnemo::jinja {

/// What the built-ins need from the renderer: errors, and calling back into values.
class Renderer {
 public:
  virtual ~Renderer() = default;
  /// Records an error (the first one wins) and returns Undefined; callers return at once.
  virtual Value fail(int line, std::string message) = 0;
  virtual bool failed() const = 0;
  /// Calls a callable value (macro, built-in).
  virtual Value call(const Value& fn, Args& args) = 0;
  /// Applies the filter or test named `name` to `v` with extra arguments.
  virtual Value filter(std::string_view name, const Value& v, Args& args) = 0;
  virtual Value test(std::string_view name, const Value& v, Args& args) = 0;
  /// obj.name / obj[name] as in a template.
  virtual Value attribute(const Value& obj, const std::string& name, int line) = 0;
  /// strftime_now's clock, and whether it is UTC.
  virtual int64_t now(bool* utc) const = 0;
  /// Counts one unit of work; false (after recording the error) once the budget is spent.
  virtual bool step() = 0;
  /// Counts n units of work at once (a filter's loop over n items).
  virtual bool steps(uint64_t n) = 0;
  /// Before building a value of about `bytes` bytes: false (after recording an OutOfRange
  /// error) when that is past the render's output limit.
  virtual bool reserve(uint64_t bytes) = 0;
};

// --- Entry points -----------------------------------------------------------------------------

/// The filter `name` applied to `v` (`args` holds the rest). Sets an error through `r` for an
/// unknown filter or bad arguments.
Value apply_filter(Renderer& r, std::string_view name, const Value& v, Args& args);
/// The test `name` (`is name(args)`); a bool, or an error through `r`.
Value apply_test(Renderer& r, std::string_view name, const Value& v, Args& args);
/// A method of a str, dict or list (`"a b".split()`, `d.items()`); `*found` false when `obj`
/// has no such method.
Value call_method(Renderer& r, const Value& obj, const std::string& name, Args& args, bool* found);
/// The globals every template sees: range, namespace, dict, raise_exception, strftime_now.
void add_globals(Dict* globals);

// --- Filters, by concept ----------------------------------------------------------------------

/// One filter: `name` is the name it was called by (aliases such as first/last share one).
using FilterFn = Value (*)(Renderer& r, std::string_view name, const Value& v, Args& args);
/// Filter name -> implementation.
using FilterTable = std::unordered_map<std::string_view, FilterFn>;
/// Adds the filters of text and numbers (filters.cc).
void add_text_filters(FilterTable* table);
/// Adds the filters of lists and dicts (sequence_filters.cc).
void add_sequence_filters(FilterTable* table);

// --- Helpers shared by filters and methods (sequence_filters.cc) -------------------------------

/// The items of an iterable as filters see them: a list's items, a dict's keys, a string's
/// code points, none for Undefined. false (after r.fail) for a value that is not iterable.
bool items_of(Renderer& r, const Value& v, int line, std::vector<Value>* out);
/// An attribute path "a.b.0" of `v`, as jinja2's make_attrgetter (numeric parts index lists).
Value get_path(Renderer& r, const Value& v, const std::string& path, int line);
/// A sort key: a string lower-cased unless case_sensitive, any other value itself.
Value sort_key(const Value& v, bool case_sensitive);
/// Sorts *items stably by sort_key (of their `attribute` path when not empty). false (after
/// r.fail) when two keys cannot be ordered or the step budget is spent.
bool sort_values(Renderer& r, std::vector<Value>* items, bool reverse, bool case_sensitive,
                 const std::string& attribute, int line);

// --- String formatting (format.cc) and JSON (json.cc) ------------------------------------------

/// Python's printf-style `fmt % args` (%s %r %d %i %f %e %x %o %c %%, flags, width, precision).
Value percent_format(Renderer& r, const std::string& fmt, const std::vector<Value>& args, int line);
/// Python's str.format for what templates write: {} {0} {name} (and {{ }}), each with an
/// optional !s / !r and a format spec [[fill]align][width][.precision][type] for s, d and f.
Value str_format(Renderer& r, const std::string& f, const Args& args, int line);
/// json.dumps(v, ensure_ascii=False, indent, separators, sort_keys) (Python's json module):
/// `indent` nullptr for one line, else the text of one level of indentation. false (after
/// r.fail) for a value JSON cannot hold (Undefined, a callable) or nesting past 256.
bool to_json(Renderer& r, const Value& v, const std::string* indent, const std::string& item_sep,
             const std::string& key_sep, bool sort_keys, int line, std::string* out);
/// JSON text with every non-ASCII code point written as \uXXXX (a UTF-16 surrogate pair past
/// U+FFFF), as json.dumps(ensure_ascii=True). Only string contents hold non-ASCII.
std::string json_ascii_escape(const std::string& json);

}  // namespace mnemo::jinja
