// Randomized property tests of KvCache and SwaKvCache against RefMemory (memory_testing.h):
// thousands of random batches and sequence operations per configuration and seed, covering
//   1. init_batch fits or fails with nothing changed (byte snapshots; for caches without a window
//      an independent capacity count predicts which);
//   2. a failure injected at a random ubatch (before or after apply, after the fake model wrote
//      or scribbled K/V) and rolled back leaves metadata and K/V bytes equal to before;
//   3. cells are reused only when every sequence in them masks them (RefMemory::reconcile), and
//      every mask row shows exactly the reference positions the token may attend to.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "memory/kv_cache.h"
#include "memory/swa_kv_cache.h"
#include "support/memory_testing.h"

namespace mnemo {
namespace {

using testing::RefMemory;

constexpr uint32_t kLayers = 3;

struct Param {
  const char* name;
  bool swa_cache;  // SwaKvCache (else KvCache)
  bool unified;
  SwaType swa_type;  // KvCache: its window; SwaKvCache: the local layers' window
  uint32_t n_swa;
  uint32_t n_seq_max;
  uint32_t n_ctx;
  uint32_t n_ubatch_max;
  GgmlType k_type;
  GgmlType v_type;
  bool swa_full = false;
};

std::ostream& operator<<(std::ostream& os, const Param& p) { return os << p.name; }

struct Child {
  const KvCache* cache;
  RefMemory ref;
  bool evict;  // the cache has a window, so find_slot may reuse masked cells
};

class PropertyRun {
 public:
  PropertyRun(const Param& p, uint32_t seed) : p_(p), rng_(seed) {
    // The cache (SwaKvCache: what both children share; swa_type / n_swa are its window).
    KvCacheConfig kv;
    kv.n_ctx = p.n_ctx;
    kv.n_seq_max = p.n_seq_max;
    kv.unified = p.unified;
    kv.k_type = p.k_type;
    kv.v_type = p.v_type;
    kv.n_embd_k_gqa = {32, 64, 32};
    kv.n_embd_v_gqa = {64, 32, 32};
    kv.head_dim_v = 16;  // V planes: 4 and 2 per row (2-byte types), rows for q8_0 and the like
    kv.swa_type = p.swa_type;
    kv.n_swa = p.n_swa;
    kv.n_pad = 8;
    if (p.swa_cache) {
      SwaKvCacheConfig c;
      c.kv = std::move(kv);
      c.is_swa_layer = [](uint32_t il) { return il != 1; };
      c.n_ubatch = p.n_ubatch_max;
      c.swa_full = p.swa_full;
      swa_ = testing::create_or_die<SwaKvCache>(std::move(c));
      mem_ = swa_.get();
      children_.push_back({&swa_->base(), RefMemory(p.unified, p.n_seq_max), false});
      children_.push_back({&swa_->swa(), RefMemory(p.unified, p.n_seq_max), !p.swa_full});
    } else {
      kv_ = testing::create_or_die<KvCache>(std::move(kv));
      mem_ = kv_.get();
      children_.push_back(
          {kv_.get(), RefMemory(p.unified, p.n_seq_max), p.swa_type != SwaType::kNone});
    }
  }

  std::string snap() const { return swa_ ? testing::snapshot(*swa_) : testing::snapshot(*kv_); }
  uint32_t rnd(uint32_t n) { return static_cast<uint32_t>(rng_() % n); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  const RefMemory& ref() const { return children_[0].ref; }
  void note(std::string what) { trace_.push_back("step " + std::to_string(step_) + ": " + what); }
  std::string trace() const {
    std::string t = "\nlast operations:";
    for (size_t i = trace_.size() > 8 ? trace_.size() - 8 : 0; i < trace_.size(); ++i) {
      t += "\n  " + trace_[i];
    }
    return t;
  }

  void run(int n_steps) {
    for (step_ = 0; step_ < n_steps && !::testing::Test::HasFailure(); ++step_) {
      const uint32_t r = rnd(100);
      if (r < 55) {
        step_batch();
      } else if (r < 90) {
        step_seq_op();
      } else if (r < 99) {
        step_update();
      } else {
        mem_->clear();
        for (Child& c : children_) c.ref.clear();
      }
      check_all("after step");
    }
  }

  // Compares every child with its reference (no eviction outside a batch) and the interface's
  // seq_pos_min / seq_pos_max with the reference.
  void check_all(const char* where) {
    for (Child& c : children_) {
      const std::string diff = c.ref.reconcile(*c.cache, {}, false);
      ASSERT_EQ(diff, "") << where << ", step " << step_ << trace();
    }
    for (SeqId s = 0; s < static_cast<SeqId>(p_.n_seq_max); ++s) {
      ASSERT_EQ(mem_->seq_pos_max(s), ref().pos_max(s)) << "seq " << s << trace();
      Pos want_min = ref().pos_min(s);
      if (swa_) want_min = std::max(want_min, children_[1].ref.pos_min(s));
      ASSERT_EQ(mem_->seq_pos_min(s), want_min) << "seq " << s << trace();
    }
  }

  void step_batch() {
    Batch b;
    std::vector<Pos> next(p_.n_seq_max);
    for (uint32_t s = 0; s < p_.n_seq_max; ++s) next[s] = ref().pos_max(s) + 1;
    const bool auto_pos = chance(0.2);
    auto add = [&](const std::vector<SeqId>& seqs) {
      if (auto_pos) {
        b.add_auto(static_cast<int32_t>(rnd(1000)), seqs, chance(0.3));
      } else {
        b.add(static_cast<int32_t>(rnd(1000)), next[seqs[0]], seqs, chance(0.3));
      }
      for (SeqId s : seqs) ++next[s];
    };
    // Unified caches: sometimes start with rows shared by sequences at the same next position.
    if (p_.unified && chance(0.2)) {
      std::map<Pos, std::vector<SeqId>> by_next;
      for (uint32_t s = 0; s < p_.n_seq_max; ++s) by_next[next[s]].push_back(s);
      for (auto& [pos, seqs] : by_next) {
        if (seqs.size() < 2) continue;
        const uint32_t n = 1 + rnd(4);
        for (uint32_t i = 0; i < n; ++i) add(seqs);
        break;
      }
    }
    std::vector<uint32_t> left(p_.n_seq_max, 0);
    const uint32_t n_seqs = 1 + rnd(p_.n_seq_max);
    for (uint32_t k = 0; k < n_seqs; ++k) {
      const uint32_t r = rnd(100);
      left[rnd(p_.n_seq_max)] += r < 65 ? 1 : (r < 95 ? 2 + rnd(7) : 9 + rnd(16));
    }
    for (uint32_t total = 0;;) {
      std::vector<SeqId> cand;
      for (uint32_t s = 0; s < p_.n_seq_max; ++s) {
        if (left[s] > 0) cand.push_back(s);
      }
      if (cand.empty()) break;
      const SeqId s = cand[rnd(cand.size())];
      add({s});
      --left[s];
      ++total;
    }
    if (b.empty()) add({0});

    const bool make_invalid = chance(0.05);
    if (make_invalid) {
      Batch bad = b;
      if (chance(0.5) || auto_pos) {
        bad.add(0, 0, {static_cast<SeqId>(p_.n_seq_max)}, false);  // seq id out of range
      } else {
        bad.add(0, next[0] + 1, {0}, false);  // skips a position
      }
      const std::string before = snap();
      auto ctx = mem_->init_batch(bad, 1 + rnd(p_.n_ubatch_max));
      ASSERT_EQ(ctx->status(), MemoryStatus::kInvalidBatch) << ctx->message();
      ASSERT_FALSE(ctx->message().empty());
      ASSERT_EQ(snap(), before);
      ++n_invalid_;
      return;
    }

    // Independent capacity oracle for the child without a window: rows per stream vs free cells.
    bool oracle_fits = true;
    const Child* full = nullptr;
    for (const Child& c : children_) {
      if (!c.evict) full = &c;
    }
    if (full != nullptr) {
      std::vector<uint32_t> need(full->cache->n_stream(), 0);
      for (uint32_t i = 0; i < b.n_tokens(); ++i) ++need[full->cache->stream_of(b.seq_ids(i)[0])];
      for (uint32_t s = 0; s < need.size(); ++s) {
        const KvCells& c = full->cache->cells(s);
        oracle_fits &= need[s] <= c.size() - c.used();
      }
    }

    const uint32_t n_ubatch = 1 + rnd(p_.n_ubatch_max);
    const std::string before = snap();
    auto ctx = mem_->init_batch(b, n_ubatch);
    {
      std::string d = "batch of " + std::to_string(b.n_tokens()) + " rows (";
      for (uint32_t i = 0; i < b.n_tokens() && i < 12; ++i) {
        d += std::to_string(b.seq_ids(i)[0]) + (b.seq_ids(i).size() > 1 ? "+" : "") + ":" +
             std::to_string(b.pos(i)) + " ";
      }
      note(d + ") n_ubatch " + std::to_string(n_ubatch) + " -> " +
           std::string(memory_status_name(ctx->status())));
    }
    if (!ctx->ok()) {
      ASSERT_EQ(ctx->status(), MemoryStatus::kFailedPrepare) << ctx->message();
      ASSERT_EQ(snap(), before) << "a failed init_batch changed the memory";
      if (full != nullptr && !swa_) {
        ASSERT_FALSE(oracle_fits) << "step " << step_ << ": " << ctx->message();
      }
      if (full != nullptr && swa_ && oracle_fits) ++n_swa_only_fail_;
      ++n_failed_prepare_;
      return;
    }
    if (full != nullptr) {
      ASSERT_TRUE(oracle_fits) << "init_batch accepted a batch that cannot fit";
    }

    const uint32_t n_ub = static_cast<uint32_t>(ctx->ubatches().size());
    const bool inject = chance(0.2);
    const uint32_t fail_at = rnd(n_ub);
    const bool fail_after_apply = chance(0.6);
    const uint64_t gen = ++generation_;
    std::vector<RefMemory> refs_before;
    for (const Child& c : children_) refs_before.push_back(c.ref);
    auto restore_refs = [&] {
      for (size_t i = 0; i < children_.size(); ++i) children_[i].ref = refs_before[i];
    };
    for (uint32_t u = 0;; ++u) {
      ASSERT_EQ(ctx->ubatch_index(), u);
      ASSERT_LE(ctx->ubatch().n_tokens(), n_ubatch);
      if (inject && u == fail_at && !fail_after_apply) {
        ctx->rollback();
        ASSERT_EQ(snap(), before) << "rollback before ubatch " << u;
        restore_refs();
        ++n_rollbacks_;
        return;
      }
      const std::vector<Pos> pos_max_before = ref().all_pos_max();
      ASSERT_TRUE(ctx->apply().ok());
      if (inject && u == fail_at) {
        if (chance(0.5)) testing::write_fake_kv(*ctx, kLayers, gen);
        testing::scribble_kv(*ctx, kLayers);  // the failing forward pass half-wrote K/V
        ctx->rollback();
        ASSERT_EQ(snap(), before) << "rollback after applying ubatch " << u << " of " << n_ub;
        restore_refs();
        ++n_rollbacks_;
        return;
      }
      testing::write_fake_kv(*ctx, kLayers, gen);
      const Ubatch& ub = ctx->ubatch();
      for (Child& c : children_) {
        for (uint32_t i = 0; i < ub.n_tokens(); ++i) {
          SeqSet seqs;
          for (SeqId s : ub.seq_ids(i)) seqs.set(s);
          c.ref.add(ub.pos[i], seqs, testing::make_tag(gen, ub.batch_row[i]));
        }
        const std::string diff = c.ref.reconcile(*c.cache, pos_max_before, c.evict);
        ASSERT_EQ(diff, "") << "step " << step_ << " ubatch " << u << trace();
      }
      check_masks(*ctx);
      if (!ctx->next()) break;
    }
    ++n_batches_;
  }

  // Every row of every placement sees exactly the reference entries of its sequence and stream
  // that are causally visible and inside the window; is_masked agrees with build_mask; nothing
  // occupied lies at or beyond n_kv.
  void check_masks(const MemoryContext& ctx) {
    std::set<const KvCacheContext*> seen;
    for (uint32_t il = 0; il < kLayers; ++il) {
      const KvCacheContext* kv = ctx.kv_for_layer(il);
      if (kv == nullptr || !seen.insert(kv).second) continue;
      const Child* child = nullptr;
      for (const Child& c : children_) {
        if (c.cache == &kv->cache()) child = &c;
      }
      ASSERT_NE(child, nullptr);
      const KvCacheConfig& cfg = kv->cache().config();
      const uint32_t il_held = [&] {
        for (uint32_t l = 0; l < kLayers; ++l) {
          if (kv->cache().holds_layer(l)) return l;
        }
        return 0u;
      }();
      const Ubatch& ub = ctx.ubatch();
      for (size_t i = 0; i < kv->placement().size(); ++i) {
        const StreamSlots& sl = kv->placement()[i];
        const uint32_t n_kv = kv->n_kv(sl.stream);
        const KvCells& cells = kv->cache().cells(sl.stream);
        ASSERT_LE(cells.used_max(), n_kv);
        ASSERT_EQ(n_kv % cfg.n_pad == 0 || n_kv == cfg.n_ctx, true);
        std::vector<float> mask;
        kv->build_mask(i, &mask);
        ASSERT_EQ(mask.size(), sl.rows.size() * n_kv);
        const KvRows k0 = kv->k_view(il_held, sl.stream);
        for (size_t r = 0; r < sl.rows.size(); ++r) {
          const uint32_t row = sl.rows[r];
          const SeqId s = ub.seq_id(row);
          const Pos p = ub.pos[row];
          std::multiset<std::pair<Pos, uint64_t>> got, want;
          for (uint32_t cell = 0; cell < n_kv; ++cell) {
            const bool visible = mask[r * n_kv + cell] == 0.0f;
            ASSERT_EQ(visible, !kv->is_masked(sl, static_cast<uint32_t>(r), cell));
            if (!visible) continue;
            uint64_t tag = 0;
            ASSERT_TRUE(testing::decode_row(k0.row(cell), k0.row_bytes, il_held, 'K', &tag));
            got.insert({cells.pos(cell), tag});
          }
          for (const testing::RefEntry& e : child->ref.entries()) {
            if (child->ref.stream_of(e) != sl.stream || !e.seqs.test(s)) continue;
            if (cfg.causal && e.pos > p) continue;
            if (testing::ref_window_hides(cfg.swa_type, cfg.n_swa, e.pos, p)) continue;
            want.insert({e.pos, e.tag});
          }
          ASSERT_EQ(got, want) << "mask of row " << row << " (seq " << s << ", pos " << p << ")";
        }
      }
    }
  }

  void step_seq_op() {
    const uint32_t op = rnd(100);
    Pos hi = 0;
    for (uint32_t s = 0; s < p_.n_seq_max; ++s) hi = std::max(hi, ref().pos_max(s));
    auto rpos = [&]() -> Pos { return chance(0.25) ? -1 : static_cast<Pos>(rnd(hi + 6)); };
    const SeqId seq = static_cast<SeqId>(rnd(p_.n_seq_max));
    const Pos p0 = rpos();
    const Pos p1 = rpos();
    const std::string before = snap();
    Status st;
    bool expect_ok = true;
    if (op < 30) {
      const SeqId s = chance(0.1) ? -1 : seq;
      st = mem_->seq_rm(s, p0, p1);
      if (st.ok()) {
        for (Child& c : children_) c.ref.seq_rm(s, p0, p1);
      }
    } else if (op < 55) {
      const SeqId dst = static_cast<SeqId>(rnd(p_.n_seq_max));
      if (!p_.unified && seq != dst) {
        // Split mode copies into free cells of dst's stream: predict from the reference.
        for (const Child& c : children_) {
          const KvCells& cd = c.cache->cells(c.cache->stream_of(dst));
          if (c.ref.count(seq, p0, p1) > cd.size() - cd.used()) expect_ok = false;
        }
      }
      st = mem_->seq_cp(seq, dst, p0, p1);
      if (st.ok()) {
        for (Child& c : children_) c.ref.seq_cp(seq, dst, p0, p1);
      } else {
        ASSERT_EQ(st.code(), StatusCode::kNoSpace) << st.to_string();
      }
    } else if (op < 60) {
      st = mem_->seq_keep(seq);
      if (st.ok()) {
        for (Child& c : children_) c.ref.seq_keep(seq);
      }
    } else if (op < 80) {
      const Pos delta = static_cast<Pos>(rnd(17)) - 8;
      st = mem_->seq_add(seq, p0, p1, delta);
      if (st.ok()) {
        for (Child& c : children_) c.ref.seq_add(seq, p0, p1, delta);
      }
    } else if (op < 92) {
      const int32_t d = 1 + static_cast<int32_t>(rnd(3));
      st = mem_->seq_div(seq, p0, p1, d);
      if (st.ok()) {
        for (Child& c : children_) c.ref.seq_div(seq, p0, p1, d);
      }
    } else {
      // Outside input that must be refused without a change.
      expect_ok = false;
      switch (rnd(4)) {
        case 0:
          st = mem_->seq_rm(static_cast<SeqId>(p_.n_seq_max), 0, -1);
          break;
        case 1:
          st = mem_->seq_cp(seq, static_cast<SeqId>(p_.n_seq_max + rnd(3)), 0, -1);
          break;
        case 2:
          st = mem_->seq_div(seq, 0, -1, -static_cast<int32_t>(rnd(2)));
          break;
        default:
          st = mem_->seq_add(static_cast<SeqId>(-1 - rnd(3)), 0, -1, 1);
          break;
      }
      ASSERT_FALSE(st.message().empty());
    }
    note("seq op " + std::to_string(op) + " seq " + std::to_string(seq) + " [" +
         std::to_string(p0) + ", " + std::to_string(p1) + ") -> " + st.to_string());
    ASSERT_EQ(st.ok(), expect_ok) << st.to_string() << trace();
    if (!st.ok()) {
      ASSERT_EQ(snap(), before) << "a refused sequence operation changed the memory";
      ++n_refused_ops_;
    } else {
      ++n_seq_ops_;
    }
  }

  void step_update() {
    bool pending = false;
    for (const Child& c : children_) {
      for (const testing::RefEntry& e : c.ref.entries()) pending |= e.shift != 0;
    }
    const std::string before = snap();
    auto ctx = mem_->init_update();
    ASSERT_EQ(ctx->status(), pending ? MemoryStatus::kSuccess : MemoryStatus::kNoUpdate);
    ASSERT_EQ(snap(), before);
    if (!pending) return;
    // The listed (stream, cell, delta) are exactly the cells with a pending shift.
    std::set<const KvCacheContext*> seen;
    for (uint32_t il = 0; il < kLayers; ++il) {
      const KvCacheContext* kv = ctx->kv_for_layer(il);
      if (kv == nullptr || !seen.insert(kv).second) continue;
      std::set<std::tuple<uint32_t, uint32_t, int32_t>> listed, want;
      for (const auto& sh : kv->shifts()) {
        ASSERT_EQ(sh.cells.size(), sh.deltas.size());
        for (size_t i = 0; i < sh.cells.size(); ++i) {
          listed.insert({sh.stream, sh.cells[i], sh.deltas[i]});
        }
      }
      for (uint32_t s = 0; s < kv->cache().n_stream(); ++s) {
        const KvCells& c = kv->cache().cells(s);
        for (uint32_t i = 0; i < c.size(); ++i) {
          if (c.shift(i) != 0) want.insert({s, i, c.shift(i)});
        }
      }
      ASSERT_EQ(listed, want);
    }
    ASSERT_TRUE(ctx->apply().ok());
    if (chance(0.3)) {
      ctx->rollback();
      ASSERT_EQ(snap(), before) << "rollback of an update";
      return;
    }
    for (Child& c : children_) c.ref.clear_shifts();
    ++n_updates_;
  }

  const Param p_;
  std::mt19937 rng_;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<SwaKvCache> swa_;
  Memory* mem_ = nullptr;
  std::vector<Child> children_;
  std::vector<std::string> trace_;
  uint64_t generation_ = 0;
  int step_ = 0;
  // Coverage counters (asserted below so a test cannot pass by never reaching a path).
  int n_batches_ = 0, n_failed_prepare_ = 0, n_invalid_ = 0, n_rollbacks_ = 0;
  int n_seq_ops_ = 0, n_refused_ops_ = 0, n_updates_ = 0, n_swa_only_fail_ = 0;
};

class KvPropertyTest : public ::testing::TestWithParam<Param> {};

TEST_P(KvPropertyTest, RandomBatchesAndSequenceOpsMatchTheReference) {
  const Param& p = GetParam();
  int batches = 0, failed = 0, rollbacks = 0, seq_ops = 0, refused = 0, updates = 0;
  uint64_t evicted = 0;
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    PropertyRun run(p, seed * 7919 + 13);
    run.run(700);
    ASSERT_FALSE(HasFailure()) << p.name << " seed " << seed;
    batches += run.n_batches_;
    failed += run.n_failed_prepare_;
    rollbacks += run.n_rollbacks_;
    seq_ops += run.n_seq_ops_;
    refused += run.n_refused_ops_ + run.n_invalid_;
    updates += run.n_updates_;
    for (const Child& c : run.children_) evicted += c.ref.n_evicted();
  }
  std::printf(
      "%-22s batches %5d  failed_prepare %4d  rollbacks %4d  seq_ops %5d  refused %4d  "
      "updates %4d  evicted %6llu\n",
      p.name, batches, failed, rollbacks, seq_ops, refused, updates,
      static_cast<unsigned long long>(evicted));
  EXPECT_GT(batches, 1000);
  EXPECT_GT(failed, 10);
  EXPECT_GT(rollbacks, 100);
  EXPECT_GT(seq_ops, 1000);
  EXPECT_GT(refused, 50);
  EXPECT_GT(updates, 30);
  const bool windowed = p.swa_cache ? !p.swa_full : p.swa_type != SwaType::kNone;
  if (windowed) {
    EXPECT_GT(evicted, 500u);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, KvPropertyTest,
    ::testing::Values(
        Param{"unified", false, true, SwaType::kNone, 0, 4, 64, 12, GgmlType::F16, GgmlType::F16},
        Param{"split", false, false, SwaType::kNone, 0, 4, 24, 12, GgmlType::Q8_0, GgmlType::F16},
        Param{"unified_swa", false, true, SwaType::kStandard, 6, 3, 40, 10, GgmlType::F16,
              GgmlType::Q4_0},
        Param{"split_chunked", false, false, SwaType::kChunked, 8, 3, 14, 8, GgmlType::BF16,
              GgmlType::F32},
        Param{"swa_cache_unified", true, true, SwaType::kStandard, 6, 3, 64, 8, GgmlType::F16,
              GgmlType::F16},
        Param{"swa_cache_split", true, false, SwaType::kStandard, 8, 4, 48, 8, GgmlType::Q8_0,
              GgmlType::Q8_0},
        Param{"swa_cache_split_full", true, false, SwaType::kChunked, 5, 3, 40, 8, GgmlType::F16,
              GgmlType::F16, true}),
    [](const ::testing::TestParamInfo<Param>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mnemo
