// JSON Schema -> GBNF (contract and the supported subset in include/mnemo/json_schema.h).
//
// A schema object is the conjunction of its keywords, and "$ref", "allOf" and the branch an
// "anyOf"/"oneOf" takes add schemas to that conjunction. So the converter works on a list of
// schemas a value must all satisfy (a Conj) and reads each keyword from all of them: "type"s
// intersect, string and array bounds take the tightest, object keys are those every schema allows,
// a property's value the conjunction of what each schema says of it. const/enum values are kept
// when every schema of the list accepts them (json_schema_eval.h evaluates them), so a keyword
// beside them is exact whatever it is. An empty result ("") is a conjunction no value satisfies.
#include "mnemo/json_schema.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "grammar/json_schema_eval.h"

namespace mnemo::grammar {
namespace {

using schema::Json;

// The JSON value grammar (RFC 8259 §2-§7), with bounded digits and whitespace. A \u escape of a
// surrogate is left out: two of them decode to one character, so a string's escapes would no
// longer count its characters (minLength); such characters come as UTF-8.
constexpr const char* kBase = R"(ws ::= [ \t\n]{0,20}
value ::= object | array | string | number | boolean | null
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" char* "\""
char ::= [^"\\\x00-\x1F\x7F] | "\\" ( ["\\/bfnrt] | "u" ( [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) )
integral ::= "0" | [1-9] [0-9]{0,15}
integer ::= "-"? integral
number ::= "-"? integral ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?
boolean ::= "true" | "false"
null ::= "null"
)";

// A rule no text matches (an empty class), for a recursive rule that turned out to accept nothing.
constexpr const char* kNothing = "[^\\x00-\\U0010FFFF]";

// At most this many conjunctions are converted: anyOf beside anyOf multiplies branches.
constexpr size_t kMaxSteps = 20000;

// A GBNF literal holding `text` exactly.
std::string literal(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02X}", c);
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

// Applicators of a member already taken into its conjunction.
enum Done : unsigned { kDoneRef = 1, kDoneAllOf = 2, kDoneAnyOf = 4, kDoneOneOf = 8 };

// One schema of a conjunction: where it sits in the document (a JSON pointer: names it in errors
// and identifies it) and which of its applicators are already applied.
struct Member {
  const Json* s;
  std::string at;
  unsigned done = 0;
};
using Conj = std::vector<Member>;

// Adds `m` unless a member at the same place is there (then their applied sets join: a schema
// conjoined with itself is itself).
void join(Conj* c, Member m) {
  for (Member& o : *c) {
    if (o.at == m.at) {
      o.done |= m.done;
      return;
    }
  }
  c->push_back(std::move(m));
}

bool has_any(const Conj& c, std::initializer_list<const char*> keys) {
  for (const Member& m : c) {
    for (const char* k : keys) {
      if (m.s->contains(k)) return true;
    }
  }
  return false;
}

// A member's place for a message ("/" for the root).
std::string where(const std::string& at) { return at.empty() ? "/" : at; }

class Converter {
 public:
  explicit Converter(const Json& root) : root_(root), doc_(root) {}

  Result<std::string> run() {
    MNEMO_RETURN_IF_ERROR(doc_.check());
    MNEMO_ASSIGN_OR_RETURN(std::string top, visit({Member{&root_, ""}}));
    if (top.empty()) {
      return schema::schema_error(
          "", "the schema accepts nothing" + (why_.empty() ? std::string() : " (" + why_ + ")"));
    }
    std::string out = "root ::= " + top + "\n" + kBase;
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out;
  }

 private:
  std::string add(std::string body) {
    const std::string name = fmt::format("s-{}", rules_.size());
    rules_[name] = std::move(body);
    return name;
  }
  // Records the first reason a conjunction accepted nothing (for the error if the whole does).
  std::string nothing(const std::string& why) {
    if (why_.empty()) why_ = why;
    return "";
  }

  // A rule name or an expression in parentheses for the values that satisfy every member of `c`;
  // "" when none does.
  Result<std::string> visit(Conj c) {
    if (++steps_ > kMaxSteps) {
      return schema::schema_error("", "the schema is too large to convert (anyOf beside anyOf?)");
    }
    // A key for this conjunction: a "$ref" makes the document recursive, and a conjunction met
    // again while it is being built is the same rule.
    std::vector<std::string> parts;
    for (const Member& m : c) parts.push_back(fmt::format("{}#{}", m.at, m.done));
    std::sort(parts.begin(), parts.end());
    const std::string key = fmt::format("{}", fmt::join(parts, " "));
    bool via_ref = false;
    for (size_t i = 0; i < c.size(); ++i) {  // c grows: targets are expanded in turn
      const Json& s = *c[i].s;
      if (s.is_boolean()) continue;
      if (auto r = s.find("$ref"); r != s.end() && !(c[i].done & kDoneRef)) {
        c[i].done |= kDoneRef;
        via_ref = true;
        const std::string ref = r->get<std::string>();
        join(&c, Member{doc_.resolve(ref), ref.substr(1)});
      }
      if (auto a = s.find("allOf"); a != s.end() && !(c[i].done & kDoneAllOf)) {
        c[i].done |= kDoneAllOf;
        join(&c, Member{&(*a)[0], c[i].at + "/allOf/0"});
      }
    }
    if (!via_ref) return build(c);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    const std::string name = add("");  // named before it is built: a recursive use finds it
    memo_[key] = name;
    MNEMO_ASSIGN_OR_RETURN(std::string body, build(c));
    if (body.empty()) {
      rules_[name] = kNothing;
      memo_[key] = "";
      return std::string();
    }
    rules_[name] = body;
    return name;
  }

  // visit() once "$ref" and "allOf" are expanded.
  Result<std::string> build(Conj c) {
    for (const Member& m : c) {
      if (m.s->is_boolean() && !m.s->get<bool>()) return nothing("false at " + where(m.at));
    }
    std::erase_if(c, [](const Member& m) { return m.s->is_boolean(); });
    for (const Member& m : c) {
      if (m.s->contains("const") || m.s->contains("enum")) return listed(c, m);
    }
    for (size_t i = 0; i < c.size(); ++i) {
      for (const auto& [key, flag] : {std::pair{"anyOf", kDoneAnyOf}, {"oneOf", kDoneOneOf}}) {
        auto it = c[i].s->find(key);
        if (it == c[i].s->end() || (c[i].done & flag)) continue;
        if (flag == kDoneOneOf) MNEMO_RETURN_IF_ERROR(check_one_of(*it, c[i].at));
        std::string alts;
        for (size_t j = 0; j < it->size(); ++j) {
          Conj d = c;
          d[i].done |= flag;
          join(&d, Member{&(*it)[j], fmt::format("{}/{}/{}", c[i].at, key, j)});
          MNEMO_ASSIGN_OR_RETURN(std::string r, visit(std::move(d)));
          if (!r.empty()) alts += (alts.empty() ? "" : " | ") + r;
        }
        return alts.empty() ? std::string() : "(" + alts + ")";
      }
    }
    return typed(c);
  }

  // `m`'s const or enum values that every member accepts, as literals of their compact JSON text.
  std::string listed(const Conj& c, const Member& m) {
    const bool is_const = m.s->contains("const");
    const Json& list = is_const ? Json::array({(*m.s)["const"]}) : (*m.s)["enum"];
    std::set<std::string> seen;
    std::string alts;
    for (const Json& v : list) {
      const bool ok =
          std::all_of(c.begin(), c.end(), [&](const Member& o) { return doc_.eval(*o.s, v); });
      if (!ok || !seen.insert(v.dump()).second) continue;
      alts += (alts.empty() ? "" : " | ") + literal(v.dump());
    }
    if (alts.empty()) {
      return nothing(fmt::format("no value of '{}' at {} meets the keywords beside it",
                                 is_const ? "const" : "enum", where(m.at)));
    }
    return "(" + alts + ")";
  }

  // oneOf is anyOf when no value can match two branches: proven for each pair (two branches that
  // both list their values need no proof, as listed() evaluates the oneOf itself on each value).
  Status check_one_of(const Json& branches, const std::string& at) {
    for (size_t i = 0; i < branches.size(); ++i) {
      for (size_t j = i + 1; j < branches.size(); ++j) {
        if (doc_.values(branches[i]) && doc_.values(branches[j])) continue;
        if (doc_.disjoint(branches[i], branches[j])) continue;
        return schema::schema_error(
            at, fmt::format("'oneOf' whose branches may overlap ({} and {}) is not supported: "
                            "branches need different types, distinct const/enum values, or a "
                            "required property whose const/enum tells them apart",
                            i, j));
      }
    }
    return Status();
  }

  // The members' types, each with the members' keywords for it. With no "type": the types the
  // keywords are about (a schema with "properties" means objects), or when no value of those
  // meets the keywords, all the other types (to which the keywords do not apply).
  Result<std::string> typed(const Conj& c) {
    unsigned mask = schema::kAllTypes;
    bool typed = false;
    for (const Member& m : c) {
      if (auto t = m.s->find("type"); t != m.s->end()) {
        mask &= schema::type_mask(*t);
        typed = true;
      }
    }
    const bool obj = has_any(c, {"properties", "required", "additionalProperties"});
    const bool arr = has_any(c, {"items", "minItems", "maxItems"});
    const bool str = has_any(c, {"minLength", "maxLength"});
    if (!typed) {
      if (!obj && !arr && !str) return std::string("value");
      mask = (obj ? schema::kObject : 0) | (arr ? schema::kArray : 0) | (str ? schema::kString : 0);
    }
    std::vector<std::string> alts;
    if (mask & schema::kObject) {
      MNEMO_ASSIGN_OR_RETURN(std::string r, obj ? object(c) : std::string("object"));
      if (!r.empty()) alts.push_back(r);
    }
    if (mask & schema::kArray) {
      MNEMO_ASSIGN_OR_RETURN(std::string r, arr ? array(c) : std::string("array"));
      if (!r.empty()) alts.push_back(r);
    }
    if (mask & schema::kString) {
      const std::string r = str ? string(c) : "string";
      if (!r.empty()) alts.push_back(r);
    }
    if (mask & schema::kFrac) {
      alts.push_back("number");
    } else if (mask & schema::kInt) {
      alts.push_back("integer");
    }
    if (mask & schema::kBool) alts.push_back("boolean");
    if (mask & schema::kNull) alts.push_back("null");
    if (alts.empty() && !typed) {
      // No value of the types the keywords are about meets them all; the others do, as the
      // keywords do not apply to them.
      mask = schema::kAllTypes & ~mask;
      for (const auto& [bit, name] : {std::pair{schema::kObject, "object"},
                                      {schema::kArray, "array"},
                                      {schema::kString, "string"}}) {
        if (mask & bit) alts.push_back(name);
      }
      alts.insert(alts.end(), {"number", "boolean", "null"});
    }
    if (alts.empty()) return nothing("the types at " + where(c[0].at) + " do not meet");
    if (alts.size() == 1) return alts[0];
    return fmt::format("( {} )", fmt::join(alts, " | "));
  }

  // Objects. Keys: with "additionalProperties": false, those every such member lists in
  // "properties"; otherwise those any member lists in "properties" or "required" (a schema that
  // names keys means those keys). Required keys are the members' "required" together.
  Result<std::string> object(const Conj& c) {
    std::vector<std::string> order;
    std::set<std::string> required;
    std::optional<std::set<std::string>> closed;
    for (const Member& m : c) {
      const Json& s = *m.s;
      auto props = s.find("properties");
      std::set<std::string> listed;
      if (props != s.end()) {
        for (const auto& [k, v] : props->items()) {
          listed.insert(k);
          if (std::find(order.begin(), order.end(), k) == order.end()) order.push_back(k);
        }
      }
      if (auto ap = s.find("additionalProperties"); ap != s.end() && !ap->get<bool>()) {
        if (!closed) closed = listed;
        std::erase_if(*closed, [&](const std::string& k) { return !listed.count(k); });
      }
      if (auto rq = s.find("required"); rq != s.end()) {
        for (const Json& r : *rq) {
          const std::string k = r.get<std::string>();
          required.insert(k);
          if (std::find(order.begin(), order.end(), k) == order.end()) order.push_back(k);
        }
      }
    }
    if (!closed && order.empty()) return std::string("object");
    std::vector<std::string> kv;
    std::vector<bool> req;
    for (const std::string& k : order) {
      const bool must = required.count(k) > 0;
      if (closed && !closed->count(k)) {
        if (must) return nothing(fmt::format("required property \"{}\" is not allowed", k));
        continue;
      }
      Conj sub;
      for (const Member& m : c) {
        auto props = m.s->find("properties");
        if (props != m.s->end() && props->contains(k)) {
          join(&sub, Member{&(*props)[k], m.at + "/properties/" + schema::pointer_token(k)});
        }
      }
      MNEMO_ASSIGN_OR_RETURN(std::string v, visit(std::move(sub)));
      if (v.empty()) {
        if (must) return std::string();
        continue;  // the key cannot appear
      }
      kv.push_back(add(literal(Json(k).dump()) + " ws \":\" ws " + v));
      req.push_back(must);
    }
    return sequence(kv, req);
  }

  // "{" the properties kv in order, each present or not as req says, "}".
  std::string sequence(const std::vector<std::string>& kv, const std::vector<bool>& req) {
    const size_t k = kv.size();
    if (k == 0) return "( \"{\" ws \"}\" )";
    // after[i]: what may follow property i: "," the next present property j (no required one
    // between), or nothing when no required property follows i.
    std::vector<std::string> after(k);
    for (size_t i = k; i-- > 0;) {
      std::string alts;
      bool required_later = false;
      for (size_t j = i + 1; j < k; ++j) {
        alts += (alts.empty() ? "" : " | ") + fmt::format("\",\" ws {} ws {}", kv[j], after[j]);
        if (req[j]) {
          required_later = true;
          break;
        }
      }
      if (!required_later) alts += alts.empty() ? "\"\"" : " | \"\"";
      after[i] = add(alts);
    }
    std::string first;
    bool any_required = false;
    for (size_t j = 0; j < k; ++j) {
      first += (first.empty() ? "" : " | ") + fmt::format("{} ws {}", kv[j], after[j]);
      if (req[j]) {
        any_required = true;
        break;
      }
    }
    return fmt::format("( \"{{\" ws ( {} ){} \"}}\" )", first, any_required ? "" : "?");
  }

  Result<std::string> array(const Conj& c) {
    Conj items;
    uint64_t min = 0, max = UINT64_MAX;
    for (const Member& m : c) {
      const Json& s = *m.s;
      if (auto it = s.find("items"); it != s.end()) join(&items, Member{&*it, m.at + "/items"});
      if (auto it = s.find("minItems"); it != s.end()) min = std::max(min, it->get<uint64_t>());
      if (auto it = s.find("maxItems"); it != s.end()) max = std::min(max, it->get<uint64_t>());
    }
    if (max < min) return nothing("'minItems' above 'maxItems' at " + where(c[0].at));
    if (max == 0) return std::string("( \"[\" ws \"]\" )");
    MNEMO_ASSIGN_OR_RETURN(std::string item, visit(std::move(items)));
    if (item.empty()) return min == 0 ? std::string("( \"[\" ws \"]\" )") : std::string();
    const uint64_t lo = min > 0 ? min - 1 : 0;
    const std::string more =
        max == UINT64_MAX ? fmt::format("{{{},}}", lo) : fmt::format("{{{},{}}}", lo, max - 1);
    const std::string list = fmt::format("{} ws ( \",\" ws {} ws ){}", item, item, more);
    return fmt::format("( \"[\" ws ( {} ){} \"]\" )", list, min == 0 ? "?" : "");
  }

  std::string string(const Conj& c) {
    uint64_t min = 0, max = UINT64_MAX;
    for (const Member& m : c) {
      const Json& s = *m.s;
      if (auto it = s.find("minLength"); it != s.end()) min = std::max(min, it->get<uint64_t>());
      if (auto it = s.find("maxLength"); it != s.end()) max = std::min(max, it->get<uint64_t>());
    }
    if (max < min) return nothing("'minLength' above 'maxLength' at " + where(c[0].at));
    if (min == 0 && max == UINT64_MAX) return "string";
    const std::string rep =
        max == UINT64_MAX ? fmt::format("{{{},}}", min) : fmt::format("{{{},{}}}", min, max);
    return fmt::format("( \"\\\"\" char{} \"\\\"\" )", rep);
  }

  const Json& root_;
  schema::Document doc_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> memo_;  // conjunction key -> its rule ("" for none)
  std::string why_;
  size_t steps_ = 0;
};

}  // namespace

Result<std::string> json_schema_to_gbnf(std::string_view schema_json) {
  Json schema;
  try {
    schema = Json::parse(schema_json);
  } catch (const Json::exception& e) {
    return Status::invalid_argument(std::string("json schema: malformed JSON: ") + e.what());
  }
  return Converter(schema).run();
}

std::string json_object_gbnf() { return std::string("root ::= object\n") + kBase; }

}  // namespace mnemo::grammar
