// Python's str over UTF-8 bytes (py_str.h): characters, whitespace, case mapping, and the str
// algorithms filters and methods share.
#include "jinja/py_str.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "base/utf8.h"

namespace mnemo::jinja {

std::vector<std::string_view> code_points(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8::sequence_length(s, i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

size_t py_len(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += !utf8::is_continuation(c);
  return n;
}

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

bool is_alpha(unsigned char c) { return std::isalpha(c) != 0 || c >= 0x80; }

// Walks in from the ends (a long text with little to strip costs little).
std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right) {
  std::vector<std::string_view> set;
  if (chars != nullptr) set = code_points(*chars);
  auto strip_it = [&](std::string_view cp) {
    if (chars == nullptr) return is_py_space(cp);
    return std::find(set.begin(), set.end(), cp) != set.end();
  };
  auto cp_at = [&](size_t i) {  // the code point starting at byte i (its lead byte's length)
    size_t n = std::max<size_t>(1, utf8::lead_length(static_cast<unsigned char>(s[i])));
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
      while (start > a && utf8::is_continuation(static_cast<unsigned char>(s[start])) &&
             b - start < 4) {
        --start;
      }
      const std::string_view cp = std::string_view(s).substr(start, b - start);
      if (!strip_it(cp)) break;
      b = start;
    }
  }
  return s.substr(a, b - a);
}

namespace {

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
  const uint32_t c = utf8::sequence_value(u);
  if (upper && c == 0xdf) {
    *out += title ? "Ss" : "SS";
    return;
  }
  uint32_t m = upper ? cp_upper(c) : cp_lower(c);
  if (upper && title && digraph_base(c) != 0) m = digraph_base(c) + 1;
  if (m == c) {
    out->append(u);
  } else {
    utf8::append(m, out);
  }
}

}  // namespace

std::string py_lower(const std::string& s) {
  std::string out;
  const auto cps = code_points(s);
  for (size_t k = 0; k < cps.size(); ++k) {
    const uint32_t c = utf8::sequence_value(cps[k]);
    if (c == 0x3a3) {
      const bool after_cased = k > 0 && cp_is_cased(utf8::sequence_value(cps[k - 1]));
      const bool before_cased = k + 1 < cps.size() && cp_is_cased(utf8::sequence_value(cps[k + 1]));
      utf8::append(after_cased && !before_cased ? 0x3c2 : 0x3c3, &out);
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
    const uint32_t c = utf8::sequence_value(u);
    if (c >= 0xfb00 && c <= 0xfb06) {
      out += kLigatures[c - 0xfb00];
    } else {
      put_case(u, true, &out);
    }
  }
  return out;
}

std::string py_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (std::string_view u : code_points(s)) {
    const bool cased = cp_is_cased(utf8::sequence_value(u));
    put_case(u, cased && !prev_cased, &out, /*title=*/true);
    prev_cased = cased;
  }
  return out;
}

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

std::string capitalize(const std::string& s) {
  std::string out;
  bool first = true;
  for (std::string_view u : code_points(s)) {
    put_case(u, first, &out, /*title=*/true);
    first = false;
  }
  return out;
}

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
    n = py_len(s) + 1;
  } else {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + from.size())) {
      ++n;
    }
  }
  if (count >= 0) n = std::min<uint64_t>(n, uint64_t(count));
  return s.size() + n * to.size();
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

bool parse_float(const std::string& text, double* out) {
  const std::string t = py_strip(text, nullptr, true, true);
  if (t.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(t.c_str(), &end);
  return end == t.c_str() + t.size();
}

}  // namespace mnemo::jinja
