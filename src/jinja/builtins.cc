// The built-in filters, tests, methods and globals of the Jinja engine (include/mnemo/jinja.h),
// with the semantics of jinja2 3.1 (jinja2/filters.py, jinja2/tests.py) and of the Python str
// and dict methods that templates call.
//
// Filters: abs, batch, capitalize, center, count, d, default, dictsort, e, escape, first, float,
//   format, groupby, indent, int, items, join, last, length, list, lower, map, max, min, reject,
//   rejectattr, replace, reverse, round, safe, select, selectattr, slice, sort, string, sum, title,
//   tojson, trim, unique, upper, wordcount.
// Tests: boolean, callable, defined, divisibleby, eq, equalto, escaped, even, false, float, ge,
//   greaterthan, gt, in, integer, iterable, le, lessthan, lower, lt, mapping, ne, none, number,
//   odd, sameas, sequence, string, true, undefined, upper, and == != < <= > >=.
// str methods: capitalize, count, endswith, find, isalnum, isalpha, isdigit, islower, isspace,
//   isupper, format, join, lower, lstrip, removeprefix, removesuffix, replace, rfind, rsplit,
//   rstrip, split, splitlines, startswith, strip, title, upper. dict: get, items, keys, values.
//   list: count, index.
// Globals: range (at most 100000 items, as jinja2's sandbox), namespace, dict, raise_exception,
//   strftime_now.
// Case mapping (upper, lower, title, capitalize, and the case folding of sort/unique) covers
// Latin-1, Latin Extended-A, Greek and Cyrillic; letters of other scripts keep their case
// (Python maps every cased letter).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <ctime>

#include <fmt/format.h>

#include "jinja/internal.h"

namespace mnemo::jinja {

bool is_py_space(std::string_view cp) {
  if (cp.size() == 1) {
    const unsigned char c = cp[0];
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
  }
  static constexpr std::string_view kWide[] = {"\u0085", "\u00a0", "\u1680", "\u2000", "\u2001",
                                               "\u2002", "\u2003", "\u2004", "\u2005", "\u2006",
                                               "\u2007", "\u2008", "\u2009", "\u200a", "\u2028",
                                               "\u2029", "\u202f", "\u205f", "\u3000"};
  for (std::string_view w : kWide) {
    if (cp == w) return true;
  }
  return false;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xc0) != 0x80;
  return n;
}

namespace {

using K = Value::Kind;

bool is_int(const Value& v) { return v.kind == K::kInt || v.kind == K::kBool; }
int64_t int_of(const Value& v) { return v.kind == K::kBool ? v.b : v.i; }

// Python's str.strip/lstrip/rstrip: `chars` nullptr for whitespace. Walks in from the ends
// (a long text with little to strip costs little).
std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right) {
  std::vector<std::string_view> set;
  if (chars != nullptr) set = code_points(*chars);
  auto strip_it = [&](std::string_view cp) {
    if (chars == nullptr) return is_py_space(cp);
    return std::find(set.begin(), set.end(), cp) != set.end();
  };
  auto cp_at = [&](size_t i) {  // the code point starting at byte i
    const unsigned char c = s[i];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + n > s.size()) n = 1;
    return std::string_view(s).substr(i, n);
  };
  size_t a = 0, b = s.size();
  if (left) {
    while (a < b) {
      const std::string_view cp = cp_at(a);
      if (!strip_it(cp)) break;
      a += cp.size();
    }
  }
  if (right) {
    while (b > a) {
      size_t start = b - 1;
      while (start > a && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80 && b - start < 4) {
        --start;
      }
      const std::string_view cp = std::string_view(s).substr(start, b - start);
      if (!strip_it(cp)) break;
      b = start;
    }
  }
  return s.substr(a, b - a);
}

// The Latin digraphs (U+01C4-01CC, U+01F1-01F3) come in threes: upper, title, lower.
uint32_t digraph_base(uint32_t c) {
  if (c >= 0x1c4 && c <= 0x1cc) return 0x1c4 + (c - 0x1c4) / 3 * 3;
  if (c >= 0x1f1 && c <= 0x1f3) return 0x1f1;
  return 0;
}

uint32_t cp_upper(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if (const uint32_t d = digraph_base(c)) return d;
  if (c == 0xb5) return 0x39c;
  if (c >= 0xe0 && c <= 0xfe && c != 0xf7) return c - 32;
  if (c == 0xff) return 0x178;
  if (c == 0x131) return 'I';
  if (c == 0x17f) return 'S';
  if ((c >= 0x100 && c <= 0x137 && c != 0x130) || (c >= 0x14a && c <= 0x177)) return c & ~1u;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e)) return (c & 1u) ? c : c - 1;
  if (c == 0x3c2) return 0x3a3;
  if ((c >= 0x3b1 && c <= 0x3c1) || (c >= 0x3c3 && c <= 0x3cb)) return c - 32;
  if (c == 0x3ac) return 0x386;
  if (c >= 0x3ad && c <= 0x3af) return c - 37;
  if (c == 0x3cc) return 0x38c;
  if (c == 0x3cd || c == 0x3ce) return c - 63;
  if (c >= 0x430 && c <= 0x44f) return c - 32;
  if (c >= 0x450 && c <= 0x45f) return c - 80;
  return c;
}

uint32_t cp_lower(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (const uint32_t d = digraph_base(c)) return d + 2;
  if (c >= 0xc0 && c <= 0xde && c != 0xd7) return c + 32;
  if (c == 0x178) return 0xff;
  if ((c >= 0x100 && c <= 0x137 && c != 0x130 && c != 0x131) || (c >= 0x14a && c <= 0x177)) {
    return c | 1u;
  }
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e)) return (c & 1u) ? c + 1 : c;
  if ((c >= 0x391 && c <= 0x3a1) || (c >= 0x3a3 && c <= 0x3ab)) return c + 32;
  if (c == 0x386) return 0x3ac;
  if (c >= 0x388 && c <= 0x38a) return c + 37;
  if (c == 0x38c) return 0x3cc;
  if (c == 0x38e || c == 0x38f) return c + 63;
  if (c >= 0x410 && c <= 0x42f) return c + 32;
  if (c >= 0x400 && c <= 0x40f) return c + 80;
  return c;
}

bool cp_is_cased(uint32_t c) { return cp_upper(c) != c || cp_lower(c) != c || c == 0xdf; }

// One code point upper- or lower-cased into *out ("ß" upper-cases to "SS", as Python).
// `title`: the title case where it differs from upper case (the digraphs; "ß" to "Ss").
void put_case(std::string_view u, bool upper, std::string* out, bool title = false) {
  const uint32_t c = decode_utf8(u);
  if (upper && c == 0xdf) {
    *out += title ? "Ss" : "SS";
    return;
  }
  uint32_t m = upper ? cp_upper(c) : cp_lower(c);
  if (upper && title && digraph_base(c) != 0) m = digraph_base(c) + 1;
  if (m == c) {
    out->append(u);
  } else {
    append_utf8(m, out);
  }
}

// Python's str.lower(), with its two context rules: capital sigma is final sigma at the end
// of a word (after a cased letter, not before one), and U+0130 becomes "i" + U+0307.
std::string py_lower(const std::string& s) {
  std::string out;
  const auto cps = code_points(s);
  for (size_t k = 0; k < cps.size(); ++k) {
    const uint32_t c = decode_utf8(cps[k]);
    if (c == 0x3a3) {
      const bool after_cased = k > 0 && cp_is_cased(decode_utf8(cps[k - 1]));
      const bool before_cased = k + 1 < cps.size() && cp_is_cased(decode_utf8(cps[k + 1]));
      append_utf8(after_cased && !before_cased ? 0x3c2 : 0x3c3, &out);
    } else if (c == 0x130) {
      out += "i\u0307";
    } else {
      put_case(cps[k], false, &out);
    }
  }
  return out;
}

// Python's str.upper(), with the Latin ligatures expanded (U+FB00-FB06: "FF", "FI", ...).
std::string py_upper(const std::string& s) {
  static constexpr const char* kLigatures[] = {"FF", "FI", "FL", "FFI", "FFL", "ST", "ST"};
  std::string out;
  for (std::string_view u : code_points(s)) {
    const uint32_t c = decode_utf8(u);
    if (c >= 0xfb00 && c <= 0xfb06) {
      out += kLigatures[c - 0xfb00];
    } else {
      put_case(u, true, &out);
    }
  }
  return out;
}
bool is_alpha(unsigned char c) { return std::isalpha(c) != 0 || c >= 0x80; }

// Python's str.title(): a cased letter after an uncased character is upper case, other cased
// letters lower case.
std::string py_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (std::string_view u : code_points(s)) {
    const bool cased = cp_is_cased(decode_utf8(u));
    put_case(u, cased && !prev_cased, &out, /*title=*/true);
    prev_cased = cased;
  }
  return out;
}

// jinja2's title filter: each word (split at whitespace, -, [, (, {) has its first character
// upper-cased and the rest lower-cased.
std::string jinja_title(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (std::string_view u : code_points(s)) {
    const char c = u[0];
    const bool sep = u.size() == 1 && (std::isspace(static_cast<unsigned char>(c)) || c == '-' ||
                                       c == '[' || c == '(' || c == '{');
    if (sep) {
      out.append(u);
      word_start = true;
    } else {
      put_case(u, word_start, &out);
      word_start = false;
    }
  }
  return out;
}

// Python's str.capitalize(): the first character upper-cased, the rest lower-cased.
std::string capitalize(const std::string& s) {
  std::string out;
  bool first = true;
  for (std::string_view u : code_points(s)) {
    put_case(u, first, &out, /*title=*/true);
    first = false;
  }
  return out;
}

// Python's str.split(sep, maxsplit) and rsplit.
std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit,
                                  bool from_right) {
  std::vector<std::string> out;
  if (sep == nullptr) {
    const auto cps = code_points(s);
    std::vector<std::pair<size_t, size_t>> words;  // code point ranges
    size_t k = 0;
    while (k < cps.size()) {
      while (k < cps.size() && is_py_space(cps[k])) ++k;
      if (k == cps.size()) break;
      size_t e = k;
      while (e < cps.size() && !is_py_space(cps[e])) ++e;
      words.emplace_back(k, e);
      k = e;
    }
    auto text = [&](size_t a, size_t b) {
      std::string t;
      for (size_t q = a; q < b; ++q) t.append(cps[q]);
      return t;
    };
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) + 1 >= words.size()) {
      for (auto [a, b] : words) out.push_back(text(a, b));
      return out;
    }
    const size_t m = static_cast<size_t>(maxsplit);
    if (!from_right) {
      for (size_t w = 0; w < m; ++w) out.push_back(text(words[w].first, words[w].second));
      out.push_back(text(words[m].first, cps.size()));  // keeps its trailing whitespace
      return out;
    }
    const size_t n = words.size();
    out.push_back(text(0, words[n - m - 1].second));  // keeps its leading whitespace
    for (size_t w = n - m; w < n; ++w) out.push_back(text(words[w].first, words[w].second));
    return out;
  }
  if (!from_right) {
    size_t at = 0;
    int64_t done = 0;
    while (maxsplit < 0 || done < maxsplit) {
      const size_t f = s.find(*sep, at);
      if (f == std::string::npos) break;
      out.push_back(s.substr(at, f - at));
      at = f + sep->size();
      ++done;
    }
    out.push_back(s.substr(at));
    return out;
  }
  std::vector<std::string> rev;
  size_t end = s.size();
  int64_t done = 0;
  while (maxsplit < 0 || done < maxsplit) {
    if (end < sep->size()) break;
    const size_t f = s.rfind(*sep, end - sep->size());
    if (f == std::string::npos) break;
    rev.push_back(s.substr(f + sep->size(), end - f - sep->size()));
    end = f;
    ++done;
  }
  out.push_back(s.substr(0, end));
  for (auto it = rev.rbegin(); it != rev.rend(); ++it) out.push_back(*it);
  return out;
}

Value string_list(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (auto& p : parts) items.push_back(Value::string(std::move(p)));
  return Value::new_list(std::move(items));
}

// Python's str.replace(old, new, count).
std::string py_replace(const std::string& s, const std::string& from, const std::string& to,
                       int64_t count) {
  std::string out;
  if (from.empty()) {
    const auto cps = code_points(s);
    int64_t done = 0;
    for (size_t k = 0; k <= cps.size(); ++k) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (k < cps.size()) out.append(cps[k]);
    }
    return out;
  }
  size_t at = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t f = s.find(from, at);
    if (f == std::string::npos) break;
    out.append(s, at, f - at);
    out += to;
    at = f + from.size();
    ++done;
  }
  out.append(s, at, std::string::npos);
  return out;
}

// The size py_replace's result would have (checked against the output limit first).
uint64_t replace_size(const std::string& s, const std::string& from, const std::string& to,
                      int64_t count) {
  uint64_t n = 0;
  if (from.empty()) {
    n = utf8_length(s) + 1;
  } else {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + from.size())) {
      ++n;
    }
  }
  if (count >= 0) n = std::min<uint64_t>(n, uint64_t(count));
  return s.size() + n * to.size();
}

// The items of an iterable as filters see them (Undefined: none).
bool items_of(Renderer& r, const Value& v, int line, std::vector<Value>* out) {
  switch (v.kind) {
    case K::kUndefined:
      return true;
    case K::kList:
      *out = v.list->items;
      return true;
    case K::kDict:
      for (size_t k = 0; k < v.dict->items.size(); ++k) out->push_back(v.dict->key(k));
      return true;
    case K::kString:
      if (!r.reserve(uint64_t(utf8_length(v.s)) * sizeof(Value))) return false;
      for (std::string_view cp : code_points(v.s)) out->push_back(Value::string(std::string(cp)));
      return true;
    default:
      r.fail(line, fmt::format(
                       "'{}' object is not iterable", to_str(v).empty() ? "value" : [&] {
                         switch (v.kind) {
                           case K::kNone:
                             return "NoneType";
                           case K::kBool:
                             return "bool";
                           case K::kInt:
                             return "int";
                           case K::kFloat:
                             return "float";
                           default:
                             return "function";
                         }
                       }()));
      return false;
  }
}

// An attribute path "a.b.0" of `v`, as jinja2's make_attrgetter.
Value get_path(Renderer& r, const Value& v, const std::string& path, int line) {
  Value cur = v;
  size_t at = 0;
  while (at <= path.size()) {
    const size_t dot = path.find('.', at);
    const std::string part =
        path.substr(at, dot == std::string::npos ? std::string::npos : dot - at);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    if (cur.is_list() && numeric) {
      size_t k = 0;
      const auto res = std::from_chars(part.data(), part.data() + part.size(), k);
      cur = res.ec == std::errc() && k < cur.list->items.size() ? cur.list->items[k]
                                                                : Value::undefined(part);
    } else if (cur.is_undefined()) {
      return cur;
    } else {
      cur = r.attribute(cur, part, line);
      if (r.failed()) return {};
    }
    if (dot == std::string::npos) break;
    at = dot + 1;
  }
  return cur;
}

// Sort key: strings lower-cased unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (v.is_string() && !case_sensitive) return Value::string(py_lower(v.s));
  return v;
}

bool sort_values(Renderer& r, std::vector<Value>* items, bool reverse, bool case_sensitive,
                 const std::string& attribute, int line) {
  // n log n comparisons.
  if (!r.steps(items->size() * (64 - uint64_t(__builtin_clzll(items->size() | 1))))) return false;
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& v : *items) {
    Value key = attribute.empty() ? v : get_path(r, v, attribute, line);
    if (r.failed()) return false;
    keyed.emplace_back(sort_key(key, case_sensitive), std::move(v));
  }
  bool bad = false;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    int c = 0;
    if (!order_values(a.first, b.first, &c)) {
      bad = true;
      return false;
    }
    return reverse ? c > 0 : c < 0;
  });
  if (bad) {
    r.fail(line, "'<' not supported between the items being sorted");
    return false;
  }
  items->clear();
  for (auto& [k, v] : keyed) items->push_back(std::move(v));
  return true;
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

namespace {

// Python's str.splitlines() (line ends \n, \r\n, \r and the rest Python knows).
std::vector<std::string> splitlines(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  const auto cps = code_points(s);
  for (size_t k = 0; k < cps.size(); ++k) {
    const std::string_view cp = cps[k];
    const bool nl = cp == "\n" || cp == "\r" || cp == "\v" || cp == "\f" || cp == "\x1c" ||
                    cp == "\x1d" || cp == "\x1e" || cp == "\u0085" || cp == "\u2028" ||
                    cp == "\u2029";
    if (!nl) {
      cur.append(cp);
      continue;
    }
    if (cp == "\r" && k + 1 < cps.size() && cps[k + 1] == "\n") ++k;
    out.push_back(std::move(cur));
    cur.clear();
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

// Python's float(str) for the forms templates meet; false when it is not a number.
bool parse_float(const std::string& text, double* out) {
  const std::string t = py_strip(text, nullptr, true, true);
  if (t.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(t.c_str(), &end);
  return end == t.c_str() + t.size();
}

bool parse_int(const std::string& text, int64_t* out) {
  std::string t = py_strip(text, nullptr, true, true);
  t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
  if (t.empty()) return false;
  size_t k = t[0] == '-' || t[0] == '+' ? 1 : 0;
  if (k == t.size()) return false;
  for (size_t q = k; q < t.size(); ++q) {
    if (!std::isdigit(static_cast<unsigned char>(t[q]))) return false;
  }
  errno = 0;
  *out = std::strtoll(t.c_str(), nullptr, 10);
  return errno == 0;
}

void json_string(const std::string& s, std::string* out) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (c < 0x20) {
          *out += fmt::format("\\u{:04x}", c);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

bool json_value(Renderer& r, const Value& v, const std::string* indent, const std::string& item_sep,
                const std::string& key_sep, bool sort_keys, int line, int level, std::string* out) {
  if (level > 256) {
    r.fail(line, "tojson: nested deeper than 256");
    return false;
  }
  auto newline = [&](int lv) {
    out->push_back('\n');
    for (int k = 0; k < lv; ++k) *out += *indent;
    return r.reserve(out->size());
  };
  switch (v.kind) {
    case K::kNone:
      *out += "null";
      return true;
    case K::kBool:
      *out += v.b ? "true" : "false";
      return true;
    case K::kInt:
      *out += std::to_string(v.i);
      return true;
    case K::kFloat:
      if (std::isnan(v.f)) {
        *out += "NaN";
      } else if (std::isinf(v.f)) {
        *out += v.f > 0 ? "Infinity" : "-Infinity";
      } else {
        *out += to_str(v);
      }
      return true;
    case K::kString:
      json_string(v.s, out);
      return true;
    case K::kList: {
      if (v.list->items.empty()) {
        *out += "[]";
        return true;
      }
      out->push_back('[');
      for (size_t k = 0; k < v.list->items.size(); ++k) {
        if (k > 0) *out += item_sep;
        if (indent != nullptr && !newline(level + 1)) return false;
        if (!json_value(r, v.list->items[k], indent, item_sep, key_sep, sort_keys, line, level + 1,
                        out)) {
          return false;
        }
      }
      if (indent != nullptr && !newline(level)) return false;
      out->push_back(']');
      return true;
    }
    case K::kDict: {
      if (v.dict->is_namespace) break;
      if (v.dict->items.empty()) {
        *out += "{}";
        return true;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict->items) items.push_back(&kv);
      if (sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out->push_back('{');
      for (size_t k = 0; k < items.size(); ++k) {
        if (k > 0) *out += item_sep;
        if (indent != nullptr && !newline(level + 1)) return false;
        json_string(items[k]->first, out);
        *out += key_sep;
        if (!json_value(r, items[k]->second, indent, item_sep, key_sep, sort_keys, line, level + 1,
                        out)) {
          return false;
        }
      }
      if (indent != nullptr && !newline(level)) return false;
      out->push_back('}');
      return true;
    }
    default:
      break;
  }
  r.fail(line,
         fmt::format("Object of type {} is not JSON serializable", v.is_undefined() ? "Undefined"
                                                                   : v.is_dict()    ? "Namespace"
                                                                                    : "function"));
  return false;
}

Value length_of(Renderer& r, const Value& v, int line) {
  switch (v.kind) {
    case K::kUndefined:
      return Value::integer(0);
    case K::kString:
      return Value::integer(static_cast<int64_t>(utf8_length(v.s)));
    case K::kList:
      return Value::integer(static_cast<int64_t>(v.list->items.size()));
    case K::kDict:
      return Value::integer(static_cast<int64_t>(v.dict->items.size()));
    default:
      return r.fail(line,
                    fmt::format("object of type '{}' has no len()", v.is_none() ? "NoneType"
                                                                    : v.kind == K::kBool ? "bool"
                                                                    : v.kind == K::kInt  ? "int"
                                                                                        : "float"));
  }
}

// select / reject / selectattr / rejectattr.
Value select_items(Renderer& r, const Value& v, Args& args, bool by_attr, bool keep_if) {
  std::vector<Value> items;
  // jinja2 iterates only a true value: none (or an empty value) selects nothing.
  if (v.truthy() && !items_of(r, v, args.line, &items)) return {};
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (args.pos.empty() || !args.pos[0].is_string()) {
      return r.fail(args.line, "selectattr/rejectattr need an attribute name");
    }
    attr = args.pos[0].s;
    next = 1;
  }
  std::string test;
  if (next < args.pos.size()) {
    if (!args.pos[next].is_string()) return r.fail(args.line, "a test name must be a string");
    test = args.pos[next].s;
  }
  Args rest;
  rest.line = args.line;
  for (size_t k = next + 1; k < args.pos.size(); ++k) rest.pos.push_back(args.pos[k]);
  std::vector<Value> out;
  for (const Value& item : items) {
    const Value subject = by_attr ? get_path(r, item, attr, args.line) : item;
    if (r.failed()) return {};
    bool pass = false;
    if (test.empty()) {
      pass = subject.truthy();
    } else {
      Args a = rest;
      const Value t = apply_test(r, test, subject, a);
      if (r.failed()) return {};
      pass = t.truthy();
    }
    if (pass == keep_if) out.push_back(item);
  }
  return Value::new_list(std::move(out));
}

}  // namespace

// Python's printf-style `fmt % args` for the conversions templates use: %s %r %d %i %f %F
// %e %x %X %o %c %%, with flags - + 0 space, a width and a precision.
Value percent_format(Renderer& r, const std::string& fmt_text, const std::vector<Value>& args,
                     int line) {
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt_text.size(); ++i) {
    if (fmt_text[i] != '%') {
      out.push_back(fmt_text[i]);
      continue;
    }
    if (++i >= fmt_text.size()) return r.fail(line, "format: incomplete format");
    if (fmt_text[i] == '%') {
      out.push_back('%');
      continue;
    }
    std::string flags;
    while (i < fmt_text.size() && std::strchr("-+ 0#", fmt_text[i]) != nullptr) {
      flags.push_back(fmt_text[i++]);
    }
    int width = 0, precision = -1;
    while (i < fmt_text.size() && std::isdigit(static_cast<unsigned char>(fmt_text[i]))) {
      width = std::min(width * 10 + (fmt_text[i++] - '0'), 1000);
    }
    if (i < fmt_text.size() && fmt_text[i] == '.') {
      precision = 0;
      ++i;
      while (i < fmt_text.size() && std::isdigit(static_cast<unsigned char>(fmt_text[i]))) {
        precision = std::min(precision * 10 + (fmt_text[i++] - '0'), 1000);
      }
    }
    if (i >= fmt_text.size()) return r.fail(line, "format: incomplete format");
    const char conv = fmt_text[i];
    if (next >= args.size()) return r.fail(line, "format: not enough arguments for format string");
    const Value& a = args[next++];
    std::string spec = "%" + flags;
    if (width > 0) spec += std::to_string(width);
    std::string piece;
    char buf[2048];
    if (conv == 's' || conv == 'r') {
      std::string text = conv == 's' ? to_str(a) : to_repr(a);
      if (precision >= 0) {
        const auto cps = code_points(text);
        std::string cut;
        for (size_t k = 0; k < cps.size() && k < static_cast<size_t>(precision); ++k)
          cut.append(cps[k]);
        text = cut;
      }
      const size_t n = code_points(text).size();
      const size_t pad = static_cast<size_t>(width) > n ? width - n : 0;
      piece = flags.find('-') != std::string::npos ? text + std::string(pad, ' ')
                                                   : std::string(pad, ' ') + text;
    } else if (std::strchr("dixXo", conv) != nullptr) {
      if (!a.is_number()) return r.fail(line, fmt::format("format: %{} needs a number", conv));
      if (a.kind == K::kFloat && !(std::fabs(a.f) < 9.2e18)) {
        return r.fail(line, "format: a number past 64-bit integers");
      }
      const long long x = a.kind == K::kFloat ? static_cast<long long>(a.f) : int_of(a);
      if (precision >= 0) spec += "." + std::to_string(precision);
      spec += "ll";
      spec += conv == 'i' ? 'd' : conv;
      std::snprintf(buf, sizeof buf, spec.c_str(), x);
      piece = buf;
    } else if (std::strchr("fFeEgG", conv) != nullptr) {
      if (!a.is_number()) return r.fail(line, fmt::format("format: %{} needs a number", conv));
      spec += "." + std::to_string(precision >= 0 ? precision : 6);
      spec += conv;
      std::snprintf(buf, sizeof buf, spec.c_str(), a.as_double());
      piece = buf;
    } else if (conv == 'c') {
      piece = is_int(a) ? std::string(1, static_cast<char>(int_of(a))) : to_str(a);
    } else {
      return r.fail(line, fmt::format("format: unsupported format character '{}'", conv));
    }
    out += piece;
  }
  if (next < args.size()) {
    return r.fail(line, "format: not all arguments converted during string formatting");
  }
  return Value::string(std::move(out));
}

namespace {

// JSON text with every non-ASCII code point written as \uXXXX (a UTF-16 surrogate pair past
// U+FFFF), as json.dumps(ensure_ascii=True). Only string contents hold non-ASCII.
std::string ascii_escape(const std::string& json) {
  std::string out;
  for (std::string_view u : code_points(json)) {
    if (u.size() == 1) {
      out.append(u);
      continue;
    }
    const uint32_t cp = decode_utf8(u);
    if (cp < 0x10000) {
      out += fmt::format("\\u{:04x}", cp);
    } else {
      const uint32_t v = cp - 0x10000;
      out += fmt::format("\\u{:04x}\\u{:04x}", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
    }
  }
  return out;
}

// Python's str.format for what templates write: {} {0} {name} (and {{ }}), each with an
// optional !s / !r and a format spec [[fill]align][width][.precision][type] for s, d and f.
Value str_format(Renderer& r, const std::string& f, const Args& args, int line) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') ++i;
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t end = f.find('}', i);
    if (end == std::string::npos) return r.fail(line, "format: a '{' is never closed");
    std::string field = f.substr(i + 1, end - i - 1);
    i = end;
    std::string spec;
    char conversion = 's';
    if (const size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      conversion = bang + 1 < field.size() ? field[bang + 1] : 's';
      field.resize(bang);
    }
    Value v;
    if (field.empty()) {
      if (auto_index >= args.pos.size()) return r.fail(line, "format: not enough arguments");
      v = args.pos[auto_index++];
    } else if (std::all_of(field.begin(), field.end(), ::isdigit)) {
      size_t k = SIZE_MAX;
      std::from_chars(field.data(), field.data() + std::min<size_t>(field.size(), 9), k);
      if (k >= args.pos.size()) return r.fail(line, "format: replacement index out of range");
      v = args.pos[k];
    } else {
      bool found = false;
      for (const auto& [name, x] : args.kw) {
        if (name == field) {
          v = x;
          found = true;
        }
      }
      if (!found) return r.fail(line, fmt::format("format: no argument named '{}'", field));
    }
    std::string text = conversion == 'r' ? to_repr(v) : to_str(v);
    if (!spec.empty()) {
      char fill = ' ', align = '\0';
      size_t p = 0;
      if (spec.size() >= 2 && std::strchr("<>^", spec[1]) != nullptr) {
        fill = spec[0];
        align = spec[1];
        p = 2;
      } else if (std::strchr("<>^", spec[0]) != nullptr) {
        align = spec[0];
        p = 1;
      }
      size_t width = 0;
      while (p < spec.size() && std::isdigit(static_cast<unsigned char>(spec[p]))) {
        width = std::min<size_t>(width * 10 + (spec[p++] - '0'), 1000);
      }
      int precision = -1;
      if (p < spec.size() && spec[p] == '.') {
        precision = 0;
        while (++p < spec.size() && std::isdigit(static_cast<unsigned char>(spec[p]))) {
          precision = std::min(precision * 10 + (spec[p] - '0'), 300);
        }
      }
      const char type = p < spec.size() ? spec[p] : '\0';
      if (type == 'f' || type == 'd') {
        if (!v.is_number()) return r.fail(line, "format: a number is needed");
        if (type == 'd' && v.kind == K::kFloat) {
          return r.fail(line, "format: unknown format code 'd' for a float");
        }
        text = type == 'f' ? fmt::format("{:.{}f}", v.as_double(), precision < 0 ? 6 : precision)
                           : std::to_string(int_of(v));
        if (align == '\0') align = '>';
      } else if (precision >= 0) {
        const auto cps = code_points(text);
        std::string cut;
        for (size_t k = 0; k < cps.size() && k < static_cast<size_t>(precision); ++k) {
          cut.append(cps[k]);
        }
        text = cut;
      }
      const size_t n = code_points(text).size();
      if (width > n) {
        const size_t pad = width - n;
        if (align == '\0') align = v.is_number() ? '>' : '<';
        const size_t left = align == '>' ? pad : align == '^' ? pad / 2 : 0;
        text = std::string(left, fill) + text + std::string(pad - left, fill);
      }
    }
    out += text;
  }
  return Value::string(std::move(out));
}

}  // namespace

Value apply_filter(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const int line = args.line;
  auto need_string = [&](const char* what) -> bool {
    if (v.is_string() || v.is_undefined()) return true;
    r.fail(line, fmt::format("the filter '{}' needs a string", what));
    return false;
  };
  if (name == "safe") {
    Value out = Value::string(to_str(v));
    out.safe = true;
    return out;
  }
  if (name == "string") return v.is_string() ? v : Value::string(to_str(v));
  if (name == "trim") {
    const Value chars = args.get(0, "chars", Value::none());
    const std::string s = to_str(v);
    return Value::string(py_strip(s, chars.is_string() ? &chars.s : nullptr, true, true));
  }
  if (name == "upper") return Value::string(py_upper(to_str(v)));
  if (name == "lower") return Value::string(py_lower(to_str(v)));
  if (name == "capitalize") return Value::string(capitalize(to_str(v)));
  if (name == "title") return Value::string(jinja_title(to_str(v)));
  if (name == "length" || name == "count") return length_of(r, v, line);
  if (name == "default" || name == "d") {
    const Value fallback = args.get(0, "default_value", Value::string(""));
    const bool boolean = args.get(1, "boolean", Value::boolean(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return fallback;
    return v;
  }
  if (name == "first" || name == "last") {
    std::vector<Value> items;
    if (!items_of(r, v, line, &items)) return {};
    if (items.empty()) return Value::undefined();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    const Value sep = args.get(0, "d", Value::string(""));
    const Value attribute = args.get(1, "attribute", Value::none());
    std::vector<Value> items;
    if (!items_of(r, v, line, &items)) return {};
    std::string out;
    for (size_t k = 0; k < items.size(); ++k) {
      if (k > 0) out += to_str(sep);
      const Value item =
          attribute.is_string() ? get_path(r, items[k], attribute.s, line) : items[k];
      if (r.failed()) return {};
      out += to_str(item);
      if (!r.reserve(out.size())) return {};
    }
    return Value::string(std::move(out));
  }
  if (name == "list") {
    std::vector<Value> items;
    if (!items_of(r, v, line, &items)) return {};
    return Value::new_list(std::move(items));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::new_list();
    if (!v.is_dict()) return r.fail(line, "the filter 'items' needs a mapping");
    std::vector<Value> out;
    for (size_t k = 0; k < v.dict->items.size(); ++k) {
      out.push_back(Value::new_list({v.dict->key(k), v.dict->items[k].second}, /*tuple=*/true));
    }
    return Value::new_list(std::move(out));
  }
  if (name == "dictsort") {
    if (!v.is_dict()) return r.fail(line, "the filter 'dictsort' needs a mapping");
    const bool case_sensitive = args.get(0, "case_sensitive", Value::boolean(false)).truthy();
    const Value by = args.get(1, "by", Value::string("key"));
    const bool reverse = args.get(2, "reverse", Value::boolean(false)).truthy();
    std::vector<Value> pairs;
    for (size_t k = 0; k < v.dict->items.size(); ++k) {
      pairs.push_back(Value::new_list({v.dict->key(k), v.dict->items[k].second}, /*tuple=*/true));
    }
    const std::string attr = by.is_string() && by.s == "value" ? "1" : "0";
    if (!sort_values(r, &pairs, reverse, case_sensitive, attr, line)) return {};
    return Value::new_list(std::move(pairs));
  }
  if (name == "tojson") {
    // transformers' signature: tojson(x, ensure_ascii=False, indent=None, separators=None,
    // sort_keys=False).
    const bool ensure_ascii = args.get(0, "ensure_ascii", Value::boolean(false)).truthy();
    const Value indent = args.get(1, "indent", Value::none());
    const Value separators = args.get(2, "separators", Value::none());
    const bool sort_keys = args.get(3, "sort_keys", Value::boolean(false)).truthy();
    std::string indent_text;
    const std::string* ind = nullptr;
    if (is_int(indent)) {
      indent_text.assign(static_cast<size_t>(std::clamp<int64_t>(int_of(indent), 0, 64)), ' ');
      ind = &indent_text;
    } else if (indent.is_string()) {
      indent_text = indent.s;
      ind = &indent_text;
    }
    std::string item_sep = ind != nullptr ? "," : ", ", key_sep = ": ";
    if (separators.is_list() && separators.list->items.size() == 2 &&
        separators.list->items[0].is_string() && separators.list->items[1].is_string()) {
      item_sep = separators.list->items[0].s;
      key_sep = separators.list->items[1].s;
    }
    std::string out;
    if (!to_json(r, v, ind, item_sep, key_sep, sort_keys, line, &out)) return {};
    if (ensure_ascii) out = ascii_escape(out);
    return Value::string(std::move(out));
  }
  if (name == "replace") {
    if (!need_string("replace")) return {};
    const Value from = args.get(0, "old"), to = args.get(1, "new");
    const Value count = args.get(2, "count", Value::none());
    const std::string text = to_str(v), f = to_str(from), t = to_str(to);
    const int64_t c = is_int(count) ? int_of(count) : -1;
    if (!r.reserve(replace_size(text, f, t, c))) return {};
    return Value::string(py_replace(text, f, t, c));
  }
  if (name == "reverse") {
    if (v.is_string()) {
      auto cps = code_points(v.s);
      std::string out;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) out.append(*it);
      return Value::string(std::move(out));
    }
    std::vector<Value> items;
    if (!items_of(r, v, line, &items)) return {};
    std::reverse(items.begin(), items.end());
    return Value::new_list(std::move(items));
  }
  if (name == "sort") {
    std::vector<Value> items;
    if (!items_of(r, v, line, &items)) return {};
    const bool reverse = args.get(0, "reverse", Value::boolean(false)).truthy();
    const bool case_sensitive = args.get(1, "case_sensitive", Value::boolean(false)).truthy();
    const Value attribute = args.get(2, "attribute", Value::none());
    if (!sort_values(r, &items, reverse, case_sensitive,
                     attribute.is_string() ? attribute.s : std::string(), line)) {
      return {};
    }
    return Value::new_list(std::move(items));
  }
  if (name == "unique") {
    std::vector<Value> items;
    if (!items_of(r, v, line, &items)) return {};
    const bool case_sensitive = args.get(0, "case_sensitive", Value::boolean(false)).truthy();
    const Value attribute = args.get(1, "attribute", Value::none());
    std::vector<Value> out, seen;
    for (const Value& item : items) {
      Value key = attribute.is_string() ? get_path(r, item, attribute.s, line) : item;
      if (r.failed()) return {};
      key = sort_key(key, case_sensitive);
      if (!r.steps(seen.size())) return {};
      bool dup = false;
      for (const Value& s : seen) dup = dup || equals(s, key);
      if (dup) continue;
      seen.push_back(key);
      out.push_back(item);
    }
    return Value::new_list(std::move(out));
  }
  if (name == "min" || name == "max") {
    std::vector<Value> items;
    if (!items_of(r, v, line, &items)) return {};
    if (items.empty()) return Value::undefined();
    const bool case_sensitive = args.get(0, "case_sensitive", Value::boolean(false)).truthy();
    const Value attribute = args.get(1, "attribute", Value::none());
    if (!sort_values(r, &items, name == "max", case_sensitive,
                     attribute.is_string() ? attribute.s : std::string(), line)) {
      return {};
    }
    return items.front();
  }
  if (name == "sum") {
    std::vector<Value> items;
    if (!items_of(r, v, line, &items)) return {};
    const Value attribute = args.get(0, "attribute", Value::none());
    Value acc = args.get(1, "start", Value::integer(0));
    for (const Value& item : items) {
      const Value x = attribute.is_string() ? get_path(r, item, attribute.s, line) : item;
      if (r.failed()) return {};
      if (!x.is_number() || !acc.is_number()) return r.fail(line, "sum: the items must be numbers");
      if (is_int(acc) && is_int(x)) {
        int64_t s = 0;
        if (__builtin_add_overflow(int_of(acc), int_of(x), &s))
          return r.fail(line, "integer overflow");
        acc = Value::integer(s);
      } else {
        acc = Value::real(acc.as_double() + x.as_double());
      }
    }
    return acc;
  }
  if (name == "map") {
    std::vector<Value> items;
    if (v.truthy() && !items_of(r, v, line, &items)) return {};  // none maps to nothing
    const Value attribute = args.get(99, "attribute", Value::none());
    std::vector<Value> out;
    if (attribute.is_string()) {
      const Value fallback = args.get(99, "default", Value::undefined());
      for (const Value& item : items) {
        Value x = get_path(r, item, attribute.s, line);
        if (r.failed()) return {};
        if (x.is_undefined() && !fallback.is_undefined()) x = fallback;
        out.push_back(std::move(x));
      }
      return Value::new_list(std::move(out));
    }
    if (args.pos.empty() || !args.pos[0].is_string()) {
      return r.fail(line, "map needs a filter name or attribute=");
    }
    Args rest;
    rest.line = line;
    rest.pos.assign(args.pos.begin() + 1, args.pos.end());
    rest.kw = args.kw;
    for (const Value& item : items) {
      Args a = rest;
      out.push_back(apply_filter(r, args.pos[0].s, item, a));
      if (r.failed()) return {};
    }
    return Value::new_list(std::move(out));
  }
  if (name == "select" || name == "reject") {
    return select_items(r, v, args, false, name == "select");
  }
  if (name == "selectattr" || name == "rejectattr") {
    return select_items(r, v, args, true, name == "selectattr");
  }
  if (name == "int") {
    const Value fallback = args.get(0, "default", Value::integer(0));
    if (is_int(v)) return Value::integer(int_of(v));
    if (v.kind == K::kFloat) {
      if (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18) return fallback;
      return Value::integer(static_cast<int64_t>(v.f));
    }
    if (v.is_string()) {
      int64_t x = 0;
      if (parse_int(v.s, &x)) return Value::integer(x);
      double d = 0;
      if (parse_float(v.s, &d) && std::isfinite(d) && std::fabs(d) < 9.2e18) {
        return Value::integer(static_cast<int64_t>(d));
      }
    }
    return fallback;
  }
  if (name == "float") {
    const Value fallback = args.get(0, "default", Value::real(0.0));
    if (v.is_number()) return Value::real(v.as_double());
    double d = 0;
    if (v.is_string() && parse_float(v.s, &d)) return Value::real(d);
    return fallback;
  }
  if (name == "abs") {
    if (v.kind == K::kFloat) return Value::real(std::fabs(v.f));
    if (is_int(v)) {
      if (int_of(v) == INT64_MIN) return r.fail(line, "integer overflow");
      return Value::integer(std::llabs(int_of(v)));
    }
    return r.fail(line, "bad operand type for abs()");
  }
  if (name == "round") {
    if (!v.is_number()) return r.fail(line, "round needs a number");
    const int64_t precision = int_of(args.get(0, "precision", Value::integer(0)));
    const Value method = args.get(1, "method", Value::string("common"));
    const std::string how = method.is_string() ? method.s : "common";
    if (how == "common") {
      // Python's round(): an int stays an int; a float is rounded half to even on its exact
      // binary value (which printf's correctly rounded %.Nf does too).
      if (is_int(v) && precision >= 0) return Value::integer(int_of(v));
      if (precision < 0 || precision > 300) {
        const double scale = std::pow(10.0, static_cast<double>(precision));
        return Value::real(std::nearbyint(v.as_double() * scale) / scale);
      }
      const std::string text = fmt::format("{:.{}f}", v.as_double(), precision);
      return Value::real(std::strtod(text.c_str(), nullptr));
    }
    if (how != "ceil" && how != "floor") {
      return r.fail(line, "round's method must be 'common', 'ceil' or 'floor'");
    }
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double x = v.as_double() * scale;
    return Value::real((how == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
  }
  if (name == "indent") {
    const Value width = args.get(0, "width", Value::integer(4));
    const bool first = args.get(1, "first", Value::boolean(false)).truthy();
    const bool blank = args.get(2, "blank", Value::boolean(false)).truthy();
    const std::string ind =
        width.is_string()
            ? width.s
            : std::string(static_cast<size_t>(std::clamp<int64_t>(int_of(width), 0, 256)), ' ');
    const std::string text = to_str(v);
    if (!r.reserve(text.size() + (std::count(text.begin(), text.end(), '\n') + 2) * ind.size())) {
      return {};
    }
    const std::vector<std::string> lines = splitlines(text + "\n");
    std::string out;
    if (blank) {
      for (size_t k = 0; k < lines.size(); ++k) {
        if (k > 0) out += "\n" + ind;
        out += lines[k];
      }
    } else if (!lines.empty()) {
      out = lines[0];
      for (size_t k = 1; k < lines.size(); ++k) {
        out += "\n";
        if (!lines[k].empty()) out += ind;
        out += lines[k];
      }
    }
    if (first) out = ind + out;
    return Value::string(std::move(out));
  }
  if (name == "center") {
    const int64_t width = int_of(args.get(0, "width", Value::integer(80)));
    const std::string s = to_str(v);
    const int64_t n = static_cast<int64_t>(code_points(s).size());
    if (width <= n || width > (1 << 20)) return Value::string(s);
    const int64_t pad = width - n;
    const int64_t left = pad / 2 + (pad & width & 1);
    return Value::string(std::string(static_cast<size_t>(left), ' ') + s +
                         std::string(static_cast<size_t>(pad - left), ' '));
  }
  if (name == "wordcount") {
    int64_t n = 0;
    bool in_word = false;
    for (unsigned char c : to_str(v)) {
      const bool w = std::isalnum(c) || c == '_' || c >= 0x80;
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value::integer(n);
  }
  if (name == "batch") {
    std::vector<Value> items;
    if (!items_of(r, v, line, &items)) return {};
    const Value count = args.get(0, "linecount");
    const Value fill = args.get(1, "fill_with", Value::none());
    if (!is_int(count) || int_of(count) <= 0) {
      return r.fail(line, "batch needs a positive item count");
    }
    const size_t n = static_cast<size_t>(int_of(count));
    if (!fill.is_none() && !r.reserve(uint64_t(n) * sizeof(Value))) return {};
    std::vector<Value> out;
    for (size_t k = 0; k < items.size(); k += n) {
      std::vector<Value> group(items.begin() + k, items.begin() + std::min(items.size(), k + n));
      if (!fill.is_none()) {
        while (group.size() < n) group.push_back(fill);
      }
      out.push_back(Value::new_list(std::move(group)));
    }
    return Value::new_list(std::move(out));
  }
  if (name == "slice") {
    std::vector<Value> items;
    if (!items_of(r, v, line, &items)) return {};
    const Value count = args.get(0, "slices");
    const Value fill = args.get(1, "fill_with", Value::none());
    if (!is_int(count) || int_of(count) <= 0 || int_of(count) > 100000) {
      return r.fail(line, "slice needs a positive number of slices");
    }
    const size_t slices = static_cast<size_t>(int_of(count));
    const size_t per = items.size() / slices, extra = items.size() % slices;
    std::vector<Value> out;
    size_t offset = 0;
    for (size_t k = 0; k < slices; ++k) {
      const size_t start = offset + k * per;
      if (k < extra) ++offset;
      const size_t end = offset + (k + 1) * per;
      std::vector<Value> part(items.begin() + start, items.begin() + end);
      if (!fill.is_none() && k >= extra) part.push_back(fill);
      out.push_back(Value::new_list(std::move(part)));
    }
    return Value::new_list(std::move(out));
  }
  if (name == "groupby") {
    std::vector<Value> items;
    if (!items_of(r, v, line, &items)) return {};
    const Value attribute = args.get(0, "attribute");
    const Value fallback = args.get(1, "default", Value::none());
    const bool case_sensitive = args.get(2, "case_sensitive", Value::boolean(false)).truthy();
    if (!attribute.is_string() && !is_int(attribute)) {
      return r.fail(line, "groupby needs an attribute");
    }
    const std::string path = to_str(attribute);
    // Sorted by key (stable), then runs of equal keys; the grouper is the first item's key.
    std::vector<std::pair<Value, Value>> keyed;
    for (Value& item : items) {
      Value key = get_path(r, item, path, line);
      if (r.failed()) return {};
      if (key.is_undefined() && !fallback.is_none()) key = fallback;
      keyed.emplace_back(std::move(key), std::move(item));
    }
    bool bad = false;
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
      int c = 0;
      if (!order_values(sort_key(a.first, case_sensitive), sort_key(b.first, case_sensitive), &c)) {
        bad = true;
        return false;
      }
      return c < 0;
    });
    if (bad) return r.fail(line, "groupby: keys that cannot be ordered");
    std::vector<Value> out;
    for (size_t k = 0; k < keyed.size();) {
      size_t e = k;
      std::vector<Value> group;
      while (e < keyed.size() && equals(sort_key(keyed[e].first, case_sensitive),
                                        sort_key(keyed[k].first, case_sensitive))) {
        group.push_back(keyed[e].second);
        ++e;
      }
      Value t = Value::new_list({keyed[k].first, Value::new_list(std::move(group))}, true);
      t.list->fields = {"grouper", "list"};
      out.push_back(std::move(t));
      k = e;
    }
    return Value::new_list(std::move(out));
  }
  if (name == "format") {
    if (!v.is_string()) return r.fail(line, "format needs a format string");
    return percent_format(r, v.s, args.pos, line);
  }
  if (name == "escape" || name == "e") {
    if (v.is_string() && v.safe) return v;
    Value out = Value::string(html_escape(to_str(v)));
    out.safe = true;
    return out;
  }
  return r.fail(line, fmt::format("no filter named '{}'", name));
}

Value apply_test(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const int line = args.line;
  const Value arg = args.get(0, "value", Value::undefined());
  auto b = [](bool x) { return Value::boolean(x); };
  if (name == "defined") return b(!v.is_undefined());
  if (name == "undefined") return b(v.is_undefined());
  if (name == "none") return b(v.is_none());
  if (name == "boolean") return b(v.kind == K::kBool);
  if (name == "true") return b(v.kind == K::kBool && v.b);
  if (name == "false") return b(v.kind == K::kBool && !v.b);
  if (name == "integer") return b(v.kind == K::kInt);
  if (name == "float") return b(v.kind == K::kFloat);
  if (name == "number") return b(v.is_number());
  if (name == "string") return b(v.is_string());
  if (name == "mapping") return b(v.is_dict());
  if (name == "iterable") return b(v.is_list() || v.is_dict() || v.is_string() || v.is_undefined());
  if (name == "sequence") return b(v.is_list() || v.is_dict() || v.is_string());
  if (name == "callable") return b(v.kind == K::kFunc);
  if (name == "lower") return b(v.is_string() && py_lower(v.s) == v.s);
  if (name == "upper") return b(v.is_string() && py_upper(v.s) == v.s);
  if (name == "escaped") return b(false);
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!is_int(v)) return r.fail(line, fmt::format("the test '{}' needs an integer", name));
    if (name == "odd") return b(int_of(v) % 2 != 0);
    if (name == "even") return b(int_of(v) % 2 == 0);
    if (!is_int(arg) || int_of(arg) == 0)
      return r.fail(line, "divisibleby needs a non-zero integer");
    return b(int_of(v) % int_of(arg) == 0);
  }
  if (name == "eq" || name == "equalto" || name == "==") return b(equals(v, arg));
  if (name == "ne" || name == "!=") return b(!equals(v, arg));
  if (name == "sameas") {
    if (v.kind != arg.kind) return b(false);
    switch (v.kind) {
      case K::kNone:
      case K::kUndefined:
        return b(true);
      case K::kBool:
        return b(v.b == arg.b);
      case K::kInt:
        return b(v.i == arg.i && v.i >= -5 && v.i <= 256);  // CPython's small-int cache
      case K::kList:
        return b(v.list == arg.list);
      case K::kDict:
        return b(v.dict == arg.dict);
      default:
        return b(false);
    }
  }
  if (name == "in") {
    if (arg.is_string()) return b(v.is_string() && arg.s.find(v.s) != std::string::npos);
    if (arg.is_list()) {
      for (const Value& x : arg.list->items) {
        if (equals(v, x)) return b(true);
      }
      return b(false);
    }
    if (arg.is_dict()) return b(v.is_string() && arg.dict->find(v.s) != nullptr);
    return r.fail(line, "the test 'in' needs a container");
  }
  static constexpr std::pair<std::string_view, std::string_view> kOrder[] = {
      {"lt", "<"}, {"lessthan", "<"},    {"<", "<"}, {"le", "<="}, {"<=", "<="},
      {"gt", ">"}, {"greaterthan", ">"}, {">", ">"}, {"ge", ">="}, {">=", ">="}};
  for (auto [n, op] : kOrder) {
    if (name != n) continue;
    int c = 0;
    if (!order_values(v, arg, &c)) return r.fail(line, "values that cannot be ordered");
    if (op == "<") return b(c < 0);
    if (op == "<=") return b(c <= 0);
    if (op == ">") return b(c > 0);
    return b(c >= 0);
  }
  return r.fail(line, fmt::format("no test named '{}'", name));
}

Value call_method(Renderer& r, const Value& obj, const std::string& name, Args& args, bool* found) {
  *found = true;
  const int line = args.line;
  if (obj.is_string()) {
    const std::string& s = obj.s;
    const Value a0 = args.get(0, "", Value::none());
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const std::string* chars = a0.is_string() ? &a0.s : nullptr;
      return Value::string(py_strip(s, chars, name != "rstrip", name != "lstrip"));
    }
    if (name == "split" || name == "rsplit") {
      const Value sep = args.get(0, "sep", Value::none());
      const Value maxsplit = args.get(1, "maxsplit", Value::integer(-1));
      if (sep.is_string() && sep.s.empty()) return r.fail(line, "empty separator");
      return string_list(py_split(s, sep.is_string() ? &sep.s : nullptr,
                                  is_int(maxsplit) ? int_of(maxsplit) : -1, name == "rsplit"));
    }
    if (name == "startswith" || name == "endswith") {
      std::vector<std::string> options;
      if (a0.is_string()) {
        options.push_back(a0.s);
      } else if (a0.is_list()) {
        for (const Value& x : a0.list->items) {
          if (x.is_string()) options.push_back(x.s);
        }
      } else {
        return r.fail(line, fmt::format("{} needs a string or a tuple of strings", name));
      }
      for (const std::string& o : options) {
        const bool hit =
            name == "startswith"
                ? s.compare(0, o.size(), o) == 0 && s.size() >= o.size()
                : s.size() >= o.size() && s.compare(s.size() - o.size(), o.size(), o) == 0;
        if (hit) return Value::boolean(true);
      }
      return Value::boolean(false);
    }
    if (name == "upper") return Value::string(py_upper(s));
    if (name == "lower") return Value::string(py_lower(s));
    if (name == "title") return Value::string(py_title(s));
    if (name == "capitalize") return Value::string(capitalize(s));
    if (name == "replace") {
      const Value count = args.get(2, "count", Value::integer(-1));
      const std::string f = to_str(args.get(0, "old")), t = to_str(args.get(1, "new"));
      const int64_t c = is_int(count) ? int_of(count) : -1;
      if (!r.reserve(replace_size(s, f, t, c))) return {};
      return Value::string(py_replace(s, f, t, c));
    }
    if (name == "find" || name == "rfind" || name == "count") {
      if (!a0.is_string()) return r.fail(line, fmt::format("{} needs a string", name));
      if (name == "count") {
        if (a0.s.empty()) return Value::integer(static_cast<int64_t>(code_points(s).size()) + 1);
        int64_t n = 0;
        for (size_t at = s.find(a0.s); at != std::string::npos;
             at = s.find(a0.s, at + a0.s.size())) {
          ++n;
        }
        return Value::integer(n);
      }
      const size_t at = name == "find" ? s.find(a0.s) : s.rfind(a0.s);
      if (at == std::string::npos) return Value::integer(-1);
      return Value::integer(static_cast<int64_t>(code_points(s.substr(0, at)).size()));
    }
    if (name == "join") {
      std::vector<Value> items;
      if (!items_of(r, a0, line, &items)) return {};
      std::string out;
      for (size_t k = 0; k < items.size(); ++k) {
        if (!items[k].is_string()) {
          return r.fail(line, fmt::format("sequence item {}: expected str instance", k));
        }
        if (k > 0) out += s;
        out += items[k].s;
        if (!r.reserve(out.size())) return {};
      }
      return Value::string(std::move(out));
    }
    if (name == "removeprefix" || name == "removesuffix") {
      if (!a0.is_string()) return r.fail(line, fmt::format("{} needs a string", name));
      if (name == "removeprefix" && s.compare(0, a0.s.size(), a0.s) == 0 &&
          s.size() >= a0.s.size()) {
        return Value::string(s.substr(a0.s.size()));
      }
      if (name == "removesuffix" && s.size() >= a0.s.size() && !a0.s.empty() &&
          s.compare(s.size() - a0.s.size(), a0.s.size(), a0.s) == 0) {
        return Value::string(s.substr(0, s.size() - a0.s.size()));
      }
      return obj;
    }
    if (name == "splitlines") return string_list(splitlines(s));
    if (name == "format") return str_format(r, s, args, line);
    if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
        name == "islower" || name == "isupper") {
      if (s.empty()) return Value::boolean(false);
      if (name == "isspace") {
        for (std::string_view cp : code_points(s)) {
          if (!is_py_space(cp)) return Value::boolean(false);
        }
        return Value::boolean(true);
      }
      if (name == "islower" || name == "isupper") {
        bool cased = false;
        for (unsigned char c : s) {
          if (std::isalpha(c)) {
            cased = true;
            if (name == "islower" ? std::isupper(c) != 0 : std::islower(c) != 0) {
              return Value::boolean(false);
            }
          }
        }
        return Value::boolean(cased);
      }
      for (unsigned char c : s) {
        const bool ok = name == "isdigit"   ? std::isdigit(c) != 0
                        : name == "isalpha" ? is_alpha(c)
                                            : (is_alpha(c) || std::isdigit(c) != 0);
        if (!ok) return Value::boolean(false);
      }
      return Value::boolean(true);
    }
  } else if (obj.is_dict()) {
    const Dict& d = *obj.dict;
    if (name == "items" || name == "keys" || name == "values") {
      std::vector<Value> out;
      for (size_t k = 0; k < d.items.size(); ++k) {
        if (name == "items") {
          out.push_back(Value::new_list({d.key(k), d.items[k].second}, /*tuple=*/true));
        } else {
          out.push_back(name == "keys" ? d.key(k) : d.items[k].second);
        }
      }
      return Value::new_list(std::move(out));
    }
    if (name == "get") {
      const Value key = args.get(0, "key");
      const Value fallback = args.get(1, "default", Value::none());
      if (key.is_string() || key.kind == K::kInt) {
        if (const Value* x = d.find(to_str(key))) return *x;
      }
      return fallback;
    }
  } else if (obj.is_list()) {
    if (name == "count" || name == "index") {
      const Value a0 = args.get(0, "value");
      int64_t n = 0;
      for (size_t k = 0; k < obj.list->items.size(); ++k) {
        if (!equals(obj.list->items[k], a0)) continue;
        if (name == "index") return Value::integer(static_cast<int64_t>(k));
        ++n;
      }
      if (name == "index") return r.fail(line, "list.index(x): x not in list");
      return Value::integer(n);
    }
  }
  *found = false;
  return {};
}

bool to_json(Renderer& r, const Value& v, const std::string* indent, const std::string& item_sep,
             const std::string& key_sep, bool sort_keys, int line, std::string* out) {
  return json_value(r, v, indent, item_sep, key_sep, sort_keys, line, 0, out);
}

void add_globals(Dict* g) {
  g->set("range", Value::function("range", [](Renderer& r, Args& args) -> Value {
           int64_t p[3] = {0, 0, 1};
           const size_t n = args.pos.size();
           if (n < 1 || n > 3) return r.fail(args.line, "range expects 1 to 3 arguments");
           for (size_t k = 0; k < n; ++k) {
             if (!is_int(args.pos[k])) return r.fail(args.line, "range arguments must be integers");
           }
           if (n == 1) {
             p[1] = int_of(args.pos[0]);
           } else {
             p[0] = int_of(args.pos[0]);
             p[1] = int_of(args.pos[1]);
             if (n == 3) p[2] = int_of(args.pos[2]);
           }
           if (p[2] == 0) return r.fail(args.line, "range() arg 3 must not be zero");
           constexpr int64_t kMaxRange = 100000;  // jinja2's sandbox MAX_RANGE
           const double count = std::ceil((static_cast<double>(p[1]) - static_cast<double>(p[0])) /
                                          static_cast<double>(p[2]));
           if (count > kMaxRange) {
             return r.fail(args.line, "range too big: at most 100000 items (as jinja2's sandbox)");
           }
           std::vector<Value> items;
           for (__int128 x = p[0]; p[2] > 0 ? x < p[1] : x > p[1]; x += p[2]) {
             items.push_back(Value::integer(static_cast<int64_t>(x)));
           }
           return Value::new_list(std::move(items));
         }));
  auto make_dict = [](bool ns) {
    return [ns](Renderer& r, Args& args) -> Value {
      Value d = Value::new_dict();
      d.dict->is_namespace = ns;
      for (const Value& p : args.pos) {
        if (!p.is_dict()) return r.fail(args.line, "expected a mapping as positional argument");
        for (const auto& [k, x] : p.dict->items) d.dict->set(k, x);
      }
      for (const auto& [k, x] : args.kw) d.dict->set(k, x);
      return d;
    };
  };
  g->set("namespace", Value::function("namespace", make_dict(true)));
  g->set("dict", Value::function("dict", make_dict(false)));
  g->set("raise_exception", Value::function("raise_exception", [](Renderer& r, Args& args) {
           return r.fail(0,
                         args.pos.empty() ? std::string("raise_exception") : to_str(args.pos[0]));
         }));
  g->set("strftime_now", Value::function("strftime_now", [](Renderer& r, Args& args) -> Value {
           if (args.pos.empty() || !args.pos[0].is_string()) {
             return r.fail(args.line, "strftime_now needs a format string");
           }
           bool utc = false;
           const time_t t = static_cast<time_t>(r.now(&utc));
           struct tm tm {};
           if (utc) {
             gmtime_r(&t, &tm);
           } else {
             localtime_r(&t, &tm);
           }
           char buf[512];
           const size_t n = std::strftime(buf, sizeof buf, args.pos[0].s.c_str(), &tm);
           return Value::string(std::string(buf, n));
         }));
}

}  // namespace mnemo::jinja
