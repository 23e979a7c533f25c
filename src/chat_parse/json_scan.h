// A scanner for JSON text (RFC 8259) that may be cut short: it tells a complete value from a
// prefix of one (the model has not finished writing it) and from text that can never become
// JSON. Used by every parser of this module, each scan from scratch (no state between calls).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace mnemo::chat_parse {

enum class Scan : unsigned char {
  kComplete,    // a whole value
  kIncomplete,  // the text ends inside a value that more text could complete
  kInvalid,     // not JSON, whatever follows
};

/// The outcome of scanning one value.
struct ScanEnd {
  Scan status = Scan::kInvalid;
  size_t end = 0;  // kComplete: one past the value; kIncomplete: text.size(); kInvalid: where
};

/// The first position at or after `pos` that is not JSON white space (space, \t, \n, \r).
size_t skip_ws(std::string_view text, size_t pos);

/// Scans the value starting at text[pos] (no white space skipped). `final`: the text is whole,
/// so a number or literal running to its end is complete. Nesting deeper than 512 is kInvalid.
ScanEnd scan_value(std::string_view text, size_t pos, bool final = false);

/// One member of an object.
struct JsonMember {
  std::string key;       // decoded
  size_t value_pos = 0;  // first byte of the value (text.size() when not begun)
  ScanEnd value;         // the value's scan (kIncomplete when not begun)
};

/// The members of the object at text[pos] ('{'). kIncomplete: `members` holds those whose key is
/// complete, the last one's value possibly incomplete.
struct ObjectScan {
  Scan status = Scan::kInvalid;
  size_t end = 0;
  std::vector<JsonMember> members;
  const JsonMember* find(std::string_view key) const;
};
ObjectScan scan_object(std::string_view text, size_t pos);

/// Decodes the JSON string starting at text[pos] ('"') up to `end` at most. *closed: the string
/// ended (its closing quote is before `end`). An escape or surrogate pair cut by `end` is left
/// out, so the result only grows as `end` does. Precondition: scan_value did not find it kInvalid.
std::string decode_string(std::string_view text, size_t pos, size_t end, bool* closed);

/// `s` as the body of a JSON string (no quotes): " \ and control characters escaped, one
/// character at a time (so the escape of a prefix is a prefix of the escape).
std::string json_escape(std::string_view s);

/// The length of `s` without a trailing incomplete UTF-8 sequence.
size_t utf8_complete_prefix(std::string_view s);

}  // namespace mnemo::chat_parse
