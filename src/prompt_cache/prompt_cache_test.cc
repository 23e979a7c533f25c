// The prompt cache alone (no model, no server): block hashes against XXH3 applied by hand, exact
// longest-prefix lookup, supersession, LRU budgets of both tiers, the disk tier across a restart
// (index read, index rebuilt, entry files of another model or damaged), a failing directory and a
// full disk, and two caches sharing one directory. Entries are real sequence states of a small
// KvCache (tests/support/state_test_util.h), restored and compared byte for byte.
#include "prompt_cache/prompt_cache.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <thread>

#include "prompt_cache/block_hash.h"
#include "prompt_cache/cache_dir.h"
#include "support/file_limit.h"
#include "support/state_test_util.h"

namespace mnemo::prompt_cache {
namespace {

namespace fs = std::filesystem;
using namespace testing;  // NOLINT(build/namespaces): support/state_test_util.h's helpers
using Bytes = std::vector<uint8_t>;

std::vector<int32_t> tokens_of(int n, int salt = 0) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = 1000 + (i * 7 + salt * 131) % 5000;
  return t;
}

StateWriteSpec seq0() {
  StateWriteSpec s;
  s.scope = state_format::Scope::kSequence;
  s.seq = 0;
  return s;
}

// A real sequence state of n cells holding `tokens` (as the server's entries are).
std::shared_ptr<const Bytes> state_of(const std::vector<int32_t>& tokens, uint64_t gen = 1) {
  auto cache = make_cache(state_config(512, 1, false));
  fill(*cache, 0, static_cast<int>(tokens.size()), gen);
  auto out = std::make_shared<Bytes>();
  VectorSink sink(out.get());
  CHECK(state_write(*cache, test_fingerprint(), &sink, seq0(), tokens).ok());
  return out;
}

// Bytes that are not a state: enough for the RAM tier, which stores what it is given.
std::shared_ptr<const Bytes> blob(size_t n) { return std::make_shared<Bytes>(n, uint8_t(7)); }

PromptCacheParams ram_params(size_t ram_bytes, uint32_t block = 16) {
  PromptCacheParams p;
  p.ram_bytes = ram_bytes;
  p.block_tokens = block;
  p.model = test_fingerprint();
  return p;
}

std::unique_ptr<PromptCache> open_cache(const PromptCacheParams& p) {
  auto r = PromptCache::open(p);
  CHECK(r.ok()) << r.status().to_string();
  return std::move(r).value();
}

const auto kAlways = [](uint32_t) { return true; };
const auto kNever = [](uint32_t) { return false; };

class TempDir {
 public:
  TempDir() {
    path_ = fs::path(::testing::TempDir()) /
            ("mnemo_pc_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

PromptCacheParams disk_params(const std::string& dir, size_t ram_bytes, size_t disk_bytes) {
  PromptCacheParams p = ram_params(ram_bytes);
  p.dir = dir;
  p.disk_bytes = disk_bytes;
  return p;
}

// Restores `bytes` into a fresh cache and returns its cells: what the entry really holds.
std::vector<testing::StoredCell> restored(const Bytes& bytes) {
  auto cache = make_cache(state_config(512, 1, false));
  Status st = state_seq_set_data(*cache, test_fingerprint(), bytes, 0);
  CHECK(st.ok()) << st.to_string();
  return seq_bytes(*cache, 0);
}

std::vector<testing::StoredCell> cells_of(int n, uint64_t gen) {
  auto cache = make_cache(state_config(512, 1, false));
  fill(*cache, 0, n, gen);
  return seq_bytes(*cache, 0);
}

std::shared_ptr<const Bytes> fetch_now(PromptCache& c, uint64_t key, Status* status = nullptr) {
  auto f = c.fetch(key, nullptr);
  while (!f->done.load(std::memory_order_acquire)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (status != nullptr) *status = f->status;
  return f->status.ok() ? f->bytes : nullptr;
}

// --- block hashes ------------------------------------------------------------------------------

TEST(BlockHash, ChainMatchesXxh3AppliedByHand) {
  const auto t = tokens_of(50);
  const uint64_t root = model_root_hash(test_fingerprint());
  const auto h = block_hashes(t, 16, root);
  ASSERT_EQ(h.size(), 3u);  // 50 / 16: the partial fourth block is not hashed
  uint64_t parent = root;
  for (size_t i = 0; i < 3; ++i) {
    parent = XXH3_64bits_withSeed(t.data() + 16 * i, 16 * sizeof(int32_t), parent);
    EXPECT_EQ(h[i], parent) << "block " << i;
  }
}

TEST(BlockHash, SharedPrefixesShareHashesUntilTheyDiverge) {
  const uint64_t root = model_root_hash(test_fingerprint());
  auto a = tokens_of(64);
  auto b = a;
  b[40] += 1;  // block 2 differs
  const auto ha = block_hashes(a, 16, root);
  const auto hb = block_hashes(b, 16, root);
  EXPECT_EQ(ha[0], hb[0]);
  EXPECT_EQ(ha[1], hb[1]);
  EXPECT_NE(ha[2], hb[2]);
  EXPECT_NE(ha[3], hb[3]);  // chained: everything after a difference differs
  ModelFingerprint other = test_fingerprint();
  other.hparams_hash ^= 1;
  EXPECT_NE(block_hashes(a, 16, model_root_hash(other))[0], ha[0]);
}

// --- lookup ------------------------------------------------------------------------------------

TEST(PromptCacheRam, LookupFindsTheLongestPrefixToTheToken) {
  auto c = open_cache(ram_params(1 << 20));
  const auto a = tokens_of(100, 1);
  auto b = a;
  b.resize(70);
  b[50] = 1;  // shares 50 tokens with a (three full blocks and two tokens)
  c->insert(a, blob(100), kNever);
  c->insert(b, blob(100), kNever);

  auto prompt = a;
  prompt.resize(90);
  prompt.push_back(42);
  auto m = c->lookup(prompt);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->key, entry_key(a, model_root_hash(test_fingerprint())));
  EXPECT_EQ(m->n_match, 90u);
  EXPECT_EQ(m->n_tokens, 100u);
  EXPECT_TRUE(m->in_ram);

  // Diverges inside block 3 from both: the match is token-exact (50 with either; the more recent
  // one, b, wins the tie).
  prompt = a;
  prompt[50] = 2;
  m = c->lookup(prompt);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->n_match, 50u);
  EXPECT_EQ(m->n_tokens, 70u);

  // Less than one shared block: no match.
  prompt = a;
  prompt[15] = 3;
  EXPECT_FALSE(c->lookup(prompt).has_value());
  EXPECT_FALSE(c->lookup(std::vector<int32_t>(a.begin(), a.begin() + 15)).has_value());
  // A prompt shorter than the entry matches as far as it goes.
  m = c->lookup(std::vector<int32_t>(a.begin(), a.begin() + 40));
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->n_match, 40u);
}

TEST(PromptCacheRam, ShortEntriesAreNotStoredAndContainsIsExact) {
  auto c = open_cache(ram_params(1 << 20));
  c->insert(tokens_of(15), blob(10), kNever);
  EXPECT_EQ(c->stats().entries_ram, 0u);
  const auto a = tokens_of(40);
  c->insert(a, blob(10), kNever);
  EXPECT_TRUE(c->contains(a));
  EXPECT_FALSE(c->contains(std::vector<int32_t>(a.begin(), a.begin() + 39)));
}

TEST(PromptCacheRam, ALongerEntrySupersedesItsPrefixesOnlyWhenItServesThem) {
  auto c = open_cache(ram_params(1 << 20));
  const auto a = tokens_of(100);
  const std::vector<int32_t> p40(a.begin(), a.begin() + 40);
  const std::vector<int32_t> p70(a.begin(), a.begin() + 70);
  c->insert(p40, blob(10), kNever);
  c->insert(p70, blob(10), kNever);  // may not drop p40
  EXPECT_TRUE(c->contains(p40));
  std::vector<uint32_t> asked;
  c->insert(a, blob(10), [&](uint32_t n) {
    asked.push_back(n);
    return n == 70;  // a memory that can cut back to 70 but not to 40 (say, a checkpoint)
  });
  std::sort(asked.begin(), asked.end());
  EXPECT_EQ(asked, (std::vector<uint32_t>{40, 70}));
  EXPECT_TRUE(c->contains(p40));
  EXPECT_FALSE(c->contains(p70));
  EXPECT_TRUE(c->contains(a));
  EXPECT_EQ(c->stats().superseded_total, 1u);
  // A diverging entry never supersedes.
  auto other = a;
  other[30] = 9;  // not an extension of p40
  c->insert(other, blob(10), kAlways);
  EXPECT_TRUE(c->contains(p40) && c->contains(a));
}

TEST(PromptCacheRam, TheRamBudgetEvictsTheLeastRecentlyUsed) {
  auto c = open_cache(ram_params(3000));
  const auto a = tokens_of(32, 1), b = tokens_of(32, 2), d = tokens_of(32, 3);
  c->insert(a, blob(1000), kNever);
  c->insert(b, blob(1000), kNever);
  c->insert(d, blob(1000), kNever);
  ASSERT_NE(c->get(entry_key(a, model_root_hash(test_fingerprint()))), nullptr);  // a is used
  c->insert(tokens_of(32, 4), blob(1000), kNever);  // over budget: b goes, not a
  EXPECT_TRUE(c->contains(a));
  EXPECT_FALSE(c->contains(b));
  EXPECT_TRUE(c->contains(d));
  const CacheStats s = c->stats();
  EXPECT_EQ(s.entries_ram, 3u);
  EXPECT_EQ(s.bytes_ram, 3000u);
  EXPECT_EQ(s.evicted_ram_total, 1u);
  // An entry larger than the whole budget is not kept, and every other entry stays: it is refused
  // before anything is evicted for it.
  c->insert(tokens_of(32, 5), blob(4000), kNever);
  EXPECT_FALSE(c->contains(tokens_of(32, 5)));
  EXPECT_TRUE(c->contains(a));
  EXPECT_TRUE(c->contains(d));
  EXPECT_TRUE(c->contains(tokens_of(32, 4)));
  const CacheStats after = c->stats();
  EXPECT_EQ(after.entries_ram, 3u);
  EXPECT_EQ(after.bytes_ram, 3000u);
  EXPECT_EQ(after.evicted_ram_total, 1u);
  // Nor does a longer entry that supersedes one of them and cannot fit drop it.
  auto a_longer = a;
  a_longer.insert(a_longer.end(), 20, 9);
  c->insert(a_longer, blob(4000), kAlways);
  EXPECT_TRUE(c->contains(a));
  EXPECT_FALSE(c->contains(a_longer));
  EXPECT_EQ(c->stats().entries_ram, 3u);
}

TEST(PromptCacheDisk, AnEntryLargerThanTheRamBudgetGoesToDiskOnly) {
  TempDir dir;
  auto c = open_cache(disk_params(dir.str(), 3000, 1 << 30));
  const auto a = tokens_of(32, 1), b = tokens_of(32, 2), big = tokens_of(48, 3);
  c->insert(a, blob(1000), kNever);
  c->insert(b, blob(1000), kNever);
  const auto big_state = state_of(big, 5);
  ASSERT_GT(big_state->size(), 3000u);
  c->insert(big, big_state, kNever);
  c->flush();
  CacheStats s = c->stats();
  EXPECT_EQ(s.entries_ram, 2u);  // a and b stay in RAM
  EXPECT_EQ(s.bytes_ram, 2000u);
  EXPECT_EQ(s.evicted_ram_total, 0u);
  EXPECT_EQ(s.entries_disk, 3u);
  auto m = c->lookup(big);
  ASSERT_TRUE(m.has_value());
  EXPECT_FALSE(m->in_ram);
  auto bytes = fetch_now(*c, m->key);
  ASSERT_NE(bytes, nullptr);
  EXPECT_EQ(restored(*bytes), cells_of(48, 5));
  // Read back, it is not promoted into a RAM tier it cannot fit: a and b are still there.
  s = c->stats();
  EXPECT_EQ(s.entries_ram, 2u);
  EXPECT_EQ(s.bytes_ram, 2000u);
  EXPECT_EQ(s.evicted_ram_total, 0u);
  EXPECT_TRUE(c->lookup(a)->in_ram && c->lookup(b)->in_ram);
}

TEST(PromptCacheRam, OpenRefusesNoTierAndAZeroBlock) {
  EXPECT_FALSE(PromptCache::open(ram_params(0)).ok());
  EXPECT_FALSE(PromptCache::open(ram_params(100, 0)).ok());
}

// --- the disk tier -----------------------------------------------------------------------------

TEST(PromptCacheDisk, EntriesSurviveARestartAndRestoreByteForByte) {
  TempDir dir;
  const auto a = tokens_of(48, 1), b = tokens_of(80, 2);
  {
    auto c = open_cache(disk_params(dir.str(), 1 << 20, 1 << 30));
    c->insert(a, state_of(a, 11), kNever);
    c->insert(b, state_of(b, 22), kNever);
    c->flush();
    EXPECT_EQ(c->stats().entries_disk, 2u);
    EXPECT_EQ(c->stats().disk_writes_total, 2u);
  }
  auto c = open_cache(disk_params(dir.str(), 1 << 20, 1 << 30));  // a restart
  auto prompt = b;
  prompt.push_back(5);
  auto m = c->lookup(prompt);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->n_match, 80u);
  EXPECT_FALSE(m->in_ram);  // on disk only until fetched
  auto bytes = fetch_now(*c, m->key);
  ASSERT_NE(bytes, nullptr);
  EXPECT_EQ(restored(*bytes), cells_of(80, 22));
  EXPECT_TRUE(c->lookup(prompt)->in_ram);  // promoted to the RAM tier
  EXPECT_EQ(c->stats().disk_reads_total, 1u);
}

TEST(PromptCacheDisk, WithoutARamTierEntriesGoToDiskOnly) {
  TempDir dir;
  auto c = open_cache(disk_params(dir.str(), 0, 1 << 30));
  const auto a = tokens_of(48);
  c->insert(a, state_of(a, 3), kNever);
  c->flush();
  const CacheStats s = c->stats();
  EXPECT_EQ(s.entries_ram, 0u);
  EXPECT_EQ(s.entries_disk, 1u);
  auto m = c->lookup(a);
  ASSERT_TRUE(m.has_value());
  EXPECT_FALSE(m->in_ram);
  auto bytes = fetch_now(*c, m->key);
  ASSERT_NE(bytes, nullptr);
  EXPECT_EQ(restored(*bytes), cells_of(48, 3));
  EXPECT_EQ(c->stats().entries_ram, 0u);
}

// The bytes of `m` read the way the lookup says: get() when it is in RAM, else fetch().
std::shared_ptr<const Bytes> read_as_told(PromptCache& c, const CacheMatch& m) {
  return m.in_ram ? c.get(m.key) : fetch_now(c, m.key);
}

TEST(PromptCacheDisk, AnEntryPendingItsWriteIsServedWhetherOrNotTheWriteEndsFirst) {
  TempDir dir;
  auto c = open_cache(disk_params(dir.str(), 0, 1 << 30));
  const auto x = tokens_of(48, 1), a = tokens_of(64, 2), b = tokens_of(80, 3);
  c->insert(x, state_of(x, 1), kNever);
  c->flush();
  // Hold the background thread (a fetch's on_done runs there) so that a and b stay pending.
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> holding{false};
  auto held = c->fetch(entry_key(x, model_root_hash(test_fingerprint())), [&] {
    holding.store(true);
    released.wait();
  });
  while (!holding.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  c->insert(a, state_of(a, 2), kNever);
  c->insert(b, state_of(b, 3), kNever);
  auto ma = c->lookup(a), mb = c->lookup(b);
  ASSERT_TRUE(ma.has_value() && mb.has_value());
  // b is read while its write is still pending: served from the bytes being written.
  auto bytes_b = read_as_told(*c, *mb);
  ASSERT_NE(bytes_b, nullptr);
  EXPECT_EQ(restored(*bytes_b), cells_of(80, 3));
  // a's write ends between the lookup and the read: served from its file.
  release.set_value();
  c->flush();
  EXPECT_EQ(c->stats().disk_writes_total, 3u);
  auto bytes_a = read_as_told(*c, *ma);
  ASSERT_NE(bytes_a, nullptr) << "the lookup and the read disagree";
  EXPECT_EQ(restored(*bytes_a), cells_of(64, 2));
  EXPECT_EQ(c->stats().entries_ram, 0u);
}

// The files renamed into place in `dir`: names and inodes (temporaries and the lock aside).
std::map<std::string, uint64_t> renamed_files(const std::string& dir) {
  std::map<std::string, uint64_t> out;
  for (const auto& f : fs::directory_iterator(dir)) {
    const std::string name = f.path().filename().string();
    if (name == ".lock" || name.find(".tmp.") != std::string::npos) continue;
    struct stat st;
    if (::stat(f.path().c_str(), &st) == 0) out[name] = st.st_ino;
  }
  return out;
}

TEST(PromptCacheDisk, EveryRenameIsFollowedBySyncingTheDirectory) {
  TempDir dir;
  std::string entry_dir;
  std::map<std::string, uint64_t> last;
  std::vector<std::vector<std::string>> renamed_before_each_sync;
  PromptCacheParams p = disk_params(dir.str(), 1 << 20, 1 << 30);
  p.sync_dir = [&](const std::string& d) {
    if (d != entry_dir) return Status();  // the namespace's own creation
    std::vector<std::string> fresh;
    auto now = renamed_files(d);
    for (const auto& [name, ino] : now) {
      if (auto it = last.find(name); it == last.end() || it->second != ino) fresh.push_back(name);
    }
    renamed_before_each_sync.push_back(fresh);
    last = std::move(now);
    return Status();
  };
  auto c = open_cache(p);
  entry_dir = c->entry_dir();
  const auto a = tokens_of(48, 1), b = tokens_of(64, 2);
  c->insert(a, state_of(a), kNever);
  c->flush();
  c->insert(b, state_of(b), kNever);
  c->flush();
  // Each sync follows exactly one rename: a's file, the index, b's file, the index again.
  const std::string fa = hex16(entry_key(a, model_root_hash(test_fingerprint()))) + ".state";
  const std::string fb = hex16(entry_key(b, model_root_hash(test_fingerprint()))) + ".state";
  const std::vector<std::vector<std::string>> want = {{fa}, {"index.json"}, {fb}, {"index.json"}};
  EXPECT_EQ(renamed_before_each_sync, want);
  EXPECT_EQ(renamed_files(entry_dir), last) << "a rename that no sync followed";
  EXPECT_EQ(c->stats().disk_errors_total, 0u);
}

TEST(PromptCacheDisk, AFailingDirectorySyncIsCountedAndTheEntryStillServed) {
  TempDir dir;
  std::atomic<int> calls{0};
  PromptCacheParams p = disk_params(dir.str(), 0, 1 << 30);
  p.sync_dir = [&](const std::string&) {
    ++calls;
    return Status::io_error("fsync: Input/output error");
  };
  const auto a = tokens_of(48, 1);
  {
    auto c = open_cache(p);
    c->insert(a, state_of(a, 4), kNever);
    c->flush();
    EXPECT_GE(calls.load(), 2);  // the entry and the index
    const CacheStats s = c->stats();
    EXPECT_GE(s.disk_errors_total, 2u);
    EXPECT_EQ(s.entries_disk, 1u);  // the file is whole: renamed, only its name's durability unsure
    auto m = c->lookup(a);
    ASSERT_TRUE(m.has_value());
    auto bytes = fetch_now(*c, m->key);
    ASSERT_NE(bytes, nullptr);
    EXPECT_EQ(restored(*bytes), cells_of(48, 4));
  }
  auto c = open_cache(disk_params(dir.str(), 0, 1 << 30));
  EXPECT_TRUE(c->contains(a));
}

TEST(PromptCacheDisk, AMissingOrDamagedIndexIsRebuiltFromTheEntryFiles) {
  TempDir dir;
  const auto a = tokens_of(48, 1), b = tokens_of(64, 2);
  std::string ns;
  {
    auto c = open_cache(disk_params(dir.str(), 1 << 20, 1 << 30));
    c->insert(a, state_of(a), kNever);
    c->insert(b, state_of(b), kNever);
    c->flush();
    ns = c->entry_dir();
  }
  ASSERT_TRUE(fs::exists(ns + "/index.json"));
  for (int round = 0; round < 2; ++round) {
    if (round == 0) {
      fs::remove(ns + "/index.json");
    } else {
      std::ofstream(ns + "/index.json") << "{\"format\": \"mnemo prompt cache index\", \"vers";
    }
    auto c = open_cache(disk_params(dir.str(), 1 << 20, 1 << 30));
    EXPECT_TRUE(c->contains(a)) << round;
    EXPECT_TRUE(c->contains(b)) << round;
    EXPECT_EQ(c->stats().ignored_total, 0u);
  }
}

TEST(PromptCacheDisk, OtherModelsAndDamagedFilesAreSkippedCountedAndNeverServed) {
  TempDir dir;
  const auto a = tokens_of(48, 1);
  std::string ns;
  {
    auto c = open_cache(disk_params(dir.str(), 1 << 20, 1 << 30));
    c->insert(a, state_of(a), kNever);
    c->flush();
    ns = c->entry_dir();
  }
  const uint64_t root = model_root_hash(test_fingerprint());
  // Another model's entry under a name this namespace would use.
  {
    const auto t = tokens_of(48, 2);
    auto cache = make_cache(state_config(512, 1, false));
    fill(*cache, 0, 48, 5);
    ModelFingerprint other = test_fingerprint();
    other.arch = "other";
    Bytes bytes;
    VectorSink sink(&bytes);
    ASSERT_TRUE(state_write(*cache, other, &sink, seq0(), t).ok());
    std::ofstream(ns + "/" + hex16(entry_key(t, root)) + ".state", std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }
  // A truncated entry and one whose tokens do not match its name.
  {
    const auto t = tokens_of(48, 3);
    auto bytes = state_of(t);
    std::ofstream(ns + "/" + hex16(entry_key(t, root)) + ".state", std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes->data()), std::streamsize(bytes->size() / 2));
    const auto u = tokens_of(48, 4);
    auto ub = state_of(u);
    std::ofstream(ns + "/" + hex16(entry_key(t, root) ^ 1) + ".state", std::ios::binary)
        .write(reinterpret_cast<const char*>(ub->data()), std::streamsize(ub->size()));
  }
  fs::remove(ns + "/index.json");
  auto c = open_cache(disk_params(dir.str(), 1 << 20, 1 << 30));
  EXPECT_EQ(c->stats().ignored_total, 3u);
  EXPECT_EQ(c->stats().entries_disk, 1u);
  EXPECT_TRUE(c->contains(a));
  EXPECT_FALSE(c->lookup(tokens_of(48, 2)).has_value());
  EXPECT_FALSE(c->lookup(tokens_of(48, 3)).has_value());

  // Damage inside the K/V rows is found by the restore (checksums), and discard() drops it.
  const std::string path = ns + "/" + hex16(entry_key(a, root)) + ".state";
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(path) / 2));
    f.put('\x55');
  }
  auto c2 = open_cache(disk_params(dir.str(), 1 << 20, 1 << 30));
  const uint64_t ignored = c2->stats().ignored_total;  // the three files above, again
  auto m = c2->lookup(a);
  ASSERT_TRUE(m.has_value());
  auto bytes = fetch_now(*c2, m->key);
  ASSERT_NE(bytes, nullptr);
  auto cache = make_cache(state_config(512, 1, false));
  const Status st = state_seq_set_data(*cache, test_fingerprint(), *bytes, 0);
  EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.to_string();
  c2->discard(m->key, st.message());
  c2->flush();
  EXPECT_FALSE(c2->lookup(a).has_value());
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(c2->stats().ignored_total, ignored + 1);
}

TEST(PromptCacheDisk, TheDiskBudgetDeletesTheLeastRecentlyUsedFiles) {
  TempDir dir;
  const auto a = tokens_of(48, 1), b = tokens_of(48, 2), d = tokens_of(48, 3);
  const size_t one = state_of(a)->size();
  auto c = open_cache(disk_params(dir.str(), 0, 2 * one + one / 2));
  c->insert(a, state_of(a), kNever);
  c->insert(b, state_of(b), kNever);
  c->flush();
  ASSERT_NE(fetch_now(*c, entry_key(a, model_root_hash(test_fingerprint()))), nullptr);
  c->insert(d, state_of(d), kNever);
  c->flush();
  EXPECT_TRUE(c->contains(a));
  EXPECT_FALSE(c->contains(b));
  EXPECT_TRUE(c->contains(d));
  EXPECT_EQ(c->stats().evicted_disk_total, 1u);
  size_t n_files = 0;
  for (const auto& f : fs::directory_iterator(c->entry_dir())) {
    n_files += f.path().extension() == ".state";
  }
  EXPECT_EQ(n_files, 2u);
}

TEST(PromptCacheDisk, AnUnusableDirectoryLeavesTheRamTierWorking) {
  TempDir dir;
  const std::string file = dir.str() + "/not_a_dir";
  std::ofstream(file) << "x";
  auto c = open_cache(disk_params(file + "/cache", 1 << 20, 1 << 30));
  const auto a = tokens_of(48);
  c->insert(a, state_of(a), kNever);
  c->flush();
  EXPECT_TRUE(c->contains(a));
  EXPECT_TRUE(c->lookup(a)->in_ram);
  EXPECT_GE(c->stats().disk_errors_total, 1u);
  EXPECT_EQ(c->stats().entries_disk, 0u);
}

TEST(PromptCacheDisk, AFullDiskKeepsEntriesInRam) {
  TempDir dir;
  auto c = open_cache(disk_params(dir.str(), 1 << 20, 1 << 30));
  const auto a = tokens_of(48);
  auto bytes = state_of(a);
  // The process may write no file larger than 4 KiB: as a disk that fills up mid-write.
  rlimit old;
  ASSERT_NO_FATAL_FAILURE(testing::limit_file_size(4096, &old));
  ASSERT_GT(bytes->size(), 4096u);
  c->insert(a, bytes, kNever);
  c->flush();
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
  EXPECT_GE(c->stats().disk_errors_total, 1u);
  EXPECT_EQ(c->stats().entries_disk, 0u);
  EXPECT_TRUE(c->lookup(a)->in_ram);
  for (const auto& f : fs::directory_iterator(c->entry_dir())) {
    EXPECT_EQ(f.path().string().find(".tmp."), std::string::npos) << "left behind: " << f.path();
    EXPECT_NE(f.path().extension(), ".state");
  }
}

TEST(PromptCacheDisk, TwoCachesShareOneDirectoryAndNoTornFileIsEverRead) {
  TempDir dir;
  std::vector<std::vector<int32_t>> mine, theirs;
  {
    auto c1 = open_cache(disk_params(dir.str(), 1 << 20, 1 << 30));
    auto c2 = open_cache(disk_params(dir.str(), 1 << 20, 1 << 30));
    std::atomic<bool> writing{true};
    std::atomic<int> bad{0}, seen{0};
    // A reader that opens every entry file it sees while both caches write: each one it can open
    // is whole (written to a temporary name, then renamed).
    std::thread reader([&] {
      while (writing.load()) {
        auto list = scan_cache_dir(dir.str(), /*verify=*/true);
        if (!list.ok()) continue;
        for (const DirEntry& e : *list) {
          ++seen;
          if (!e.status.ok() && e.status.code() != StatusCode::kNotFound) ++bad;
        }
      }
    });
    for (int i = 0; i < 12; ++i) {
      mine.push_back(tokens_of(48 + i, 100 + i));
      theirs.push_back(tokens_of(48 + i, 200 + i));
      c1->insert(mine.back(), state_of(mine.back()), kNever);
      c2->insert(theirs.back(), state_of(theirs.back()), kNever);
    }
    c1->flush();
    c2->flush();
    writing.store(false);
    reader.join();
    EXPECT_EQ(bad.load(), 0);
    EXPECT_GT(seen.load(), 0);
  }
  // Each cache wrote its own index, merging the other's: a third sees all 24 entries.
  auto c3 = open_cache(disk_params(dir.str(), 1 << 20, 1 << 30));
  for (const auto& t : mine) EXPECT_TRUE(c3->contains(t));
  for (const auto& t : theirs) EXPECT_TRUE(c3->contains(t));
}

TEST(CacheDir, ListVerifyAndClear) {
  TempDir dir;
  const auto a = tokens_of(48, 1), b = tokens_of(64, 2);
  std::string ns;
  {
    auto c = open_cache(disk_params(dir.str(), 0, 1 << 30));
    c->insert(a, state_of(a), kNever);
    c->insert(b, state_of(b), kNever);
    c->flush();
    ns = c->entry_dir();
  }
  std::ofstream(dir.str() + "/unrelated.txt") << "kept";
  auto list = scan_cache_dir(dir.str(), true);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  for (const DirEntry& e : *list) {
    EXPECT_TRUE(e.status.ok()) << e.name;
    EXPECT_EQ(e.arch, "test");
  }
  EXPECT_EQ((*list)[0].n_tokens + (*list)[1].n_tokens, 48u + 64u);
  // One damaged byte in the rows: only a verifying scan sees it.
  const std::string path = dir.str() + "/" + (*list)[0].name;
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x01');
  }
  EXPECT_TRUE((*scan_cache_dir(dir.str(), false))[0].status.ok());
  EXPECT_EQ((*scan_cache_dir(dir.str(), true))[0].status.code(), StatusCode::kCorruption);

  auto n = clear_cache_dir(dir.str());
  ASSERT_TRUE(n.ok());
  EXPECT_GE(n->removed, 3u);  // two entries and the index (and the lock)
  EXPECT_FALSE(fs::exists(ns));
  EXPECT_TRUE(fs::exists(dir.str() + "/unrelated.txt"));
  EXPECT_EQ(scan_cache_dir(dir.str() + "/missing", false).status().code(), StatusCode::kNotFound);
}

TEST(CacheDir, ClearKeepsWhatARunningCacheNeeds) {
  TempDir dir;
  const auto a = tokens_of(48, 1), b = tokens_of(64, 2), d = tokens_of(80, 3);
  auto c = open_cache(disk_params(dir.str(), 0, 1 << 30));
  const std::string ns = c->entry_dir();
  c->insert(a, state_of(a), kNever);
  c->insert(b, state_of(b), kNever);
  c->flush();
  ASSERT_TRUE(fs::exists(ns + "/.lock"));
  // A write in flight (its temporary is fresh) and the left-over of a process that died writing.
  const std::string young = ns + "/0123456789abcdef.state.tmp.99999";
  const std::string old = ns + "/fedcba9876543210.state.tmp.99998";
  std::ofstream(young) << "being written";
  std::ofstream(old) << "left over";
  fs::last_write_time(old, fs::file_time_type::clock::now() - std::chrono::minutes(11));

  auto n = clear_cache_dir(dir.str());
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  EXPECT_EQ(n->removed, 4u);  // two entries, the index, the left-over
  ASSERT_EQ(n->in_use.size(), 1u);
  EXPECT_EQ(n->in_use[0], fs::path(ns).filename().string());
  EXPECT_TRUE(fs::exists(ns + "/.lock"));
  EXPECT_TRUE(fs::exists(young));
  EXPECT_FALSE(fs::exists(old));
  EXPECT_FALSE(fs::exists(ns + "/index.json"));
  EXPECT_TRUE(scan_cache_dir(dir.str(), false)->empty());

  // The cache goes on: a deleted entry is a miss (not a disk error), new entries are written.
  Status st;
  EXPECT_EQ(fetch_now(*c, entry_key(a, model_root_hash(test_fingerprint())), &st), nullptr);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_FALSE(c->contains(a));
  c->insert(d, state_of(d, 7), kNever);
  c->flush();
  EXPECT_EQ(c->stats().disk_errors_total, 0u);
  auto m = c->lookup(d);
  ASSERT_TRUE(m.has_value());
  auto bytes = fetch_now(*c, m->key);
  ASSERT_NE(bytes, nullptr);
  EXPECT_EQ(restored(*bytes), cells_of(80, 7));
  EXPECT_TRUE(fs::exists(ns + "/index.json"));

  // No cache open: the namespace goes whole, its lock and every temporary with it.
  c.reset();
  n = clear_cache_dir(dir.str());
  ASSERT_TRUE(n.ok());
  EXPECT_TRUE(n->in_use.empty());
  EXPECT_FALSE(fs::exists(ns));
  // A cache opened again creates the namespace anew.
  c = open_cache(disk_params(dir.str(), 0, 1 << 30));
  c->insert(a, state_of(a), kNever);
  c->flush();
  EXPECT_EQ(c->stats().entries_disk, 1u);
  EXPECT_EQ(c->stats().disk_errors_total, 0u);
}

}  // namespace
}  // namespace mnemo::prompt_cache
