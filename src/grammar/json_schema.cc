// JSON Schema -> GBNF (contract and the supported subset in include/mnemo/json_schema.h).
#include "mnemo/json_schema.h"

#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

namespace mnemo::grammar {
namespace {

using Json = nlohmann::ordered_json;  // properties keep the schema's order

// The JSON value grammar (RFC 8259 §2-§7), with bounded digits and whitespace.
constexpr const char* kBase = R"(ws ::= [ \t\n]{0,20}
value ::= object | array | string | number | boolean | null
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" char* "\""
char ::= [^"\\\x00-\x1F\x7F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
integral ::= "0" | [1-9] [0-9]{0,15}
integer ::= "-"? integral
number ::= "-"? integral ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?
boolean ::= "true" | "false"
null ::= "null"
)";

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

class Converter {
 public:
  explicit Converter(const Json& root) : root_(root) {}

  Result<std::string> run() {
    MNEMO_ASSIGN_OR_RETURN(std::string top, visit(root_, ""));
    std::string out = "root ::= " + top + "\n" + kBase;
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out;
  }

 private:
  Status error(const std::string& where, const std::string& what) const {
    return Status::invalid_argument(
        fmt::format("json schema{}: {}", where.empty() ? "" : " at " + where, what));
  }
  std::string add(std::string body) {
    const std::string name = fmt::format("s-{}", rules_.size());
    rules_[name] = std::move(body);
    return name;
  }

  // A rule (or an expression in parentheses) for `s` at JSON pointer `where`.
  Result<std::string> visit(const Json& s, const std::string& where) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return std::string("value");
      return error(where, "the schema false accepts nothing");
    }
    if (!s.is_object()) return error(where, "a schema must be an object or a boolean");
    static const std::set<std::string> kIgnored = {
        "title",    "description", "default",  "examples",  "$schema", "$id",
        "$comment", "deprecated",  "readOnly", "writeOnly", "$defs",   "definitions"};
    static const std::set<std::string> kKnown = {
        "type",  "const",    "enum",       "anyOf",     "oneOf",
        "allOf", "$ref",     "properties", "required",  "additionalProperties",
        "items", "minItems", "maxItems",   "minLength", "maxLength"};
    for (const auto& [k, v] : s.items()) {
      if (!kIgnored.count(k) && !kKnown.count(k)) {
        return error(where, fmt::format("'{}' is not supported", k));
      }
    }
    if (auto it = s.find("$ref"); it != s.end()) return ref(*it, where);
    if (auto it = s.find("const"); it != s.end()) return literal(it->dump());
    if (auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) return error(where, "'enum' must be a non-empty array");
      std::string alts;
      for (const Json& v : *it) alts += (alts.empty() ? "" : " | ") + literal(v.dump());
      return "(" + alts + ")";
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (auto it = s.find(key); it != s.end()) {
        if (!it->is_array() || it->empty()) {
          return error(where, fmt::format("'{}' must be a non-empty array", key));
        }
        std::string alts;
        for (size_t i = 0; i < it->size(); ++i) {
          MNEMO_ASSIGN_OR_RETURN(std::string r,
                                 visit((*it)[i], fmt::format("{}/{}/{}", where, key, i)));
          alts += (alts.empty() ? "" : " | ") + r;
        }
        return "(" + alts + ")";
      }
    }
    if (auto it = s.find("allOf"); it != s.end()) {
      if (!it->is_array() || it->size() != 1) {
        return error(where, "'allOf' is supported with exactly one schema");
      }
      return visit((*it)[0], where + "/allOf/0");
    }
    auto type = s.find("type");
    if (type == s.end()) {
      if (s.contains("properties")) return object(s, where);
      if (s.contains("items")) return array(s, where);
      return std::string("value");
    }
    if (type->is_array()) {
      std::string alts;
      for (const Json& t : *type) {
        Json one = s;
        one["type"] = t;
        MNEMO_ASSIGN_OR_RETURN(std::string r, visit(one, where));
        alts += (alts.empty() ? "" : " | ") + r;
      }
      if (alts.empty()) return error(where, "'type' is an empty list");
      return "(" + alts + ")";
    }
    if (!type->is_string()) return error(where, "'type' must be a string or a list");
    const std::string t = type->get<std::string>();
    if (t == "object") return object(s, where);
    if (t == "array") return array(s, where);
    if (t == "string") return string(s, where);
    if (t == "number" || t == "integer" || t == "boolean" || t == "null") return t;
    return error(where, fmt::format("unknown type '{}'", t));
  }

  Result<std::string> ref(const Json& r, const std::string& where) {
    if (!r.is_string()) return error(where, "'$ref' must be a string");
    const std::string target = r.get<std::string>();
    auto it = refs_.find(target);
    if (it != refs_.end()) return it->second;
    std::string key;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      if (target.rfind(prefix, 0) == 0) {
        const Json* defs = nullptr;
        const std::string section = std::string(prefix).substr(2, std::string(prefix).size() - 3);
        if (root_.contains(section)) defs = &root_[section];
        key = target.substr(std::string(prefix).size());
        if (defs != nullptr && defs->is_object() && defs->contains(key)) {
          // Named before it is built: a recursive reference finds the name.
          const std::string name = fmt::format("s-{}", rules_.size());
          rules_[name] = "";
          refs_[target] = name;
          MNEMO_ASSIGN_OR_RETURN(std::string body, visit((*defs)[key], target.substr(1)));
          rules_[name] = body;
          return name;
        }
      }
    }
    return error(where, fmt::format("'$ref' '{}' cannot be resolved (only #/$defs/... and "
                                    "#/definitions/... of this schema)",
                                    target));
  }

  Result<std::string> object(const Json& s, const std::string& where) {
    auto props = s.find("properties");
    if (auto ap = s.find("additionalProperties"); ap != s.end()) {
      const bool is_false = ap->is_boolean() && !ap->get<bool>();
      const bool any_object = ap->is_boolean() && ap->get<bool>() && props == s.end();
      if (!is_false && !any_object) {
        return error(where, "'additionalProperties' is supported as false only");
      }
    }
    if (props == s.end()) return std::string("object");
    if (!props->is_object()) return error(where, "'properties' must be an object");
    std::set<std::string> required;
    if (auto rq = s.find("required"); rq != s.end()) {
      if (!rq->is_array()) return error(where, "'required' must be an array");
      for (const Json& r : *rq) {
        if (!r.is_string() || !props->contains(r.get<std::string>())) {
          return error(where, fmt::format("required property {} is not in 'properties'", r.dump()));
        }
        required.insert(r.get<std::string>());
      }
    }
    std::vector<std::string> kv;
    std::vector<bool> req;
    for (const auto& [name, sub] : props->items()) {
      MNEMO_ASSIGN_OR_RETURN(std::string v, visit(sub, where + "/properties/" + name));
      kv.push_back(add(literal(Json(name).dump()) + " ws \":\" ws " + v));
      req.push_back(required.count(name) > 0);
    }
    const size_t k = kv.size();
    if (k == 0) return std::string("( \"{\" ws \"}\" )");
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

  Result<std::string> array(const Json& s, const std::string& where) {
    std::string item = "value";
    if (auto it = s.find("items"); it != s.end()) {
      MNEMO_ASSIGN_OR_RETURN(item, visit(*it, where + "/items"));
    }
    uint64_t min = 0, max = UINT64_MAX;
    MNEMO_RETURN_IF_ERROR(count(s, "minItems", where, &min));
    MNEMO_RETURN_IF_ERROR(count(s, "maxItems", where, &max));
    if (max < min) return error(where, "'maxItems' is below 'minItems'");
    if (max == 0) return std::string("( \"[\" ws \"]\" )");
    const uint64_t lo = min > 0 ? min - 1 : 0;
    const std::string more =
        max == UINT64_MAX ? fmt::format("{{{},}}", lo) : fmt::format("{{{},{}}}", lo, max - 1);
    const std::string list = fmt::format("{} ws ( \",\" ws {} ws ){}", item, item, more);
    return fmt::format("( \"[\" ws ( {} ){} \"]\" )", list, min == 0 ? "?" : "");
  }

  Result<std::string> string(const Json& s, const std::string& where) {
    uint64_t min = 0, max = UINT64_MAX;
    MNEMO_RETURN_IF_ERROR(count(s, "minLength", where, &min));
    MNEMO_RETURN_IF_ERROR(count(s, "maxLength", where, &max));
    if (max < min) return error(where, "'maxLength' is below 'minLength'");
    if (min == 0 && max == UINT64_MAX) return std::string("string");
    const std::string rep =
        max == UINT64_MAX ? fmt::format("{{{},}}", min) : fmt::format("{{{},{}}}", min, max);
    return fmt::format("( \"\\\"\" char{} \"\\\"\" )", rep);
  }

  Status count(const Json& s, const char* key, const std::string& where, uint64_t* out) {
    auto it = s.find(key);
    if (it == s.end()) return Status();
    if (!it->is_number_unsigned() || it->get<uint64_t>() > 10000) {
      return error(where, fmt::format("'{}' must be an integer in [0, 10000]", key));
    }
    *out = it->get<uint64_t>();
    return Status();
  }

  const Json& root_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> refs_;
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
