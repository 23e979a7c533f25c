// Unit tests of the Jinja engine. Expected strings are what Python's jinja2 3.1 renders with
// trim_blocks and lstrip_blocks on (the settings transformers uses); the byte-for-byte
// comparison over whole chat templates and random conversations is
// tests/python/test_chat_template_jinja.py, which runs jinja2 itself.
#include "mnemo/jinja.h"

#include <gtest/gtest.h>

namespace mnemo::jinja {
namespace {

using Json = nlohmann::ordered_json;

std::string render(std::string_view src, const Json& ctx = Json::object()) {
  auto t = Template::parse(src);
  if (!t.ok()) return "PARSE ERROR: " + t.status().message();
  RenderOptions o;
  o.now_unix = 1772712000;  // 2026-03-05 12:00:00 UTC
  auto r = t->render(ctx, o);
  if (!r.ok()) return "ERROR: " + r.status().message();
  return *r;
}

TEST(JinjaTest, PrintsValuesAsPython) {
  EXPECT_EQ(render("{{ 1e20 }} {{ 0.1+0.2 }} {{ 1e-5 }} {{ 2.0 }} {{ 1e16 }} {{ 1e15 }}"),
            "1e+20 0.30000000000000004 1e-05 2.0 1e+16 1000000000000000.0");
  EXPECT_EQ(render(R"({{ [1.0, "a'b", none, true] }} {{ {"a": 1} }} {{ none }} {{ x }})"),
            R"([1.0, "a'b", None, True] {'a': 1} None )");
  EXPECT_EQ(render("{{ (1, 2) }} {{ () }} {{ (1,) }}"), "(1, 2) () (1,)");
}

TEST(JinjaTest, ArithmeticIsPython) {
  EXPECT_EQ(
      render("{{ 7 // -2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 4 / 2 }} {{ 10 % 3.5 }}"),
      "-4 2 1024 0.5 2.0 3.0");
  EXPECT_EQ(render("{{ [1,2] + [3] }} {{ 'ab' * 3 }} {{ [1] * 2 }}"), "[1, 2, 3] ababab [1, 1]");
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 'a' in 'cat' }} {{ 1 in [1] }} {{ 'k' in {'k':1} }}"),
            "True True True True");
  EXPECT_EQ(render("{{ true and 3 }} {{ 0 or 'x' }} {{ none or [] }}"), "3 x []");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none ~ 1.5 }}"), "a1None1.5");
  EXPECT_EQ(render("{{ 'a' + 1 }}"),
            "ERROR: line 1: can only concatenate str (not \"int\") to str");
}

TEST(JinjaTest, ScopesAreJinja2s) {
  EXPECT_EQ(
      render("{% set c = 0 %}{% for i in [1,2] %}{% set c = c + 1 %}{{ c }}{% endfor %}{{ c }}"),
      "110");
  EXPECT_EQ(render("{% for i in [1,2] %}{% if i == 2 %}{{ x }}{% endif %}{% set x = i %}{% endfor "
                   "%}[{{x}}]"),
            "[]");
  EXPECT_EQ(render("{% if true %}{% set y = 3 %}{% endif %}{{ y }}"), "3");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}"
                   "{% endfor %}{{ ns.n }}"),
            "3");
  EXPECT_EQ(render("{% macro m(a, b=2) %}{{a}}{{b}}{{ c }}{% endmacro %}{% set c = 5 %}"
                   "{{ m(1) }}{{ m(1, b=3) }}"),
            "125135");
}

TEST(JinjaTest, UndefinedIsJinja2sDefault) {
  EXPECT_EQ(render("[{{ x }}]{{ x is defined }}{{ x|length }}"), "[]False0");
  EXPECT_EQ(render("{{ x.y }}"), "ERROR: line 1: 'x' is undefined");
  EXPECT_EQ(render("{{ d.y }}|{{ d.y is defined }}", {{"d", Json::object()}}), "|False");
}

TEST(JinjaTest, WhitespaceControl) {
  EXPECT_EQ(render("a\n  {% if true %}\n  b\n  {% endif %}\nc\n"), "a\n  b\nc");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif %}"), "ab");
  EXPECT_EQ(render("a\n  {{ 1 }}\n  {# c #}\nb"), "a\n  1\nb");
  EXPECT_EQ(render("{% raw %}\n{{ x }}{% endraw %}"), "\n{{ x }}");
  EXPECT_EQ(render("a\r\nb\r\n"), "a\nb");
}

TEST(JinjaTest, LoopVariable) {
  EXPECT_EQ(render("{% for x in 'abc' if x != 'b' %}{{ loop.index }}{{ x }}{{ loop.length }}"
                   "{{ loop.last }}{{ loop.cycle('+', '-') }}{% else %}none{% endfor %}"),
            "1a2False+2c2True-");
  EXPECT_EQ(render("{% for x in [] %}{{ x }}{% else %}none{% endfor %}"), "none");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"),
            "a=1;b=2;");
  EXPECT_EQ(render("{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}"
                   "{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
            "02");
}

TEST(JinjaTest, FiltersAndMethods) {
  EXPECT_EQ(render("{{ '  a b  '|trim }}|{{ ' x '.strip() }}|{{ 'a,b,,c'.split(',') }}|"
                   "{{ ' a  b '.split() }}|{{ 'a b c'.rsplit(' ', 1) }}"),
            "a b|x|['a', 'b', '', 'c']|['a', 'b']|['a b', 'c']");
  EXPECT_EQ(render("{{ 'héllo'[1:3] }} {{ 'héllo'|length }} {{ 'abc'[::-1] }}"), "él 5 cba");
  EXPECT_EQ(render(R"({{ {"b": [1, 2.5, "é\n"], "a": none}|tojson }})"),
            R"({"b": [1, 2.5, "é\n"], "a": null})");
  EXPECT_EQ(render(R"({{ {"b": [1], "a": {}}|tojson(indent=2, sort_keys=true) }})"),
            "{\n  \"a\": {},\n  \"b\": [\n    1\n  ]\n}");
  EXPECT_EQ(
      render(
          "{{ [3, 1, 2]|sort|join(',') }} {{ ['B', 'a']|sort|list }} {{ [1, 1, 2]|unique|list }}"),
      "1,2,3 ['a', 'B'] [1, 2]");
  EXPECT_EQ(
      render("{{ users|selectattr('admin')|map(attribute='name')|join(' ') }}",
             {{"users", {{{"name", "a"}, {"admin", true}}, {{"name", "b"}, {"admin", false}}}}}),
      "a");
  EXPECT_EQ(
      render("{{ x|default('d') }} {{ ''|default('d', true) }} {{ 3.7|int }} {{ '12'|int + 1 }}"),
      "d d 3 13");
  EXPECT_EQ(render("{{ strftime_now('%d %b %Y') }}"), "05 Mar 2026");
}

TEST(JinjaTest, RaiseExceptionIsAnError) {
  EXPECT_EQ(render("{{ raise_exception('roles must alternate') }}"), "ERROR: roles must alternate");
}

TEST(JinjaTest, BadTemplatesAreErrorsNotCrashes) {
  for (const char* bad : {"{% if x %}", "{{ x", "{% for %}", "{% include 'x' %}", "{{ 'a }}",
                          "{% endfor %}", "{{ ]", "{% set %}", "{{ x | }}", "{% macro m( %}",
                          "{% break %}", "{{ 99999999999999999999 }}", "{# x"}) {
    auto t = Template::parse(bad);
    EXPECT_FALSE(t.ok()) << bad;
  }
  std::string deep(1000, '(');
  EXPECT_FALSE(Template::parse("{{ " + deep + " }}").ok());
  std::string nested;
  for (int i = 0; i < 300; ++i) nested += "{% if true %}";
  EXPECT_FALSE(Template::parse(nested).ok());
}

// Templates that used to crash, loop or exhaust memory: each ends in an error (or in
// jinja2's own answer) within the render's bounds.
TEST(JinjaTest, HostileTemplatesEndInErrors) {
  auto fails = [](const std::string& src) {
    auto t = Template::parse(src);
    if (!t.ok()) return true;
    RenderOptions o;
    o.max_output_bytes = 16 << 20;
    return !t->render(Json::object(), o).ok();
  };
  std::string plus = "{{ 1";
  for (int i = 0; i < 20000; ++i) plus += "+1";
  EXPECT_TRUE(fails(plus + " }}"));
  EXPECT_TRUE(fails(plus + " ) }}"));
  std::string filters = "{{ 'a'";
  for (int i = 0; i < 20000; ++i) filters += "|trim";
  EXPECT_TRUE(fails(filters + " }}"));
  std::string loops;
  for (int i = 0; i < 250; ++i) loops += "{% for x in [1] %}";
  loops += "{% if n < 60 %}{{ f(n+1) }}{% endif %}";
  for (int i = 0; i < 250; ++i) loops += "{% endfor %}";
  EXPECT_TRUE(fails("{% macro f(n) %}" + loops + "{% endmacro %}{{ f(0) }}"));
  EXPECT_TRUE(
      fails("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
            "{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l|string|length }}"));
  EXPECT_TRUE(fails("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns }}"));
  EXPECT_TRUE(fails("{% set s='x'*1000 %}{% set big=[s]*4000000 %}{{ big|length }}"));
  EXPECT_TRUE(
      fails("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}"
            "{% set ns.l = ns.l + ns.l %}{% endfor %}"));
  EXPECT_TRUE(fails("{% for c in 'x'*20000000 %}{% break %}{% endfor %}"));
  EXPECT_TRUE(fails("{{ ('\n'*1000000)|indent('x'*100000, blank=true) }}"));
  EXPECT_TRUE(fails("{{ [1]|batch(1000000000000, 0)|list }}"));
  EXPECT_TRUE(
      fails("{% macro f(n) %}{{ 'x'*6000000 }}{% if n < 40 %}{{ f(n+1) }}{% endif %}"
            "{% endmacro %}{{ f(0)|length }}"));
  EXPECT_TRUE(
      fails("{% set ns = namespace(s='x') %}{% for i in range(40) %}"
            "{% set ns.s = ns.s ~ ns.s %}{% endfor %}"));
  EXPECT_TRUE(fails("{{ '%d'|format(1e300) }}"));
  EXPECT_TRUE(fails("{{ range(200000)|unique|list|length }}"));
  // Where jinja2 has an answer, the same one.
  EXPECT_EQ(render("{{ [1,2,3][1::9223372036854775807] }}"), "[2]");
  EXPECT_EQ(render("{{ range(9223372036854775806, 9223372036854775807, 9223372036854775807)"
                   "|list }}"),
            "[9223372036854775806]");
  EXPECT_EQ(render("{% macro f(a, b=a) %}[{{b}}]{% endmacro %}{{ f(1) }}"), "[1]");
  EXPECT_EQ(render("{{ '%s-%05.2f' % ('a', 3.14159) }}"), "a-03.14");
  EXPECT_EQ(render("x\u00a0{%- if true %}y{% endif %}"), "xy");
  EXPECT_EQ(render("a\x0cb\x0b"), "a\x0cb\x0b");
}

TEST(JinjaTest, LimitsStopHostileTemplates) {
  auto t = Template::parse(
      "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}");
  ASSERT_TRUE(t.ok());
  RenderOptions o;
  o.max_output_bytes = 1 << 20;
  auto r = t->render(Json::object(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  auto rec = Template::parse("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_TRUE(rec.ok());
  EXPECT_FALSE(rec->render(Json::object()).ok());
  auto big = Template::parse("{{ 'x' * 1000000000000 }}");
  ASSERT_TRUE(big.ok());
  EXPECT_FALSE(big->render(Json::object()).ok());
  EXPECT_FALSE(Template::parse("{{ range(1000000) }}")->render(Json::object()).ok());
  // Rebuilding a long string again and again is work in proportion to its bytes: stopped.
  auto quadratic = Template::parse(
      "{% set ns = namespace(s='') %}{% for i in range(100000) %}"
      "{% set ns.s = ns.s ~ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' %}"
      "{% endfor %}{{ ns.s | length }}");
  ASSERT_TRUE(quadratic.ok());
  auto q = quadratic->render(Json::object());
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), StatusCode::kOutOfRange);
  // ... while the same pattern over a long conversation's worth of text passes.
  Json ctx;
  ctx["parts"] = Json::array();
  for (int i = 0; i < 1000; ++i) ctx["parts"].push_back(std::string(1000, 'a'));
  auto linear = Template::parse(
      "{% set ns = namespace(s='') %}{% for p in parts %}{% set ns.s = ns.s ~ p %}{% endfor %}"
      "{{ ns.s | length }}");
  ASSERT_TRUE(linear.ok());
  auto l = linear->render(ctx);
  ASSERT_TRUE(l.ok()) << l.status().message();
  EXPECT_EQ(*l, "1000000");
}

}  // namespace
}  // namespace mnemo::jinja
