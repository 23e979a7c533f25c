// tool_call_grammar: GBNF for a format's call markup (contract in chat_parse.h). Each tool's
// parameters schema goes through grammar::json_schema_to_gbnf; its rules are renamed with a
// per-tool prefix so that the tools' grammars sit side by side in one text.
#include <fmt/format.h>

#include <set>

#include "chat_parse/engine.h"
#include "mnemo/json_schema.h"

namespace mnemo::chat_parse {
namespace {

using Json = nlohmann::ordered_json;

// A GBNF literal holding `s` exactly (UTF-8 as is).
std::string lit(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02X}", c);
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// A JSON string's literal: "\"NAME\"".
std::string json_lit(std::string_view s) { return lit("\"" + json_escape(s) + "\""); }

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

// `gbnf` with every rule it defines renamed PREFIX+name (references too; literals, classes,
// repetition counts and comments untouched). Its root becomes PREFIX+"root".
std::string prefix_rules(std::string_view gbnf, const std::string& prefix) {
  std::set<std::string, std::less<>> defined;
  for (size_t line = 0; line < gbnf.size();) {
    size_t e = gbnf.find('\n', line);
    if (e == std::string_view::npos) e = gbnf.size();
    const std::string_view l = gbnf.substr(line, e - line);
    size_t k = 0;
    while (k < l.size() && name_char(l[k])) ++k;
    if (k > 0 && l.substr(k).find("::=") != std::string_view::npos &&
        trim_view(l.substr(k)).starts_with("::=")) {
      defined.insert(std::string(l.substr(0, k)));
    }
    line = e + 1;
  }
  std::string out;
  for (size_t i = 0; i < gbnf.size();) {
    const char c = gbnf[i];
    if (c == '"' || c == '[' || c == '{' || c == '#') {
      const char close = c == '"' ? '"' : c == '[' ? ']' : c == '{' ? '}' : '\n';
      size_t j = i + 1;
      while (j < gbnf.size() && gbnf[j] != close) j += (gbnf[j] == '\\' && c != '#') ? 2 : 1;
      j = std::min(j + 1, gbnf.size());
      out += gbnf.substr(i, j - i);
      i = j;
    } else if (name_char(c)) {
      size_t j = i;
      while (j < gbnf.size() && name_char(gbnf[j])) ++j;
      const std::string_view word = gbnf.substr(i, j - i);
      if (defined.count(word)) out += prefix;
      out += word;
      i = j;
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

// The grammar being built: rules as text, in order.
class Builder {
 public:
  Builder() { out_ = "tc-ws ::= [ \\t\\n]{0,20}\n"; }
  std::string add(const std::string& name, const std::string& body) {
    out_ += name + " ::= " + body + "\n";
    return name;
  }
  /// A rule for JSON texts the schema accepts (null: any object). Errors: the converter's.
  Result<std::string> schema(const Json& s, const std::string& prefix) {
    const Json effective = s.is_null() ? Json{{"type", "object"}} : s;
    auto g = grammar::json_schema_to_gbnf(effective.dump());
    if (!g.ok()) return g.status();
    out_ += prefix_rules(*g, prefix);
    return prefix + "root";
  }
  /// A rule for text that does not contain `closer` (an ASCII string): the states of a matcher
  /// of `closer`, state j having read its first j characters.
  std::string until(std::string_view closer, const std::string& name) {
    auto state = [&](size_t j) { return fmt::format("{}-{}", name, j); };
    std::string chars;
    for (char c : closer) {
      if (chars.find(c) == std::string::npos) chars += c;
    }
    std::string others = "[^";
    for (char c : chars) others += fmt::format("\\x{:02X}", static_cast<unsigned char>(c));
    others += "]";
    for (size_t j = 0; j < closer.size(); ++j) {
      std::string body = "( " + others + " " + state(0);
      for (char c : chars) {
        // The longest prefix of closer that is a suffix of closer[0, j) + c.
        const std::string read = std::string(closer.substr(0, j)) + c;
        size_t next = std::min(read.size(), closer.size());
        while (next > 0 && read.substr(read.size() - next) != closer.substr(0, next)) --next;
        if (next == closer.size()) continue;  // would complete the closer
        body += " | " + lit(std::string(1, c)) + " " + state(next);
      }
      add(state(j), body + " )?");
    }
    return state(0);
  }
  const std::string& text() const { return out_; }

 private:
  std::string out_;
};

// `item` once, or (parallel) one or more separated by `sep` (GBNF, may be empty).
std::string repeat(const std::string& item, bool parallel, const std::string& sep) {
  if (!parallel) return item;
  return item + " ( " + (sep.empty() ? "" : sep + " ") + item + " )*";
}

// A JSON object with these members in order (key, value rule).
std::string object(std::initializer_list<std::pair<std::string_view, std::string>> members) {
  std::string out = "\"{\" tc-ws";
  bool first = true;
  for (const auto& [key, value] : members) {
    if (!first) out += " \",\" tc-ws";
    first = false;
    out += " " + json_lit(key) + " tc-ws \":\" tc-ws " + value + " tc-ws";
  }
  return out + " \"}\"";
}

// A JSON-arguments format's rule for one call of `name` with arguments `args`.
std::string json_call(ChatFormat f, const std::string& name, const std::string& args) {
  const std::string n = json_lit(name);
  switch (f) {
    case ChatFormat::kHermes:
      return "\"<tool_call>\" tc-ws " + object({{"name", n}, {"arguments", args}}) +
             " tc-ws \"</tool_call>\"";
    case ChatFormat::kLlama3:
      return object({{"name", n}, {"parameters", args}});
    case ChatFormat::kFunctionaryV31:
      return lit("<function=" + name + ">") + " " + args + " \"</function>\"";
    case ChatFormat::kMistral:
      return lit("[TOOL_CALLS]" + name) + " ( \"[CALL_ID]\" [a-zA-Z0-9]{9} )? \"[ARGS]\" " + args;
    case ChatFormat::kMistralNemo:
      return object({{"name", n}, {"arguments", args}, {"id", "\"\\\"\" [a-zA-Z0-9]{9} \"\\\"\""}});
    case ChatFormat::kCommandR7B:
      return object({{"tool_call_id", "\"\\\"\" [0-9]{1,10} \"\\\"\""},
                     {"tool_name", n},
                     {"parameters", args}});
    case ChatFormat::kDeepSeekV31:
      return lit("<｜tool▁call▁begin｜>" + name + "<｜tool▁sep｜>") + " " + args +
             " \"<｜tool▁call▁end｜>\"";
    case ChatFormat::kDeepSeekR1:
      return lit("<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + name + "\n```json\n") + " " +
             args + " " + lit("\n```<｜tool▁call▁end｜>");
    case ChatFormat::kKimiK2:
      return lit("<|tool_call_begin|>functions." + name + ":") +
             " [0-9]{1,3} \"<|tool_call_argument_begin|>\" " + args + " \"<|tool_call_end|>\"";
    case ChatFormat::kGptOss:
      return lit("<|channel|>commentary to=functions." + name) +
             " ( \" <|constrain|>json\" )? \"<|message|>\" " + args;
    default:  // Granite, FireFunction, Apriel, Nemotron: array items
      return object({{"name", n}, {"arguments", args}});
  }
}

// The root of a JSON-arguments format around `call` (one call of any allowed tool).
std::string json_root(ChatFormat f, bool parallel) {
  auto array = [&](std::string_view open, std::string_view close) {
    std::string r = lit(open) + " tc-ws \"[\" tc-ws " +
                    repeat("call", parallel, "tc-ws \",\" tc-ws") + " tc-ws \"]\"";
    if (!close.empty()) r += " tc-ws " + lit(close);
    return r;
  };
  switch (f) {
    case ChatFormat::kHermes:
    case ChatFormat::kFunctionaryV31:
      return repeat("call", parallel, "tc-ws");
    case ChatFormat::kLlama3:
      return repeat("call", parallel, "tc-ws \";\"? tc-ws");
    case ChatFormat::kMistral:
      return repeat("call", parallel, "");
    case ChatFormat::kGptOss:
      return "call";
    case ChatFormat::kDeepSeekV31:
    case ChatFormat::kDeepSeekR1:
      return "\"<｜tool▁calls▁begin｜>\" " + repeat("call", parallel, "") +
             " \"<｜tool▁calls▁end｜>\"";
    case ChatFormat::kKimiK2:
      return "\"<|tool_calls_section_begin|>\" " + repeat("call", parallel, "") +
             " \"<|tool_calls_section_end|>\"";
    case ChatFormat::kMistralNemo:
      return array("[TOOL_CALLS]", "");
    case ChatFormat::kGranite:
      return array("<|tool_call|>", "");
    case ChatFormat::kFirefunctionV2:
      return "\" \"? \"functools\" tc-ws \"[\" tc-ws " +
             repeat("call", parallel, "tc-ws \",\" tc-ws") + " tc-ws \"]\"";
    case ChatFormat::kApriel15:
      return array("<tool_calls>", "</tool_calls>");
    case ChatFormat::kNemotronV2:
      return array("<TOOLCALL>", "</TOOLCALL>");
    case ChatFormat::kCommandR7B:
      return array("<|START_ACTION|>", "<|END_ACTION|>");
    default:
      return "call";
  }
}

// The XML formats' markup around parameters.
struct XmlGrammar {
  std::string_view param_open, param_name_end, value_open, param_close;
  bool json_padding;  // white space allowed around a JSON value (Qwen3-Coder's newlines)
};

// The parameters of one tool in an XML format, in its schema's order, the required ones
// mandatory. Errors: a schema that is not an object schema with "properties" (or none).
Result<std::string> xml_params(Builder& b, const ToolSpec& tool, const std::string& prefix,
                               const XmlGrammar& x) {
  const Json& s = tool.parameters;
  if (s.is_null()) return std::string("\"\"");
  const auto props = s.is_object() ? s.find("properties") : s.end();
  if (!s.is_object() || props == s.end() || !props->is_object()) {
    if (s.is_object() && !s.contains("properties") && !s.contains("anyOf") && !s.contains("$ref")) {
      return std::string("\"\"");  // an object without declared properties: no parameters
    }
    return Status::invalid_argument(
        fmt::format("tool '{}': an XML tool-call format needs an object schema with \"properties\"",
                    tool.name));
  }
  std::set<std::string> required;
  if (auto r = s.find("required"); r != s.end() && r->is_array()) {
    for (const Json& k : *r) {
      if (k.is_string()) required.insert(k.get<std::string>());
    }
  }
  std::string seq;
  size_t j = 0;
  for (const auto& [key, sub] : props->items()) {
    const std::string pp = fmt::format("{}p{}-", prefix, j++);
    std::string value;
    if (string_schema(sub)) {
      value = b.until(x.param_close, pp + "text");
    } else {
      MNEMO_ASSIGN_OR_RETURN(value, b.schema(sub, pp));
      if (x.json_padding) value = "tc-ws " + value + " tc-ws";
    }
    std::string param = lit(std::string(x.param_open) + key + std::string(x.param_name_end));
    if (!x.value_open.empty()) param += " tc-ws " + lit(x.value_open);
    param += " " + value + " " + lit(x.param_close) + " tc-ws";
    seq += (seq.empty() ? "" : " ") + (required.count(key) ? param : "( " + param + " )?");
  }
  return seq.empty() ? std::string("\"\"") : seq;
}

// The rule for one call of `tool` in an XML format.
Result<std::string> xml_call(Builder& b, ChatFormat f, const ToolSpec& tool,
                             const std::string& prefix) {
  const std::string& n = tool.name;
  switch (f) {
    case ChatFormat::kQwen3Coder:
    case ChatFormat::kSeedOss: {
      MNEMO_ASSIGN_OR_RETURN(
          std::string params,
          xml_params(b, tool, prefix, {"<parameter=", ">", "", "</parameter>", true}));
      const std::string block = f == ChatFormat::kSeedOss ? "seed:tool_call" : "tool_call";
      const std::string open = f == ChatFormat::kSeedOss ? lit("<" + block + ">") + " tc-ws"
                                                         : "( \"<tool_call>\" tc-ws )?";
      return open + " " + lit("<function=" + n + ">") + " tc-ws " + params +
             " \"</function>\" tc-ws " + lit("</" + block + ">");
    }
    case ChatFormat::kMiniMaxM2: {
      MNEMO_ASSIGN_OR_RETURN(
          std::string params,
          xml_params(b, tool, prefix, {"<parameter name=\"", "\">", "", "</parameter>", false}));
      return lit("<invoke name=\"" + n + "\">") + " tc-ws " + params + " \"</invoke>\" tc-ws";
    }
    case ChatFormat::kGlm45: {
      MNEMO_ASSIGN_OR_RETURN(
          std::string params,
          xml_params(b, tool, prefix,
                     {"<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", false}));
      return lit("<tool_call>" + n) + " tc-ws " + params + " \"</tool_call>\"";
    }
    default:
      return Status::internal("not an XML format");
  }
}

// The generic format's whole answer as a JSON schema (llama.cpp's shape of it).
Json generic_schema(std::span<const ToolSpec* const> tools, bool required, bool parallel) {
  Json alts = Json::array();
  for (const ToolSpec* t : tools) {
    Json props = {
        {"name", {{"const", t->name}}},
        {"arguments", t->parameters.is_null() ? Json{{"type", "object"}} : t->parameters}};
    Json req = {"name", "arguments"};
    if (parallel) {
      props["id"] = {{"type", "string"}, {"minLength", 4}};
      req.push_back("id");
    }
    alts.push_back({{"type", "object"}, {"properties", props}, {"required", req}});
  }
  const Json one = alts.size() == 1 ? alts[0] : Json{{"anyOf", alts}};
  const Json call =
      parallel ? Json{{"type", "object"},
                      {"properties",
                       {{"tool_calls", {{"type", "array"}, {"items", one}, {"minItems", 1}}}}},
                      {"required", {"tool_calls"}}}
               : Json{{"type", "object"},
                      {"properties", {{"tool_call", one}}},
                      {"required", {"tool_call"}}};
  if (required) return call;
  const Json response = {{"type", "object"},
                         {"properties", {{"response", {{"type", "string"}}}}},
                         {"required", {"response"}}};
  return Json{{"anyOf", {call, response}}};
}

std::vector<std::string> triggers(ChatFormat f) {
  switch (f) {
    case ChatFormat::kHermes:
    case ChatFormat::kGlm45:
      return {"<tool_call>"};
    case ChatFormat::kQwen3Coder:
      return {"<tool_call>", "<function="};
    case ChatFormat::kSeedOss:
      return {"<seed:tool_call>"};
    case ChatFormat::kMiniMaxM2:
      return {"<minimax:tool_call>"};
    case ChatFormat::kLlama3:
      return {"{\"name\"", "{ \"name\""};
    case ChatFormat::kFunctionaryV31:
      return {"<function="};
    case ChatFormat::kFirefunctionV2:
      return {"functools["};
    case ChatFormat::kMistralNemo:
    case ChatFormat::kMistral:
      return {"[TOOL_CALLS]"};
    case ChatFormat::kDeepSeekR1:
    case ChatFormat::kDeepSeekV31:
      return {"<｜tool▁calls▁begin｜>"};
    case ChatFormat::kGranite:
      return {"<|tool_call|>"};
    case ChatFormat::kKimiK2:
      return {"<|tool_calls_section_begin|>"};
    case ChatFormat::kCommandR7B:
      return {"<|START_ACTION|>"};
    case ChatFormat::kApriel15:
      return {"<tool_calls>"};
    case ChatFormat::kNemotronV2:
      return {"<TOOLCALL>"};
    case ChatFormat::kGptOss:
      return {"<|channel|>commentary to=functions."};
    default:
      return {};
  }
}

Result<ToolGrammar> generic_grammar(std::span<const ToolSpec* const> tools, bool think,
                                    bool required, bool parallel) {
  Builder b;
  MNEMO_ASSIGN_OR_RETURN(std::string answer,
                         b.schema(generic_schema(tools, required, parallel), "g-"));
  std::string root = answer;
  if (think)
    root = "( \"<think>\" " + b.until("</think>", "think") + " \"</think>\" tc-ws )? " + answer;
  ToolGrammar out;
  out.gbnf = "root ::= " + root + "\n" + b.text();
  out.lazy = false;
  return out;
}

}  // namespace

Result<ToolGrammar> tool_call_grammar(ChatFormat format, std::span<const ToolSpec> tools,
                                      const ToolChoice& choice, bool parallel_tool_calls) {
  if (tools.empty()) return Status::invalid_argument("tool grammar: no tools");
  std::vector<const ToolSpec*> allowed;
  for (const ToolSpec& t : tools) {
    if (choice.kind != ToolChoice::Kind::kNamed || t.name == choice.name) allowed.push_back(&t);
  }
  if (allowed.empty()) {
    return Status::invalid_argument(fmt::format(
        "tool grammar: tool_choice names '{}', which is not a declared tool", choice.name));
  }
  const bool forced = choice.kind != ToolChoice::Kind::kAuto;
  if (format == ChatFormat::kGeneric || format == ChatFormat::kGenericThink) {
    return generic_grammar(allowed, format == ChatFormat::kGenericThink, forced,
                           parallel_tool_calls);
  }
  const bool xml = format == ChatFormat::kQwen3Coder || format == ChatFormat::kSeedOss ||
                   format == ChatFormat::kMiniMaxM2 || format == ChatFormat::kGlm45;
  Builder b;
  std::string calls;
  for (size_t i = 0; i < allowed.size(); ++i) {
    const std::string prefix = fmt::format("t{}-", i);
    std::string call;
    if (xml) {
      MNEMO_ASSIGN_OR_RETURN(call, xml_call(b, format, *allowed[i], prefix));
    } else {
      auto args = b.schema(allowed[i]->parameters, prefix);
      if (!args.ok()) {
        return args.status().with_context(fmt::format("tool grammar: tool '{}'", allowed[i]->name));
      }
      call = json_call(format, allowed[i]->name, *args);
    }
    calls += (calls.empty() ? "" : " | ") + b.add(fmt::format("call-{}", i), call);
  }
  b.add("call", calls);
  std::string root;
  switch (format) {
    case ChatFormat::kQwen3Coder:
    case ChatFormat::kSeedOss:
    case ChatFormat::kGlm45:
      root = repeat("call", parallel_tool_calls, "tc-ws");
      break;
    case ChatFormat::kMiniMaxM2:
      root = "\"<minimax:tool_call>\" tc-ws " + repeat("call", parallel_tool_calls, "") +
             " \"</minimax:tool_call>\"";
      break;
    default:
      root = json_root(format, parallel_tool_calls);
  }
  ToolGrammar out;
  out.gbnf = "root ::= " + root + "\n" + b.text();
  out.triggers = triggers(format);
  out.lazy = !forced;
  return out;
}

}  // namespace mnemo::chat_parse
