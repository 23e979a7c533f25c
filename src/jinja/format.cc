// Python's string formatting as templates use it (builtins.h): printf-style `fmt % args` and
// str.format.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "jinja/builtins.h"
#include "jinja/py_str.h"

namespace mnemo::jinja {

using K = Value::Kind;

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

}  // namespace mnemo::jinja
