// The KV-event encoder and publisher without a model or a server: both wire forms decoded back
// with msgpack-cxx (maps keyed as vLLM's structs, in msgspec's field order) and compared with the
// bytes msgspec / msgpack write for the same values; the publisher's groups for a sliding-window
// model, its reference counts across holders, the legacy form's all-or-nothing rule, the PUB
// stream and the replay socket (DEALER and REQ clients), and its errors.
#include "kv_events/kv_events.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <msgpack.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "kv_events/kv_event_codec.h"
#include "prompt_cache/block_hash.h"

namespace mnemo::kv_events {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes from_hex(std::string_view hex) {
  Bytes out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<uint8_t>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

// A decoded msgpack value and the zone that owns it.
struct Decoded {
  msgpack::object_handle handle;
  const msgpack::object& get() const { return handle.get(); }
};

Decoded decode(const Bytes& b) {
  Decoded d{msgpack::unpack(reinterpret_cast<const char*>(b.data()), b.size())};
  return d;
}

// The keys of a map, in order.
std::vector<std::string> keys(const msgpack::object& o) {
  EXPECT_EQ(o.type, msgpack::type::MAP);
  std::vector<std::string> k;
  for (uint32_t i = 0; i < o.via.map.size; ++i) k.push_back(o.via.map.ptr[i].key.as<std::string>());
  return k;
}

// The value of `key` in map `o` (a failed expectation and nil when missing).
const msgpack::object& field(const msgpack::object& o, const std::string& key) {
  static const msgpack::object nil;
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    if (o.via.map.ptr[i].key.as<std::string>() == key) return o.via.map.ptr[i].val;
  }
  ADD_FAILURE() << "no key " << key;
  return nil;
}

const std::vector<uint64_t> kHashes = {1, UINT64_MAX};
const std::vector<int32_t> kTokens = {5, -1};

BlockStoredEvent stored_event(std::optional<uint32_t> window) {
  BlockStoredEvent e;
  e.hashes = kHashes;
  e.tokens = kTokens;
  e.block_size = 1;
  e.medium = "CPU";
  if (window) {
    e.group.idx = 1;
    e.group.kind = "sliding_window";
    e.group.sliding_window = window;
  }
  return e;
}

// --- the encoder ---------------------------------------------------------------------------

TEST(KvEventCodecTest, MapFormBlockStoredDecodesToVllmFields) {
  const Decoded d = decode(encode_block_stored(EventFormat::kVllm, stored_event(512)));
  const msgpack::object& o = d.get();
  EXPECT_EQ(keys(o),
            (std::vector<std::string>{"type", "block_hashes", "parent_block_hash", "token_ids",
                                      "block_size", "lora_id", "medium", "lora_name", "group_idx",
                                      "kv_cache_spec_kind", "kv_cache_spec_sliding_window"}));
  EXPECT_EQ(field(o, "type").as<std::string>(), "BlockStored");
  EXPECT_EQ(field(o, "block_hashes").as<std::vector<uint64_t>>(), kHashes);
  EXPECT_TRUE(field(o, "parent_block_hash").is_nil());
  EXPECT_EQ(field(o, "token_ids").as<std::vector<int32_t>>(), kTokens);
  EXPECT_EQ(field(o, "block_size").as<uint32_t>(), 1u);
  EXPECT_TRUE(field(o, "lora_id").is_nil());
  EXPECT_EQ(field(o, "medium").as<std::string>(), "CPU");
  EXPECT_TRUE(field(o, "lora_name").is_nil());
  EXPECT_EQ(field(o, "group_idx").as<uint32_t>(), 1u);
  EXPECT_EQ(field(o, "kv_cache_spec_kind").as<std::string>(), "sliding_window");
  EXPECT_EQ(field(o, "kv_cache_spec_sliding_window").as<uint32_t>(), 512u);
}

TEST(KvEventCodecTest, MapFormLeavesOutFieldsAtTheirDefault) {
  BlockStoredEvent e = stored_event(std::nullopt);
  e.parent = 9;
  const Decoded d = decode(encode_block_stored(EventFormat::kVllm, e));
  const std::vector<std::string> k = keys(d.get());
  EXPECT_EQ(k.size(), 10u);
  EXPECT_EQ(k.back(), "kv_cache_spec_kind");  // no window, no extra_keys
  EXPECT_EQ(field(d.get(), "parent_block_hash").as<uint64_t>(), 9u);
  EXPECT_EQ(field(d.get(), "group_idx").as<uint32_t>(), 0u);
  EXPECT_EQ(field(d.get(), "kv_cache_spec_kind").as<std::string>(), "full_attention");

  const Decoded r =
      decode(encode_block_removed(EventFormat::kVllm, std::vector<uint64_t>{7}, "CPU_CACHE", 1));
  EXPECT_EQ(keys(r.get()),
            (std::vector<std::string>{"type", "block_hashes", "medium", "group_idx"}));
  EXPECT_EQ(field(r.get(), "type").as<std::string>(), "BlockRemoved");
  EXPECT_EQ(field(r.get(), "block_hashes").as<std::vector<uint64_t>>(), std::vector<uint64_t>{7});
  EXPECT_EQ(field(r.get(), "medium").as<std::string>(), "CPU_CACHE");
  EXPECT_EQ(field(r.get(), "group_idx").as<uint32_t>(), 1u);

  const Decoded c = decode(encode_all_blocks_cleared(EventFormat::kVllm));
  EXPECT_EQ(keys(c.get()), std::vector<std::string>{"type"});
  EXPECT_EQ(field(c.get(), "type").as<std::string>(), "AllBlocksCleared");
}

TEST(KvEventCodecTest, MapFormBatchHoldsTsEventsAndRank) {
  const std::vector<EncodedEvent> events = {encode_all_blocks_cleared(EventFormat::kVllm)};
  const Decoded d = decode(encode_batch(EventFormat::kVllm, 1.5, events));
  EXPECT_EQ(keys(d.get()), (std::vector<std::string>{"ts", "events", "data_parallel_rank"}));
  EXPECT_EQ(field(d.get(), "ts").as<double>(), 1.5);
  const msgpack::object& ev = field(d.get(), "events");
  ASSERT_EQ(ev.type, msgpack::type::ARRAY);
  ASSERT_EQ(ev.via.array.size, 1u);
  EXPECT_EQ(field(ev.via.array.ptr[0], "type").as<std::string>(), "AllBlocksCleared");
  EXPECT_EQ(field(d.get(), "data_parallel_rank").as<int>(), 0);
}

// msgspec 0.22's encoding of vLLM's structs with the same values (msgspec.msgpack.Encoder().
// encode(BlockStored([1, 2**64 - 1], None, [5, -1], 1, None, "CPU", None, group_idx=1,
// kv_cache_spec_kind="sliding_window", kv_cache_spec_sliding_window=512)), and so on).
TEST(KvEventCodecTest, MapFormBytesEqualMsgspecs) {
  EXPECT_EQ(encode_block_stored(EventFormat::kVllm, stored_event(512)),
            from_hex("8ba474797065ab426c6f636b53746f726564ac626c6f636b5f6861736865739201cfffffff"
                     "ffffffffffb1706172656e745f626c6f636b5f68617368c0a9746f6b656e5f6964739205ff"
                     "aa626c6f636b5f73697a6501a76c6f72615f6964c0a66d656469756da3435055a96c6f7261"
                     "5f6e616d65c0a967726f75705f69647801b26b765f63616368655f737065635f6b696e64ae"
                     "736c6964696e675f77696e646f77bc6b765f63616368655f737065635f736c6964696e675f"
                     "77696e646f77cd0200"));
  EXPECT_EQ(encode_block_removed(EventFormat::kVllm, std::vector<uint64_t>{7}, "CPU_CACHE", 0),
            from_hex("84a474797065ac426c6f636b52656d6f766564ac626c6f636b5f6861736865739107a66d65"
                     "6469756da94350555f4341434845a967726f75705f69647800"));
  const std::vector<EncodedEvent> events = {encode_all_blocks_cleared(EventFormat::kVllm)};
  EXPECT_EQ(encode_batch(EventFormat::kVllm, 1.5, events),
            from_hex("83a27473cb3ff8000000000000a66576656e74739181a474797065b0416c6c426c6f636b73"
                     "436c6561726564b2646174615f706172616c6c656c5f72616e6b00"));
}

// The positional form, byte for byte as mnemo sent it before the map form (msgpack.packb of the
// same lists).
TEST(KvEventCodecTest, LegacyFormIsUnchanged) {
  const Bytes stored = encode_block_stored(EventFormat::kLegacy, stored_event(512));
  EXPECT_EQ(stored,
            from_hex("97ab426c6f636b53746f7265649201cfffffffffffffffffc09205ff01c0a3435055"));
  const Decoded d = decode(stored);
  ASSERT_EQ(d.get().type, msgpack::type::ARRAY);
  ASSERT_EQ(d.get().via.array.size, 7u);
  const msgpack::object* a = d.get().via.array.ptr;
  EXPECT_EQ(a[0].as<std::string>(), "BlockStored");
  EXPECT_EQ(a[1].as<std::vector<uint64_t>>(), kHashes);
  EXPECT_TRUE(a[2].is_nil());
  EXPECT_EQ(a[3].as<std::vector<int32_t>>(), kTokens);
  EXPECT_EQ(a[4].as<uint32_t>(), 1u);
  EXPECT_TRUE(a[5].is_nil());
  EXPECT_EQ(a[6].as<std::string>(), "CPU");
  EXPECT_EQ(encode_block_removed(EventFormat::kLegacy, std::vector<uint64_t>{7}, "CPU_CACHE", 1),
            from_hex("93ac426c6f636b52656d6f7665649107a94350555f4341434845"));
  EXPECT_EQ(encode_all_blocks_cleared(EventFormat::kLegacy),
            from_hex("91b0416c6c426c6f636b73436c6561726564"));
  const std::vector<EncodedEvent> events = {encode_all_blocks_cleared(EventFormat::kLegacy)};
  EXPECT_EQ(encode_batch(EventFormat::kLegacy, 1.5, events),
            from_hex("92cb3ff80000000000009191b0416c6c426c6f636b73436c6561726564"));
}

TEST(KvEventCodecTest, FormatNames) {
  EXPECT_EQ(*parse_event_format("vllm"), EventFormat::kVllm);
  EXPECT_EQ(*parse_event_format("legacy"), EventFormat::kLegacy);
  auto bad = parse_event_format("positional");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--kv-events-format"), std::string::npos);
}

// --- the publisher -------------------------------------------------------------------------

constexpr uint32_t kBlock = 4;
constexpr uint64_t kRoot = 0x1234;

// ipc endpoints in /tmp, their socket files removed when the tests end.
std::vector<std::string>& ipc_files() {
  static std::vector<std::string> files;
  return files;
}

class RemoveIpcFiles : public ::testing::Environment {
 public:
  void TearDown() override {
    for (const std::string& f : ipc_files()) ::unlink(f.c_str());
  }
};
const auto* const kRemoveIpcFiles = ::testing::AddGlobalTestEnvironment(new RemoveIpcFiles);

std::string ipc(const std::string& name) {
  static int n = 0;
  const std::string path =
      "/tmp/mnemo-kv-test-" + std::to_string(::getpid()) + "-" + name + "-" + std::to_string(n++);
  ipc_files().push_back(path);
  return "ipc://" + path;
}

std::vector<int32_t> tokens(int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = 100 + i;
  return t;
}

// One event, decoded from the map form: what the tests compare.
struct Event {
  std::string type;
  std::vector<uint64_t> hashes;
  std::optional<uint64_t> parent;
  size_t n_tokens = 0;
  std::string medium;
  uint32_t group = 0;
  std::string kind;
  std::optional<uint32_t> window;
};

std::vector<Event> events_of(const Bytes& payload) {
  const Decoded d = decode(payload);
  std::vector<Event> out;
  const msgpack::object& ev = field(d.get(), "events");
  for (uint32_t i = 0; i < ev.via.array.size; ++i) {
    const msgpack::object& o = ev.via.array.ptr[i];
    Event e;
    e.type = field(o, "type").as<std::string>();
    if (e.type != "AllBlocksCleared") {
      e.hashes = field(o, "block_hashes").as<std::vector<uint64_t>>();
      e.medium = field(o, "medium").as<std::string>();
      e.group = field(o, "group_idx").as<uint32_t>();
    }
    if (e.type == "BlockStored") {
      const msgpack::object& p = field(o, "parent_block_hash");
      if (!p.is_nil()) e.parent = p.as<uint64_t>();
      e.n_tokens = field(o, "token_ids").via.array.size;
      e.kind = field(o, "kv_cache_spec_kind").as<std::string>();
      for (const std::string& k : keys(o)) {
        if (k == "kv_cache_spec_sliding_window") {
          e.window = field(o, k).as<uint32_t>();
        }
      }
    }
    out.push_back(std::move(e));
  }
  return out;
}

// A replay client (a DEALER that sends the empty delimiter itself, as a REQ socket would).
struct ReplayClient {
  zmq::context_t ctx;
  zmq::socket_t sock{ctx, zmq::socket_type::dealer};
  explicit ReplayClient(const std::string& endpoint) {
    sock.set(zmq::sockopt::linger, 0);
    sock.connect(endpoint);
  }
  // The (seq, payload) batches from `start` on, up to the end marker.
  std::vector<std::pair<int64_t, Bytes>> ask(uint64_t start) {
    uint8_t s[8];
    for (int i = 0; i < 8; ++i) s[i] = static_cast<uint8_t>(start >> (56 - 8 * i));
    sock.send(zmq::const_buffer("", 0), zmq::send_flags::sndmore);
    sock.send(zmq::const_buffer(s, 8), zmq::send_flags::none);
    std::vector<std::pair<int64_t, Bytes>> out;
    sock.set(zmq::sockopt::rcvtimeo, 5000);
    while (true) {
      std::vector<zmq::message_t> frames;
      auto got = zmq::recv_multipart(sock, std::back_inserter(frames));
      EXPECT_TRUE(got.has_value()) << "no answer from the replay socket";
      if (!got) return out;
      EXPECT_EQ(frames.size(), 3u);
      EXPECT_EQ(frames[0].size(), 0u);  // the delimiter
      EXPECT_EQ(frames[1].size(), 8u);
      int64_t seq = 0;
      for (int i = 0; i < 8; ++i)
        seq = (seq << 8) | static_cast<const uint8_t*>(frames[1].data())[i];
      const auto* p = static_cast<const uint8_t*>(frames[2].data());
      if (seq == -1) {
        EXPECT_EQ(frames[2].size(), 0u);
        return out;
      }
      out.emplace_back(seq, Bytes(p, p + frames[2].size()));
    }
  }
  // Every event published so far, once `n` events have gone out (the publisher's own thread
  // sends them: asks again until they are there).
  std::vector<Event> all_events(size_t n) {
    std::vector<Event> all;
    for (int attempt = 0; attempt < 100; ++attempt) {
      all.clear();
      for (const auto& [seq, payload] : ask(0)) {
        for (Event& e : events_of(payload)) all.push_back(std::move(e));
      }
      if (all.size() >= n) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(all.size(), n);
    return all;
  }
};

PublisherParams params(EventFormat format, SwaType swa, uint32_t n_swa) {
  PublisherParams p;
  p.endpoint = ipc("pub");
  p.replay_endpoint = ipc("replay");
  p.format = format;
  p.block_tokens = kBlock;
  p.root = kRoot;
  p.swa_type = swa;
  p.n_swa = n_swa;
  return p;
}

TEST(KvEventPublisherTest, SlidingWindowGroupHoldsOnlyTheBlocksTheLocalLayersKeep) {
  const PublisherParams p = params(EventFormat::kVllm, SwaType::kStandard, 8);
  auto pub = KvEventPublisher::open(p);
  ASSERT_TRUE(pub.ok()) << pub.status().to_string();
  const std::vector<int32_t> t = tokens(24);
  const std::vector<uint64_t> h = prompt_cache::block_hashes(t, kBlock, kRoot);
  // 20 tokens (5 blocks); the local layers hold positions 6.. : blocks 2, 3, 4 (block 1 holds
  // positions 4..7, two of them gone).
  (*pub)->hold("slot:0", std::span(t).first(20), "CPU", 6);
  // The window slides: 24 tokens, local layers from 11 on: block 2 leaves group 1, block 5
  // joins both groups.
  (*pub)->hold("slot:0", t, "CPU", 11);
  ReplayClient client(p.replay_endpoint);
  const std::vector<Event> ev = client.all_events(6);
  ASSERT_EQ(ev.size(), 6u);
  EXPECT_EQ(ev[0].type, "AllBlocksCleared");
  EXPECT_EQ(ev[1].type, "BlockStored");
  EXPECT_EQ(ev[1].group, 0u);
  EXPECT_EQ(ev[1].kind, "full_attention");
  EXPECT_FALSE(ev[1].window.has_value());
  EXPECT_EQ(ev[1].hashes, std::vector<uint64_t>(h.begin(), h.begin() + 5));
  EXPECT_FALSE(ev[1].parent.has_value());
  EXPECT_EQ(ev[1].n_tokens, 20u);
  EXPECT_EQ(ev[2].type, "BlockStored");
  EXPECT_EQ(ev[2].group, 1u);
  EXPECT_EQ(ev[2].kind, "sliding_window");
  EXPECT_EQ(ev[2].window, 8u);
  EXPECT_EQ(ev[2].hashes, std::vector<uint64_t>(h.begin() + 2, h.begin() + 5));
  EXPECT_EQ(ev[2].parent, h[1]);
  EXPECT_EQ(ev[2].n_tokens, 12u);
  EXPECT_EQ(ev[3].type, "BlockRemoved");
  EXPECT_EQ(ev[3].group, 1u);
  EXPECT_EQ(ev[3].hashes, std::vector<uint64_t>{h[2]});
  EXPECT_EQ(ev[4].type, "BlockStored");
  EXPECT_EQ(ev[4].group, 0u);
  EXPECT_EQ(ev[4].hashes, std::vector<uint64_t>{h[5]});
  EXPECT_EQ(ev[4].parent, h[4]);
  EXPECT_EQ(ev[5].type, "BlockStored");
  EXPECT_EQ(ev[5].group, 1u);
  EXPECT_EQ(ev[5].hashes, std::vector<uint64_t>{h[5]});
  // Released: every block of both groups goes.
  (*pub)->release("slot:0");
  const std::vector<Event> after = client.all_events(8);
  ASSERT_EQ(after.size(), 8u);
  EXPECT_EQ(after[6].type, "BlockRemoved");
  EXPECT_EQ(after[6].group, 0u);
  EXPECT_EQ(after[6].hashes, h);
  EXPECT_EQ(after[7].type, "BlockRemoved");
  EXPECT_EQ(after[7].group, 1u);
  EXPECT_EQ(after[7].hashes, std::vector<uint64_t>(h.begin() + 3, h.end()));
}

TEST(KvEventPublisherTest, UnknownFirstPositionAssumesOnlyTheLastWindow) {
  const PublisherParams p = params(EventFormat::kVllm, SwaType::kStandard, 8);
  auto pub = KvEventPublisher::open(p);
  ASSERT_TRUE(pub.ok());
  const std::vector<int32_t> t = tokens(24);
  const std::vector<uint64_t> h = prompt_cache::block_hashes(t, kBlock, kRoot);
  // A token at 24 sees (16, 24]: positions 17.. are sure to be held: block 5 (20..23) only.
  (*pub)->hold("entry:1", t, "CPU_CACHE");
  ReplayClient client(p.replay_endpoint);
  const std::vector<Event> ev = client.all_events(3);
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[1].hashes, h);
  EXPECT_EQ(ev[2].group, 1u);
  EXPECT_EQ(ev[2].hashes, std::vector<uint64_t>{h[5]});
  EXPECT_EQ(ev[2].medium, "CPU_CACHE");
}

TEST(KvEventPublisherTest, BlocksSharedByHoldersAreStoredOnceAndRemovedWithTheLast) {
  const PublisherParams p = params(EventFormat::kVllm, SwaType::kNone, 0);
  auto pub = KvEventPublisher::open(p);
  ASSERT_TRUE(pub.ok());
  const std::vector<int32_t> t = tokens(16);
  const std::vector<uint64_t> h = prompt_cache::block_hashes(t, kBlock, kRoot);
  (*pub)->hold("slot:0", std::span(t).first(8), "CPU");  // blocks 0, 1
  (*pub)->hold("slot:1", t, "CPU");                      // blocks 2, 3 are new
  (*pub)->release("slot:0");                             // slot 1 still holds 0, 1
  (*pub)->hold("slot:1", std::span(t).first(4), "CPU");  // 1, 2, 3 go
  ReplayClient client(p.replay_endpoint);
  const std::vector<Event> ev = client.all_events(4);
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[1].hashes, std::vector<uint64_t>(h.begin(), h.begin() + 2));
  EXPECT_EQ(ev[2].hashes, std::vector<uint64_t>(h.begin() + 2, h.end()));
  EXPECT_EQ(ev[2].parent, h[1]);
  EXPECT_EQ(ev[3].type, "BlockRemoved");
  EXPECT_EQ(ev[3].hashes, std::vector<uint64_t>(h.begin() + 1, h.end()));
  for (const Event& e : ev) EXPECT_EQ(e.group, 0u);  // one group without a window
}

// The positional form has no groups: a sliding-window holder's blocks go out only while every
// prefix of them can be continued (the local layers still hold position 0), else none.
TEST(KvEventPublisherTest, LegacyFormPublishesAWindowedHolderAllOrNothing) {
  PublisherParams p = params(EventFormat::kLegacy, SwaType::kStandard, 8);
  auto pub = KvEventPublisher::open(p);
  ASSERT_TRUE(pub.ok());
  const std::vector<int32_t> t = tokens(24);
  (*pub)->hold("slot:0", std::span(t).first(12), "CPU", 0);
  (*pub)->hold("slot:0", t, "CPU", 6);
  ReplayClient client(p.replay_endpoint);
  std::vector<std::vector<std::string>> types;
  for (int attempt = 0; attempt < 100 && types.size() < 3; ++attempt) {
    types.clear();
    for (const auto& [seq, payload] : client.ask(0)) {
      const Decoded d = decode(payload);
      ASSERT_EQ(d.get().type, msgpack::type::ARRAY);  // [ts, [event, ...]]
      ASSERT_EQ(d.get().via.array.size, 2u);
      const msgpack::object& ev = d.get().via.array.ptr[1];
      for (uint32_t i = 0; i < ev.via.array.size; ++i) {
        const msgpack::object& e = ev.via.array.ptr[i];
        ASSERT_EQ(e.type, msgpack::type::ARRAY);
        std::vector<std::string> one = {e.via.array.ptr[0].as<std::string>()};
        if (one[0] != "AllBlocksCleared") {
          one.push_back(std::to_string(e.via.array.ptr[1].via.array.size));
        }
        types.push_back(one);
      }
    }
    if (types.size() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(types.size(), 3u);
  EXPECT_EQ(types[0], std::vector<std::string>{"AllBlocksCleared"});
  EXPECT_EQ(types[1], (std::vector<std::string>{"BlockStored", "3"}));
  // Position 6 gone: a cut back to 4 tokens could not continue; every block is withdrawn.
  EXPECT_EQ(types[2], (std::vector<std::string>{"BlockRemoved", "3"}));
}

TEST(KvEventPublisherTest, ReplayAnswersFromTheStartNumberAndRequestClientsGetTheFirst) {
  const PublisherParams p = params(EventFormat::kVllm, SwaType::kNone, 0);
  auto pub = KvEventPublisher::open(p);
  ASSERT_TRUE(pub.ok());
  const std::vector<int32_t> t = tokens(8);
  ReplayClient client(p.replay_endpoint);
  client.all_events(1);  // batch 0 (AllBlocksCleared) is out
  (*pub)->hold("slot:0", t, "CPU");
  client.all_events(2);  // batch 1
  (*pub)->release("slot:0");
  client.all_events(3);  // batch 2
  const auto from1 = client.ask(1);
  ASSERT_EQ(from1.size(), 2u);
  EXPECT_EQ(from1[0].first, 1);
  EXPECT_EQ(from1[1].first, 2);
  EXPECT_EQ(events_of(from1[1].second)[0].type, "BlockRemoved");
  EXPECT_TRUE(client.ask(3).empty());  // nothing newer: only the end marker

  // A REQ socket (vLLM's example client) receives the first answer as [seq, payload].
  zmq::context_t ctx;
  zmq::socket_t req(ctx, zmq::socket_type::req);
  req.set(zmq::sockopt::linger, 0);
  req.set(zmq::sockopt::rcvtimeo, 5000);
  req.connect(p.replay_endpoint);
  const uint8_t start[8] = {0, 0, 0, 0, 0, 0, 0, 2};
  req.send(zmq::const_buffer(start, 8), zmq::send_flags::none);
  std::vector<zmq::message_t> frames;
  ASSERT_TRUE(zmq::recv_multipart(req, std::back_inserter(frames)).has_value());
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(static_cast<const uint8_t*>(frames[0].data())[7], 2);
  const auto* b = static_cast<const uint8_t*>(frames[1].data());
  EXPECT_EQ(events_of(Bytes(b, b + frames[1].size()))[0].type, "BlockRemoved");
}

TEST(KvEventPublisherTest, ReplayBufferIsBounded) {
  PublisherParams p = params(EventFormat::kVllm, SwaType::kNone, 0);
  p.replay_batches = 2;
  auto pub = KvEventPublisher::open(p);
  ASSERT_TRUE(pub.ok());
  const std::vector<int32_t> t = tokens(4);
  ReplayClient client(p.replay_endpoint);
  // The buffered batches once batch `seq` went out (one event per batch: each waits for the
  // one before it).
  auto until = [&](int64_t seq) {
    std::vector<std::pair<int64_t, Bytes>> got;
    for (int attempt = 0; attempt < 100; ++attempt) {
      got = client.ask(0);
      if (!got.empty() && got.back().first >= seq) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return got;
  };
  until(0);
  for (int i = 1; i <= 4; ++i) {
    if (i % 2 == 1) {
      (*pub)->hold("slot:0", t, "CPU");
    } else {
      (*pub)->release("slot:0");
    }
    until(i);
  }
  const auto got = until(4);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].first, 3);
  EXPECT_EQ(got[1].first, 4);
}

TEST(KvEventPublisherTest, LiveStreamCarriesSequenceNumbers) {
  const PublisherParams p = params(EventFormat::kVllm, SwaType::kNone, 0);
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "");
  sub.set(zmq::sockopt::rcvtimeo, 5000);
  sub.set(zmq::sockopt::linger, 0);
  auto pub = KvEventPublisher::open(p);
  ASSERT_TRUE(pub.ok());
  sub.connect(p.endpoint);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // PUB drops before a subscriber
  (*pub)->hold("slot:0", tokens(8), "CPU");
  // Batch 0 (AllBlocksCleared) reaches the subscriber only if it was sent after it connected.
  std::vector<Event> ev;
  while (ev.empty() || ev[0].type == "AllBlocksCleared") {
    std::vector<zmq::message_t> frames;
    ASSERT_TRUE(zmq::recv_multipart(sub, std::back_inserter(frames)).has_value());
    ASSERT_EQ(frames.size(), 3u);
    EXPECT_EQ(frames[0].size(), 0u);  // topic
    ASSERT_EQ(frames[1].size(), 8u);
    const auto* b = static_cast<const uint8_t*>(frames[2].data());
    ev = events_of(Bytes(b, b + frames[2].size()));
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(static_cast<const uint8_t*>(frames[1].data())[7], ev[0].type == "BlockStored");
  }
  EXPECT_EQ(ev[0].type, "BlockStored");
  EXPECT_EQ(ev[0].hashes.size(), 2u);
}

TEST(KvEventPublisherTest, EndpointErrorsNameTheFlag) {
  PublisherParams p = params(EventFormat::kVllm, SwaType::kNone, 0);
  p.replay_endpoint = "not-an-endpoint";
  auto bad = KvEventPublisher::open(p);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--kv-events-replay"), std::string::npos);

  // A port in use, by the PUB socket and by the ROUTER socket.
  zmq::context_t ctx;
  zmq::socket_t taken(ctx, zmq::socket_type::pub);
  taken.set(zmq::sockopt::linger, 0);
  taken.bind("tcp://127.0.0.1:*");
  const std::string in_use = taken.get(zmq::sockopt::last_endpoint);
  PublisherParams q = params(EventFormat::kVllm, SwaType::kNone, 0);
  q.endpoint = in_use;
  auto pub_clash = KvEventPublisher::open(q);
  ASSERT_FALSE(pub_clash.ok());
  EXPECT_EQ(pub_clash.status().code(), StatusCode::kIOError);
  EXPECT_NE(pub_clash.status().message().find("--kv-events:"), std::string::npos);
  PublisherParams r = params(EventFormat::kVllm, SwaType::kNone, 0);
  r.replay_endpoint = in_use;
  auto router_clash = KvEventPublisher::open(r);
  ASSERT_FALSE(router_clash.ok());
  EXPECT_EQ(router_clash.status().code(), StatusCode::kIOError);
  EXPECT_NE(router_clash.status().message().find("--kv-events-replay"), std::string::npos);
}

}  // namespace
}  // namespace mnemo::kv_events
