// The generic JSON format ({"response": ...} / {"tool_call": ...} / {"tool_calls": [...]}, the
// whole answer, optionally fenced) and gpt-oss's harmony messages.
#include <algorithm>
#include <iterator>

#include "chat_parse/engine.h"

namespace mnemo::chat_parse {
namespace {

// The decoded "response" value (a string's text, else the value's JSON text).
std::string response_text(const Ctx& ctx, const JsonMember& m) {
  const size_t end = m.value.status == Scan::kComplete ? m.value.end : ctx.size();
  if (m.value_pos < ctx.size() && ctx.text[m.value_pos] == '"') {
    bool closed = false;
    return decode_string(ctx.text, m.value_pos, end, &closed);
  }
  return std::string(ctx.text.substr(m.value_pos, end - m.value_pos));
}

// Where the JSON answer starts after an optional ``` / ```json fence; npos while a partial text
// may still be a fence, or `pos` itself when there is none.
size_t after_fence(const Ctx& ctx, size_t q) {
  if (!ctx.starts_with(q, "```")) {
    return ctx.partial() && q < ctx.size() && ctx.prefix_of(q, "```") ? std::string_view::npos : q;
  }
  size_t p = q + 3;
  if (ctx.starts_with(p, "json")) {
    p += 4;
  } else if (ctx.partial() && p < ctx.size() && ctx.prefix_of(p, "json")) {
    return std::string_view::npos;
  }
  return skip_ws(ctx.text, p);
}

}  // namespace

void parse_generic(Ctx& ctx, size_t pos) {
  const size_t q = skip_ws(ctx.text, pos);
  auto all_content = [&] { add_content(ctx, pos, ctx.size(), {}); };
  if (!ctx.opt.parse_tool_calls) return all_content();
  const size_t p = after_fence(ctx, q);
  if (p == std::string_view::npos) return;  // held: may be a fence
  if (p >= ctx.size()) {
    if (!ctx.partial() || p == q) all_content();
    return;
  }
  if (ctx.text[p] != '{') return all_content();
  const ObjectScan os = scan_object(ctx.text, p);
  if (os.status == Scan::kInvalid) return all_content();
  if (os.members.empty()) {
    if (os.status == Scan::kComplete || !ctx.partial()) all_content();
    return;
  }
  const JsonMember& first = os.members[0];
  if (first.key == "response") {
    // A cut answer (max tokens) keeps what was written, as the stream showed it.
    ctx.content += response_text(ctx, first);
    return;
  }
  SectionResult r;
  constexpr CallKeys kKeys{.hold_for_id = true};
  if (first.key == "tool_call" && first.value_pos < ctx.size() &&
      ctx.text[first.value_pos] == '{') {
    CallParse cp = parse_call_object(ctx, first.value_pos, kKeys);
    r.outcome = cp.status == Scan::kComplete  ? Outcome::kDone
                : cp.status == Scan::kInvalid ? Outcome::kInvalid
                                              : Outcome::kIncomplete;
    if (cp.call) r.calls.push_back(std::move(*cp.call));
  } else if (first.key == "tool_calls" && first.value_pos < ctx.size() &&
             ctx.text[first.value_pos] == '[') {
    r = parse_call_array(ctx, first.value_pos, kKeys, "");
  } else if (first.value_pos >= ctx.size() && ctx.partial() &&
             (first.key == "tool_call" || first.key == "tool_calls")) {
    return;  // the value has not begun
  } else {
    return all_content();
  }
  if (r.outcome == Outcome::kInvalid || (r.outcome == Outcome::kIncomplete && !ctx.partial())) {
    return all_content();
  }
  for (ToolCall& c : r.calls) ctx.calls.push_back(std::move(c));
}

// gpt-oss (harmony). Each message: [<|start|>assistant][ to=R]<|channel|>C[ to=R][ <|constrain|>T]
// <|message|>BODY, ended by <|end|>, <|call|> or <|return|> (or the next <|start|>, or the text's
// end). analysis -> reasoning, final / commentary -> content, recipient functions.N -> a call.
ChatMsg parse_gpt_oss(Ctx& ctx) {
  constexpr std::string_view kMessage = "<|message|>";
  static constexpr std::string_view kEnds[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>",
                                               "<|channel|>"};
  static constexpr std::string_view kHeads[] = {"<|start|>", "<|channel|>", " to=", "to="};
  const bool keep = ctx.opt.reasoning == ReasoningFormat::kNone;
  size_t pos = 0;
  while (pos < ctx.size()) {
    const bool header = std::any_of(std::begin(kHeads), std::end(kHeads), [&](std::string_view h) {
      return ctx.starts_with(pos, h) || (ctx.partial() && ctx.prefix_of(pos, h));
    });
    const size_t m = ctx.text.find(kMessage, pos);
    if (!header || m == std::string_view::npos) {
      if (header) break;  // a header still being written (or, final, left unfinished): nothing
      // Text outside any message: content up to the next header.
      size_t next = std::min(ctx.text.find("<|start|>", pos), ctx.text.find("<|channel|>", pos));
      if (next == std::string_view::npos) next = ctx.size();
      add_content(ctx, pos, next, kEnds);
      if (next == ctx.size()) break;
      pos = next;
      continue;
    }
    const std::string_view head = ctx.text.substr(pos, m - pos);
    std::string channel, recipient;
    if (const size_t c = head.rfind("<|channel|>"); c != std::string_view::npos) {
      const std::string_view rest = head.substr(c + 11);
      channel = std::string(rest.substr(0, rest.find_first_of(" <")));
    }
    if (const size_t t = head.rfind("to="); t != std::string_view::npos) {
      const std::string_view rest = head.substr(t + 3);
      recipient = std::string(rest.substr(0, rest.find_first_of(" <")));
      if (recipient == "assistant" || recipient == "user" || recipient == "all") recipient.clear();
    }
    const size_t b = m + kMessage.size();
    size_t be = ctx.size(), next = ctx.size();
    for (std::string_view e : kEnds) {
      const size_t at = ctx.text.find(e, b);
      if (at < be) {
        be = at;
        next = e == "<|start|>" || e == "<|channel|>" ? at : at + e.size();
      }
    }
    const bool closed = be < ctx.size();
    std::string_view body = ctx.text.substr(b, be - b);
    if (!closed && ctx.partial()) {
      for (std::string_view e : kEnds) body = drop_partial(body, e);
    }
    const bool is_call = recipient.starts_with("functions.");
    if (is_call && ctx.opt.parse_tool_calls) {
      const size_t v = skip_ws(body, 0);
      const ScanEnd s = scan_value(body, v, closed || !ctx.partial());
      if (s.status == Scan::kInvalid ||
          (s.status == Scan::kIncomplete && (closed || !ctx.partial()))) {
        ctx.content += body;  // not JSON: the body is all there is to show
      } else {
        ctx.calls.push_back({"", recipient.substr(10), std::string(body.substr(v, s.end - v))});
      }
    } else if (is_call || (recipient.empty() && channel == "analysis" && keep)) {
      ctx.content += ctx.text.substr(pos, (closed ? next : b + body.size()) - pos);
    } else if (recipient.empty() && channel == "analysis") {
      if (!ctx.reasoning.empty()) ctx.reasoning += "\n";
      ctx.reasoning += body;
    } else if (recipient.empty()) {
      ctx.content += body;
    }  // a built-in recipient (python, browser.search, container.exec): dropped
    pos = next;
  }
  return finish(ctx);
}

}  // namespace mnemo::chat_parse
