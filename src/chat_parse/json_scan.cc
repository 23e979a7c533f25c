// JSON scanning of possibly unfinished text (contract in json_scan.h).
#include "chat_parse/json_scan.h"

#include <fmt/format.h>

namespace mnemo::chat_parse {
namespace {

constexpr int kMaxDepth = 512;

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

ScanEnd incomplete(std::string_view text) { return {Scan::kIncomplete, text.size()}; }
ScanEnd invalid(size_t at) { return {Scan::kInvalid, at}; }

ScanEnd scan_string(std::string_view text, size_t pos) {
  size_t i = pos + 1;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '"') return {Scan::kComplete, i + 1};
    if (c < 0x20) return invalid(i);
    if (c != '\\') {
      ++i;
      continue;
    }
    if (i + 1 >= text.size()) return incomplete(text);
    const char e = text[i + 1];
    if (e == 'u') {
      for (size_t k = 0; k < 4; ++k) {
        if (i + 2 + k >= text.size()) return incomplete(text);
        if (!is_hex(text[i + 2 + k])) return invalid(i + 2 + k);
      }
      i += 6;
    } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' ||
               e == 't') {
      i += 2;
    } else {
      return invalid(i + 1);
    }
  }
  return incomplete(text);
}

ScanEnd scan_number(std::string_view text, size_t pos, bool final) {
  size_t i = pos;
  auto at_end = [&] { return i >= text.size(); };
  auto ended = [&]() -> ScanEnd { return final ? ScanEnd{Scan::kComplete, i} : incomplete(text); };
  if (text[i] == '-') ++i;
  if (at_end()) return incomplete(text);
  if (text[i] == '0') {
    ++i;
  } else if (is_digit(text[i])) {
    while (!at_end() && is_digit(text[i])) ++i;
  } else {
    return invalid(i);
  }
  if (at_end()) return ended();
  if (text[i] == '.') {
    ++i;
    if (at_end()) return incomplete(text);
    if (!is_digit(text[i])) return invalid(i);
    while (!at_end() && is_digit(text[i])) ++i;
    if (at_end()) return ended();
  }
  if (text[i] == 'e' || text[i] == 'E') {
    ++i;
    if (!at_end() && (text[i] == '+' || text[i] == '-')) ++i;
    if (at_end()) return incomplete(text);
    if (!is_digit(text[i])) return invalid(i);
    while (!at_end() && is_digit(text[i])) ++i;
    if (at_end()) return ended();
  }
  return {Scan::kComplete, i};
}

ScanEnd scan_literal(std::string_view text, size_t pos, std::string_view word) {
  for (size_t k = 0; k < word.size(); ++k) {
    if (pos + k >= text.size()) return incomplete(text);
    if (text[pos + k] != word[k]) return invalid(pos + k);
  }
  return {Scan::kComplete, pos + word.size()};
}

ScanEnd scan_at(std::string_view text, size_t pos, bool final, int depth);

// The rest of an array or object after its opening bracket.
ScanEnd scan_container(std::string_view text, size_t pos, bool final, int depth) {
  const bool object = text[pos] == '{';
  const char close = object ? '}' : ']';
  size_t i = skip_ws(text, pos + 1);
  if (i >= text.size()) return incomplete(text);
  if (text[i] == close) return {Scan::kComplete, i + 1};
  while (true) {
    if (object) {
      if (text[i] != '"') return invalid(i);
      ScanEnd k = scan_string(text, i);
      if (k.status != Scan::kComplete) return k;
      i = skip_ws(text, k.end);
      if (i >= text.size()) return incomplete(text);
      if (text[i] != ':') return invalid(i);
      i = skip_ws(text, i + 1);
      if (i >= text.size()) return incomplete(text);
    }
    ScanEnd v = scan_at(text, i, /*final=*/false, depth + 1);
    if (v.status != Scan::kComplete) return v;
    i = skip_ws(text, v.end);
    if (i >= text.size()) return incomplete(text);
    if (text[i] == close) return {Scan::kComplete, i + 1};
    if (text[i] != ',') return invalid(i);
    i = skip_ws(text, i + 1);
    if (i >= text.size()) return incomplete(text);
  }
}

ScanEnd scan_at(std::string_view text, size_t pos, bool final, int depth) {
  if (pos >= text.size()) return incomplete(text);
  if (depth > kMaxDepth) return invalid(pos);
  switch (text[pos]) {
    case '{':
    case '[':
      return scan_container(text, pos, final, depth);
    case '"':
      return scan_string(text, pos);
    case 't':
      return scan_literal(text, pos, "true");
    case 'f':
      return scan_literal(text, pos, "false");
    case 'n':
      return scan_literal(text, pos, "null");
    default:
      if (text[pos] == '-' || is_digit(text[pos])) return scan_number(text, pos, final);
      return invalid(pos);
  }
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += char(cp);
  } else if (cp < 0x800) {
    *out += char(0xC0 | (cp >> 6));
    *out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += char(0xE0 | (cp >> 12));
    *out += char(0x80 | ((cp >> 6) & 0x3F));
    *out += char(0x80 | (cp & 0x3F));
  } else {
    *out += char(0xF0 | (cp >> 18));
    *out += char(0x80 | ((cp >> 12) & 0x3F));
    *out += char(0x80 | ((cp >> 6) & 0x3F));
    *out += char(0x80 | (cp & 0x3F));
  }
}

uint32_t hex4(std::string_view s) {
  uint32_t v = 0;
  for (char c : s.substr(0, 4)) {
    v <<= 4;
    if (is_digit(c)) {
      v |= uint32_t(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      v |= uint32_t(c - 'a' + 10);
    } else {
      v |= uint32_t(c - 'A' + 10);
    }
  }
  return v;
}

}  // namespace

size_t skip_ws(std::string_view text, size_t pos) {
  while (pos < text.size() && is_ws(text[pos])) ++pos;
  return pos;
}

ScanEnd scan_value(std::string_view text, size_t pos, bool final) {
  return scan_at(text, pos, final, 0);
}

const JsonMember* ObjectScan::find(std::string_view key) const {
  for (const JsonMember& m : members) {
    if (m.key == key) return &m;
  }
  return nullptr;
}

ObjectScan scan_object(std::string_view text, size_t pos) {
  ObjectScan out;
  auto stop = [&](Scan s, size_t at) {
    out.status = s;
    out.end = at;
    return out;
  };
  if (pos >= text.size()) return stop(Scan::kIncomplete, text.size());
  if (text[pos] != '{') return stop(Scan::kInvalid, pos);
  size_t i = skip_ws(text, pos + 1);
  if (i >= text.size()) return stop(Scan::kIncomplete, text.size());
  if (text[i] == '}') return stop(Scan::kComplete, i + 1);
  while (true) {
    if (text[i] != '"') return stop(Scan::kInvalid, i);
    ScanEnd k = scan_string(text, i);
    if (k.status != Scan::kComplete) return stop(k.status, k.end);
    bool closed = false;
    JsonMember m;
    m.key = decode_string(text, i, k.end, &closed);
    i = skip_ws(text, k.end);
    if (i >= text.size()) return stop(Scan::kIncomplete, text.size());
    if (text[i] != ':') return stop(Scan::kInvalid, i);
    i = skip_ws(text, i + 1);
    m.value_pos = i;
    m.value = scan_at(text, i, /*final=*/false, 1);
    out.members.push_back(m);
    if (m.value.status != Scan::kComplete) return stop(m.value.status, m.value.end);
    i = skip_ws(text, m.value.end);
    if (i >= text.size()) return stop(Scan::kIncomplete, text.size());
    if (text[i] == '}') return stop(Scan::kComplete, i + 1);
    if (text[i] != ',') return stop(Scan::kInvalid, i);
    i = skip_ws(text, i + 1);
    if (i >= text.size()) return stop(Scan::kIncomplete, text.size());
  }
}

std::string decode_string(std::string_view text, size_t pos, size_t end, bool* closed) {
  std::string out;
  *closed = false;
  end = std::min(end, text.size());
  size_t i = pos + 1;
  while (i < end) {
    const char c = text[i];
    if (c == '"') {
      *closed = true;
      return out;
    }
    if (c != '\\') {
      size_t j = i + 1;
      while (j < end && text[j] != '"' && text[j] != '\\') ++j;
      out.append(text.substr(i, j - i));
      i = j;
      continue;
    }
    if (i + 1 >= end) break;
    const char e = text[i + 1];
    if (e != 'u') {
      static constexpr std::string_view kFrom = "\"\\/bfnrt", kTo = "\"\\/\b\f\n\r\t";
      const size_t k = kFrom.find(e);
      out += k == std::string_view::npos ? e : kTo[k];
      i += 2;
      continue;
    }
    if (i + 6 > end) break;
    uint32_t cp = hex4(text.substr(i + 2));
    size_t used = 6;
    if (cp >= 0xD800 && cp < 0xDC00) {  // a high surrogate wants its low half
      // Undecidable until "\uXXXX" follows whole: stop (the string is unfinished anyway).
      if (i + 6 >= end) break;
      if (text[i + 6] == '\\') {
        if (i + 7 >= end) break;
        if (text[i + 7] == 'u') {
          if (i + 12 > end) break;
          const uint32_t lo = hex4(text.substr(i + 8));
          if (lo >= 0xDC00 && lo < 0xE000) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            used = 12;
          } else {
            cp = 0xFFFD;
          }
        } else {
          cp = 0xFFFD;
        }
      } else {
        cp = 0xFFFD;
      }
    } else if (cp >= 0xDC00 && cp < 0xE000) {
      cp = 0xFFFD;
    }
    append_utf8(cp, &out);
    i += used;
  }
  return out;
}

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  size_t run = 0;  // start of the characters not yet copied that need no escape
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s.substr(run, i - run));
    run = i + 1;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        out += fmt::format("\\u{:04x}", c);
    }
  }
  out.append(s.substr(run));
  return out;
}

size_t utf8_complete_prefix(std::string_view s) {
  // Look back at most 3 bytes for the lead byte of the last sequence.
  size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    size_t want = 1;
    if ((c & 0xE0) == 0xC0) {
      want = 2;
    } else if ((c & 0xF0) == 0xE0) {
      want = 3;
    } else if ((c & 0xF8) == 0xF0) {
      want = 4;
    }
    return back < want ? n - back : n;
  }
  return n;
}

}  // namespace mnemo::chat_parse
