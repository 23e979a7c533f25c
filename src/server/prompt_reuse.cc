// PromptReuse (prompt_reuse.h): planning and applying a prompt's reusable prefix, stashing a
// sequence's state into the prompt cache and the store, slot files. The only server file that
// calls the state API (include/mnemo/state.h).
#include "server/prompt_reuse.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <utility>

#include "mnemo/check.h"
#include "mnemo/log.h"
#include "mnemo/state.h"
#include "mnemo/state_io.h"
#include "prompt_cache/block_hash.h"

namespace mnemo::server {
namespace {

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

size_t common_prefix(std::span<const TokenId> a, std::span<const TokenId> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

// The one check of a restored token list: a sequence holds its tokens at positions 0..n-1, so a
// state whose token list disagrees with its cells (positions [p0, p1]), or holds an id outside
// the vocabulary (written by another program, or edited), cannot be continued. `what` names the
// state in messages (a file's name as the client gave it, or "the entry").
Status check_tokens(std::span<const int32_t> tokens, Pos p0, Pos p1, uint32_t n_vocab,
                    std::string_view what) {
  const Pos n = static_cast<Pos>(tokens.size());
  const bool ok = n == 0 ? p1 < 0 : (p0 == 0 && p1 == n - 1);
  if (!ok) {
    return Status::invalid_argument(
        fmt::format("{} holds {} tokens but cells at positions [{}, {}]; a slot needs "
                    "positions 0..{}",
                    what, n, p0, p1, n - 1));
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || static_cast<uint32_t>(tokens[i]) >= n_vocab) {
      return Status::invalid_argument(
          fmt::format("{} holds token id {} at position {}; the vocabulary has {} tokens", what,
                      tokens[i], i, n_vocab));
    }
  }
  return Status();
}

// check_tokens between the validation pass and the apply: the positions the validation found
// (when the memory reports them), the vocabulary always.
Status check_before(std::span<const int32_t> tokens, const StateSeqSummary& s, uint32_t n_vocab,
                    std::string_view what) {
  const Pos n = static_cast<Pos>(tokens.size());
  return s.set ? check_tokens(tokens, s.pos_min, s.pos_max, n_vocab, what)
               : check_tokens(tokens, n == 0 ? -1 : 0, n - 1, n_vocab, what);
}

// check_tokens after the apply, for a memory whose parts report no positions to the validation:
// the sequence must end at the last token. (Its first position says nothing: a sliding window
// holds only the last n_swa positions of a long sequence.)
Status check_after(std::span<const int32_t> tokens, const Memory& mem, SeqId seq, uint32_t n_vocab,
                   std::string_view what) {
  return check_tokens(tokens, tokens.empty() ? -1 : 0, mem.seq_pos_max(seq), n_vocab, what);
}

// The error with the slot directory taken out of its message (a client names files, not paths).
Status without_dir(const Status& st, const std::string& path, const std::string& name) {
  std::string m = st.message();
  for (size_t at = m.find(path); at != std::string::npos; at = m.find(path, at + name.size())) {
    m.replace(at, path.size(), name);
  }
  return Status(st.code(), m);
}

Result<size_t> file_size(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return Status::io_error("cannot stat '" + path.substr(path.find_last_of('/') + 1) + "'");
  }
  return static_cast<size_t>(st.st_size);
}

}  // namespace

bool ReuseFetch::pending() const {
  return (disk && !disk->done.load(std::memory_order_acquire)) ||
         (store && !store->done.load(std::memory_order_acquire));
}

Result<std::unique_ptr<PromptReuse>> PromptReuse::create(Context& ctx,
                                                         const PromptReuseParams& params,
                                                         std::function<void()> wake,
                                                         Metrics* metrics) {
  CHECK(metrics != nullptr);
  std::unique_ptr<PromptReuse> r(new PromptReuse(ctx, metrics));
  r->wake_ = std::move(wake);
  const ModelFingerprint& fp = ctx.fingerprint();
  r->root_ = prompt_cache::model_root_hash(fp);
  r->block_ = params.cache ? params.cache->block_tokens : params.block_tokens;
  r->type_k_ = params.cache_type_k;
  r->type_v_ = params.cache_type_v;
  if (!params.events.endpoint.empty()) {
    kv_events::PublisherParams ep = params.events;
    ep.block_tokens = r->block_;
    ep.root = r->root_;
    // The local layers' window, when some layers have one and keep only it (not --swa-full).
    const HParams& hp = ctx.model().hparams();
    bool local = false;
    for (uint32_t il = 0; il < hp.n_layer; ++il) local = local || hp.is_swa_layer(il);
    if (local && hp.swa_type != SwaType::kNone && !ctx.params().swa_full) {
      ep.swa_type = hp.swa_type;
      ep.n_swa = hp.n_swa;
    }
    auto ev = kv_events::KvEventPublisher::open(ep);
    if (!ev.ok()) return ev.status();
    r->events_ = std::move(ev).value();
  }
  if (params.cache) {
    prompt_cache::PromptCacheParams cp = *params.cache;
    cp.model = fp;
    if (kv_events::KvEventPublisher* ev = r->events_.get()) {
      cp.on_added = [ev, self = r.get()](uint64_t key, std::span<const int32_t> tokens) {
        Pos first = kv_events::kFirstPosUnknown;
        {
          std::lock_guard<std::mutex> lk(self->entry_first_mu_);
          if (auto it = self->entry_first_.find(key); it != self->entry_first_.end()) {
            first = it->second;
          }
        }
        ev->hold("entry:" + prompt_cache::hex16(key), tokens, "CPU_CACHE", first);
      };
      cp.on_removed = [ev](uint64_t key) { ev->release("entry:" + prompt_cache::hex16(key)); };
    }
    auto cache = prompt_cache::PromptCache::open(cp);
    if (!cache.ok()) return cache.status();
    r->cache_ = std::move(cache).value();
  }
  if (params.store) {
    prompt_cache::StoreParams sp = *params.store;
    sp.model = fp;
    sp.block_tokens = r->block_;
    r->store_ = prompt_cache::Store::open(sp);
  }
  if (r->cache_ || r->store_) r->stasher_ = std::make_unique<StashWorker>([self = r.get()] {
    self->wake_();
  });
  return r;
}

PromptReuse::~PromptReuse() {
  // The stash jobs still queued run first (they write to the cache and the store). The cache's
  // and the store's threads may still call wake_ (a lookup's on_done) until they are gone. The
  // publisher goes last (the cache tells it of entries it drops).
  stasher_.reset();
  store_.reset();
  cache_.reset();
  events_.reset();
}

// ---------------------------------------------------------------------------------------------
// Planning

size_t PromptReuse::reusable_prefix(const HeldSeq& s, std::span<const TokenId> prompt,
                                    size_t limit) const {
  const size_t lcp = std::min(common_prefix(s.tokens, prompt), limit);
  if (lcp == 0) return 0;
  auto plan = ctx_.memory().plan_truncate(s.seq, static_cast<Pos>(lcp));
  return plan.ok() ? static_cast<size_t>(plan->keep) : 0;
}

ReuseSource PromptReuse::plan(std::span<const TokenId> prompt, bool cache_prompt,
                              const HeldSeq& target, std::span<const HeldSeq* const> others,
                              ReuseFetch* fetch) {
  ReuseSource best;
  if (!cache_prompt) return best;  // kNone: bypasses every tier
  // The last prompt token is always evaluated: its logits give the first generated token.
  const size_t limit = prompt.size() - 1;
  best.kind = ReuseSource::Kind::kOwn;
  best.keep = reusable_prefix(target, prompt, limit);
  for (const HeldSeq* o : others) {
    if (o == &target || o->tokens.size() < best.keep + kMinGain) continue;
    const size_t k = reusable_prefix(*o, prompt, limit);
    if (k >= best.keep + kMinGain) {
      best.kind = ReuseSource::Kind::kSeq;
      best.keep = k;
      best.from = o;
    }
  }
  if (cache_) {
    if (auto m = cache_->lookup(prompt)) {
      const size_t k = std::min<size_t>(m->n_match, limit);
      if (k >= best.keep + kMinGain) {
        best.kind = ReuseSource::Kind::kEntry;
        best.keep = k;
        best.from = nullptr;
        best.match = *m;
      }
    }
  }
  // The shared store may hold a longer prefix (another replica's conversation): asked once per
  // request, while it waits, when the prompt goes a block or more past what is here.
  const size_t min_store = best.keep + kMinGain;
  if (store_ && !fetch->store && prompt.size() >= block_ && limit >= min_store) {
    fetch->store = store_->lookup(std::vector<int32_t>(prompt.begin(), prompt.end()),
                                  static_cast<uint32_t>(min_store), [this] { wake_(); });
    best.kind = ReuseSource::Kind::kDeferred;
    return best;
  }
  if (fetch->store && fetch->store->status.ok() && fetch->store->bytes &&
      std::min<size_t>(fetch->store->n_match, limit) >= min_store) {
    const prompt_cache::StoreFetch& f = *fetch->store;
    best = ReuseSource{};
    best.kind = ReuseSource::Kind::kEntry;
    best.keep = std::min<size_t>(f.n_match, limit);
    best.bytes = f.bytes;
    best.match.key = prompt_cache::entry_key(f.tokens, root_);
    best.match.n_match = f.n_match;
    best.match.n_tokens = static_cast<uint32_t>(f.tokens.size());
    best.match.in_ram = true;
    // Kept in the local tiers too: the next turn here needs no store.
    if (cache_) cache_->insert(f.tokens, f.bytes, nullptr);
  }
  if (best.kind == ReuseSource::Kind::kEntry && !best.match.in_ram) {
    // A disk entry: read by the cache's thread while the request waits (once per request).
    auto have = [&] {
      return fetch->disk && fetch->disk->key == best.match.key && fetch->disk->status.ok();
    };
    if (!have() && !fetch->disk) {
      fetch->disk = cache_->fetch(best.match.key, [this] { wake_(); });
      if (fetch->pending()) {
        best.kind = ReuseSource::Kind::kDeferred;
        return best;
      }
    }
    if (!have()) {  // the entry went away; the sequence's own prefix then
      best = ReuseSource{};
      best.kind = ReuseSource::Kind::kOwn;
      best.keep = reusable_prefix(target, prompt, limit);
    }
  }
  return best;
}

// ---------------------------------------------------------------------------------------------
// Applying

void PromptReuse::hold_at_test_gate() const {
  // A test hook (tests/python/test_prompt_cache.py): while the file MNEMO_TEST_STASH_GATE names
  // exists, a stash waits before it reads the sequence, for at most 60 s.
  static const char* gate = std::getenv("MNEMO_TEST_STASH_GATE");
  if (gate == nullptr) return;
  struct stat st;
  for (int i = 0; i < 6000 && ::stat(gate, &st) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool PromptReuse::stash_pending(SeqId seq) const { return stasher_ && stasher_->pending(seq); }

bool PromptReuse::stashes_pending() const { return stasher_ && stasher_->any_pending(); }

void PromptReuse::wait_stash(SeqId seq) {
  if (stasher_) stasher_->wait(seq);
}

void PromptReuse::wait_stashes() {
  if (stasher_) stasher_->wait_all();
}

void PromptReuse::pace_stashes(bool decoding) {
  if (stasher_) stasher_->set_paced(decoding);
}

void PromptReuse::stash_slice() {
  if (stasher_) stasher_->run_slice(kStashSliceBytes);
}

size_t PromptReuse::keep_own(HeldSeq& s, size_t keep) {
  wait_stash(s.seq);
  Memory& mem = ctx_.memory();
  if (Status st = mem.seq_rm(s.seq, static_cast<Pos>(keep), -1); !st.ok()) {
    MNEMO_LOG(kError) << "seq " << s.seq << ": seq_rm failed: " << st.to_string();
    CHECK(mem.seq_rm(s.seq, -1, -1).ok());
    keep = 0;
  }
  s.tokens.resize(keep);
  return keep;
}

size_t PromptReuse::apply(std::span<const TokenId> prompt, bool cache_prompt, HeldSeq& target,
                          const ReuseSource& src, const ReuseFetch& fetch) {
  CHECK(src.kind != ReuseSource::Kind::kDeferred);
  wait_stash(target.seq);
  size_t n = 0;
  switch (src.kind) {
    case ReuseSource::Kind::kNone:
    case ReuseSource::Kind::kDeferred:
      n = keep_own(target, 0);
      break;
    case ReuseSource::Kind::kOwn:
      n = keep_own(target, src.keep);
      break;
    case ReuseSource::Kind::kSeq: {
      // Another sequence's prefix: copied (split KV: its rows; unified KV: shared cells).
      Memory& mem = ctx_.memory();
      keep_own(target, 0);
      const Pos keep = static_cast<Pos>(src.keep);
      if (Status st = mem.seq_cp(src.from->seq, target.seq, 0, keep);
          !st.ok() || mem.seq_pos_max(target.seq) != keep - 1) {
        MNEMO_LOG(kWarn) << "seq " << target.seq << ": copying seq " << src.from->seq
                         << "'s prefix failed: " << st.to_string();
        n = keep_own(target, 0);
        break;
      }
      target.tokens.assign(src.from->tokens.begin(), src.from->tokens.begin() + src.keep);
      n = src.keep;
      break;
    }
    case ReuseSource::Kind::kEntry:
      n = apply_entry(prompt, target, src, fetch);
      break;
  }
  if (cache_prompt) {
    Metrics& m = *metrics_;
    if (n == 0) {
      m.prompt_cache_misses_total.fetch_add(1, std::memory_order_relaxed);
    } else {
      // 0: a sequence (its own or another's), 1: the RAM tier, 2: the disk tier, 3: the store.
      const bool fetched = fetch.disk && fetch.disk->key == src.match.key;
      const size_t tier = src.kind != ReuseSource::Kind::kEntry ? 0
                          : src.bytes                           ? 3
                          : fetched                             ? 2
                                                                : 1;
      m.prompt_cache_hits_total[tier].fetch_add(1, std::memory_order_relaxed);
    }
  }
  return n;
}

size_t PromptReuse::apply_entry(std::span<const TokenId> prompt, HeldSeq& target,
                                const ReuseSource& src, const ReuseFetch& fetch) {
  // The entry's state is restored over the sequence, then cut back to the shared prefix. Its
  // token list must be the sequence's positions 0..n-1 and start with the prompt's matched
  // tokens; anything else (damage, another model) fails the validation pass, which changes
  // nothing, and the entry is dropped.
  Memory& mem = ctx_.memory();
  const size_t limit = prompt.size() - 1;
  std::shared_ptr<const std::vector<uint8_t>> bytes =
      src.bytes ? src.bytes
      : fetch.disk && fetch.disk->key == src.match.key && fetch.disk->status.ok()
          ? fetch.disk->bytes
      : cache_ ? cache_->get(src.match.key)
               : nullptr;
  if (!bytes) return keep_own(target, reusable_prefix(target, prompt, limit));  // evicted
  const uint32_t n_vocab = ctx_.model().hparams().n_vocab;
  const size_t n_match = src.match.n_match;
  auto check = [&](std::span<const int32_t> t, const StateSeqSummary& s) -> Status {
    MNEMO_RETURN_IF_ERROR(check_before(t, s, n_vocab, "the entry"));
    if (t.size() < n_match || !std::equal(prompt.begin(), prompt.begin() + n_match, t.begin())) {
      return Status::invalid_argument("its tokens do not match the index");
    }
    return Status();
  };
  SpanSource source(*bytes);
  auto tokens = state_read(mem, ctx_.fingerprint(), &source, state_format::Scope::kSequence,
                           target.seq, check);
  if (!tokens.ok()) {
    const StatusCode c = tokens.status().code();
    // No room (a unified stream, or an entry of a longer context) is not the entry's fault.
    if (c != StatusCode::kNoSpace && cache_) {
      cache_->discard(src.match.key, tokens.status().message());
    }
    // Only a source that changed between the passes empties the sequence; it then starts from
    // nothing.
    if (mem.seq_pos_max(target.seq) != static_cast<Pos>(target.tokens.size()) - 1) {
      return keep_own(target, 0);
    }
    return keep_own(target, reusable_prefix(target, prompt, limit));
  }
  if (Status st = check_after(*tokens, mem, target.seq, n_vocab, "the entry"); !st.ok()) {
    if (cache_) cache_->discard(src.match.key, st.message());
    target.tokens.clear();
    CHECK(mem.seq_rm(target.seq, -1, -1).ok());
    return 0;
  }
  target.tokens = std::move(tokens).value();
  auto plan = mem.plan_truncate(target.seq, static_cast<Pos>(src.keep));
  return keep_own(target, plan.ok() ? static_cast<size_t>(plan->keep) : 0);
}

// ---------------------------------------------------------------------------------------------
// Where memory goes

Pos PromptReuse::first_held(SeqId seq) const {
  return std::max<Pos>(0, ctx_.memory().seq_pos_min(seq));
}

void PromptReuse::publish(const HeldSeq& s) {
  if (events_) events_->hold("slot:" + std::to_string(s.seq), s.tokens, "CPU", first_held(s.seq));
}

namespace {

// A sink that asks the stash thread's pacing for every write (StashWorker::before_write).
class PacedSink final : public StateSink {
 public:
  PacedSink(StateSink* inner, StashWorker* worker) : inner_(inner), worker_(worker) {}
  Status write(const void* data, size_t n) override {
    worker_->before_write(n);
    return inner_->write(data, n);
  }

 private:
  StateSink* inner_;
  StashWorker* worker_;
};

}  // namespace

Result<std::shared_ptr<const std::vector<uint8_t>>> PromptReuse::write_state(
    SeqId seq, std::span<const TokenId> tokens, bool convert, bool paced) const {
  StateWriteSpec spec;
  spec.scope = state_format::Scope::kSequence;
  spec.seq = seq;
  if (convert) {
    spec.k_type = type_k_;
    spec.v_type = type_v_;
  }
  const Memory& mem = ctx_.memory();
  // The exact size first (O(metadata)), so the one copy of the rows is written without regrowth.
  CountingSink count;
  MNEMO_RETURN_IF_ERROR(state_write(mem, ctx_.fingerprint(), &count, spec, tokens));
  auto bytes = std::make_shared<std::vector<uint8_t>>();
  bytes->reserve(count.bytes());
  VectorSink sink(bytes.get());
  PacedSink paced_sink(&sink, stasher_.get());
  StateSink* out = paced && stasher_ ? static_cast<StateSink*>(&paced_sink) : &sink;
  MNEMO_RETURN_IF_ERROR(state_write(mem, ctx_.fingerprint(), out, spec, tokens));
  return std::shared_ptr<const std::vector<uint8_t>>(std::move(bytes));
}

void PromptReuse::insert_local(SeqId seq, std::vector<TokenId> tokens, uint64_t key,
                               std::shared_ptr<const std::vector<uint8_t>> bytes) {
  if (events_) {
    std::lock_guard<std::mutex> lk(entry_first_mu_);
    entry_first_[key] = first_held(seq);
  }
  // An entry holding a prefix of these tokens is redundant once this one can be cut back to it.
  const Memory& mem = ctx_.memory();
  cache_->insert(std::move(tokens), std::move(bytes), [&](uint32_t n) {
    auto plan = mem.plan_truncate(seq, static_cast<Pos>(n));
    return plan.ok() && plan->keep == static_cast<Pos>(n);
  });
  if (events_) {
    std::lock_guard<std::mutex> lk(entry_first_mu_);
    entry_first_.erase(key);
  }
}

void PromptReuse::stash(HeldSeq& s, std::function<void()> then) {
  auto done = [&] {
    if (then) then();
  };
  if ((!cache_ && !store_) || !s.cacheable || s.tokens.size() < block_) return done();
  // These very tokens went into the cache and to the store already (a turn's end, then its slot
  // taken): nothing to do.
  const uint64_t key = prompt_cache::entry_key(s.tokens, root_);
  if (key == s.stashed_key) return done();
  // An entry of these tokens needs no second copy locally; the store is written anyway.
  const bool have = cache_ && cache_->contains(s.tokens);
  if (have && !store_) return done();
  s.stashed_key = key;
  // On the stash thread when the memory lets the sequence be read beside the loop's work (its
  // callers then wait for it before they change the sequence), else here.
  const bool async = stasher_ && ctx_.memory().seq_isolated(s.seq);
  auto job = [this, seq = s.seq, tokens = s.tokens, key, have, async,
              then = std::move(then)]() mutable {
    stash_now(seq, std::move(tokens), key, have, /*paced=*/async);
    if (then) then();
  };
  if (async) {
    stasher_->submit(s.seq, std::move(job));
  } else {
    job();
  }
}

void PromptReuse::stash_now(SeqId seq, std::vector<TokenId> tokens, uint64_t key, bool have,
                            bool paced) {
  hold_at_test_gate();
  const double t0 = now_ms();
  auto bytes = write_state(seq, tokens, /*convert=*/true, paced);
  if (!bytes.ok()) {
    MNEMO_LOG(kWarn) << "seq " << seq
                     << ": not stored in the prompt cache: " << bytes.status().to_string();
    return;
  }
  const size_t n_bytes = (*bytes)->size();
  const size_t n_tokens = tokens.size();
  if (store_) store_->put(tokens, *bytes);
  if (cache_ && !have) insert_local(seq, std::move(tokens), key, *bytes);
  MNEMO_LOG(kDebug) << fmt::format(
      "seq {}: {} tokens stored in the prompt cache ({} bytes, {:.1f} ms)", seq, n_tokens,
      n_bytes, now_ms() - t0);
}

Status PromptReuse::drop(HeldSeq& s) {
  stash(s);
  wait_stash(s.seq);
  MNEMO_RETURN_IF_ERROR(ctx_.memory().seq_rm(s.seq, -1, -1));
  s.tokens.clear();
  publish(s);
  return Status();
}

Result<SuspendedSeq> PromptReuse::suspend(HeldSeq& s) {
  wait_stash(s.seq);
  SuspendedSeq out;
  if (!s.tokens.empty()) {
    // In the sequence's own types whatever --prompt-cache-type-k/-v say: the resumed sequence
    // must compute exactly what it would have.
    auto own = write_state(s.seq, s.tokens, /*convert=*/false);
    if (!own.ok()) return own.status();
    out.state = *own;
    if (cache_ && s.cacheable && s.tokens.size() >= block_) {
      const uint64_t key = prompt_cache::entry_key(s.tokens, root_);
      std::shared_ptr<const std::vector<uint8_t>> entry = out.state;
      if (type_k_ || type_v_) {
        auto converted = write_state(s.seq, s.tokens, /*convert=*/true);
        entry = converted.ok() ? *converted : nullptr;
      }
      if (entry && key != s.stashed_key && !cache_->contains(s.tokens)) {
        insert_local(s.seq, s.tokens, key, std::move(entry));
        s.stashed_key = key;
      }
    }
  }
  MNEMO_RETURN_IF_ERROR(ctx_.memory().seq_rm(s.seq, -1, -1));
  out.tokens = std::move(s.tokens);
  s.tokens.clear();
  publish(s);
  return out;
}

Status PromptReuse::resume(HeldSeq& s, const SuspendedSeq& saved) {
  CHECK(s.tokens.empty()) << "seq " << s.seq << " holds " << s.tokens.size() << " tokens";
  wait_stash(s.seq);
  if (saved.tokens.empty()) return Status();
  Memory& mem = ctx_.memory();
  const uint32_t n_vocab = ctx_.model().hparams().n_vocab;
  auto check = [&](std::span<const int32_t> t, const StateSeqSummary& sum) -> Status {
    MNEMO_RETURN_IF_ERROR(check_before(t, sum, n_vocab, "the suspended state"));
    if (!std::equal(t.begin(), t.end(), saved.tokens.begin(), saved.tokens.end())) {
      return Status::internal("the suspended state's tokens are not the sequence's");
    }
    return Status();
  };
  SpanSource source(*saved.state);
  auto tokens =
      state_read(mem, ctx_.fingerprint(), &source, state_format::Scope::kSequence, s.seq, check);
  Status st = tokens.ok() ? check_after(*tokens, mem, s.seq, n_vocab, "the suspended state")
                          : tokens.status();
  if (!st.ok()) {
    (void)mem.seq_rm(s.seq, -1, -1);
    publish(s);
    return st;
  }
  s.tokens = saved.tokens;
  publish(s);
  return Status();
}

void PromptReuse::shut_down(std::span<HeldSeq* const> all) {
  if (!cache_ && !store_) return;
  for (HeldSeq* s : all) stash(*s);
  wait_stashes();
  if (cache_) cache_->flush();
  if (store_) store_->flush();
}

std::optional<prompt_cache::CacheStats> PromptReuse::cache_stats() const {
  if (!cache_) return std::nullopt;
  return cache_->stats();
}

std::optional<prompt_cache::StoreStats> PromptReuse::store_stats() const {
  if (!store_) return std::nullopt;
  return store_->stats();
}

// ---------------------------------------------------------------------------------------------
// Slot files

Result<size_t> PromptReuse::save_file(const HeldSeq& s, const std::string& path) {
  const std::string name = path.substr(path.find_last_of('/') + 1);
  if (Status st = state_seq_save_file(ctx_.memory(), ctx_.fingerprint(), path, s.seq, s.tokens);
      !st.ok()) {
    return without_dir(st, path, name);
  }
  return file_size(path);
}

Result<size_t> PromptReuse::load_file(HeldSeq& s, const std::string& path) {
  stash(s);  // what the sequence held is replaced
  wait_stash(s.seq);
  const std::string name = path.substr(path.find_last_of('/') + 1);
  const std::string what = "'" + name + "'";
  Memory& mem = ctx_.memory();
  const uint32_t n_vocab = ctx_.model().hparams().n_vocab;
  // Checked between the validation pass and the apply: a file that fails changes nothing.
  auto check = [&](std::span<const int32_t> t, const StateSeqSummary& sum) {
    return check_before(t, sum, n_vocab, what);
  };
  auto r = state_seq_load_file(mem, ctx_.fingerprint(), path, s.seq, check);
  Status err;
  if (!r.ok()) {
    err = without_dir(r.status(), path, name);
  } else if (Status st = check_after(*r, mem, s.seq, n_vocab, what); !st.ok()) {
    (void)mem.seq_rm(s.seq, -1, -1);
    err = Status(st.code(), st.message() + " (the slot was cleared)");
  }
  if (!err.ok()) {
    // The state API leaves the sequence as it was on every error but one (a file changed while
    // it was read, or a token list that does not match the cells): then it is empty.
    if (mem.seq_pos_max(s.seq) != static_cast<Pos>(s.tokens.size()) - 1) {
      (void)mem.seq_rm(s.seq, -1, -1);
      s.tokens.clear();
    }
    publish(s);
    return err;
  }
  s.tokens = std::move(r).value();
  publish(s);
  return file_size(path);
}

}  // namespace mnemo::server
