// KV events over ZeroMQ with msgpack (kv_events.h). The socket (cppzmq) and the encoding
// (msgpack-cxx) are the libraries'; this file decides what is held and when.
#include "kv_events/kv_events.h"

#include <msgpack.hpp>
#include <zmq.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "mnemo/log.h"
#include "prompt_cache/block_hash.h"

namespace mnemo::kv_events {

namespace {

constexpr size_t kMaxEventsPerMessage = 512;

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

using Packer = msgpack::packer<msgpack::sbuffer>;

std::vector<uint8_t> bytes_of(const msgpack::sbuffer& b) {
  return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(b.data()),
                              reinterpret_cast<const uint8_t*>(b.data()) + b.size());
}

// The block_hashes field of BlockStored and BlockRemoved: an array of uint64.
void pack_hashes(Packer& p, std::span<const uint64_t> hashes) {
  p.pack_array(static_cast<uint32_t>(hashes.size()));
  for (uint64_t h : hashes) p.pack_uint64(h);
}

std::vector<uint8_t> block_stored(std::span<const uint64_t> hashes, const uint64_t* parent,
                                  std::span<const int32_t> tokens, uint32_t block_size,
                                  const std::string& medium) {
  msgpack::sbuffer b;
  Packer p(b);
  p.pack_array(7);
  p.pack(std::string("BlockStored"));
  pack_hashes(p, hashes);
  if (parent != nullptr) {
    p.pack_uint64(*parent);
  } else {
    p.pack_nil();
  }
  p.pack_array(static_cast<uint32_t>(tokens.size()));
  for (int32_t t : tokens) p.pack_int32(t);
  p.pack_uint32(block_size);
  p.pack_nil();  // lora_id
  p.pack(medium);
  return bytes_of(b);
}

std::vector<uint8_t> block_removed(std::span<const uint64_t> hashes, const std::string& medium) {
  msgpack::sbuffer b;
  Packer p(b);
  p.pack_array(3);
  p.pack(std::string("BlockRemoved"));
  pack_hashes(p, hashes);
  p.pack(medium);
  return bytes_of(b);
}

std::vector<uint8_t> all_cleared() {
  msgpack::sbuffer b;
  Packer p(b);
  p.pack_array(1);
  p.pack(std::string("AllBlocksCleared"));
  return bytes_of(b);
}

}  // namespace

KvEventPublisher::KvEventPublisher(uint32_t block_tokens, uint64_t root)
    : block_tokens_(block_tokens), root_(root) {}

Result<std::unique_ptr<KvEventPublisher>> KvEventPublisher::open(const std::string& endpoint,
                                                                 uint32_t block_tokens,
                                                                 uint64_t root) {
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(block_tokens, root));
  auto* ctx = new zmq::context_t(1);
  auto* sock = new zmq::socket_t(*ctx, zmq::socket_type::pub);
  try {
    sock->set(zmq::sockopt::linger, 1000);  // queued events get a second to leave at shutdown
    sock->bind(endpoint);
  } catch (const zmq::error_t& e) {
    delete sock;
    delete ctx;
    const bool in_use = e.num() == EADDRINUSE;
    return Status(in_use ? StatusCode::kIOError : StatusCode::kInvalidArgument,
                  "--kv-events: cannot bind '" + endpoint + "': " + e.what());
  }
  p->zmq_context_ = ctx;
  {
    std::lock_guard<std::mutex> lk(p->mu_);
    p->enqueue_locked(all_cleared());
  }
  p->thread_ = std::thread([raw = p.get(), sock] { raw->run(sock); });
  return p;
}

KvEventPublisher::~KvEventPublisher() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  delete static_cast<zmq::context_t*>(zmq_context_);
}

void KvEventPublisher::run(void* socket) {
  std::unique_ptr<zmq::socket_t> sock(static_cast<zmq::socket_t*>(socket));
  uint64_t seq = 0;
  while (true) {
    std::vector<std::vector<uint8_t>> events;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      stopping = stop_;
      while (!queue_.empty() && events.size() < kMaxEventsPerMessage) {
        events.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    if (!events.empty()) {
      msgpack::sbuffer b;
      Packer p(b);
      p.pack_array(2);
      p.pack_double(now_seconds());
      p.pack_array(static_cast<uint32_t>(events.size()));
      for (const auto& e : events) b.write(reinterpret_cast<const char*>(e.data()), e.size());
      uint8_t seq_be[8];
      for (int i = 0; i < 8; ++i) seq_be[i] = static_cast<uint8_t>(seq >> (56 - 8 * i));
      ++seq;
      try {
        sock->send(zmq::const_buffer("", 0), zmq::send_flags::sndmore);
        sock->send(zmq::const_buffer(seq_be, 8), zmq::send_flags::sndmore);
        sock->send(zmq::const_buffer(b.data(), b.size()), zmq::send_flags::none);
      } catch (const zmq::error_t& e) {
        MNEMO_LOG(kWarn) << "kv events: send failed: " << e.what();
      }
      continue;  // drain the queue before stopping
    }
    if (stopping) break;
  }
  sock->close();
}

void KvEventPublisher::enqueue_locked(std::vector<uint8_t> event) {
  queue_.push_back(std::move(event));
  ++n_events_;
  cv_.notify_one();
}

void KvEventPublisher::update_locked(const std::string& holder, std::span<const int32_t> tokens,
                                     const std::string& medium) {
  const std::vector<uint64_t> blocks = prompt_cache::block_hashes(tokens, block_tokens_, root_);
  Held old;
  if (auto it = holders_.find(holder); it != holders_.end()) old = std::move(it->second);
  // Chained hashes: two lists agree up to their first difference and differ after it.
  size_t same = 0;
  if (old.medium == medium) {
    while (same < old.blocks.size() && same < blocks.size() && old.blocks[same] == blocks[same]) {
      ++same;
    }
  }
  std::vector<uint64_t> removed;
  for (size_t i = same; i < old.blocks.size(); ++i) {
    auto it = refs_.find({old.medium, old.blocks[i]});
    if (it == refs_.end()) continue;
    if (--it->second == 0) {
      removed.push_back(old.blocks[i]);
      refs_.erase(it);
    }
  }
  if (!removed.empty()) enqueue_locked(block_removed(removed, old.medium));
  // New blocks first held in this medium, published as runs of consecutive blocks.
  size_t i = same;
  while (i < blocks.size()) {
    if (refs_[{medium, blocks[i]}]++ != 0) {
      ++i;
      continue;
    }
    size_t e = i + 1;
    while (e < blocks.size() && refs_.find({medium, blocks[e]}) == refs_.end()) {
      refs_[{medium, blocks[e]}] = 1;
      ++e;
    }
    const uint64_t* parent = i == 0 ? nullptr : &blocks[i - 1];
    enqueue_locked(block_stored(std::span(blocks).subspan(i, e - i), parent,
                                tokens.subspan(i * block_tokens_, (e - i) * block_tokens_),
                                block_tokens_, medium));
    i = e;
  }
  if (blocks.empty()) {
    holders_.erase(holder);
  } else {
    holders_[holder] = Held{medium, blocks};
  }
}

void KvEventPublisher::hold(const std::string& holder, std::span<const int32_t> tokens,
                            const std::string& medium) {
  std::lock_guard<std::mutex> lk(mu_);
  update_locked(holder, tokens, medium);
}

void KvEventPublisher::release(const std::string& holder) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = holders_.find(holder);
  if (it == holders_.end()) return;
  const std::string medium = it->second.medium;
  update_locked(holder, {}, medium);
}

uint64_t KvEventPublisher::n_events() const {
  std::lock_guard<std::mutex> lk(mu_);
  return n_events_;
}

}  // namespace mnemo::kv_events
