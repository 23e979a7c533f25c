// The prompt cache's index, tiers and background thread (prompt_cache.h). The directory layout
// and the index file are docs/formats/prompt_cache.md.
#include "prompt_cache/prompt_cache.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "mnemo/check.h"
#include "mnemo/log.h"
#include "mnemo/state_io.h"
#include "prompt_cache/block_hash.h"
#include "prompt_cache/disk_files.h"

namespace mnemo::prompt_cache {

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

constexpr const char* kIndexFormat = "mnemo prompt cache index";
constexpr int kIndexVersion = 1;

// One record of the index file.
struct IndexRecord {
  uint64_t bytes = 0;
  uint64_t last_used = 0;
  std::vector<int32_t> tokens;
};

// Parses the index file; nullopt when it is missing, damaged or of another model / version.
std::optional<std::unordered_map<std::string, IndexRecord>> read_index(const std::string& path,
                                                                       uint64_t root,
                                                                       uint64_t* clock) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  try {
    const Json j = Json::parse(in);
    if (j.at("format").get<std::string>() != kIndexFormat ||
        j.at("version").get<int>() != kIndexVersion ||
        j.at("root").get<std::string>() != hex16(root)) {
      return std::nullopt;
    }
    *clock = j.at("clock").get<uint64_t>();
    std::unordered_map<std::string, IndexRecord> out;
    for (const Json& e : j.at("entries")) {
      IndexRecord r;
      r.bytes = e.at("bytes").get<uint64_t>();
      r.last_used = e.at("last_used").get<uint64_t>();
      r.tokens = e.at("tokens").get<std::vector<int32_t>>();
      out[e.at("file").get<std::string>()] = std::move(r);
    }
    return out;
  } catch (const Json::exception&) {
    return std::nullopt;
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------

struct PromptCache::Entry {
  uint64_t key = 0;
  std::vector<int32_t> tokens;   // [n] positions 0..n-1
  std::vector<uint64_t> blocks;  // [n / block_tokens] chained hashes of the full blocks
  uint64_t bytes = 0;            // size of the state
  uint64_t last_used = 0;
  std::shared_ptr<const Bytes> ram;      // the RAM tier's copy
  std::shared_ptr<const Bytes> pending;  // queued for the disk tier, not yet written
  bool on_disk = false;
  uint64_t disk_bytes = 0;  // size of its file when on_disk
};

struct PromptCache::Job {
  enum class Kind : uint8_t { kWrite, kRead, kUnlink, kBarrier };
  Kind kind = Kind::kBarrier;
  uint64_t key = 0;
  std::shared_ptr<const Bytes> bytes;  // kWrite
  std::shared_ptr<CacheFetch> fetch;   // kRead
  std::function<void()> on_done;       // kRead
  std::vector<std::string> files;      // kUnlink: names in entry_dir_
  std::shared_ptr<std::promise<void>> barrier;
};

PromptCache::PromptCache(const PromptCacheParams& params) : params_(params) {
  root_ = model_root_hash(params.model);
}

Result<std::unique_ptr<PromptCache>> PromptCache::open(const PromptCacheParams& params) {
  if (params.block_tokens == 0) {
    return Status::invalid_argument("prompt cache: the block size must be at least 1 token");
  }
  if (params.ram_bytes == 0 && params.dir.empty()) {
    return Status::invalid_argument("prompt cache: neither a RAM budget nor a directory");
  }
  std::unique_ptr<PromptCache> c(new PromptCache(params));
  if (!params.dir.empty()) c->open_dir();
  c->thread_ = std::thread([p = c.get()] { p->worker(); });
  return c;
}

PromptCache::~PromptCache() {
  flush();
  {
    std::lock_guard<std::mutex> lk(jobs_mu_);
    stop_ = true;
  }
  jobs_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PromptCache::disk_error(const std::string& what) {
  bool first = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    ++counters_.disk_errors_total;
    first = !disk_failing_;
    disk_failing_ = true;
  }
  if (first) {
    MNEMO_LOG(kWarn) << "prompt cache: " << what
                     << " (disk tier failing; entries stay in RAM; further errors are counted "
                        "in mnemo_prompt_cache_disk_errors_total)";
  }
}

void PromptCache::open_dir() {
  const std::string ns = params_.model.arch + "-" + hex16(root_);
  entry_dir_ = params_.dir + "/" + ns;
  std::error_code ec;
  bool created = false;
  // Held shared while the cache is open, so that `mnemo cache clear` leaves the namespace's lock
  // and files being written alone; a clear that removed the directory under the wait: again.
  for (int attempt = 0; attempt < 3 && dir_lock_ == nullptr; ++attempt) {
    created = fs::create_directories(entry_dir_, ec) || created;
    if (!fs::is_directory(entry_dir_, ec)) {
      disk_error("cannot create the cache directory");
      return;
    }
    auto lock = DirLock::shared(entry_dir_);
    if (lock.ok()) {
      dir_lock_ = std::make_unique<DirLock>(std::move(lock).value());
    } else if (lock.status().code() != StatusCode::kNotFound) {
      MNEMO_LOG(kWarn) << "prompt cache: " << lock.status().message()
                       << " (mnemo cache clear cannot tell that this server uses it)";
      break;
    }
  }
  if (created) sync_names(params_.dir);  // the namespace's own name
  uint64_t clock = 0;
  auto index = read_index(entry_dir_ + "/" + kIndexName, root_, &clock);
  size_t n_scanned = 0, n_indexed = 0, n_ignored = 0;
  const auto now = fs::file_time_type::clock::now();
  std::vector<Entry> found;
  for (const fs::directory_entry& de : fs::directory_iterator(entry_dir_, ec)) {
    const std::string name = de.path().filename().string();
    if (is_temp_file_name(name)) {
      std::error_code e2;
      const auto t = de.last_write_time(e2);
      if (!e2 && now - t > kStaleTemp) fs::remove(de.path(), e2);
      continue;
    }
    const auto key = key_of_file_name(name);
    if (!key || !de.is_regular_file(ec)) continue;
    const uint64_t size = de.file_size(ec);
    if (ec) continue;
    Entry e;
    e.key = *key;
    e.bytes = e.disk_bytes = size;
    e.on_disk = true;
    if (index) {
      auto it = index->find(name);
      if (it != index->end() && it->second.bytes == size &&
          entry_key(it->second.tokens, root_) == *key) {
        e.tokens = std::move(it->second.tokens);
        e.last_used = it->second.last_used;
        found.push_back(std::move(e));
        ++n_indexed;
        continue;
      }
    }
    // Not in the index (or the index is stale): read the entry's header and token list.
    ++n_scanned;
    auto src = FileSource::open(de.path().string());
    if (!src.ok()) continue;
    std::vector<int32_t> tokens;
    auto info = state_inspect_tokens(src->get(), &tokens);
    if (!info.ok() || info->scope != state_format::Scope::kSequence ||
        !(info->model == params_.model) || entry_key(tokens, root_) != *key) {
      ++n_ignored;
      MNEMO_LOG(kWarn) << "prompt cache: ignoring entry file " << name << ": "
                       << (!info.ok()                                      ? info.status().message()
                           : info->scope != state_format::Scope::kSequence ? "not a sequence state"
                           : !(info->model == params_.model) ? "written for another model"
                                                             : "its tokens do not match its name");
      continue;
    }
    e.tokens = std::move(tokens);
    found.push_back(std::move(e));
  }
  std::vector<std::string> victims;
  {
    std::lock_guard<std::mutex> lk(mu_);
    clock_ = clock;
    counters_.ignored_total += n_ignored;
    // Oldest first, so that ties in last_used keep the file order stable.
    std::sort(found.begin(), found.end(),
              [](const Entry& a, const Entry& b) { return a.last_used < b.last_used; });
    for (Entry& e : found) {
      if (e.tokens.size() < params_.block_tokens) continue;
      clock_ = std::max(clock_, e.last_used);
      add_locked(std::move(e));
    }
    victims = evict_disk_locked();
    index_dirty_ = true;
  }
  unlink_files(victims);
  MNEMO_LOG(kInfo) << "prompt cache: " << entries_.size() << " entries on disk ("
                   << (index                             ? "index read"
                       : found.empty() && n_ignored == 0 ? "new directory"
                                                         : "index missing or damaged: rebuilt")
                   << ", " << n_indexed << " from the index, " << n_scanned
                   << " read from their files, " << n_ignored << " ignored)";
}

// --- the index (mu_ held) ----------------------------------------------------------------------

void PromptCache::touch_locked(Entry& e) { e.last_used = ++clock_; }

void PromptCache::add_locked(Entry e) {
  e.blocks = block_hashes(e.tokens, params_.block_tokens, root_);
  for (uint64_t h : e.blocks) block_index_[h].push_back(e.key);
  if (e.ram) ram_used_ += e.ram->size();
  if (e.on_disk) disk_used_ += e.disk_bytes;
  const uint64_t key = e.key;
  if (params_.on_added) params_.on_added(key, e.tokens);
  entries_[key] = std::make_unique<Entry>(std::move(e));
  index_dirty_ = true;
}

void PromptCache::remove_locked(uint64_t key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  const Entry& e = *it->second;
  for (uint64_t h : e.blocks) {
    auto b = block_index_.find(h);
    if (b == block_index_.end()) continue;
    auto& v = b->second;
    v.erase(std::remove(v.begin(), v.end(), key), v.end());
    if (v.empty()) block_index_.erase(b);
  }
  if (e.ram) ram_used_ -= e.ram->size();
  if (e.on_disk) disk_used_ -= e.disk_bytes;
  if (params_.on_removed) params_.on_removed(key);
  entries_.erase(it);
  index_dirty_ = true;
}

void PromptCache::evict_ram_locked() {
  while (ram_used_ > params_.ram_bytes) {
    Entry* lru = nullptr;
    for (auto& [k, e] : entries_) {
      if (e->ram && (lru == nullptr || e->last_used < lru->last_used)) lru = e.get();
    }
    if (lru == nullptr) break;
    ram_used_ -= lru->ram->size();
    lru->ram.reset();
    ++counters_.evicted_ram_total;
    if (!lru->on_disk && !lru->pending) remove_locked(lru->key);
  }
}

std::vector<std::string> PromptCache::evict_disk_locked() {
  std::vector<std::string> files;
  while (disk_used_ > params_.disk_bytes) {
    Entry* lru = nullptr;
    for (auto& [k, e] : entries_) {
      if (e->on_disk && (lru == nullptr || e->last_used < lru->last_used)) lru = e.get();
    }
    if (lru == nullptr) break;
    files.push_back(entry_file_name(lru->key));
    disk_used_ -= lru->disk_bytes;
    lru->on_disk = false;
    lru->disk_bytes = 0;
    ++counters_.evicted_disk_total;
    index_dirty_ = true;
    if (!lru->ram && !lru->pending) remove_locked(lru->key);
  }
  return files;
}

// --- lookups and inserts -----------------------------------------------------------------------

std::optional<CacheMatch> PromptCache::lookup(std::span<const int32_t> prompt) const {
  const uint32_t B = params_.block_tokens;
  std::lock_guard<std::mutex> lk(mu_);
  uint64_t h = root_;
  const std::vector<uint64_t>* deepest = nullptr;
  size_t n_blocks = 0;
  for (size_t i = 0; (i + 1) * B <= prompt.size(); ++i) {
    h = next_block_hash(h, prompt.subspan(i * B, B));
    auto it = block_index_.find(h);
    if (it == block_index_.end()) break;
    deepest = &it->second;
    n_blocks = i + 1;
  }
  if (deepest == nullptr) return std::nullopt;
  const Entry* best = nullptr;
  size_t best_n = 0;
  for (uint64_t key : *deepest) {
    const Entry& e = *entries_.at(key);
    size_t n = n_blocks * B;
    const size_t limit = std::min(e.tokens.size(), prompt.size());
    while (n < limit && e.tokens[n] == prompt[n]) ++n;
    const bool better =
        best == nullptr || n > best_n ||
        (n == best_n && (bool(e.ram || e.pending) != bool(best->ram || best->pending)
                             ? bool(e.ram || e.pending)
                             : e.last_used > best->last_used));
    if (better) {
      best = &e;
      best_n = n;
    }
  }
  // The hashes said the first n_blocks blocks agree; make sure (a 64-bit collision is not
  // impossible, and a wrong match must never be served).
  if (!std::equal(prompt.begin(), prompt.begin() + n_blocks * B, best->tokens.begin())) {
    return std::nullopt;
  }
  CacheMatch m;
  m.key = best->key;
  m.n_match = static_cast<uint32_t>(best_n);
  m.n_tokens = static_cast<uint32_t>(best->tokens.size());
  // Only the RAM tier's copy stays until get(): bytes still pending their write may be released
  // by the write before the caller reads them, so such an entry is fetch()ed (which takes the
  // pending bytes at once, or reads the file the write left).
  m.in_ram = best->ram != nullptr;
  return m;
}

bool PromptCache::contains(std::span<const int32_t> tokens) const {
  const uint64_t key = entry_key(tokens, root_);
  std::lock_guard<std::mutex> lk(mu_);
  auto it = entries_.find(key);
  return it != entries_.end() && std::equal(tokens.begin(), tokens.end(),
                                            it->second->tokens.begin(), it->second->tokens.end());
}

void PromptCache::insert(std::vector<int32_t> tokens, std::shared_ptr<const Bytes> state,
                         const std::function<bool(uint32_t n)>& serves_prefix) {
  const uint32_t B = params_.block_tokens;
  if (tokens.size() < B || state == nullptr) return;
  // An entry a tier cannot hold whole is refused by that tier before anything is evicted for it;
  // one that fits neither changes nothing (not even the entries it would supersede).
  const bool to_ram = params_.ram_bytes > 0 && state->size() <= params_.ram_bytes;
  const bool to_disk = !params_.dir.empty() && state->size() <= params_.disk_bytes;
  if (!to_ram && !to_disk) return;
  const uint64_t key = entry_key(tokens, root_);
  std::vector<std::string> victims;
  {
    std::lock_guard<std::mutex> lk(mu_);
    ++counters_.stored_total;
    // Replacing an entry of the same tokens keeps its file until the new one is written over it.
    bool on_disk = false;
    uint64_t disk_bytes = 0;
    if (auto it = entries_.find(key); it != entries_.end()) {
      on_disk = it->second->on_disk;
      disk_bytes = it->second->disk_bytes;
      remove_locked(key);
    }
    // Entries holding a strict prefix of these tokens, which the new entry serves as well.
    const std::vector<uint64_t> blocks = block_hashes(tokens, B, root_);
    std::vector<uint64_t> drop;
    for (size_t i = 0; i < blocks.size(); ++i) {
      auto it = block_index_.find(blocks[i]);
      if (it == block_index_.end()) break;
      for (uint64_t k : it->second) {
        const Entry& f = *entries_.at(k);
        const size_t n = f.tokens.size();
        if (n >= tokens.size() || n / B != i + 1) continue;  // f's last full block is block i
        if (!std::equal(f.tokens.begin(), f.tokens.end(), tokens.begin())) continue;
        if (serves_prefix && serves_prefix(static_cast<uint32_t>(n))) drop.push_back(k);
      }
    }
    for (uint64_t k : drop) {
      Entry& f = *entries_.at(k);
      if (f.on_disk) victims.push_back(entry_file_name(k));
      remove_locked(k);
      ++counters_.superseded_total;
    }
    Entry e;
    e.key = key;
    e.tokens = std::move(tokens);
    e.bytes = state->size();
    if (to_ram) e.ram = state;
    if (to_disk) e.pending = state;
    e.on_disk = on_disk;
    e.disk_bytes = disk_bytes;
    touch_locked(e);
    add_locked(std::move(e));
    evict_ram_locked();
  }
  if (!victims.empty()) {
    Job j;
    j.kind = Job::Kind::kUnlink;
    j.files = std::move(victims);
    enqueue(std::move(j));
  }
  if (to_disk) {
    Job j;
    j.kind = Job::Kind::kWrite;
    j.key = key;
    j.bytes = std::move(state);
    enqueue(std::move(j));
  }
}

std::shared_ptr<const PromptCache::Bytes> PromptCache::get(uint64_t key) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  Entry& e = *it->second;
  std::shared_ptr<const Bytes> b = e.ram ? e.ram : e.pending;
  if (b) touch_locked(e);
  return b;
}

std::shared_ptr<CacheFetch> PromptCache::fetch(uint64_t key, std::function<void()> on_done) {
  auto f = std::make_shared<CacheFetch>();
  f->key = key;
  bool from_disk = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      f->status = Status::not_found("the entry left the cache");
    } else if (it->second->ram || it->second->pending) {
      Entry& e = *it->second;
      f->bytes = e.ram ? e.ram : e.pending;
      touch_locked(e);
    } else {
      from_disk = true;
    }
  }
  if (!from_disk) {
    f->done.store(true, std::memory_order_release);
    if (on_done) on_done();
    return f;
  }
  Job j;
  j.kind = Job::Kind::kRead;
  j.key = key;
  j.fetch = f;
  j.on_done = std::move(on_done);
  enqueue(std::move(j));
  return f;
}

void PromptCache::discard(uint64_t key, const std::string& why) {
  std::vector<std::string> files;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    if (it->second->on_disk) files.push_back(entry_file_name(key));
    remove_locked(key);
    ++counters_.ignored_total;
  }
  MNEMO_LOG(kWarn) << "prompt cache: dropped entry " << hex16(key) << ": " << why;
  if (!files.empty() && !params_.dir.empty()) {
    Job j;
    j.kind = Job::Kind::kUnlink;
    j.files = std::move(files);
    enqueue(std::move(j));
  }
}

void PromptCache::flush() {
  Job j;
  j.kind = Job::Kind::kBarrier;
  j.barrier = std::make_shared<std::promise<void>>();
  std::future<void> done = j.barrier->get_future();
  {
    std::lock_guard<std::mutex> lk(jobs_mu_);
    if (stop_ || !thread_.joinable()) return;
    jobs_.push_back(std::move(j));
  }
  jobs_cv_.notify_one();
  done.wait();
}

CacheStats PromptCache::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  CacheStats s = counters_;
  for (const auto& [k, e] : entries_) {
    if (e->ram) ++s.entries_ram;
    if (e->on_disk) ++s.entries_disk;
  }
  s.bytes_ram = ram_used_;
  s.bytes_disk = disk_used_;
  return s;
}

// --- the background thread ---------------------------------------------------------------------

void PromptCache::enqueue(Job job) {
  {
    std::lock_guard<std::mutex> lk(jobs_mu_);
    // A read has a request waiting for it: ahead of writes (after earlier reads, in order).
    if (job.kind == Job::Kind::kRead) {
      auto it = jobs_.begin();
      while (it != jobs_.end() && it->kind == Job::Kind::kRead) ++it;
      jobs_.insert(it, std::move(job));
    } else {
      jobs_.push_back(std::move(job));
    }
  }
  jobs_cv_.notify_one();
}

void PromptCache::worker() {
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lk(jobs_mu_);
      jobs_cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stop_ and nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    switch (job.kind) {
      case Job::Kind::kWrite:
        write_entry(job.key, job.bytes);
        break;
      case Job::Kind::kRead:
        read_entry(job.fetch, job.on_done);
        break;
      case Job::Kind::kUnlink:
        unlink_files(job.files);
        break;
      case Job::Kind::kBarrier:
        break;
    }
    bool idle = false;
    {
      std::lock_guard<std::mutex> lk(jobs_mu_);
      idle = jobs_.empty();
    }
    // The index is rewritten when the queue runs dry (not after every entry) and at a barrier.
    if (!entry_dir_.empty() && (idle || job.kind == Job::Kind::kBarrier)) {
      bool dirty = false;
      {
        std::lock_guard<std::mutex> lk(mu_);
        dirty = index_dirty_;
      }
      if (dirty) save_index();
    }
    if (job.barrier) job.barrier->set_value();
  }
}

void PromptCache::unlink_files(const std::vector<std::string>& files) {
  for (const std::string& f : files) {
    if (::unlink((entry_dir_ + "/" + f).c_str()) != 0 && errno != ENOENT) {
      disk_error("cannot delete an entry file: " + std::string(std::strerror(errno)));
    }
  }
}

void PromptCache::write_entry(uint64_t key, const std::shared_ptr<const Bytes>& bytes) {
  if (entry_dir_.empty()) {
    disk_error("the cache directory is not usable");
  } else {
    const std::string name = entry_file_name(key);
    Status st;
    {
      auto sink = FileSink::create(entry_dir_ + "/" + name);
      st = sink.status();
      if (st.ok()) st = (*sink)->write(bytes->data(), bytes->size());
      if (st.ok()) st = (*sink)->commit();
    }
    if (st.ok()) {
      // Counted as written either way: the file is whole; only its name's durability is unsure.
      const bool synced = sync_names(entry_dir_);
      std::vector<std::string> victims;
      bool orphan = false;
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (synced) disk_failing_ = false;  // a whole entry written: a run of failures ends
        ++counters_.disk_writes_total;
        auto it = entries_.find(key);
        if (it == entries_.end()) {
          orphan = true;  // dropped while it was being written
        } else if (it->second->pending == bytes) {
          Entry& e = *it->second;
          if (e.on_disk) disk_used_ -= e.disk_bytes;
          e.on_disk = true;
          e.disk_bytes = bytes->size();
          disk_used_ += e.disk_bytes;
          e.pending.reset();
          index_dirty_ = true;
          victims = evict_disk_locked();
        }
      }
      if (orphan) victims.push_back(name);
      unlink_files(victims);
      return;
    }
    // The message names the temporary path; the directory is the operator's own, so say what
    // failed without repeating it.
    disk_error("cannot write an entry file (" + st.message().substr(0, 200) + ")");
  }
  std::lock_guard<std::mutex> lk(mu_);
  auto it = entries_.find(key);
  if (it != entries_.end() && it->second->pending == bytes) {
    it->second->pending.reset();
    if (!it->second->ram && !it->second->on_disk) remove_locked(key);
  }
}

void PromptCache::read_entry(const std::shared_ptr<CacheFetch>& f,
                             const std::function<void()>& on_done) {
  auto bytes = read_whole_file(entry_dir_ + "/" + entry_file_name(f->key));
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = entries_.find(f->key);
    if (!bytes.ok()) {
      // Deleted meanwhile (another server sharing the directory evicted it) or unreadable.
      if (bytes.status().code() != StatusCode::kNotFound) ++counters_.disk_errors_total;
      if (it != entries_.end() && it->second->on_disk) {
        Entry& e = *it->second;
        disk_used_ -= e.disk_bytes;
        e.on_disk = false;
        e.disk_bytes = 0;
        if (!e.ram && !e.pending) remove_locked(f->key);
      }
      f->status = bytes.status();
    } else {
      ++counters_.disk_reads_total;
      f->bytes = *bytes;
      if (it != entries_.end()) {
        Entry& e = *it->second;
        touch_locked(e);
        // Promoted into the RAM tier only when it fits there whole.
        if (!e.ram && params_.ram_bytes > 0 && f->bytes->size() <= params_.ram_bytes) {
          e.ram = f->bytes;
          ram_used_ += e.ram->size();
          evict_ram_locked();
        }
      }
    }
  }
  f->done.store(true, std::memory_order_release);
  if (on_done) on_done();
}

void PromptCache::save_index() {
  Json entries = Json::array();
  std::unordered_map<std::string, bool> mine;
  uint64_t clock = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    index_dirty_ = false;
    clock = clock_;
    for (const auto& [k, e] : entries_) {
      if (!e->on_disk) continue;
      const std::string name = entry_file_name(k);
      mine[name] = true;
      entries.push_back(Json{{"file", name},
                             {"bytes", e->disk_bytes},
                             {"last_used", e->last_used},
                             {"tokens", e->tokens}});
    }
  }
  FileLock lock(entry_dir_ + "/" + kLockName);
  if (!lock.ok()) {
    disk_error("cannot lock the cache index");
    return;
  }
  // Another server sharing the directory may have indexed entries this one does not know: keep
  // those whose files still exist.
  const std::string path = entry_dir_ + "/" + kIndexName;
  uint64_t their_clock = 0;
  if (auto theirs = read_index(path, root_, &their_clock)) {
    for (auto& [name, r] : *theirs) {
      if (mine.count(name) != 0) continue;
      std::error_code ec;
      if (!fs::exists(entry_dir_ + "/" + name, ec)) continue;
      entries.push_back(Json{
          {"file", name}, {"bytes", r.bytes}, {"last_used", r.last_used}, {"tokens", r.tokens}});
    }
    clock = std::max(clock, their_clock);
  }
  const Json j{{"format", kIndexFormat},
               {"version", kIndexVersion},
               {"root", hex16(root_)},
               {"arch", params_.model.arch},
               {"block_tokens", params_.block_tokens},
               {"clock", clock},
               {"entries", std::move(entries)}};
  const std::string text = j.dump();
  auto sink = FileSink::create(path);
  Status st = sink.status();
  if (st.ok()) st = (*sink)->write(text.data(), text.size());
  if (st.ok()) st = (*sink)->commit();
  if (!st.ok()) {
    disk_error("cannot write the cache index");
    return;
  }
  sync_names(entry_dir_);
}

bool PromptCache::sync_names(const std::string& dir) {
  const Status st = params_.sync_dir ? params_.sync_dir(dir) : sync_dir(dir);
  if (!st.ok()) {
    disk_error("cannot sync the cache directory (" + st.message().substr(0, 200) + ")");
    return false;
  }
  return true;
}

}  // namespace mnemo::prompt_cache
