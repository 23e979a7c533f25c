// Schema checking, evaluation and value analysis for the JSON Schema converter
// (json_schema_eval.h).
#include "grammar/json_schema_eval.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

namespace mnemo::grammar::schema {
namespace {

// Keywords that carry no constraint: skipped wherever they sit.
const std::set<std::string>& annotations() {
  static const std::set<std::string> k = {"title",    "description", "default",  "examples",
                                          "$schema",  "$id",         "$comment", "deprecated",
                                          "readOnly", "writeOnly",   "$defs",    "definitions"};
  return k;
}

const std::set<std::string>& constraints() {
  static const std::set<std::string> k = {
      "type",  "const",    "enum",       "anyOf",     "oneOf",
      "allOf", "$ref",     "properties", "required",  "additionalProperties",
      "items", "minItems", "maxItems",   "minLength", "maxLength"};
  return k;
}

// The "$ref"s a schema applies in place (not inside a property or an item): a cycle of these
// would be a value that never starts.
void in_place_refs(const Json& s, std::vector<std::string>* out) {
  if (!s.is_object()) return;
  if (auto r = s.find("$ref"); r != s.end()) out->push_back(r->get<std::string>());
  for (const char* key : {"anyOf", "oneOf", "allOf"}) {
    if (auto it = s.find(key); it != s.end()) {
      for (const Json& b : *it) in_place_refs(b, out);
    }
  }
}

}  // namespace

unsigned type_bit(const Json& v) {
  switch (v.type()) {
    case Json::value_t::object:
      return kObject;
    case Json::value_t::array:
      return kArray;
    case Json::value_t::string:
      return kString;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return kInt;
    case Json::value_t::number_float: {
      const double d = v.get<double>();
      return std::isfinite(d) && std::floor(d) == d ? kInt : kFrac;
    }
    case Json::value_t::boolean:
      return kBool;
    default:
      return kNull;
  }
}

unsigned type_mask(const Json& type) {
  if (type.is_array()) {
    unsigned m = 0;
    for (const Json& t : type) m |= type_mask(t);
    return m;
  }
  static const std::map<std::string, unsigned> kNames = {
      {"object", kObject},      {"array", kArray},  {"string", kString}, {"integer", kInt},
      {"number", kInt | kFrac}, {"boolean", kBool}, {"null", kNull}};
  auto it = type.is_string() ? kNames.find(type.get<std::string>()) : kNames.end();
  return it == kNames.end() ? 0 : it->second;
}

bool json_equal(const Json& a, const Json& b) {
  if (a.is_number() && b.is_number()) return a == b;  // nlohmann compares numbers by value
  if (a.type() != b.type()) return false;
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (const auto& [k, v] : a.items()) {
      auto it = b.find(k);
      if (it == b.end() || !json_equal(v, *it)) return false;
    }
    return true;
  }
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!json_equal(a[i], b[i])) return false;
    }
    return true;
  }
  return a == b;
}

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

Status schema_error(const std::string& where, const std::string& what) {
  return Status::invalid_argument(
      fmt::format("json schema{}: {}", where.empty() ? "" : " at " + where, what));
}

std::string pointer_token(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

const Json* Document::resolve(const std::string& ref) const {
  for (const std::string section : {"$defs", "definitions"}) {
    const std::string prefix = "#/" + section + "/";
    if (ref.rfind(prefix, 0) != 0) continue;
    auto defs = root_.find(section);
    if (defs == root_.end() || !defs->is_object()) return nullptr;
    auto it = defs->find(ref.substr(prefix.size()));
    return it == defs->end() ? nullptr : &*it;
  }
  return nullptr;
}

Status Document::check() const {
  std::vector<std::string> refs;
  MNEMO_RETURN_IF_ERROR(check_at(root_, "", &refs));
  return check_ref_cycles(refs);
}

// One schema and those below it; `refs` collects the "$ref" targets reached (each checked once).
Status Document::check_at(const Json& s, const std::string& where,
                          std::vector<std::string>* refs) const {
  if (s.is_boolean()) return Status();
  if (!s.is_object()) return schema_error(where, "a schema must be an object or a boolean");
  for (const auto& [k, v] : s.items()) {
    if (!annotations().count(k) && !constraints().count(k)) {
      return schema_error(where, fmt::format("'{}' is not supported", k));
    }
  }
  if (auto t = s.find("type"); t != s.end()) {
    if (!t->is_string() && !t->is_array()) {
      return schema_error(where, "'type' must be a string or a list");
    }
    if (t->is_array() && t->empty()) return schema_error(where, "'type' is an empty list");
    for (const Json& name : t->is_array() ? *t : Json::array({*t})) {
      if (type_mask(name) == 0)
        return schema_error(
            where,
            fmt::format("unknown type {}",
                        name.is_string() ? "'" + name.get<std::string>() + "'" : name.dump()));
    }
  }
  if (auto e = s.find("enum"); e != s.end() && (!e->is_array() || e->empty())) {
    return schema_error(where, "'enum' must be a non-empty array");
  }
  for (const char* key : {"anyOf", "oneOf", "allOf"}) {
    auto it = s.find(key);
    if (it == s.end()) continue;
    if (!it->is_array() || it->empty()) {
      return schema_error(where, fmt::format("'{}' must be a non-empty array", key));
    }
    if (std::string(key) == "allOf" && it->size() != 1) {
      return schema_error(where, "'allOf' is supported with exactly one schema");
    }
    for (size_t i = 0; i < it->size(); ++i) {
      MNEMO_RETURN_IF_ERROR(check_at((*it)[i], fmt::format("{}/{}/{}", where, key, i), refs));
    }
  }
  if (auto r = s.find("$ref"); r != s.end()) {
    const Json* target = r->is_string() ? resolve(r->get<std::string>()) : nullptr;
    if (target == nullptr) {
      return schema_error(where, fmt::format("'$ref' {} cannot be resolved (only #/$defs/... and "
                                             "#/definitions/... of this schema)",
                                             r->dump()));
    }
    const std::string ref = r->get<std::string>();
    if (std::find(refs->begin(), refs->end(), ref) == refs->end()) {
      refs->push_back(ref);
      MNEMO_RETURN_IF_ERROR(check_at(*target, ref.substr(1), refs));
    }
  }
  auto props = s.find("properties");
  if (props != s.end()) {
    if (!props->is_object()) return schema_error(where, "'properties' must be an object");
    for (const auto& [name, sub] : props->items()) {
      MNEMO_RETURN_IF_ERROR(check_at(sub, where + "/properties/" + pointer_token(name), refs));
    }
  }
  if (auto rq = s.find("required"); rq != s.end()) {
    if (!rq->is_array()) return schema_error(where, "'required' must be an array");
    for (const Json& r : *rq) {
      // A name missing from a "properties" the schema writes out is most likely a slip.
      if (!r.is_string() || (props != s.end() && !props->contains(r.get<std::string>()))) {
        return schema_error(where,
                            fmt::format("required property {} is not in 'properties'", r.dump()));
      }
    }
  }
  if (auto ap = s.find("additionalProperties"); ap != s.end()) {
    const bool ok = ap->is_boolean() && (!ap->get<bool>() || props == s.end());
    if (!ok) return schema_error(where, "'additionalProperties' is supported as false only");
  }
  if (auto it = s.find("items"); it != s.end()) {
    MNEMO_RETURN_IF_ERROR(check_at(*it, where + "/items", refs));
  }
  for (const auto& [lo, hi] : {std::pair{"minItems", "maxItems"}, {"minLength", "maxLength"}}) {
    for (const char* key : {lo, hi}) {
      auto it = s.find(key);
      if (it != s.end() && (!it->is_number_unsigned() || it->get<uint64_t>() > 10000)) {
        return schema_error(where, fmt::format("'{}' must be an integer in [0, 10000]", key));
      }
    }
    if (s.contains(lo) && s.contains(hi) && s[hi].get<uint64_t>() < s[lo].get<uint64_t>()) {
      return schema_error(where, fmt::format("'{}' is below '{}'", hi, lo));
    }
  }
  return Status();
}

Status Document::check_ref_cycles(const std::vector<std::string>& refs) const {
  // Depth-first over "in place" edges; a target met again while on the path closes a cycle.
  std::map<std::string, int> state;  // 1: on the path, 2: done
  std::function<Status(const std::string&)> walk = [&](const std::string& ref) -> Status {
    state[ref] = 1;
    std::vector<std::string> next;
    in_place_refs(*resolve(ref), &next);
    for (const std::string& n : next) {
      if (state[n] == 1) {
        return schema_error(ref.substr(1),
                            fmt::format("'$ref' \"{}\" comes back to itself without entering a "
                                        "property or an item (a value that never starts)",
                                        n));
      }
      if (state[n] == 0) MNEMO_RETURN_IF_ERROR(walk(n));
    }
    state[ref] = 2;
    return Status();
  };
  for (const std::string& r : refs) {
    if (state[r] == 0) MNEMO_RETURN_IF_ERROR(walk(r));
  }
  return Status();
}

bool Document::eval(const Json& s, const Json& v) const {
  if (s.is_boolean()) return s.get<bool>();
  const unsigned bit = type_bit(v);
  for (const auto& [k, kw] : s.items()) {
    bool ok = true;
    if (k == "type") {
      ok = (type_mask(kw) & bit) != 0;
    } else if (k == "const") {
      ok = json_equal(kw, v);
    } else if (k == "enum") {
      ok = std::any_of(kw.begin(), kw.end(), [&](const Json& e) { return json_equal(e, v); });
    } else if (k == "anyOf") {
      ok = std::any_of(kw.begin(), kw.end(), [&](const Json& b) { return eval(b, v); });
    } else if (k == "oneOf") {
      ok = std::count_if(kw.begin(), kw.end(), [&](const Json& b) { return eval(b, v); }) == 1;
    } else if (k == "allOf") {
      ok = std::all_of(kw.begin(), kw.end(), [&](const Json& b) { return eval(b, v); });
    } else if (k == "$ref") {
      ok = eval(*resolve(kw.get<std::string>()), v);
    } else if (k == "properties" && bit == kObject) {
      for (const auto& [name, value] : v.items()) {
        if (auto p = kw.find(name); p != kw.end()) ok = ok && eval(*p, value);
      }
    } else if (k == "required" && bit == kObject) {
      for (const Json& r : kw) ok = ok && v.contains(r.get<std::string>());
    } else if (k == "additionalProperties" && bit == kObject && !kw.get<bool>()) {
      auto props = s.find("properties");
      for (const auto& [name, value] : v.items()) {
        ok = ok && props != s.end() && props->contains(name);
      }
    } else if (k == "items" && bit == kArray) {
      const Json& item = kw;  // clang 14 cannot capture a structured binding in a lambda
      ok = std::all_of(v.begin(), v.end(), [&](const Json& e) { return eval(item, e); });
    } else if (bit == kArray && (k == "minItems" || k == "maxItems")) {
      ok = k == "minItems" ? v.size() >= kw.get<uint64_t>() : v.size() <= kw.get<uint64_t>();
    } else if (bit == kString && (k == "minLength" || k == "maxLength")) {
      const size_t n = utf8_length(v.get<std::string>());
      ok = k == "minLength" ? n >= kw.get<uint64_t>() : n <= kw.get<uint64_t>();
    }
    if (!ok) return false;
  }
  return true;
}

unsigned Document::types(const Json& s) const {
  if (s.is_boolean()) return s.get<bool>() ? kAllTypes : 0;
  unsigned m = kAllTypes;
  if (auto t = s.find("type"); t != s.end()) m &= type_mask(*t);
  if (auto c = s.find("const"); c != s.end()) m &= type_bit(*c);
  if (auto e = s.find("enum"); e != s.end()) {
    unsigned u = 0;
    for (const Json& v : *e) u |= type_bit(v);
    m &= u;
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (auto it = s.find(key); it != s.end()) {
      unsigned u = 0;
      for (const Json& b : *it) u |= types(b);
      m &= u;
    }
  }
  if (auto it = s.find("allOf"); it != s.end()) m &= types((*it)[0]);
  if (auto r = s.find("$ref"); r != s.end()) m &= types(*resolve(r->get<std::string>()));
  return m;
}

std::optional<std::vector<Json>> Document::values(const Json& s) const {
  if (s.is_boolean()) {
    if (s.get<bool>()) return std::nullopt;
    return std::vector<Json>{};
  }
  if (auto c = s.find("const"); c != s.end()) return std::vector<Json>{*c};
  if (auto e = s.find("enum"); e != s.end()) return std::vector<Json>(e->begin(), e->end());
  if (auto r = s.find("$ref"); r != s.end()) {
    if (auto v = values(*resolve(r->get<std::string>()))) return v;
  }
  if (auto it = s.find("allOf"); it != s.end()) {
    if (auto v = values((*it)[0])) return v;
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    auto it = s.find(key);
    if (it == s.end()) continue;
    std::vector<Json> all;
    bool finite = true;
    for (const Json& b : *it) {
      auto v = values(b);
      if (!v) {
        finite = false;
        break;
      }
      all.insert(all.end(), v->begin(), v->end());
    }
    if (finite) return all;
  }
  return std::nullopt;
}

// `s` and the schemas it applies in place through "$ref" and "allOf" (all of which a value of
// `s` satisfies).
void Document::conjuncts(const Json& s, std::vector<const Json*>* out) const {
  out->push_back(&s);
  if (!s.is_object()) return;
  if (auto r = s.find("$ref"); r != s.end()) conjuncts(*resolve(r->get<std::string>()), out);
  if (auto it = s.find("allOf"); it != s.end()) conjuncts((*it)[0], out);
}

// Objects `a` and `b` both require a property whose value one of them limits to a list of
// values, none of which the other accepts there.
bool Document::told_apart(const Json& a, const Json& b) const {
  std::vector<const Json*> ca, cb;
  conjuncts(a, &ca);
  conjuncts(b, &cb);
  auto required = [](const std::vector<const Json*>& c) {
    std::set<std::string> out;
    for (const Json* s : c) {
      if (!s->is_object()) continue;
      if (auto rq = s->find("required"); rq != s->end()) {
        for (const Json& r : *rq) out.insert(r.get<std::string>());
      }
    }
    return out;
  };
  auto props = [](const std::vector<const Json*>& c, const std::string& k) {
    std::vector<const Json*> out;
    for (const Json* s : c) {
      if (!s->is_object()) continue;
      auto p = s->find("properties");
      if (p != s->end() && p->contains(k)) out.push_back(&(*p)[k]);
    }
    return out;
  };
  const std::set<std::string> rb = required(cb);
  for (const std::string& k : required(ca)) {
    if (!rb.count(k)) continue;
    const std::vector<const Json*> pa = props(ca, k), pb = props(cb, k);
    auto all = [&](const std::vector<const Json*>& ps, const Json& v) {
      return std::all_of(ps.begin(), ps.end(), [&](const Json* p) { return eval(*p, v); });
    };
    std::vector<const Json*> both = pa;
    both.insert(both.end(), pb.begin(), pb.end());
    for (const Json* p : both) {
      auto vals = values(*p);
      if (!vals) continue;
      if (std::none_of(vals->begin(), vals->end(),
                       [&](const Json& v) { return all(pa, v) && all(pb, v); })) {
        return true;
      }
    }
  }
  return false;
}

bool Document::disjoint(const Json& a, const Json& b) const {
  const unsigned common = types(a) & types(b);
  if (common == 0) return true;
  for (const auto& xy : {std::pair{&a, &b}, {&b, &a}}) {
    const Json* x = xy.first;  // not a structured binding: the lambda below captures it
    const Json* y = xy.second;
    auto vals = values(*x);
    if (vals && std::none_of(vals->begin(), vals->end(),
                             [&](const Json& v) { return eval(*x, v) && eval(*y, v); })) {
      return true;
    }
  }
  return (common & ~unsigned(kObject)) == 0 && told_apart(a, b);
}

}  // namespace mnemo::grammar::schema
