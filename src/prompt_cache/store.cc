// The shared tier over hiredis (store.h). Commands are RESP through hiredis's blocking API with
// a timeout, on one thread of our own: Redis's protocol is the library's business, not ours.
#include "prompt_cache/store.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <utility>

#include "mnemo/log.h"
#include "mnemo/state_io.h"
#include "prompt_cache/block_hash.h"

namespace mnemo::prompt_cache {

namespace {

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

timeval to_timeval(int ms) {
  timeval tv;
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

// Frees a hiredis reply.
struct ReplyDeleter {
  void operator()(redisReply* r) const {
    if (r != nullptr) freeReplyObject(r);
  }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

// Runs one command on a blocking context within `deadline` (now_ms() clock) as a whole: before
// every socket write and read the time left becomes the socket's timeout, so the command ends by
// the deadline however the server spaces its bytes. nullptr: the connection is unusable (*why).
Reply command(redisContext* c, const std::vector<std::string>& args, int64_t deadline,
              std::string* why) {
  std::vector<const char*> argv;
  std::vector<size_t> len;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    len.push_back(a.size());
  }
  auto failed = [&] {
    *why = now_ms() >= deadline ? "timed out" : c->errstr[0] != 0 ? c->errstr : "failed";
    return nullptr;
  };
  // Sets the socket timeout to the time left; false once the deadline passed.
  auto time_left = [&] {
    const int64_t ms = deadline - now_ms();
    return ms > 0 && redisSetTimeout(c, to_timeval(static_cast<int>(ms))) == REDIS_OK;
  };
  if (redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), len.data()) !=
      REDIS_OK) {
    return Reply(failed());
  }
  for (int done = 0; !done;) {
    if (!time_left() || redisBufferWrite(c, &done) != REDIS_OK) return Reply(failed());
  }
  while (true) {
    void* reply = nullptr;
    if (redisGetReplyFromReader(c, &reply) != REDIS_OK) return Reply(failed());
    if (reply != nullptr) return Reply(static_cast<redisReply*>(reply));
    if (!time_left() || redisBufferRead(c) != REDIS_OK) return Reply(failed());
  }
}

constexpr int64_t kBackoffFirstMs = 100;
// Entries one lookup GETs at most (deepest pointer first) before it counts a miss.
constexpr size_t kMaxEntriesPerLookup = 4;
constexpr int64_t kBackoffMaxMs = 2000;

}  // namespace

Result<StoreUrl> parse_store_url(const std::string& url) {
  StoreUrl u;
  std::string rest;
  for (const char* scheme : {"redis://", "valkey://"}) {
    if (url.rfind(scheme, 0) == 0) rest = url.substr(std::strlen(scheme));
  }
  if (rest.empty()) {
    return Status::invalid_argument(
        "--cache-store: expected redis://[[user]:password@]host[:port][/db] (or valkey://)");
  }
  if (const size_t at = rest.rfind('@'); at != std::string::npos) {
    const std::string user_info = rest.substr(0, at);
    const size_t colon = user_info.find(':');
    if (colon == std::string::npos) {
      u.password = user_info;
    } else {
      u.user = user_info.substr(0, colon);
      u.password = user_info.substr(colon + 1);
    }
    rest = rest.substr(at + 1);
  }
  std::string host_port = rest;
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    host_port = rest.substr(0, slash);
    const std::string db = rest.substr(slash + 1);
    if (!db.empty()) {
      if (db.size() > 4 || !std::all_of(db.begin(), db.end(), ::isdigit)) {
        return Status::invalid_argument("--cache-store: the database must be a number");
      }
      u.db = std::stoi(db);
    }
  }
  const size_t colon = host_port.rfind(':');
  u.host = colon == std::string::npos ? host_port : host_port.substr(0, colon);
  if (colon != std::string::npos) {
    const std::string port = host_port.substr(colon + 1);
    if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), ::isdigit) ||
        std::stoi(port) == 0 || std::stoi(port) > 65535) {
      return Status::invalid_argument("--cache-store: the port must be in 1..65535");
    }
    u.port = std::stoi(port);
  }
  if (u.host.empty()) return Status::invalid_argument("--cache-store: no host");
  return u;
}

struct Store::Job {
  bool lookup = false;
  std::vector<int32_t> tokens;         // put: the entry's tokens; lookup: the prompt
  std::shared_ptr<const Bytes> bytes;  // put
  uint32_t min_match = 0;              // lookup
  std::shared_ptr<StoreFetch> fetch;   // lookup
  std::function<void()> on_done;       // lookup
  std::shared_ptr<std::promise<void>> barrier;
};

Store::Store(const StoreParams& params) : params_(params) {
  root_ = model_root_hash(params.model);
  prefix_ = "mnemo:" + hex16(root_) + ":";
}

std::unique_ptr<Store> Store::open(const StoreParams& params) {
  std::unique_ptr<Store> s(new Store(params));
  s->thread_ = std::thread([p = s.get()] { p->worker(); });
  return s;
}

Store::~Store() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (ctx_ != nullptr) redisFree(ctx_);
}

void Store::put(std::vector<int32_t> tokens, std::shared_ptr<const Bytes> bytes) {
  if (tokens.size() < params_.block_tokens || bytes == nullptr) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (pending_bytes_ + bytes->size() > params_.max_pending_bytes) {
      ++stats_.dropped_total;  // the store is slower than the writes: keep memory bounded
      return;
    }
    pending_bytes_ += bytes->size();
    Job j;
    j.tokens = std::move(tokens);
    j.bytes = std::move(bytes);
    jobs_.push_back(std::move(j));
  }
  cv_.notify_one();
}

std::shared_ptr<StoreFetch> Store::lookup(std::vector<int32_t> prompt, uint32_t min_match,
                                          std::function<void()> on_done) {
  auto f = std::make_shared<StoreFetch>();
  {
    std::lock_guard<std::mutex> lk(mu_);
    Job j;
    j.lookup = true;
    j.tokens = std::move(prompt);
    j.min_match = min_match;
    j.fetch = f;
    j.on_done = std::move(on_done);
    // Ahead of queued writes, behind earlier lookups: a request waits for it.
    auto it = jobs_.begin();
    while (it != jobs_.end() && it->lookup) ++it;
    jobs_.insert(it, std::move(j));
  }
  cv_.notify_one();
  return f;
}

void Store::flush() {
  auto barrier = std::make_shared<std::promise<void>>();
  std::future<void> done = barrier->get_future();
  {
    std::lock_guard<std::mutex> lk(mu_);
    Job j;
    j.barrier = barrier;
    jobs_.push_back(std::move(j));
  }
  cv_.notify_one();
  done.wait();
}

StoreStats Store::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  StoreStats s = stats_;
  for (const Job& j : jobs_) s.pending += !j.lookup && !j.barrier;
  if (busy_) ++s.pending;
  return s;
}

void Store::worker() {
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) {
        // Unanswered lookups still complete (as misses) so no request waits forever.
        for (Job& j : jobs_) {
          if (j.fetch) {
            j.fetch->status = Status::aborted("the store is shutting down");
            j.fetch->done.store(true, std::memory_order_release);
          }
          if (j.barrier) j.barrier->set_value();
        }
        jobs_.clear();
        return;
      }
      job = std::move(jobs_.front());
      jobs_.pop_front();
      busy_ = !job.lookup && !job.barrier;
    }
    if (job.barrier) {
      job.barrier->set_value();
    } else if (job.lookup) {
      run_lookup(job);
      job.fetch->done.store(true, std::memory_order_release);
      if (job.on_done) job.on_done();
    } else {
      run_put(job);
      std::lock_guard<std::mutex> lk(mu_);
      pending_bytes_ -= job.bytes->size();
      busy_ = false;
    }
  }
}

bool Store::connect(int64_t deadline) {
  if (ctx_ != nullptr) return true;
  if (now_ms() < retry_at_ms_) return false;
  const int64_t left = deadline - now_ms();
  redisContext* c = left <= 0 ? nullptr
                              : redisConnectWithTimeout(params_.url.host.c_str(), params_.url.port,
                                                        to_timeval(static_cast<int>(left)));
  std::string why;
  if (left <= 0) {
    why = "timed out";
  } else if (c == nullptr || c->err) {
    why = c != nullptr ? c->errstr : "out of memory";
  } else {
    auto refused = [&](const Reply& r, const char* what) {
      if (!r) return std::string(what) + ": " + why;  // why: the command's own reason
      return r->type == REDIS_REPLY_ERROR ? std::string(what) + " refused" : std::string();
    };
    if (!params_.url.password.empty()) {
      std::vector<std::string> auth = {"AUTH", params_.url.password};
      if (!params_.url.user.empty()) auth = {"AUTH", params_.url.user, params_.url.password};
      Reply r = command(c, auth, deadline, &why);
      why = refused(r, "AUTH");
    }
    if (why.empty() && params_.url.db != 0) {
      Reply r = command(c, {"SELECT", std::to_string(params_.url.db)}, deadline, &why);
      why = refused(r, "SELECT");
    }
  }
  if (!why.empty()) {
    if (c != nullptr) redisFree(c);
    fail("cannot connect to " + params_.url.host + ":" + std::to_string(params_.url.port) + ": " +
         why);
    return false;
  }
  ctx_ = c;
  backoff_ms_ = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.connected = true;
  }
  if (outage_logged_) {
    MNEMO_LOG(kInfo) << "cache store: connected again to " << params_.url.host << ":"
                     << params_.url.port;
    outage_logged_ = false;
  }
  return true;
}

void Store::fail(const std::string& what) {
  if (ctx_ != nullptr) {
    redisFree(ctx_);
    ctx_ = nullptr;
  }
  written_.clear();
  written_order_.clear();
  backoff_ms_ = backoff_ms_ == 0 ? kBackoffFirstMs : std::min(kBackoffMaxMs, backoff_ms_ * 2);
  retry_at_ms_ = now_ms() + backoff_ms_;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.connected = false;
    ++stats_.errors_total;
  }
  if (!outage_logged_) {
    MNEMO_LOG(kWarn) << "cache store: " << what
                     << " (requests go on without it; retrying with backoff; errors are counted "
                        "in mnemo_prompt_cache_store_errors_total)";
    outage_logged_ = true;
  }
}

void Store::refused(const std::string& what) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.errors_total;
  }
  // Its own log line, once per run of refusals: a later outage is still logged (outage_logged_).
  if (!refused_logged_) {
    MNEMO_LOG(kWarn) << "cache store: write refused: " << what
                     << " (writes are dropped while the store refuses them; counted in "
                        "mnemo_prompt_cache_store_dropped_total)";
    refused_logged_ = true;
  }
}

void Store::run_put(const Job& job) {
  const int64_t deadline = now_ms() + params_.timeout_ms;
  if (!connect(deadline)) {
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.dropped_total;
    return;
  }
  const uint64_t key = entry_key(job.tokens, root_);
  if (written_.count(key) != 0) return;  // sent already on this connection
  const std::vector<uint64_t> blocks = block_hashes(job.tokens, params_.block_tokens, root_);
  const std::string last = hex16(blocks.back());
  // The entry first, then the pointers to it: a reader never follows a pointer to a value that
  // was not written (unless the store evicted it since, which is a miss).
  std::vector<std::string> set = {"SET", prefix_ + "e:" + last,
                                  std::string(job.bytes->begin(), job.bytes->end())};
  // A command that did not go through: the connection failed (dropped, an outage) or the store
  // refused it (full with maxmemory and noeviction, or a command it does not allow: the store is
  // up). Either way the write is dropped and counted.
  std::string why;
  auto failed = [&](const Reply& r) {
    if (!r) {
      fail("write failed: " + why);
    } else if (r->type == REDIS_REPLY_ERROR) {
      refused(std::string(r->str, r->len));
    } else {
      return false;
    }
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.dropped_total;
    return true;
  };
  if (failed(command(ctx_, set, deadline, &why))) return;
  std::vector<std::string> mset = {"MSET"};
  for (uint64_t h : blocks) {
    mset.push_back(prefix_ + "b:" + hex16(h));
    mset.push_back(last);
  }
  if (failed(command(ctx_, mset, deadline, &why))) return;
  refused_logged_ = false;
  written_.insert(key);
  written_order_.push_back(key);
  if (written_order_.size() > 4096) {
    written_.erase(written_order_.front());
    written_order_.pop_front();
  }
  std::lock_guard<std::mutex> lk(mu_);
  ++stats_.writes_total;
}

void Store::run_lookup(const Job& job) {
  StoreFetch& f = *job.fetch;
  auto miss = [&](Status st) {
    f.status = std::move(st);
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.misses_total;
  };
  const std::vector<int32_t>& prompt = job.tokens;
  const size_t B = params_.block_tokens;
  const std::vector<uint64_t> blocks = block_hashes(prompt, params_.block_tokens, root_);
  if (blocks.empty()) return miss(Status::not_found("the prompt is shorter than a block"));
  const int64_t deadline = now_ms() + params_.timeout_ms;
  if (!connect(deadline)) return miss(Status::io_error("the store is unreachable"));
  std::vector<std::string> mget = {"MGET"};
  for (uint64_t h : blocks) mget.push_back(prefix_ + "b:" + hex16(h));
  std::string why;
  Reply r = command(ctx_, mget, deadline, &why);
  if (!r) {
    fail("lookup failed: " + why);
    return miss(Status::io_error("the store did not answer"));
  }
  if (r->type != REDIS_REPLY_ARRAY || r->elements != blocks.size()) {
    return miss(Status::not_found("unexpected reply"));
  }
  // The entries the pointers lead to, deepest pointer first, each once (the pointers of a prefix
  // that several entries share lead to the newest of them): when the deepest entry is gone or
  // bad, the next-shallower one that is elsewhere serves a shorter prefix.
  std::vector<std::pair<size_t, std::string>> candidates;  // (blocks vouched for, entry hash)
  for (size_t i = r->elements; i-- > 0;) {
    const redisReply* e = r->element[i];
    if (e->type != REDIS_REPLY_STRING || e->len != 16) continue;
    std::string h(e->str, e->len);
    const bool seen = std::any_of(candidates.begin(), candidates.end(),
                                  [&](const auto& c) { return c.second == h; });
    if (!seen) candidates.emplace_back(i + 1, std::move(h));
  }
  r.reset();
  Status last = Status::not_found("no longer prefix is stored");
  for (size_t c = 0; c < candidates.size() && c < kMaxEntriesPerLookup; ++c) {
    const auto& [depth, entry] = candidates[c];
    if (depth * B + B <= job.min_match) break;  // this one and the shallower ones are too short
    last = try_entry(prompt, job.min_match, depth, entry, deadline, &f);
    if (last.ok()) {
      std::lock_guard<std::mutex> lk(mu_);
      ++stats_.hits_total;
      return;
    }
    if (last.code() == StatusCode::kIOError) break;  // the connection is gone
  }
  miss(std::move(last));
}

Status Store::try_entry(const std::vector<int32_t>& prompt, uint32_t min_match, size_t depth,
                        const std::string& entry, int64_t deadline, StoreFetch* f) {
  std::string why;
  Reply r = command(ctx_, {"GET", prefix_ + "e:" + entry}, deadline, &why);
  if (!r) {
    fail("lookup failed: " + why);
    return Status::io_error("the store did not answer");
  }
  if (r->type != REDIS_REPLY_STRING) return Status::not_found("the entry was evicted");
  auto bytes = std::make_shared<Bytes>(r->str, r->str + r->len);
  r.reset();
  // Trust nothing fetched.
  auto discard = [&](const std::string& what) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      ++stats_.ignored_total;
    }
    MNEMO_LOG(kWarn) << "cache store: discarded entry " << entry << ": " << what;
    return Status::corruption("discarded: " + what);
  };
  SpanSource src(*bytes);
  if (Status st = state_verify(&src); !st.ok()) return discard(st.message());
  SpanSource again(*bytes);
  std::vector<int32_t> tokens;
  auto info = state_inspect_tokens(&again, &tokens);
  if (!info.ok()) return discard(info.status().message());
  if (info->scope != state_format::Scope::kSequence || !(info->model == params_.model)) {
    return discard("written for another model");
  }
  const size_t vouched = depth * params_.block_tokens;
  if (tokens.size() < vouched ||
      !std::equal(prompt.begin(), prompt.begin() + vouched, tokens.begin())) {
    return discard("its tokens do not match its block hashes");
  }
  size_t n = vouched;
  while (n < tokens.size() && n < prompt.size() && tokens[n] == prompt[n]) ++n;
  if (n < min_match) return Status::not_found("no longer prefix is stored");
  f->bytes = std::move(bytes);
  f->tokens = std::move(tokens);
  f->n_match = static_cast<uint32_t>(n);
  return Status();
}

}  // namespace mnemo::prompt_cache
