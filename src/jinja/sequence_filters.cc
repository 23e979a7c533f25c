// The filters of lists and dicts (builtins.h), and the helpers they share with the methods:
// iterating a value, attribute paths, sorting.
#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "jinja/builtins.h"
#include "jinja/py_str.h"

namespace mnemo::jinja {

using K = Value::Kind;

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
      if (!r.reserve(uint64_t(py_len(v.s)) * sizeof(Value))) return false;
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

namespace {

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

// first and last (`name` tells which).
Value filter_first(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const int line = args.line;
  std::vector<Value> items;
  if (!items_of(r, v, line, &items)) return {};
  if (items.empty()) return Value::undefined();
  return name == "first" ? items.front() : items.back();
}

Value filter_join(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const int line = args.line;
  const Value sep = args.get(0, "d", Value::string(""));
  const Value attribute = args.get(1, "attribute", Value::none());
  std::vector<Value> items;
  if (!items_of(r, v, line, &items)) return {};
  std::string out;
  for (size_t k = 0; k < items.size(); ++k) {
    if (k > 0) out += to_str(sep);
    const Value item = attribute.is_string() ? get_path(r, items[k], attribute.s, line) : items[k];
    if (r.failed()) return {};
    out += to_str(item);
    if (!r.reserve(out.size())) return {};
  }
  return Value::string(std::move(out));
}

Value filter_list(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const int line = args.line;
  std::vector<Value> items;
  if (!items_of(r, v, line, &items)) return {};
  return Value::new_list(std::move(items));
}

Value filter_items(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const int line = args.line;
  if (v.is_undefined()) return Value::new_list();
  if (!v.is_dict()) return r.fail(line, "the filter 'items' needs a mapping");
  std::vector<Value> out;
  for (size_t k = 0; k < v.dict->items.size(); ++k) {
    out.push_back(Value::new_list({v.dict->key(k), v.dict->items[k].second}, /*tuple=*/true));
  }
  return Value::new_list(std::move(out));
}

Value filter_dictsort(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const int line = args.line;
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

Value filter_reverse(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const int line = args.line;
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

Value filter_sort(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const int line = args.line;
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

Value filter_unique(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const int line = args.line;
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

// min and max (`name` tells which).
Value filter_min(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const int line = args.line;
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

Value filter_sum(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const int line = args.line;
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

Value filter_map(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const int line = args.line;
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

// select and reject (`name` tells which).
Value filter_select(Renderer& r, std::string_view name, const Value& v, Args& args) {
  return select_items(r, v, args, false, name == "select");
}

// selectattr and rejectattr (`name` tells which).
Value filter_selectattr(Renderer& r, std::string_view name, const Value& v, Args& args) {
  return select_items(r, v, args, true, name == "selectattr");
}

Value filter_batch(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const int line = args.line;
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

Value filter_slice(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const int line = args.line;
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

Value filter_groupby(Renderer& r, std::string_view name, const Value& v, Args& args) {
  const int line = args.line;
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

}  // namespace

void add_sequence_filters(FilterTable* table) {
  (*table)["first"] = filter_first;
  (*table)["last"] = filter_first;
  (*table)["join"] = filter_join;
  (*table)["list"] = filter_list;
  (*table)["items"] = filter_items;
  (*table)["dictsort"] = filter_dictsort;
  (*table)["reverse"] = filter_reverse;
  (*table)["sort"] = filter_sort;
  (*table)["unique"] = filter_unique;
  (*table)["min"] = filter_min;
  (*table)["max"] = filter_min;
  (*table)["sum"] = filter_sum;
  (*table)["map"] = filter_map;
  (*table)["select"] = filter_select;
  (*table)["reject"] = filter_select;
  (*table)["selectattr"] = filter_selectattr;
  (*table)["rejectattr"] = filter_selectattr;
  (*table)["batch"] = filter_batch;
  (*table)["slice"] = filter_slice;
  (*table)["groupby"] = filter_groupby;
}

}  // namespace mnemo::jinja
