// llama.cpp's built-in chat templates (chat_builtin.cc) and the Jinja rules that follow
// llama-server, compared byte for byte with what llama-server (llama.cpp build 11669) returned
// for the same conversations: tests/fixtures/builtin_chat_templates.json, recorded by
// tests/fixtures/make_builtin_templates.py.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "mnemo/chat.h"

namespace mnemo {
namespace {

using Json = nlohmann::ordered_json;

// Built-in cases ("name/conversation") where mnemo's rendering is known to differ from the
// recording, with the reason; empty while every recorded case matches.
const std::map<std::string, std::string> kKnownDifferences = {};

// Folding cases ("template/conversation") known to differ, with the reason.
const std::map<std::string, std::string> kKnownFoldDifferences = {
    {"no_system/sys_only",
     "a lone system message is removed, leaving no messages; the template then reads "
     "messages[0]['role'], which mnemo's Jinja engine refuses (as Python's jinja2 does: an "
     "attribute of an undefined value) where llama-server's engine reads it as undefined and "
     "renders the generation prompt alone"},
};

Json load_fixture() {
  const char* src = std::getenv("MNEMO_SOURCE_DIR");
  const std::filesystem::path path =
      std::filesystem::path(src ? src : ".") / "tests" / "fixtures" / "builtin_chat_templates.json";
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
}

std::vector<ChatMessage> to_messages(const Json& conv) {
  std::vector<ChatMessage> out;
  for (const Json& m : conv) out.push_back({m["role"], m["content"]});
  return out;
}

TEST(ChatBuiltin, NamesAreLlamaServers) {
  const Json fx = load_fixture();
  ASSERT_TRUE(fx.is_object());
  std::vector<std::string> ours;
  for (ChatTemplateFamily f : chat_template_families()) {
    ours.emplace_back(chat_template_family_name(f));
  }
  EXPECT_EQ(ours, fx["names"].get<std::vector<std::string>>());
  for (const std::string& name : ours) {
    auto t = ChatTemplate::from_name(name);
    ASSERT_TRUE(t.ok()) << name;
    EXPECT_EQ(chat_template_family_name(t->family()), name);
  }
  auto bad = ChatTemplate::from_name("nope");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("mistral-v7"), std::string::npos);
}

TEST(ChatBuiltin, EveryNameRendersAsLlamaServer) {
  const Json fx = load_fixture();
  ASSERT_TRUE(fx.is_object());
  const Json& convs = fx["conversations"];
  size_t compared = 0;
  for (const auto& [name, cases] : fx["templates"].items()) {
    auto t = ChatTemplate::from_name(name);
    ASSERT_TRUE(t.ok()) << name;
    for (const auto& [cid, want] : cases.items()) {
      if (kKnownDifferences.count(name + "/" + cid)) continue;
      ASSERT_TRUE(want.is_string()) << name << "/" << cid << ": " << want.dump();
      EXPECT_EQ(t->apply(to_messages(convs[cid]), true), want.get<std::string>())
          << name << " / " << cid;
      // The server's path (render) gives the same text.
      auto r = t->render(convs[cid], Json::object());
      ASSERT_TRUE(r.ok()) << r.status().message();
      EXPECT_EQ(*r, want.get<std::string>()) << name << " / " << cid << " (render)";
      ++compared;
    }
  }
  EXPECT_GE(compared, 54u * 7u - kKnownDifferences.size());
}

// A template that refuses a system message (or writes none) gets the first message's system
// text put before the next message's content, as llama-server does.
TEST(ChatBuiltin, SystemFoldedIntoTheNextMessageAsLlamaServer) {
  const Json fx = load_fixture();
  ASSERT_TRUE(fx.is_object());
  const Json& rules = fx["rules"];
  for (const char* which : {"no_system", "drop_system"}) {
    const std::string source = rules[std::string(which) + "_template"];
    // SmolLM2's BOS text, which its tokenizer does not add (so the template's copy stays).
    auto t = ChatTemplate::from_jinja(source, "<|im_start|>", "<|im_end|>", false, false);
    ASSERT_TRUE(t.ok()) << t.status().message();
    EXPECT_FALSE(t->system_role());
    for (const auto& [cid, want] : rules[std::string(which) + "_jinja"].items()) {
      auto r = t->render(rules["fold_conversations"][cid], Json::object());
      if (kKnownFoldDifferences.count(std::string(which) + "/" + cid)) {
        EXPECT_FALSE(r.ok()) << which << " / " << cid << " now renders: drop it from the list";
        continue;
      }
      if (want.is_object()) {  // the peer answered 400: the template still raised
        EXPECT_FALSE(r.ok()) << which << " / " << cid << ": " << *r;
        continue;
      }
      ASSERT_TRUE(r.ok()) << which << " / " << cid << ": " << r.status().message();
      EXPECT_EQ(*r, want.get<std::string>()) << which << " / " << cid;
    }
  }
  // A template that writes the system message keeps it.
  auto keeps = ChatTemplate::from_jinja("{% for m in messages %}{{ m.content }}{% endfor %}", "",
                                        "", false, false);
  ASSERT_TRUE(keeps.ok());
  EXPECT_TRUE(keeps->system_role());
}

// With Jinja, any --chat-template text is a template, even one without markup or a built-in
// name: llama-server renders it as it stands.
TEST(ChatBuiltin, PlainTextIsATemplateWithJinja) {
  const Json fx = load_fixture();
  ASSERT_TRUE(fx.is_object());
  const Json& rules = fx["rules"];
  const Json& convs = fx["conversations"];
  for (const auto& [rule, text] :
       std::map<std::string, std::string>{{"jinja_raw_text", "hello"},
                                          {"jinja_builtin_name", "llama2"},
                                          {"default_builtin_name", "vicuna"}}) {
    auto t = ChatTemplate::from_jinja(text, "", "", false, false);
    ASSERT_TRUE(t.ok()) << t.status().message();
    for (const auto& [cid, want] : rules[rule].items()) {
      auto r = t->render(convs[cid], Json::object());
      ASSERT_TRUE(r.ok()) << r.status().message();
      EXPECT_EQ(*r, want.get<std::string>()) << rule << " / " << cid;
    }
  }
  // Without Jinja such a text is refused at start (the peer exits).
  EXPECT_TRUE(rules["no_jinja_raw_text"].contains("error"));
}

// A template text with a format's markers: with --no-jinja, the format llama-server picks, or,
// where llama-server recognises none (mnemo knows fewer markers), none.
TEST(ChatBuiltin, DetectsTheFormatLlamaServerPicks) {
  const Json fx = load_fixture();
  ASSERT_TRUE(fx.is_object());
  for (const auto& [hint, rec] : fx["rules"]["detect"].items()) {
    const ChatTemplate t = ChatTemplate::detect(rec["text"].get<std::string>());
    if (rec["peer"].is_string()) {  // "error": llama-server recognises nothing
      EXPECT_FALSE(t.recognized()) << hint;
      continue;
    }
    const auto peer = rec["peer"].get<std::vector<std::string>>();
    EXPECT_TRUE(t.recognized()) << hint;
    EXPECT_NE(std::find(peer.begin(), peer.end(), chat_template_family_name(t.family())),
              peer.end())
        << hint << ": mnemo " << chat_template_family_name(t.family());
  }
}

}  // namespace
}  // namespace mnemo
