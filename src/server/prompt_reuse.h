// PromptReuse: where a prompt's prefix comes from and where a slot's memory goes (docs/design.md
// §3.9). Owned by the Engine and used on its loop thread (a stash in split KV is written on its
// own stash thread, see stash()); it is the one place in the server that reads or writes
// sequence state bytes (include/mnemo/state.h).
//
// Sources of a prompt's reusable prefix, best first by the tokens they give:
//   own     the sequence the request is admitted to keeps its common prefix with the prompt;
//   seq     another sequence's prefix is copied (seq_cp: split KV copies rows, unified KV shares
//           cells);
//   entry   a prompt-cache entry (RAM or disk tier) or the shared store's state is restored over
//           the sequence (state_read, converting K/V types), then cut back to the shared prefix.
// Every cut goes through Memory::plan_truncate (a recurrent memory returns only to a checkpoint,
// a sliding window only where it is still held), with one helper (`reusable_prefix`).
// A disk entry or a store lookup is asynchronous: planning starts it and answers kDeferred; the
// cache's or the store's thread calls `wake` when it is done, and the request is planned again.
//
// Where memory goes: before a sequence's tokens are dropped (its slot taken by another
// conversation, an erase, a restore over it, an eviction, the server's shutdown) and, with a
// shared store, after every turn, its state is stashed into the prompt cache's tiers and the
// store. A running request's sequence may be suspended (the engine preempts it when a unified
// cache runs full): its state, in its own K/V types, is kept in a buffer the request holds (and
// put into the RAM tier too), its cells freed, and it is resumed byte-identical later. The
// KV-event stream (when configured) hears which blocks every sequence and every entry holds.
// Slot files (POST /slots/{id}?action=save|restore) are the same state bytes in a file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv_events/kv_events.h"
#include "mnemo/context.h"
#include "mnemo/quant.h"
#include "mnemo/status.h"
#include "mnemo/tokenizer.h"
#include "prompt_cache/prompt_cache.h"
#include "prompt_cache/store.h"
#include "server/metrics.h"
#include "server/stash_worker.h"

namespace mnemo::server {

/// The tokens one sequence of the memory holds and what the prompt cache knows of them. A slot
/// owns one (slot i: seq i). Invariant (the engine DCHECKs it): the sequence holds exactly
/// positions [0, tokens.size()) and those cells hold `tokens`, in order.
struct HeldSeq {
  SeqId seq = 0;
  std::vector<TokenId> tokens;  // [n] the tokens at positions 0..n-1
  bool cacheable = true;        // may go into the prompt cache (a cache_prompt: false request's
                                // tokens may not)
  uint64_t stashed_key = 0;     // entry_key of the tokens last stashed (0: none)
};

/// A sequence's memory set aside while its request waits for cells (PromptReuse::suspend /
/// resume): its sequence state in the sequence's own K/V types, so that the resumed sequence
/// computes byte-equal logits, and the tokens it holds.
struct SuspendedSeq {
  std::vector<TokenId> tokens;  // [n] the tokens at positions 0..n-1 (empty: nothing held)
  std::shared_ptr<const std::vector<uint8_t>> state;  // a sequence state (§5); null when empty
};

/// How prompt reuse is set up (from EngineParams).
struct PromptReuseParams {
  /// The prompt cache's RAM / disk tiers; nullopt: none. `model` is filled in by create().
  std::optional<prompt_cache::PromptCacheParams> cache;
  /// K / V types of the stashed states (converted when the sequence's differ); nullopt: its own.
  std::optional<GgmlType> cache_type_k;
  std::optional<GgmlType> cache_type_v;
  /// The shared store; nullopt: none. `model` and `block_tokens` are filled in by create().
  std::optional<prompt_cache::StoreParams> store;
  /// The KV-event publisher: endpoint "" for none. block_tokens, root and the sliding window
  /// are filled in by create() (from the model and the context).
  kv_events::PublisherParams events;
  /// Tokens per hashed block when there is no local tier (else the cache's block_tokens).
  uint32_t block_tokens = 64;
};

/// The asynchronous lookups of one request (a disk entry being read, the store's answer), kept
/// by the request between two admission attempts.
struct ReuseFetch {
  std::shared_ptr<prompt_cache::CacheFetch> disk;
  std::shared_ptr<prompt_cache::StoreFetch> store;
  /// A lookup is still running: the request cannot be admitted yet.
  bool pending() const;
};

/// Where admission takes a prompt's reusable prefix from (PromptReuse::plan).
struct ReuseSource {
  enum class Kind : uint8_t {
    kNone,     // nothing is reused (cache_prompt: false): the sequence is emptied
    kOwn,      // the target sequence keeps `keep` tokens of its own
    kSeq,      // `keep` tokens of sequence `from` are copied
    kEntry,    // a prompt-cache entry or the store's state is restored, then cut to `keep`
    kDeferred  // a disk read or a store lookup was started: plan again when woken
  };
  Kind kind = Kind::kNone;
  size_t keep = 0;                 // prompt tokens it gives (kEntry: at most; the restore says)
  const HeldSeq* from = nullptr;   // kSeq
  prompt_cache::CacheMatch match;  // kEntry
  // kEntry: the state when it came from the shared store (else from the cache or a disk read).
  std::shared_ptr<const std::vector<uint8_t>> bytes;
};

class PromptReuse {
 public:
  /// Opens the KV-event publisher, the prompt cache and the store that `params` name (errors:
  /// those of KvEventPublisher::open and PromptCache::open). `ctx` must outlive the object;
  /// `wake` is called from the cache's and the store's threads when an asynchronous lookup
  /// finishes; `metrics` counts hits and misses.
  static Result<std::unique_ptr<PromptReuse>> create(Context& ctx, const PromptReuseParams& params,
                                                     std::function<void()> wake, Metrics* metrics);
  /// Stops the store's and the cache's threads (no `wake` after this returns), then the publisher.
  ~PromptReuse();
  PromptReuse(const PromptReuse&) = delete;
  PromptReuse& operator=(const PromptReuse&) = delete;

  /// Tokens per hashed block (the cache's, the store's and the events').
  uint32_t block_tokens() const { return block_; }
  /// True with a shared store: then every finished turn is stashed (the next turn may land on
  /// another replica).
  bool stashes_every_turn() const { return store_ != nullptr; }

  /// How many tokens `s`, cut back to its common prefix with `prompt` (at most `limit` tokens),
  /// keeps where Memory::plan_truncate allows. 0 when nothing can be kept.
  size_t reusable_prefix(const HeldSeq& s, std::span<const TokenId> prompt, size_t limit) const;

  /// Where the longest reusable prefix of `prompt` (non-empty) is for `target`: its own tokens,
  /// one of `others` (a source must give kMinGain more tokens than the one before it), the
  /// prompt cache, or the store. May start a disk read or a store lookup into `fetch` and answer
  /// kDeferred; a later call with the same `fetch` uses its result. kNone when !cache_prompt.
  /// Changes no memory.
  ReuseSource plan(std::span<const TokenId> prompt, bool cache_prompt, const HeldSeq& target,
                   std::span<const HeldSeq* const> others, ReuseFetch* fetch);

  /// Puts the planned prefix into `target`'s sequence: keeps its own prefix, or copies another
  /// sequence's, or restores the entry (checked against the prompt: one token-list check, see
  /// check_tokens) and cuts it back. Returns the prompt tokens the sequence now holds (fewer than
  /// planned when a restore fails or cuts back further: the rest is decoded). Counts the hit or
  /// miss in the metrics when cache_prompt. Never fails: a bad entry is dropped from the cache.
  size_t apply(std::span<const TokenId> prompt, bool cache_prompt, HeldSeq& target,
               const ReuseSource& src, const ReuseFetch& fetch);

  /// Puts `s`'s state into the prompt cache and the store before its memory is dropped. No-op
  /// without either, for fewer than one block of tokens, for a !cacheable sequence, or when these
  /// tokens were stashed last time. A failure to serialize is logged, never an error. When the
  /// memory lets the sequence be read beside the loop's work (Memory::seq_isolated: split KV),
  /// the state is written on the stash thread and this returns at once: until stash_pending(seq)
  /// is false the sequence must not change. Every method of this class that changes a sequence
  /// waits for its stash first; a caller that changes memory itself asks stash_pending /
  /// stashes_pending, or waits (wait_stash, wait_stashes). Otherwise it is written here.
  /// `then` (optional) runs once the state is handed to the store and the cache (on the stash
  /// thread when written there; at once when there is nothing to stash).
  void stash(HeldSeq& s, std::function<void()> then = {});
  /// Whether a stash of sequence `seq` is still being written (then it must not change).
  bool stash_pending(SeqId seq) const;
  /// Whether any stash is still being written.
  bool stashes_pending() const;
  /// Blocks until no stash of `seq` is being written.
  void wait_stash(SeqId seq);
  /// Blocks until every stash so far is written (before requantizing the whole memory).
  void wait_stashes();
  /// Stashes on the stash thread are paced while the loop is `decoding`: their writes wait for
  /// stash_slice(), so a long state is copied a slice per step (while the loop waits, not beside
  /// its compute, which would slow every step: the copy competes for cores and memory
  /// bandwidth). Not decoding, they run freely.
  void pace_stashes(bool decoding);
  /// Lets the stash being written copy kStashSliceBytes more and waits for that (the loop, once
  /// per step). No-op when no stash is pending.
  void stash_slice();
  /// Bytes a paced stash copies per decode step: 8 MiB, a few milliseconds, so a step grows by a
  /// few percent while a long context is stashed (docs/benchmarks.md, "What a stash costs the
  /// other slots").
  static constexpr size_t kStashSliceBytes = size_t{8} << 20;
  /// Stashes `s` (and waits for it), then empties its sequence. Errors: seq_rm's (then nothing
  /// is dropped).
  Status drop(HeldSeq& s);
  /// Sets `s`'s memory aside and frees its cells: its state is written in its own K/V types
  /// into a buffer the caller keeps (whether or not there is a prompt cache: nothing can evict
  /// it) and, when `s` is cacheable and there is a local tier, also inserted into the cache (the
  /// same bytes, or a copy in --prompt-cache-type-k/-v), where other prompts may reuse it. Then
  /// the sequence is emptied (s.tokens too). Errors: state_write's and seq_rm's; then the
  /// sequence is as before.
  Result<SuspendedSeq> suspend(HeldSeq& s);
  /// Restores a suspended sequence into `s`, which must be empty: afterwards s.tokens ==
  /// saved.tokens and the sequence computes what it computed when suspended (byte-equal). The
  /// destination may be another sequence than the one suspended. Errors: state_read's (NoSpace
  /// when the cells are not free); then `s` is empty.
  Status resume(HeldSeq& s, const SuspendedSeq& saved);
  /// Tells the KV-event stream which blocks `s` now holds (no-op without one).
  void publish(const HeldSeq& s);

  /// Writes `s`'s sequence and tokens to `path` (a slot file, atomically). Returns the bytes
  /// written. Errors: IOError naming the file (not the directory); the memory never changes.
  Result<size_t> save_file(const HeldSeq& s, const std::string& path);
  /// Stashes `s`, then replaces its sequence with the state in `path` and sets s.tokens. Returns
  /// the bytes read. Errors: NotFound, Corruption / InvalidArgument / NotSupported (a bad,
  /// damaged, newer or other model's file, a token list that disagrees with its cells), NoSpace,
  /// each naming the file (not the directory). On an error the sequence is as before, except
  /// when the file changed while it was read: then it is empty (and s.tokens too). The KV-event
  /// stream hears what the sequence holds afterwards, either way.
  Result<size_t> load_file(HeldSeq& s, const std::string& path);

  /// Stashes every sequence, then writes the cache's pending entries to disk and flushes the
  /// store (a clean shutdown: a restarted server continues these conversations).
  void shut_down(std::span<HeldSeq* const> all);

  /// The prompt cache's numbers (nullopt without a local tier) and the store's (nullopt without
  /// one), for /metrics and /slots.
  std::optional<prompt_cache::CacheStats> cache_stats() const;
  std::optional<prompt_cache::StoreStats> store_stats() const;

  /// A sequence must give this many more prompt tokens than the one before it before its copy or
  /// restore (which moves the whole prefix's rows) is preferred.
  static constexpr size_t kMinGain = 16;

 private:
  PromptReuse(Context& ctx, Metrics* metrics) : ctx_(ctx), metrics_(metrics) {}
  // Restores entry `src` over `target`'s sequence; the rest as apply().
  size_t apply_entry(std::span<const TokenId> prompt, HeldSeq& target, const ReuseSource& src,
                     const ReuseFetch& fetch);
  // Keeps [0, keep) of `s`'s sequence (all of it goes when seq_rm fails). Returns what it kept.
  size_t keep_own(HeldSeq& s, size_t keep);
  // Sequence `seq`'s state with `tokens`, converted to type_k_ / type_v_ when `convert` (else in
  // its own types). Errors: state_write's. Reads only `seq` (so may run on the stash thread).
  // With `paced`, every write asks the stash thread's pacing first (on that thread only).
  Result<std::shared_ptr<const std::vector<uint8_t>>> write_state(SeqId seq,
                                                                  std::span<const TokenId> tokens,
                                                                  bool convert,
                                                                  bool paced = false) const;
  // Inserts `bytes` (seq's state; `key` is entry_key(tokens)) into the local tiers, dropping
  // entries of a prefix seq's memory can be cut back to exactly. Reads only `seq`.
  void insert_local(SeqId seq, std::vector<TokenId> tokens, uint64_t key,
                    std::shared_ptr<const std::vector<uint8_t>> bytes);
  // stash()'s work: writes `seq`'s state and hands it to the store and (unless `have`) the
  // local tiers. On the stash thread (`paced`) or the loop's.
  void stash_now(SeqId seq, std::vector<TokenId> tokens, uint64_t key, bool have, bool paced);
  // Waits while the file named by the environment variable MNEMO_TEST_STASH_GATE exists (at most
  // 60 s): the tests hold a stash with it to see what goes on meanwhile. No-op without it.
  void hold_at_test_gate() const;

  Context& ctx_;
  Metrics* metrics_;
  std::function<void()> wake_;  // called by the cache's and the store's threads
  uint64_t root_ = 0;           // model_root_hash(fingerprint): the block hashes' chain root
  uint32_t block_ = 64;         // tokens per hashed block
  std::optional<GgmlType> type_k_, type_v_;
  // The lowest position every layer of `seq` holds (the local layers' first one): what the
  // KV events say the sliding-window layers keep. 0 for an empty sequence.
  Pos first_held(SeqId seq) const;

  std::unique_ptr<kv_events::KvEventPublisher> events_;  // thread-safe; before cache_ (it calls it)
  // first_held of entries being inserted into the cache by stash(), by entry key: the cache's
  // on_added callback (on the inserting thread) passes it to the publisher. Entries the cache
  // adds otherwise (the disk tier at start-up, the store's) are not here: the publisher then
  // assumes only the last window is held.
  std::mutex entry_first_mu_;
  std::unordered_map<uint64_t, Pos> entry_first_;
  std::unique_ptr<prompt_cache::PromptCache> cache_;  // thread-safe
  std::unique_ptr<prompt_cache::Store> store_;        // thread-safe
  // The stash thread (with a cache or a store); after cache_ and store_, which its jobs use.
  std::unique_ptr<StashWorker> stasher_;
};

}  // namespace mnemo::server
