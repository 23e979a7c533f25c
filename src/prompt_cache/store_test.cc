// The shared store without a Redis (store.h): the URL parser, and the timeout against a server
// that answers one byte at a time. End to end against a real redis-server:
// tests/python/test_replicas.py.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "mnemo/check.h"
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

// A TCP server on a loopback port that answers every connection's first bytes with `reply`, one
// byte every `gap`: a store alive enough never to let a single read wait long.
class TrickleServer {
 public:
  TrickleServer(std::string reply, std::chrono::milliseconds gap)
      : reply_(std::move(reply)), gap_(gap) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    CHECK(::bind(fd_, reinterpret_cast<sockaddr*>(&a), len) == 0);
    CHECK(::listen(fd_, 8) == 0);
    CHECK(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~TrickleServer() {
    stop_.store(true);
    thread_.join();
    ::close(fd_);
  }
  int port() const { return port_; }

 private:
  void serve() {
    while (!stop_.load()) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      char buf[4096];
      pollfd q{c, POLLIN, 0};
      while (!stop_.load() && ::poll(&q, 1, 20) == 0) {
      }
      if (::recv(c, buf, sizeof buf, 0) > 0) {
        for (size_t i = 0; i < reply_.size() && !stop_.load(); ++i) {
          if (::send(c, reply_.data() + i, 1, MSG_NOSIGNAL) != 1) break;
          std::this_thread::sleep_for(gap_);
        }
      }
      ::close(c);
    }
  }

  std::string reply_;
  std::chrono::milliseconds gap_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

StoreParams trickle_params(int port) {
  StoreParams p;
  p.url.host = "127.0.0.1";
  p.url.port = port;
  p.timeout_ms = 300;
  p.block_tokens = 16;
  return p;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(PromptCacheStore, TheTimeoutBoundsAWholeLookupNotEachRead) {
  // MGET's answer for 4 blocks (none stored), 24 bytes at 100 ms each: 2.4 s in all, while no
  // single read waits more than 100 ms.
  TrickleServer srv("*4\r\n$-1\r\n$-1\r\n$-1\r\n$-1\r\n", std::chrono::milliseconds(100));
  auto store = Store::open(trickle_params(srv.port()));
  const auto t0 = std::chrono::steady_clock::now();
  auto f = store->lookup(std::vector<int32_t>(64, 7), 0, nullptr);
  while (!f->done.load(std::memory_order_acquire)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const double s = seconds_since(t0);
  EXPECT_LT(s, 1.2) << "the lookup waited as long as the store kept trickling";
  EXPECT_GE(s, 0.25);
  EXPECT_FALSE(f->status.ok());
  const StoreStats st = store->stats();
  EXPECT_EQ(st.misses_total, 1u);
  EXPECT_GE(st.errors_total, 1u);
  EXPECT_FALSE(st.connected);
}

TEST(PromptCacheStore, TheTimeoutBoundsAWholeWrite) {
  // SET's "+OK" padded to 30 bytes at 100 ms each: 3 s.
  TrickleServer srv("+OK" + std::string(25, 'K') + "\r\n", std::chrono::milliseconds(100));
  auto store = Store::open(trickle_params(srv.port()));
  const auto t0 = std::chrono::steady_clock::now();
  store->put(std::vector<int32_t>(32, 7), std::make_shared<std::vector<uint8_t>>(100, 1));
  store->flush();
  EXPECT_LT(seconds_since(t0), 1.2) << "the write waited as long as the store kept trickling";
  const StoreStats st = store->stats();
  EXPECT_EQ(st.writes_total, 0u);
  EXPECT_EQ(st.dropped_total, 1u);
  EXPECT_GE(st.errors_total, 1u);
}

}  // namespace
}  // namespace mnemo::prompt_cache
