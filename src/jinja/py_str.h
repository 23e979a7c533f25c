// Python's str over UTF-8 bytes (module-private): characters, whitespace, case mapping and the
// str algorithms (strip, split, replace, splitlines) that filters and methods share.
//
// A template's strings are bytes that are almost always UTF-8, and Python's str semantics count
// characters. A character here is a structurally complete UTF-8 sequence (base/utf8.h's
// sequence_length: a lead byte and the continuation bytes it announces); any other byte stands
// for itself, as one character whose code point is the byte's value.
//
// Case mapping covers Latin-1, Latin Extended-A, Greek and Cyrillic; letters of other scripts
// keep their case (Python maps every cased letter).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mnemo::jinja {

/// The characters of `s` (see the file comment), each as the bytes that spell it.
std::vector<std::string_view> code_points(std::string_view s);
/// Python's len(s), counted without materializing: the bytes of `s` that are not continuation
/// bytes.
size_t py_len(std::string_view s);
/// Python's str.isspace() for one character (its bytes, as code_points gives them).
bool is_py_space(std::string_view cp);
/// Python's str.isalpha() for one byte (any non-ASCII byte counts as a letter).
bool is_alpha(unsigned char c);

/// Python's str.strip/lstrip/rstrip: `chars` nullptr for whitespace.
std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right);
/// Python's str.lower(), with its context rules (final sigma, U+0130).
std::string py_lower(const std::string& s);
/// Python's str.upper() ("ß" to "SS", the Latin ligatures expanded).
std::string py_upper(const std::string& s);
/// Python's str.title(): a cased letter after an uncased character upper case, others lower.
std::string py_title(const std::string& s);
/// jinja2's title filter: each word (split at whitespace, -, [, (, {) has its first character
/// upper-cased and the rest lower-cased.
std::string jinja_title(const std::string& s);
/// Python's str.capitalize(): the first character upper-cased, the rest lower-cased.
std::string capitalize(const std::string& s);

/// Python's str.split(sep, maxsplit) (`sep` nullptr: runs of whitespace), or rsplit when
/// `from_right`. maxsplit < 0: no limit. `sep` must not be empty.
std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit,
                                  bool from_right);
/// Python's str.splitlines() (line ends \n, \r\n, \r and the rest Python knows).
std::vector<std::string> splitlines(const std::string& s);
/// Python's str.replace(old, new, count); count < 0: all.
std::string py_replace(const std::string& s, const std::string& from, const std::string& to,
                       int64_t count);
/// The size py_replace's result would have (checked against the output limit first).
uint64_t replace_size(const std::string& s, const std::string& from, const std::string& to,
                      int64_t count);

/// Python's int(str): optional sign, digits and underscores, whitespace around; false when it
/// is not one or does not fit 64 bits.
bool parse_int(const std::string& text, int64_t* out);
/// Python's float(str) for the forms templates meet; false when it is not a number.
bool parse_float(const std::string& text, double* out);

}  // namespace mnemo::jinja
