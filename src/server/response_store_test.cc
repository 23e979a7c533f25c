#include "server/response_store.h"

#include <gtest/gtest.h>

#include <string>

namespace mnemo::server {
namespace {

StoredResponse response(const std::string& id, size_t text_bytes) {
  StoredResponse r;
  r.id = id;
  r.response = {{"id", id}};
  r.messages = nlohmann::ordered_json::array(
      {{{"role", "user"}, {"content", std::string(text_bytes, 'x')}}});
  return r;
}

// Least recently used out first, by count and by bytes; get() counts as a use; an entry larger
// than the whole byte budget is refused and leaves every other entry in place.
TEST(ResponseStoreTest, BoundedByCountAndBytesLeastRecentlyUsedFirst) {
  ResponseStore s(3, 10000);
  ASSERT_TRUE(s.put(response("a", 100)));
  ASSERT_TRUE(s.put(response("b", 100)));
  ASSERT_TRUE(s.put(response("c", 100)));
  ASSERT_NE(s.get("a"), nullptr);  // a is now the most recently used
  ASSERT_TRUE(s.put(response("d", 100)));
  EXPECT_EQ(s.get("b"), nullptr);  // evicted by count
  EXPECT_NE(s.get("a"), nullptr);
  EXPECT_NE(s.get("c"), nullptr);
  EXPECT_NE(s.get("d"), nullptr);
  // By bytes: a big entry pushes out the least recently used until it fits.
  ASSERT_TRUE(s.put(response("e", 9800)));
  EXPECT_EQ(s.get("a"), nullptr);
  EXPECT_NE(s.get("e"), nullptr);
  EXPECT_LE(s.stats().bytes, 10000u);
  // Too large alone: refused, nothing else goes.
  const size_t before = s.stats().count;
  EXPECT_FALSE(s.put(response("huge", 20000)));
  EXPECT_EQ(s.get("huge"), nullptr);
  EXPECT_EQ(s.stats().count, before);
  EXPECT_NE(s.get("e"), nullptr);
  const ResponseStoreStats st = s.stats();
  EXPECT_EQ(st.stored_total, 5u);
  EXPECT_EQ(st.evicted_total, 3u);  // b by count; a and c by bytes
  EXPECT_GT(st.hits_total, 0u);
  EXPECT_EQ(st.misses_total, 3u);
}

TEST(ResponseStoreTest, ReplaceAndErase) {
  ResponseStore s(4, 100000);
  ASSERT_TRUE(s.put(response("a", 10)));
  ASSERT_TRUE(s.put(response("a", 1000)));  // same id: replaced, counted once in the sizes
  EXPECT_EQ(s.stats().count, 1u);
  EXPECT_EQ(s.stats().bytes, s.get("a")->bytes);
  EXPECT_TRUE(s.erase("a"));
  EXPECT_FALSE(s.erase("a"));
  EXPECT_EQ(s.stats().count, 0u);
  EXPECT_EQ(s.stats().bytes, 0u);
  ResponseStore none(0, 0);  // no budget: nothing is kept
  EXPECT_FALSE(none.put(response("x", 1)));
}

// A generation stopped by max_output_tokens inside a multi-byte character leaves an incomplete
// UTF-8 sequence in the output text; storing it must not throw.
TEST(ResponseStoreTest, OutputEndingInsideAUtf8CharacterIsStored) {
  ResponseStore s(4, 100000);
  StoredResponse r = response("cut", 10);
  r.response["output_text"] = std::string("Hi \xF0\x9F\x91", 6);  // the first 3 bytes of U+1F44B
  r.messages.push_back({{"role", "assistant"}, {"content", r.response["output_text"]}});
  ASSERT_TRUE(s.put(std::move(r)));
  ASSERT_NE(s.get("cut"), nullptr);
  EXPECT_GT(s.get("cut")->bytes, 0u);
}

}  // namespace
}  // namespace mnemo::server
