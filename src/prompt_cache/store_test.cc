// The shared store without a Redis (store.h): the URL parser. End to end against a real
// redis-server: tests/python/test_replicas.py.
#include <gtest/gtest.h>

#include <string>

#include "prompt_cache/store.h"

namespace mnemo::prompt_cache {
namespace {

StoreUrl parsed(const std::string& url) {
  auto u = parse_store_url(url);
  EXPECT_TRUE(u.ok()) << url << ": " << u.status().to_string();
  return u.ok() ? *u : StoreUrl{};
}

TEST(PromptCacheStoreUrl, HostPortAndDatabase) {
  StoreUrl u = parsed("redis://127.0.0.1:6380/2");
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_EQ(u.port, 6380);
  EXPECT_EQ(u.db, 2);
  EXPECT_EQ(u.user, "");
  EXPECT_EQ(u.password, "");
  u = parsed("valkey://cache.internal");  // valkey:// is the same; port and db default
  EXPECT_EQ(u.host, "cache.internal");
  EXPECT_EQ(u.port, 6379);
  EXPECT_EQ(u.db, 0);
  EXPECT_EQ(parsed("redis://h/").db, 0);
  EXPECT_EQ(parsed("redis://h:65535/9999").port, 65535);
  EXPECT_EQ(parsed("redis://h:1").port, 1);
}

TEST(PromptCacheStoreUrl, UserAndPassword) {
  StoreUrl u = parsed("redis://:s3cret@h:7000");
  EXPECT_EQ(u.user, "");
  EXPECT_EQ(u.password, "s3cret");
  EXPECT_EQ(u.host, "h");
  u = parsed("redis://alice:s3cret@h");  // a Redis 6+ ACL user
  EXPECT_EQ(u.user, "alice");
  EXPECT_EQ(u.password, "s3cret");
  EXPECT_EQ(u.host, "h");
  u = parsed("redis://alice:p@ss:w0rd@h:7000/3");  // the last '@' ends the user information
  EXPECT_EQ(u.user, "alice");
  EXPECT_EQ(u.password, "p@ss:w0rd");
  EXPECT_EQ(u.host, "h");
  EXPECT_EQ(u.port, 7000);
  EXPECT_EQ(u.db, 3);
  u = parsed("redis://s3cret@h");  // a bare password: the default user's
  EXPECT_EQ(u.user, "");
  EXPECT_EQ(u.password, "s3cret");
}

TEST(PromptCacheStoreUrl, BadUrlsNameWhatIsWrongAndNeverThePassword) {
  const struct {
    const char* url;
    const char* says;
  } cases[] = {
      {"ftp://h:6379", "expected redis://"},
      {"h:6379", "expected redis://"},
      {"redis://", "expected redis://"},
      {"redis://h:0", "port"},
      {"redis://h:65536", "port"},
      {"redis://h:123456", "port"},
      {"redis://h:", "port"},
      {"redis://h:63a9", "port"},
      {"redis://h/db1", "database"},
      {"redis://h/12345", "database"},
      {"redis://:s3cret@", "no host"},
      {"redis://alice:s3cret@:6379", "no host"},
      {"redis://alice:s3cret@h:99999", "port"},
      {"redis://:s3cret@h/x", "database"},
  };
  for (const auto& c : cases) {
    auto u = parse_store_url(c.url);
    ASSERT_FALSE(u.ok()) << c.url;
    EXPECT_EQ(u.status().code(), StatusCode::kInvalidArgument) << c.url;
    EXPECT_NE(u.status().message().find(c.says), std::string::npos)
        << c.url << ": " << u.status().message();
    EXPECT_EQ(u.status().message().find("s3cret"), std::string::npos) << c.url;
    EXPECT_NE(u.status().message().find("--cache-store"), std::string::npos) << c.url;
  }
}

}  // namespace
}  // namespace mnemo::prompt_cache
