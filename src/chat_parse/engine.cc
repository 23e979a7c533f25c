// Shared parse machinery (contract in engine.h).
#include "chat_parse/engine.h"

#include <algorithm>

namespace mnemo::chat_parse {
namespace {

// The longest proper prefix of one of `tags` that `s` ends with (0: none).
size_t partial_suffix(std::string_view s, std::span<const std::string_view> tags) {
  size_t best = 0;
  for (std::string_view tag : tags) {
    for (size_t k = std::min(s.size(), tag.size() - (tag.empty() ? 0 : 1)); k > best; --k) {
      if (s.ends_with(tag.substr(0, k))) {
        best = k;
        break;
      }
    }
  }
  return best;
}

void trim(std::string* s) {
  auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  size_t b = 0, e = s->size();
  while (b < e && ws((*s)[b])) ++b;
  while (e > b && ws((*s)[e - 1])) --e;
  *s = s->substr(b, e - b);
}

}  // namespace

const nlohmann::ordered_json* Ctx::tool_schema(std::string_view name) const {
  for (const ToolSpec& t : opt.tools) {
    if (t.name == name) return &t.parameters;
  }
  return nullptr;
}

size_t split_reasoning(Ctx& ctx, size_t pos, const ThinkTags& tags) {
  if (tags.open.empty()) return pos;
  const bool keep = ctx.opt.reasoning == ReasoningFormat::kNone;
  const size_t q = skip_ws(ctx.text, pos);
  size_t inner = 0;
  if (ctx.starts_with(q, tags.open)) {
    inner = q + tags.open.size();
  } else if (ctx.partial() && q < ctx.size() && ctx.prefix_of(q, tags.open)) {
    return ctx.size();  // "<thi": may be the tag; hold everything back
  } else if (ctx.opt.thinking_forced_open) {
    inner = pos;
  } else {
    return pos;
  }
  const size_t close = ctx.text.find(tags.close, inner);
  if (close != std::string_view::npos) {
    const size_t after = close + tags.close.size();
    if (keep) {
      ctx.content += ctx.text.substr(pos, after - pos);
    } else {
      ctx.reasoning += ctx.text.substr(inner, close - inner);
    }
    return after;
  }
  // Never closed: reasoning to the end (a partial text holds back a piece of the closing tag).
  size_t end = ctx.size();
  if (ctx.partial()) {
    const std::string_view tag[] = {tags.close};
    end -= partial_suffix(ctx.text.substr(inner), tag);
  }
  if (keep) {
    ctx.content += ctx.text.substr(pos, end - pos);
  } else {
    ctx.reasoning += ctx.text.substr(inner, end - inner);
  }
  return ctx.size();
}

void add_content(Ctx& ctx, size_t pos, size_t end, std::span<const std::string_view> openers) {
  if (pos >= end) return;
  std::string_view piece = ctx.text.substr(pos, end - pos);
  if (ctx.partial() && end == ctx.size()) {
    piece.remove_suffix(partial_suffix(piece, openers));
  }
  ctx.content += piece;
}

void scan_sections(Ctx& ctx, size_t pos, std::span<const Section> sections) {
  std::vector<std::string_view> all;
  for (const Section& s : sections) all.insert(all.end(), s.openers.begin(), s.openers.end());
  while (pos < ctx.size()) {
    size_t best = std::string_view::npos, len = 0;
    const Section* section = nullptr;
    for (const Section& s : sections) {
      for (std::string_view o : s.openers) {
        const size_t at = ctx.text.find(o, pos);
        if (at < best || (at == best && at != std::string_view::npos && o.size() > len)) {
          best = at;
          len = o.size();
          section = &s;
        }
      }
    }
    if (section == nullptr) {
      add_content(ctx, pos, ctx.size(), all);
      return;
    }
    ctx.content += ctx.text.substr(pos, best - pos);
    SectionResult r = section->parse(ctx, best);
    if (r.outcome == Outcome::kDone) {
      for (ToolCall& c : r.calls) ctx.calls.push_back(std::move(c));
      pos = std::max(r.end, best + 1);
    } else if (r.outcome == Outcome::kIncomplete) {
      // Unfinished at the end: streamed, its calls so far stand; final (the model stopped inside
      // it, e.g. at its token limit), it is dropped: markup never reaches the content.
      if (ctx.partial()) {
        for (ToolCall& c : r.calls) ctx.calls.push_back(std::move(c));
      }
      return;
    } else {
      ctx.content += ctx.text.substr(best, len);
      pos = best + len;
    }
  }
}

ChatMsg finish(Ctx& ctx) {
  ChatMsg m;
  m.content = std::move(ctx.content);
  m.reasoning_content = std::move(ctx.reasoning);
  m.tool_calls = std::move(ctx.calls);
  if (ctx.partial()) {
    m.content.resize(utf8_complete_prefix(m.content));
    m.reasoning_content.resize(utf8_complete_prefix(m.reasoning_content));
    for (ToolCall& c : m.tool_calls) c.arguments.resize(utf8_complete_prefix(c.arguments));
  }
  trim(&m.content);
  trim(&m.reasoning_content);
  return m;
}

SectionResult drop_marker(Ctx& ctx, size_t pos, std::string_view marker) {
  return {Outcome::kDone, pos + marker.size(), {}};
}

Close find_close(const Ctx& ctx, size_t pos, std::string_view tag, size_t* end) {
  const size_t q = skip_ws(ctx.text, pos);
  if (ctx.starts_with(q, tag)) {
    *end = q + tag.size();
    return Close::kFound;
  }
  if (q >= ctx.size() || ctx.prefix_of(q, tag)) {
    *end = ctx.size();
    return Close::kMaybe;
  }
  *end = pos;
  return Close::kAbsent;
}

CallParse parse_call_object(const Ctx& ctx, size_t pos, const CallKeys& keys) {
  const std::string_view text = ctx.text;
  ObjectScan os = scan_object(text, pos);
  CallParse out;
  out.status = os.status;
  out.end = os.end;
  if (os.status == Scan::kInvalid) return out;
  const JsonMember* name = os.find(keys.name);
  const bool name_done = name != nullptr && name->value.status == Scan::kComplete;
  if ((name_done && text[name->value_pos] != '"') || (os.status == Scan::kComplete && !name)) {
    out.status = Scan::kInvalid;
    return out;
  }
  if (!name_done) return out;
  const JsonMember* id = keys.id.empty() ? nullptr : os.find(keys.id);
  const bool id_done = id != nullptr && id->value.status == Scan::kComplete;
  if (keys.hold_for_id && os.status != Scan::kComplete && !id_done) return out;
  ToolCall c;
  bool closed = false;
  c.name = decode_string(text, name->value_pos, name->value.end, &closed);
  if (c.name.empty()) {
    out.status = Scan::kInvalid;
    return out;
  }
  if (id_done && text[id->value_pos] == '"')
    c.id = decode_string(text, id->value_pos, id->value.end, &closed);
  const JsonMember* args = os.find(keys.args);
  if (args == nullptr && !keys.args_alt.empty()) args = os.find(keys.args_alt);
  if (args == nullptr) {
    c.arguments = os.status == Scan::kComplete ? "{}" : "";
  } else {
    const size_t end = args->value.status == Scan::kComplete ? args->value.end : text.size();
    if (args->value_pos < text.size() && text[args->value_pos] == '"') {
      c.arguments = decode_string(text, args->value_pos, end, &closed);  // stringified arguments
    } else {
      c.arguments = std::string(text.substr(args->value_pos, end - args->value_pos));
    }
  }
  out.call = std::move(c);
  return out;
}

ArgsParse parse_args(const Ctx& ctx, size_t pos) {
  ArgsParse out;
  const size_t p = skip_ws(ctx.text, pos);
  if (p >= ctx.size()) {
    out.status = Scan::kIncomplete;
    out.end = ctx.size();
    return out;
  }
  if (ctx.text[p] != '{') {
    out.end = p;
    return out;
  }
  const ScanEnd v = scan_value(ctx.text, p, !ctx.partial());
  out.status = v.status;
  out.end = v.end;
  if (v.status != Scan::kInvalid) out.args = std::string(ctx.text.substr(p, v.end - p));
  return out;
}

SectionResult close_section(const Ctx& ctx, size_t pos, std::string_view closer,
                            std::vector<ToolCall> calls) {
  SectionResult r;
  r.calls = std::move(calls);
  r.outcome = Outcome::kDone;
  r.end = pos;
  if (closer.empty()) return r;
  size_t end = pos;
  switch (find_close(ctx, pos, closer, &end)) {
    case Close::kFound:
      r.end = end;
      break;
    case Close::kMaybe:
      if (ctx.partial()) {
        r.outcome = Outcome::kIncomplete;
      } else {
        r.end = ctx.size();  // only white space left: the closer was left out
      }
      break;
    case Close::kAbsent:
      break;  // left out; what follows is content
  }
  return r;
}

SectionResult parse_call_array(Ctx& ctx, size_t pos, const CallKeys& keys,
                               std::string_view closer) {
  SectionResult r;
  size_t p = pos + 1;
  auto stop = [&](Outcome o) {
    r.outcome = o;
    r.end = p;
    return r;
  };
  while (true) {
    p = skip_ws(ctx.text, p);
    if (p >= ctx.size()) {
      // Final text ending after whole calls: the "]" (and closer) were left out.
      if (!ctx.partial() && !r.calls.empty()) return close_section(ctx, p, "", r.calls);
      return stop(Outcome::kIncomplete);
    }
    if (ctx.text[p] == ']') {
      ++p;
      break;
    }
    if (ctx.text[p] != '{') return stop(Outcome::kInvalid);
    CallParse cp = parse_call_object(ctx, p, keys);
    if (cp.status == Scan::kInvalid) return stop(Outcome::kInvalid);
    if (cp.call) r.calls.push_back(std::move(*cp.call));
    if (cp.status == Scan::kIncomplete) return stop(Outcome::kIncomplete);
    p = skip_ws(ctx.text, cp.end);
    if (p < ctx.size() && ctx.text[p] == ',') {
      ++p;
      continue;
    }
    if (p < ctx.size() && ctx.text[p] != ']') return stop(Outcome::kInvalid);
  }
  return close_section(ctx, p, closer, std::move(r.calls));
}

std::string_view drop_partial(std::string_view s, std::string_view tag) {
  const std::string_view one[] = {tag};
  return s.substr(0, s.size() - partial_suffix(s, one));
}

std::string_view trim_view(std::string_view s) {
  const size_t b = skip_ws(s, 0);
  size_t e = s.size();
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\n' || s[e - 1] == '\r')) {
    --e;
  }
  return s.substr(b, e - b);
}

// Whether the schema `s` only admits strings (its value is then the raw text).
bool string_schema(const nlohmann::ordered_json& s) {
  if (!s.is_object()) return false;
  if (auto t = s.find("type"); t != s.end()) {
    if (t->is_string()) return *t == "string";
    if (t->is_array()) {
      bool any = false;
      for (const nlohmann::ordered_json& x : *t) {
        if (x == "string") {
          any = true;
        } else if (x != "null") {
          return false;
        }
      }
      return any;
    }
    return false;
  }
  if (auto e = s.find("enum"); e != s.end() && e->is_array() && !e->empty()) {
    for (const nlohmann::ordered_json& x : *e) {
      if (!x.is_string()) return false;
    }
    return true;
  }
  if (auto c = s.find("const"); c != s.end()) return c->is_string();
  for (const char* key : {"anyOf", "oneOf"}) {
    if (auto a = s.find(key); a != s.end() && a->is_array() && !a->empty()) {
      for (const nlohmann::ordered_json& x : *a) {
        if (!string_schema(x)) return false;
      }
      return true;
    }
  }
  return false;
}

SectionResult parse_json_calls(Ctx& ctx, size_t pos, const CallKeys& keys,
                               std::string_view closer) {
  if (pos >= ctx.size()) return {Outcome::kIncomplete, ctx.size(), {}};
  if (ctx.text[pos] == '[') return parse_call_array(ctx, pos, keys, closer);
  if (ctx.text[pos] != '{') return {Outcome::kInvalid, pos, {}};
  CallParse cp = parse_call_object(ctx, pos, keys);
  if (cp.status == Scan::kInvalid) return {Outcome::kInvalid, cp.end, {}};
  std::vector<ToolCall> calls;
  if (cp.call) calls.push_back(std::move(*cp.call));
  if (cp.status == Scan::kIncomplete) return {Outcome::kIncomplete, ctx.size(), std::move(calls)};
  return close_section(ctx, cp.end, closer, std::move(calls));
}

bool is_name(std::string_view s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == ':' || c == '-';
  });
}

}  // namespace mnemo::chat_parse
