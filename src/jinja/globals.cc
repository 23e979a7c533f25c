// The globals every template sees (builtins.h): range, namespace, dict, raise_exception,
// strftime_now.
#include <cmath>
#include <ctime>

#include "jinja/builtins.h"

namespace mnemo::jinja {

void add_globals(Dict* g) {
  g->set("range", Value::function("range", [](Renderer& r, Args& args) -> Value {
           int64_t p[3] = {0, 0, 1};
           const size_t n = args.pos.size();
           if (n < 1 || n > 3) return r.fail(args.line, "range expects 1 to 3 arguments");
           for (size_t k = 0; k < n; ++k) {
             if (!is_int(args.pos[k])) return r.fail(args.line, "range arguments must be integers");
           }
           if (n == 1) {
             p[1] = int_of(args.pos[0]);
           } else {
             p[0] = int_of(args.pos[0]);
             p[1] = int_of(args.pos[1]);
             if (n == 3) p[2] = int_of(args.pos[2]);
           }
           if (p[2] == 0) return r.fail(args.line, "range() arg 3 must not be zero");
           constexpr int64_t kMaxRange = 100000;  // jinja2's sandbox MAX_RANGE
           const double count = std::ceil((static_cast<double>(p[1]) - static_cast<double>(p[0])) /
                                          static_cast<double>(p[2]));
           if (count > kMaxRange) {
             return r.fail(args.line, "range too big: at most 100000 items (as jinja2's sandbox)");
           }
           std::vector<Value> items;
           for (__int128 x = p[0]; p[2] > 0 ? x < p[1] : x > p[1]; x += p[2]) {
             items.push_back(Value::integer(static_cast<int64_t>(x)));
           }
           return Value::new_list(std::move(items));
         }));
  auto make_dict = [](bool ns) {
    return [ns](Renderer& r, Args& args) -> Value {
      Value d = Value::new_dict();
      d.dict->is_namespace = ns;
      for (const Value& p : args.pos) {
        if (!p.is_dict()) return r.fail(args.line, "expected a mapping as positional argument");
        for (const auto& [k, x] : p.dict->items) d.dict->set(k, x);
      }
      for (const auto& [k, x] : args.kw) d.dict->set(k, x);
      return d;
    };
  };
  g->set("namespace", Value::function("namespace", make_dict(true)));
  g->set("dict", Value::function("dict", make_dict(false)));
  g->set("raise_exception", Value::function("raise_exception", [](Renderer& r, Args& args) {
           return r.fail(0,
                         args.pos.empty() ? std::string("raise_exception") : to_str(args.pos[0]));
         }));
  g->set("strftime_now", Value::function("strftime_now", [](Renderer& r, Args& args) -> Value {
           if (args.pos.empty() || !args.pos[0].is_string()) {
             return r.fail(args.line, "strftime_now needs a format string");
           }
           bool utc = false;
           const time_t t = static_cast<time_t>(r.now(&utc));
           struct tm tm {};
           if (utc) {
             gmtime_r(&t, &tm);
           } else {
             localtime_r(&t, &tm);
           }
           char buf[512];
           const size_t n = std::strftime(buf, sizeof buf, args.pos[0].s.c_str(), &tm);
           return Value::string(std::string(buf, n));
         }));
}

}  // namespace mnemo::jinja
