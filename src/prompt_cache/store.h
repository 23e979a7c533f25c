// The shared tier of the prompt cache: entries in a Redis or Valkey server that every replica of
// a deployment reads and writes (`mnemo serve --cache-store redis://...`; docs/deployment.md).
//
// Keys (one namespace per model: <root> is model_root_hash of the model fingerprint, 16 hex):
//   mnemo:<root>:e:<h>   an entry: the sequence state (docs/formats/state.md, with its token list
//                        in TOKN) of a sequence whose last full block has chained hash h
//                        (block_hash.h)
//   mnemo:<root>:b:<h>   for every full block of a stored entry: the hex hash of that entry's last
//                        full block (a pointer from any block to the newest entry holding it)
// Values are written with SET, so the store's own eviction (maxmemory with an LRU policy) bounds
// them; a pointer whose entry was evicted leads nowhere (see below).
//
// A lookup is two round trips: MGET of the prompt's block pointers (the deepest present one wins),
// then GET of that entry. Nothing fetched is trusted: every section checksum is verified, the
// header must carry this model's fingerprint, and the token list must equal the prompt over the
// blocks the pointer vouched for; anything else is discarded and counted. An entry that is gone
// (evicted) or discarded is no miss yet: the next-shallower pointer leading to another entry is
// followed (a GET more; at most 4 entries per lookup), and only when none serves the prompt is
// the lookup a miss. The caller restores the
// bytes like any entry (its own validation pass runs again).
//
// The store never fails a request: a lookup as a whole (connecting when needed, MGET, GET) and a
// write as a whole (connecting, SET, MSET) end within the timeout, however the store spaces its
// bytes: before every socket read and write the time left becomes the socket's timeout. A store
// that is down, slow or full makes lookups miss and writes drop (counted, one log line per
// outage), and the connection is retried with backoff (100 ms doubling to at most 2 s). Commands
// run on the store's own thread; lookups go ahead of queued writes.
//
// Thread-safety: every public member may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "mnemo/state.h"
#include "mnemo/status.h"

struct redisContext;

namespace mnemo::prompt_cache {

/// A parsed `redis://[[user]:password@]host[:port][/db]` (valkey:// is accepted as the same).
struct StoreUrl {
  std::string host;
  int port = 6379;
  std::string user;      // a Redis 6+ ACL user: AUTH user password; "": AUTH password
  std::string password;  // "" = no AUTH
  int db = 0;
};

/// Parses a store URL. The user information is everything before the last '@': "user:password"
/// (the password may hold ':' and '@'), ":password", or a bare "password" (the default user).
/// Errors: kInvalidArgument naming what is wrong (scheme, host, port, db). The message never
/// repeats the password.
Result<StoreUrl> parse_store_url(const std::string& url);

struct StoreParams {
  StoreUrl url;
  int timeout_ms = 500;  // bound of a whole lookup, and of a whole write (connection included)
  uint32_t block_tokens = 64;
  ModelFingerprint model;                        // values of other models are discarded
  size_t max_pending_bytes = size_t{512} << 20;  // queued writes beyond this are dropped
};

/// Counters for /metrics.
struct StoreStats {
  bool connected = false;
  uint64_t hits_total = 0;     // lookups that returned a verified entry
  uint64_t misses_total = 0;   // lookups without one (none stored, evicted, bad, too short)
  uint64_t ignored_total = 0;  // fetched values discarded: damaged, another model's, wrong tokens
  uint64_t writes_total = 0;   // entries written
  uint64_t dropped_total = 0;  // entries not written: store down, slow, full, or queue full
  uint64_t errors_total = 0;   // failed commands and connection attempts
  uint64_t pending = 0;        // writes queued, not yet run
};

/// An asynchronous lookup (Store::lookup).
struct StoreFetch {
  std::atomic<bool> done{false};                      // set last (release order)
  Status status;                                      // once done: OK with an entry, else why not
  std::shared_ptr<const std::vector<uint8_t>> bytes;  // the entry's state
  std::vector<int32_t> tokens;                        // its token list
  uint32_t n_match = 0;                               // leading prompt tokens equal to the entry's
};

class Store {
 public:
  using Bytes = std::vector<uint8_t>;

  /// Starts the store's thread; connects lazily (a store that is down is not an error here).
  static std::unique_ptr<Store> open(const StoreParams& params);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  /// Queues a write of the entry holding `tokens` (>= one block) with state `bytes`.
  void put(std::vector<int32_t> tokens, std::shared_ptr<const Bytes> bytes);

  /// Looks for the stored entry sharing the longest prefix with `prompt`; a result sharing fewer
  /// than `min_match` tokens is a miss. `on_done` runs on the store's thread after the result is
  /// set.
  std::shared_ptr<StoreFetch> lookup(std::vector<int32_t> prompt, uint32_t min_match,
                                     std::function<void()> on_done);

  /// Waits until every queued command ran (tests, shutdown).
  void flush();

  StoreStats stats() const;

 private:
  struct Job;
  explicit Store(const StoreParams& params);
  void worker();
  bool connect(int64_t deadline);      // store thread; true when connected (by deadline)
  void fail(const std::string& what);  // store thread: drop the connection, back off, log once
  // Store thread: a write the store refused (it is up): counted, logged once per run of refusals.
  void refused(const std::string& what);
  void run_put(const Job& job);
  void run_lookup(const Job& job);
  // One entry a lookup's pointer at `depth` blocks leads to: GET, verify, match against the
  // prompt. OK: *f filled; kNotFound: gone or too short; kCorruption: discarded (counted);
  // kIOError: the connection failed (dropped).
  Status try_entry(const std::vector<int32_t>& prompt, uint32_t min_match, size_t depth,
                   const std::string& entry, int64_t deadline, StoreFetch* f);

  StoreParams params_;
  uint64_t root_ = 0;
  std::string prefix_;  // "mnemo:<root>:"

  // Store thread only.
  redisContext* ctx_ = nullptr;
  // Entries written on this connection (keys, oldest first; bounded): the same tokens stashed
  // again are not sent twice. Forgotten when the connection drops (the store may have restarted).
  std::unordered_set<uint64_t> written_;
  std::deque<uint64_t> written_order_;
  int64_t retry_at_ms_ = 0;
  int64_t backoff_ms_ = 0;
  bool outage_logged_ = false;   // an outage (no connection) was logged; reset on reconnecting
  bool refused_logged_ = false;  // a refused write was logged; reset by a write that succeeds

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::deque<Job> jobs_;
  size_t pending_bytes_ = 0;
  bool busy_ = false;
  bool stop_ = false;
  StoreStats stats_;
  std::thread thread_;
};

}  // namespace mnemo::prompt_cache
