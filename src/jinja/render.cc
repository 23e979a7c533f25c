// The render's frame (interp.h): the Interp's scopes, output, errors and budgets, the Renderer
// interface the built-ins call back through, and Template's entry points.
#include <ctime>

#include <fmt/format.h>

#include "jinja/interp.h"

namespace mnemo::jinja {

Interp::Interp(const RenderOptions& o, const nlohmann::ordered_json& context) : opt_(o) {
  scopes_.emplace_back();  // globals
  Dict globals;
  add_globals(&globals);
  for (auto& [k, v] : globals.items) scopes_.back().emplace_back(k, v);
  scopes_.emplace_back();  // the context and the template's own top-level variables
  if (context.is_object()) {
    for (auto it = context.begin(); it != context.end(); ++it) {
      set_var(it.key(), from_json(it.value()));
    }
  }
}

Status Interp::run(const Program& p, std::string* out) {
  out_ = out;
  exec(p.body);
  return error_;
}

Value Interp::fail(int line, std::string message) {
  if (error_.ok()) {
    error_ = Status::invalid_argument(line > 0 ? fmt::format("line {}: {}", line, message)
                                               : std::move(message));
  }
  return Value::undefined();
}

bool Interp::step() {
  if (++steps_ <= opt_.max_steps) return true;
  if (error_.ok()) {
    error_ = Status::out_of_range(
        fmt::format("the template ran past {} evaluation steps", opt_.max_steps));
  }
  return false;
}

bool Interp::steps(uint64_t n) {
  steps_ += n;
  return step();
}

bool Interp::reserve(uint64_t bytes) {
  if (bytes + total_before_ + out_->size() <= opt_.max_output_bytes) return true;
  if (error_.ok()) {
    error_ = Status::out_of_range(fmt::format(
        "the template builds a value past the output limit of {} bytes", opt_.max_output_bytes));
  }
  return false;
}

int64_t Interp::now(bool* utc) const {
  *utc = opt_.now_unix >= 0;
  return opt_.now_unix >= 0 ? opt_.now_unix : static_cast<int64_t>(std::time(nullptr));
}

Value Interp::call(const Value& fn, Args& args) {
  if (fn.kind != Value::Kind::kFunc) {
    if (fn.is_undefined()) {
      return fail(args.line, fmt::format("'{}' is undefined", fn.s.empty() ? "value" : fn.s));
    }
    return fail(args.line, fmt::format("'{}' object is not callable", type_name(fn)));
  }
  if (++call_depth_ > kMaxCallDepth) {
    --call_depth_;
    return fail(args.line, fmt::format("calls nested deeper than {}", kMaxCallDepth));
  }
  Value r = fn.func->fn(*this, args);
  --call_depth_;
  return r;
}

Value Interp::filter(std::string_view name, const Value& v, Args& args) {
  return apply_filter(*this, name, v, args);
}

Value Interp::test(std::string_view name, const Value& v, Args& args) {
  return apply_test(*this, name, v, args);
}

Value Interp::attribute(const Value& obj, const std::string& name, int line) {
  if (obj.is_undefined()) {
    return fail(line, fmt::format("'{}' is undefined", obj.s.empty() ? name : obj.s));
  }
  if (obj.is_dict()) {
    if (const Value* v = obj.dict->find(name)) return *v;
    return Value::undefined(name);
  }
  if (obj.is_list()) {
    for (size_t k = 0; k < obj.list->fields.size() && k < obj.list->items.size(); ++k) {
      if (obj.list->fields[k] == name) return obj.list->items[k];
    }
  }
  return Value::undefined(name);
}

Value Interp::lookup(const std::string& name) const {
  for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s) {
    for (auto it = s->rbegin(); it != s->rend(); ++it) {
      if (it->first == name) return it->second;
    }
  }
  return Value::undefined(name);
}

void Interp::set_var(const std::string& name, Value v) {
  for (auto& [k, old] : scopes_.back()) {
    if (k == name) {
      old = std::move(v);
      return;
    }
  }
  scopes_.back().emplace_back(name, std::move(v));
}

bool Interp::emit(std::string_view s) {
  out_->append(s);
  if (out_->size() + total_before_ > opt_.max_output_bytes) {
    if (error_.ok()) {
      error_ = Status::out_of_range(
          fmt::format("the template's output passed {} bytes", opt_.max_output_bytes));
    }
    return false;
  }
  return true;
}

// Renders `body` into a new string (set blocks, filter blocks).
bool Interp::capture(const std::vector<NodePtr>& body, std::string* text) {
  std::string* saved = out_;
  total_before_ += saved->size();
  out_ = text;
  const Flow f = exec(body);
  out_ = saved;
  total_before_ -= saved->size();
  return f != Flow::kError && !failed();
}

bool Interp::charge(size_t bytes) {
  steps_ += bytes / 1024;
  return step();
}

Result<Template> Template::parse(std::string_view source, const ParseOptions& options) {
  auto prog = parse_program(source, options);
  if (!prog.ok()) return prog.status();
  Template t;
  t.program_ = std::move(prog).value();
  return t;
}

Result<std::string> Template::render(const nlohmann::ordered_json& context,
                                     const RenderOptions& options) const {
  if (program_ == nullptr) return Status::invalid_argument("an empty template object");
  if (!context.is_object()) return Status::invalid_argument("the context must be a JSON object");
  Interp interp(options, context);
  std::string out;
  MNEMO_RETURN_IF_ERROR(interp.run(*program_, &out));
  return out;
}

}  // namespace mnemo::jinja
