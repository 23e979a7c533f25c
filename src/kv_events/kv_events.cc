// KV events over ZeroMQ (kv_events.h). The sockets are cppzmq's, the encoding kv_event_codec's;
// this file decides what is held, in which group, and when.
#include "kv_events/kv_events.h"

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <utility>

#include "mnemo/log.h"
#include "prompt_cache/block_hash.h"

namespace mnemo::kv_events {

namespace {

constexpr size_t kMaxEventsPerMessage = 512;
// How long the publisher thread waits for events before it looks at the replay socket again.
constexpr auto kReplayPoll = std::chrono::milliseconds(50);

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

void put_be64(uint64_t v, uint8_t out[8]) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(v >> (56 - 8 * i));
}

// Binds a new socket of `type` to `endpoint`; the error names `flag`.
Result<zmq::socket_t*> bind_socket(zmq::context_t& ctx, zmq::socket_type type,
                                   const std::string& endpoint, const char* flag) {
  auto* sock = new zmq::socket_t(ctx, type);
  try {
    sock->set(zmq::sockopt::linger, 1000);  // queued messages get a second to leave at shutdown
    sock->bind(endpoint);
  } catch (const zmq::error_t& e) {
    delete sock;
    const bool in_use = e.num() == EADDRINUSE;
    return Status(in_use ? StatusCode::kIOError : StatusCode::kInvalidArgument,
                  std::string(flag) + ": cannot bind '" + endpoint + "': " + e.what());
  }
  return sock;
}

}  // namespace

struct KvEventPublisher::Replay {
  zmq::socket_t* router = nullptr;
  std::deque<std::pair<uint64_t, std::vector<uint8_t>>> buffer;  // (seq, payload), oldest first
  size_t bytes = 0;                                              // payload bytes in buffer
};

KvEventPublisher::KvEventPublisher(const PublisherParams& params) : params_(params) {}

Result<std::unique_ptr<KvEventPublisher>> KvEventPublisher::open(const PublisherParams& params) {
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(params));
  auto* ctx = new zmq::context_t(1);
  auto pub = bind_socket(*ctx, zmq::socket_type::pub, params.endpoint, "--kv-events");
  if (!pub.ok()) {
    delete ctx;
    return pub.status();
  }
  zmq::socket_t* router = nullptr;
  if (!params.replay_endpoint.empty()) {
    auto r =
        bind_socket(*ctx, zmq::socket_type::router, params.replay_endpoint, "--kv-events-replay");
    if (!r.ok()) {
      delete *pub;
      delete ctx;
      return r.status();
    }
    router = *r;
  }
  p->zmq_context_ = ctx;
  {
    std::lock_guard<std::mutex> lk(p->mu_);
    p->enqueue_locked(encode_all_blocks_cleared(params.format));
  }
  p->thread_ = std::thread([raw = p.get(), s = *pub, router] { raw->run(s, router); });
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

void KvEventPublisher::run(void* pub_socket, void* router_socket) {
  std::unique_ptr<zmq::socket_t> pub(static_cast<zmq::socket_t*>(pub_socket));
  std::unique_ptr<zmq::socket_t> router(static_cast<zmq::socket_t*>(router_socket));
  Replay replay;
  replay.router = router.get();
  uint64_t seq = 0;
  while (true) {
    std::vector<EncodedEvent> events;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lk(mu_);
      auto ready = [&] { return stop_ || !queue_.empty(); };
      if (router) {
        cv_.wait_for(lk, kReplayPoll, ready);
      } else {
        cv_.wait(lk, ready);
      }
      stopping = stop_;
      while (!queue_.empty() && events.size() < kMaxEventsPerMessage) {
        events.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    if (!events.empty()) {
      std::vector<uint8_t> payload = encode_batch(params_.format, now_seconds(), events);
      uint8_t seq_be[8];
      put_be64(seq, seq_be);
      try {
        pub->send(zmq::const_buffer("", 0), zmq::send_flags::sndmore);
        pub->send(zmq::const_buffer(seq_be, 8), zmq::send_flags::sndmore);
        pub->send(zmq::const_buffer(payload.data(), payload.size()), zmq::send_flags::none);
      } catch (const zmq::error_t& e) {
        MNEMO_LOG(kWarn) << "kv events: send failed: " << e.what();
      }
      if (router && params_.replay_batches > 0) {
        replay.bytes += payload.size();
        replay.buffer.emplace_back(seq, std::move(payload));
        while (replay.buffer.size() > params_.replay_batches ||
               (replay.bytes > params_.replay_bytes && replay.buffer.size() > 1)) {
          replay.bytes -= replay.buffer.front().second.size();
          replay.buffer.pop_front();
        }
      }
      ++seq;
    }
    // After the batch went out and into the buffer: a replay answers with it.
    if (router) serve_replay(replay);
    if (events.empty() && stopping) break;  // the queue is drained
  }
  if (router) router->close();
  pub->close();
}

void KvEventPublisher::serve_replay(Replay& replay) {
  zmq::socket_t& router = *replay.router;
  while (true) {
    std::vector<zmq::message_t> frames;
    std::optional<size_t> got;
    try {
      got = zmq::recv_multipart(router, std::back_inserter(frames), zmq::recv_flags::dontwait);
    } catch (const zmq::error_t& e) {
      MNEMO_LOG(kWarn) << "kv events: replay receive failed: " << e.what();
      return;
    }
    if (!got) return;  // no request waiting
    // [identity, "", start] from a REQ socket (or a DEALER that sends the delimiter itself);
    // [identity, start] from a DEALER that does not. The answer uses the same envelope.
    const bool delimited = frames.size() == 3 && frames[1].size() == 0;
    if (!(delimited || frames.size() == 2) || frames.back().size() != 8) {
      MNEMO_LOG(kWarn) << "kv events: ignored a replay request of " << frames.size()
                       << " frames (expected an 8-byte start sequence number)";
      continue;
    }
    const auto* s = static_cast<const uint8_t*>(frames.back().data());
    uint64_t start = 0;
    for (int i = 0; i < 8; ++i) start = (start << 8) | s[i];
    auto send = [&](const uint8_t seq_be[8], const void* data, size_t size) {
      router.send(zmq::const_buffer(frames[0].data(), frames[0].size()), zmq::send_flags::sndmore);
      if (delimited) router.send(zmq::const_buffer("", 0), zmq::send_flags::sndmore);
      router.send(zmq::const_buffer(seq_be, 8), zmq::send_flags::sndmore);
      router.send(zmq::const_buffer(data, size), zmq::send_flags::none);
    };
    try {
      for (const auto& [seq, payload] : replay.buffer) {
        if (seq < start) continue;
        uint8_t seq_be[8];
        put_be64(seq, seq_be);
        send(seq_be, payload.data(), payload.size());
      }
      const uint8_t end[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};  // -1
      send(end, "", 0);
    } catch (const zmq::error_t& e) {
      MNEMO_LOG(kWarn) << "kv events: replay send failed: " << e.what();
    }
  }
}

uint32_t KvEventPublisher::n_groups() const {
  const bool window = params_.swa_type != SwaType::kNone && params_.n_swa > 0;
  return window && params_.format == EventFormat::kVllm ? 2 : 1;
}

EventGroup KvEventPublisher::group(uint32_t g) const {
  EventGroup e;
  e.idx = g;
  if (g == 0) return e;  // full_attention
  if (params_.swa_type == SwaType::kChunked) {
    e.kind = "chunked_local_attention";
  } else {
    e.kind = "sliding_window";
    e.sliding_window = params_.n_swa;
  }
  return e;
}

void KvEventPublisher::ranges(size_t n_tokens, Pos first_pos, Range* out) const {
  const size_t B = params_.block_tokens;
  const size_t n = n_tokens / B;
  for (size_t g = 0; g < kMaxGroups; ++g) out[g] = Range{};
  out[0] = Range{0, n};
  if (params_.swa_type == SwaType::kNone || params_.n_swa == 0) return;
  const int64_t W = params_.n_swa;
  // The oldest position a token at position L attends in the local layers (swa.h).
  auto window_start = [&](int64_t L) -> int64_t {
    return params_.swa_type == SwaType::kChunked ? (L / W) * W : std::max<int64_t>(0, L - W + 1);
  };
  // Unknown: only the window of the next token is sure to be held (a window never evicts it).
  const int64_t first =
      first_pos == kFirstPosUnknown ? window_start(static_cast<int64_t>(n_tokens)) : first_pos;
  if (params_.format == EventFormat::kLegacy) {
    // No groups: the blocks go out only if the sequence can be cut back to every block boundary.
    for (size_t i = 1; i <= n; ++i) {
      const int64_t L = static_cast<int64_t>(i * B);
      const int64_t ws = window_start(L);
      if (ws < L && ws < first) {
        out[0] = Range{0, 0};
        break;
      }
    }
    return;
  }
  // Group 1: the blocks whose every token the local layers hold.
  const size_t first_block =
      first <= 0 ? 0 : std::min<size_t>(n, (static_cast<size_t>(first) + B - 1) / B);
  out[1] = Range{first_block, n};
}

void KvEventPublisher::enqueue_locked(EncodedEvent event) {
  queue_.push_back(std::move(event));
  ++n_events_;
  cv_.notify_one();
}

void KvEventPublisher::update_locked(const std::string& holder, std::span<const int32_t> tokens,
                                     const std::string& medium, Pos first_pos) {
  const uint32_t B = params_.block_tokens;
  Held now;
  now.medium = medium;
  now.blocks = prompt_cache::block_hashes(tokens, B, params_.root);
  ranges(tokens.size(), first_pos, now.groups);
  Held old;
  if (auto it = holders_.find(holder); it != holders_.end()) old = std::move(it->second);
  // Chained hashes: two lists agree up to their first difference and differ after it.
  size_t same = 0;
  if (old.medium == medium) {
    while (same < old.blocks.size() && same < now.blocks.size() &&
           old.blocks[same] == now.blocks[same]) {
      ++same;
    }
  }
  const uint32_t n_groups = this->n_groups();
  // Block i of group g stays with the holder when it held it there and still does.
  auto kept = [&](uint32_t g, size_t i) {
    return i < same && old.groups[g].has(i) && now.groups[g].has(i);
  };
  for (uint32_t g = 0; g < n_groups; ++g) {
    std::vector<uint64_t> removed;
    for (size_t i = old.groups[g].begin; i < old.groups[g].end; ++i) {
      if (kept(g, i)) continue;
      auto it = refs_.find({old.medium, g, old.blocks[i]});
      if (it == refs_.end()) continue;
      if (--it->second == 0) {
        removed.push_back(old.blocks[i]);
        refs_.erase(it);
      }
    }
    if (!removed.empty()) {
      enqueue_locked(encode_block_removed(params_.format, removed, old.medium, g));
    }
  }
  // Blocks first held in this medium and group, published as runs of consecutive blocks.
  for (uint32_t g = 0; g < n_groups; ++g) {
    const Range r = now.groups[g];
    // True when block i is new to the holder and to the medium's group (then counted).
    auto first_holder = [&](size_t i) {
      return !kept(g, i) && refs_[{medium, g, now.blocks[i]}]++ == 0;
    };
    size_t i = r.begin;
    while (i < r.end) {
      if (!first_holder(i)) {
        ++i;
        continue;
      }
      size_t e = i + 1;
      while (e < r.end && !kept(g, e) && refs_.find({medium, g, now.blocks[e]}) == refs_.end()) {
        refs_[{medium, g, now.blocks[e]}] = 1;
        ++e;
      }
      BlockStoredEvent ev;
      ev.hashes = std::span(now.blocks).subspan(i, e - i);
      if (i > 0) ev.parent = now.blocks[i - 1];
      ev.tokens = tokens.subspan(i * B, (e - i) * B);
      ev.block_size = B;
      ev.medium = medium;
      ev.group = group(g);
      enqueue_locked(encode_block_stored(params_.format, ev));
      i = e;
    }
  }
  if (now.blocks.empty()) {
    holders_.erase(holder);
  } else {
    holders_[holder] = std::move(now);
  }
}

void KvEventPublisher::hold(const std::string& holder, std::span<const int32_t> tokens,
                            const std::string& medium, Pos first_pos) {
  std::lock_guard<std::mutex> lk(mu_);
  update_locked(holder, tokens, medium, first_pos);
}

void KvEventPublisher::release(const std::string& holder) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = holders_.find(holder);
  if (it == holders_.end()) return;
  const std::string medium = it->second.medium;
  update_locked(holder, {}, medium, kFirstPosUnknown);
}

uint64_t KvEventPublisher::n_events() const {
  std::lock_guard<std::mutex> lk(mu_);
  return n_events_;
}

}  // namespace mnemo::kv_events
