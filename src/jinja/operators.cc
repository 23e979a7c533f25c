// Python 3's arithmetic and comparisons over Jinja values (interp.h): true division, floor
// division and modulo by the divisor's sign, int overflow an error rather than a bignum, str and
// list concatenation and repetition, `%` formatting, chained comparisons' single steps, `in`.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "jinja/interp.h"

namespace mnemo::jinja {
namespace {

using K = Value::Kind;

bool both_ints(const Value& a, const Value& b) { return is_int(a) && is_int(b); }

Value unsupported(Renderer& r, std::string_view op, const Value& a, const Value& b, int line) {
  return r.fail(line, fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op,
                                  type_name(a), type_name(b)));
}

}  // namespace

Value Interp::binary(const std::string& op, const Value& a, const Value& b, int line) {
  if (op == "~") return Value::string(to_str(a) + to_str(b));
  if (a.is_undefined() || b.is_undefined()) {
    const Value& u = a.is_undefined() ? a : b;
    return fail(line, fmt::format("'{}' is undefined", u.s.empty() ? "value" : u.s));
  }
  if (op == "+") return add(a, b, line);
  if (op == "-") {
    int64_t r = 0;
    if (both_ints(a, b)) {
      if (__builtin_sub_overflow(int_of(a), int_of(b), &r)) return fail(line, "integer overflow");
      return Value::integer(r);
    }
    if (a.is_number() && b.is_number()) return Value::real(a.as_double() - b.as_double());
    return unsupported(*this, op, a, b, line);
  }
  if (op == "*") return multiply(a, b, line);
  if (op == "%" && a.is_string()) {
    // printf-style formatting: "fmt" % value or "fmt" % (values, ...).
    std::vector<Value> fargs;
    if (b.is_list() && b.list->tuple) {
      fargs = b.list->items;
    } else {
      fargs.push_back(b);
    }
    return percent_format(*this, a.s, fargs, line);
  }
  if (!a.is_number() || !b.is_number()) return unsupported(*this, op, a, b, line);
  if (op == "/") {
    if (b.as_double() == 0) return fail(line, "division by zero");
    return Value::real(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") return divide(op, a, b, line);
  if (op == "**") return power(a, b, line);
  return unsupported(*this, op, a, b, line);
}

// +: numbers, str + str (a safe string escapes a plain one, as markupsafe), list + list and
// tuple + tuple.
Value Interp::add(const Value& a, const Value& b, int line) {
  int64_t r = 0;
  if (both_ints(a, b)) {
    if (__builtin_add_overflow(int_of(a), int_of(b), &r)) return fail(line, "integer overflow");
    return Value::integer(r);
  }
  if (a.is_number() && b.is_number()) return Value::real(a.as_double() + b.as_double());
  if (a.is_string() && b.is_string()) {
    if (a.safe == b.safe) {
      Value r = Value::string(a.s + b.s);
      r.safe = a.safe;
      return r;
    }
    Value r = Value::string(a.safe ? a.s + html_escape(b.s) : html_escape(a.s) + b.s);
    r.safe = true;
    return r;
  }
  if (a.is_list() && b.is_list() && a.list->tuple == b.list->tuple) {
    if (!reserve((uint64_t(a.list->items.size()) + b.list->items.size()) * sizeof(Value))) {
      return {};
    }
    std::vector<Value> items = a.list->items;
    items.insert(items.end(), b.list->items.begin(), b.list->items.end());
    return Value::new_list(std::move(items), a.list->tuple);
  }
  if (a.is_string() || b.is_string()) {
    return fail(line, fmt::format("can only concatenate str (not \"{}\") to str",
                                  type_name(a.is_string() ? b : a)));
  }
  return unsupported(*this, "+", a, b, line);
}

// *: numbers, and a str or list repeated an int number of times.
Value Interp::multiply(const Value& a, const Value& b, int line) {
  int64_t r = 0;
  if (both_ints(a, b)) {
    if (__builtin_mul_overflow(int_of(a), int_of(b), &r)) return fail(line, "integer overflow");
    return Value::integer(r);
  }
  if (a.is_number() && b.is_number()) return Value::real(a.as_double() * b.as_double());
  const Value* seq = a.is_string() || a.is_list() ? &a : &b;
  const Value* count = seq == &a ? &b : &a;
  if ((seq->is_string() || seq->is_list()) && (count->kind == K::kInt || count->kind == K::kBool)) {
    const int64_t times = std::max<int64_t>(0, int_of(*count));
    uint64_t unit = seq->is_string() ? seq->s.size() : 0;
    if (seq->is_list()) {
      for (const Value& x : seq->list->items) unit += sizeof(Value) + x.s.size();
    }
    if (unit > 0 && static_cast<uint64_t>(times) > opt_.max_output_bytes / unit) {
      if (error_.ok()) error_ = Status::out_of_range("a repeated sequence past the output limit");
      return {};
    }
    if (seq->is_string()) {
      std::string s;
      for (int64_t k = 0; k < times; ++k) s += seq->s;
      return Value::string(std::move(s));
    }
    std::vector<Value> items;
    for (int64_t k = 0; k < times; ++k) {
      items.insert(items.end(), seq->list->items.begin(), seq->list->items.end());
    }
    return Value::new_list(std::move(items), seq->list->tuple);
  }
  return unsupported(*this, "*", a, b, line);
}

// // and % of two numbers: Python's floor division and modulo (the sign of the divisor).
Value Interp::divide(const std::string& op, const Value& a, const Value& b, int line) {
  if (b.as_double() == 0) {
    return fail(line, op == "%" ? "integer modulo by zero" : "integer division or modulo by zero");
  }
  if (both_ints(a, b)) {
    const int64_t x = int_of(a), y = int_of(b);
    if (x == INT64_MIN && y == -1) return fail(line, "integer overflow");
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) {
      --q;
      m += y;
    }
    return Value::integer(op == "//" ? q : m);
  }
  // CPython's float_divmod.
  const double x = a.as_double(), y = b.as_double();
  double m = std::fmod(x, y);
  double div = (x - m) / y;
  if (m != 0) {
    if ((y < 0) != (m < 0)) {
      m += y;
      div -= 1.0;
    }
  } else {
    m = std::copysign(0.0, y);
  }
  if (op == "%") return Value::real(m);
  double q = std::copysign(0.0, x / y);
  if (div != 0) {
    q = std::floor(div);
    if (div - q > 0.5) q += 1.0;
  }
  return Value::real(q);
}

// **: an int to a non-negative int power stays an int (overflow an error), else a float.
Value Interp::power(const Value& a, const Value& b, int line) {
  if (both_ints(a, b) && int_of(b) >= 0) {
    int64_t base = int_of(a), e = int_of(b), acc = 1;
    while (e > 0) {
      if (e & 1) {
        if (__builtin_mul_overflow(acc, base, &acc)) return fail(line, "integer overflow");
      }
      e >>= 1;
      if (e > 0 && __builtin_mul_overflow(base, base, &base)) {
        return fail(line, "integer overflow");
      }
    }
    return Value::integer(acc);
  }
  return Value::real(std::pow(a.as_double(), b.as_double()));
}

Value Interp::compare(const std::string& op, const Value& a, const Value& b, int line) {
  if (a.is_list() && b.is_list() && !steps(std::min(a.list->items.size(), b.list->items.size()))) {
    return {};
  }
  if (op == "==") return Value::boolean(equals(a, b));
  if (op == "!=") return Value::boolean(!equals(a, b));
  if (op == "in" || op == "notin") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string()) {
        return fail(line, fmt::format("'in <string>' requires string as left operand, not {}",
                                      type_name(a)));
      }
      found = b.s.find(a.s) != std::string::npos;
    } else if (b.is_list()) {
      if (!steps(b.list->items.size())) return {};
      for (const Value& v : b.list->items) found = found || equals(a, v);
    } else if (b.is_dict()) {
      found = (a.is_string() || a.kind == Value::Kind::kInt) && b.dict->find(to_str(a)) != nullptr;
    } else if (!b.is_undefined()) {
      return fail(line, fmt::format("argument of type '{}' is not iterable", type_name(b)));
    }
    return Value::boolean(op == "in" ? found : !found);
  }
  int c = 0;
  if (!order_values(a, b, &c)) {
    return fail(line, fmt::format("'{}' not supported between instances of '{}' and '{}'", op,
                                  type_name(a), type_name(b)));
  }
  if (op == "<") return Value::boolean(c < 0);
  if (op == "<=") return Value::boolean(c <= 0);
  if (op == ">") return Value::boolean(c > 0);
  return Value::boolean(c >= 0);
}

}  // namespace mnemo::jinja
