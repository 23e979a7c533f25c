// The prompt cache: memory that outlives its slot (docs/design.md §3.9).
//
// An entry is one sequence's state (docs/formats/state.md, scope "one sequence", with its token
// list in TOKN: the tokens it holds at positions 0..n-1). Entries live in up to two tiers:
//   RAM   the state bytes in this process, LRU-bounded by ram_bytes (0: no RAM tier);
//   disk  one file per entry under a directory (layout and index: docs/formats/prompt_cache.md),
//         LRU-bounded by disk_bytes, written and read by a background thread, indexed at start-up
//         (the index file, or the entry files themselves when it is missing or damaged), so
//         entries survive a restart.
// An entry may be in both tiers at once.
//
// Lookup finds the entry that shares the longest prefix with a prompt. Every entry's full blocks
// of block_tokens tokens are indexed by chained hashes (block_hash.h; as vLLM's prefix caching),
// so a lookup walks the prompt's blocks, O(prompt / block_tokens) hash probes, then extends the
// match token by token past the last shared block: the match is exact to the token.
//
// The cache knows no slot and no memory: it stores and hands out bytes. Whether bytes are good
// (checksums, model fingerprint, token list) is checked by the restore that uses them; a caller
// that finds an entry bad calls discard(), which drops it and counts it as ignored. Entry files
// of another model, or damaged ones, found at start-up are skipped and counted the same way.
//
// Failure never stops the cache: a directory that cannot be created or written, or a full disk,
// gives one log line per run of failures and a count (CacheStats::disk_errors_total); entries
// then stay in RAM only.
//
// Thread-safety: every public member may be called from any thread. One mutex guards the index;
// file I/O happens on the background thread, outside it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "mnemo/state.h"
#include "mnemo/status.h"

namespace mnemo::prompt_cache {

/// How a cache is set up (`mnemo serve --cache-ram / --cache-dir / --cache-disk`).
struct PromptCacheParams {
  size_t ram_bytes = 0;        // RAM tier budget in bytes; 0: no RAM tier
  std::string dir;             // disk tier directory; "": no disk tier
  size_t disk_bytes = 0;       // disk tier budget in bytes (with dir)
  uint32_t block_tokens = 64;  // tokens per hashed block, >= 1
  ModelFingerprint model;      // entries of other models are ignored
  /// Told of every entry that joins / leaves the cache (under the cache's lock: they must not
  /// call back into it). The KV-event publisher listens here.
  std::function<void(uint64_t key, std::span<const int32_t> tokens)> on_added;
  std::function<void(uint64_t key)> on_removed;
  /// Makes the names in directory `dir` durable (fsync of the directory), after every rename
  /// into it; empty: sync_dir() (disk_files.h). Tests replace it to watch the calls or to fail.
  /// Runs on the cache's thread (and in open(), for a namespace it creates).
  std::function<Status(const std::string& dir)> sync_dir;
};

/// The best entry for a prompt (PromptCache::lookup).
struct CacheMatch {
  uint64_t key = 0;       // the entry (pass to get / fetch / discard)
  uint32_t n_match = 0;   // leading tokens of the prompt equal to the entry's, >= block_tokens
  uint32_t n_tokens = 0;  // tokens the entry holds (>= n_match)
  bool in_ram = false;    // in the RAM tier: get() returns its bytes; else fetch() them (from
                          // the bytes still being written, or from disk)
};

/// Counters and sizes, for /metrics. Sizes are of the state bytes (what the tiers hold).
struct CacheStats {
  uint64_t entries_ram = 0;
  uint64_t entries_disk = 0;
  uint64_t bytes_ram = 0;
  uint64_t bytes_disk = 0;
  uint64_t stored_total = 0;        // entries inserted
  uint64_t superseded_total = 0;    // entries dropped because a longer one serves their tokens
  uint64_t evicted_ram_total = 0;   // entries that left the RAM tier for its budget
  uint64_t evicted_disk_total = 0;  // entry files deleted for the disk budget
  uint64_t ignored_total = 0;       // entries skipped or dropped: damaged, another model's, bad
  uint64_t disk_writes_total = 0;   // entry files written
  uint64_t disk_reads_total = 0;    // entry files read back (fetch)
  uint64_t disk_errors_total = 0;   // failed directory, write, read or index operations
};

/// An asynchronous read of an entry's bytes from the disk tier (PromptCache::fetch).
struct CacheFetch {
  uint64_t key = 0;
  std::atomic<bool> done{false};  // set last, after status and bytes (release order)
  Status status;                  // once done: OK, or why the bytes could not be read
  std::shared_ptr<const std::vector<uint8_t>> bytes;  // once done and OK: the whole state
};

class DirLock;

class PromptCache {
 public:
  using Bytes = std::vector<uint8_t>;

  /// Opens a cache: with a directory, creates <dir>/<namespace>/ if needed and indexes the
  /// entries already there (docs/formats/prompt_cache.md), evicting beyond disk_bytes. Problems
  /// with the directory are logged and counted, never an error: the cache then works from RAM.
  /// Errors: kInvalidArgument for block_tokens == 0 or no tier at all (ram_bytes == 0 and no dir).
  static Result<std::unique_ptr<PromptCache>> open(const PromptCacheParams& params);
  /// Flushes (see flush()) and stops the background thread.
  ~PromptCache();
  PromptCache(const PromptCache&) = delete;
  PromptCache& operator=(const PromptCache&) = delete;

  uint32_t block_tokens() const { return params_.block_tokens; }
  bool has_ram_tier() const { return params_.ram_bytes > 0; }
  bool has_disk_tier() const { return !params_.dir.empty(); }
  /// The directory this cache's entries go to (<dir>/<namespace>), "" without a disk tier.
  const std::string& entry_dir() const { return entry_dir_; }

  /// The entry sharing the longest prefix with `prompt` (ties: one in RAM, then the most recently
  /// used); nullopt when none shares a whole first block. Does not count as a use. Cost:
  /// O(prompt / block_tokens) hash probes plus O(n_match) token comparisons for the winner.
  std::optional<CacheMatch> lookup(std::span<const int32_t> prompt) const;

  /// True when an entry holds exactly `tokens`.
  bool contains(std::span<const int32_t> tokens) const;

  /// Adds an entry holding `tokens` (positions 0..n-1) whose state is `state` (a complete
  /// sequence state with the same token list in TOKN). An entry of the same tokens is replaced.
  /// Entries holding a strict prefix of `tokens` are dropped when `serves_prefix(n)` says the
  /// new entry also serves their n tokens exactly (a memory that can cut back to n). Goes to the
  /// RAM tier (evicting least recently used entries beyond ram_bytes) and is queued for the disk
  /// tier. A tier never takes an entry larger than its whole budget: such an entry goes to the
  /// other tier only, and one that fits neither is not stored and changes nothing (no eviction,
  /// no supersession). Entries shorter than one block are not stored. Cost: O(tokens) plus the
  /// evictions.
  void insert(std::vector<int32_t> tokens, std::shared_ptr<const Bytes> state,
              const std::function<bool(uint32_t n)>& serves_prefix);

  /// The bytes of entry `key` if they are in RAM (or still waiting to be written), marking it
  /// used; nullptr otherwise (evicted meanwhile, or only on disk: fetch()).
  std::shared_ptr<const Bytes> get(uint64_t key);

  /// Reads entry `key` from the disk tier on the background thread, puts it in the RAM tier (when
  /// there is one and the entry fits its budget) and marks it used; `on_done` runs on that thread
  /// after the result is set. A key that is in RAM, or whose write to disk is still pending,
  /// completes at once with those bytes (on the calling thread).
  std::shared_ptr<CacheFetch> fetch(uint64_t key, std::function<void()> on_done);

  /// Drops entry `key` whose bytes failed verification (`why` is logged), deletes its file and
  /// counts it as ignored. A key no longer present is a no-op.
  void discard(uint64_t key, const std::string& why);

  /// Waits until every entry queued for the disk tier is written (or failed) and the index file
  /// is up to date. Called on a clean shutdown, so what was only in RAM survives a restart.
  void flush();

  CacheStats stats() const;

 private:
  struct Entry;
  struct Job;

  explicit PromptCache(const PromptCacheParams& params);
  void open_dir();
  void worker();
  void enqueue(Job job);
  // The following need mu_ held.
  void add_locked(Entry e);
  void remove_locked(uint64_t key);
  void touch_locked(Entry& e);
  void evict_ram_locked();
  // Entry files to delete for the disk budget (their entries updated); the caller unlinks them.
  std::vector<std::string> evict_disk_locked();
  void unlink_files(const std::vector<std::string>& files);
  void write_entry(uint64_t key, const std::shared_ptr<const Bytes>& bytes);
  void read_entry(const std::shared_ptr<CacheFetch>& f, const std::function<void()>& on_done);
  void save_index();
  // Syncs `dir` after a rename into it (params_.sync_dir); false: failed, a disk error.
  bool sync_names(const std::string& dir);
  void disk_error(const std::string& what);

  PromptCacheParams params_;
  uint64_t root_ = 0;      // hash of the model fingerprint: the seed of every block chain
  std::string entry_dir_;  // <dir>/<namespace>, "" without a disk tier
  std::unique_ptr<DirLock> dir_lock_;  // entry_dir_ held shared while open (disk_files.h)

  mutable std::mutex mu_;
  std::unordered_map<uint64_t, std::unique_ptr<Entry>> entries_;     // by key
  std::unordered_map<uint64_t, std::vector<uint64_t>> block_index_;  // block hash -> keys
  uint64_t clock_ = 0;                                               // last_used order
  uint64_t ram_used_ = 0;
  uint64_t disk_used_ = 0;
  bool index_dirty_ = false;
  bool disk_failing_ = false;  // the last disk operation failed (log once per run of failures)
  CacheStats counters_;        // the *_total fields

  std::mutex jobs_mu_;
  std::condition_variable jobs_cv_;
  std::condition_variable idle_cv_;
  std::deque<Job> jobs_;
  bool busy_ = false;  // the worker is running a job
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace mnemo::prompt_cache
