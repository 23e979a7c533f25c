// Helpers shared by the state, corruption and requantization tests (test-only, header-only).
//
// Independent references: K/V values come from a closed-form generator (kv_value), rotation is
// checked against the explicit Walsh-Hadamard matrix built from bit parities (ref_hadamard), and
// contents are compared per sequence (position -> rows) rather than per cell index, so a
// restore may place cells anywhere.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "memory/kv_cache.h"
#include "memory/swa_kv_cache.h"
#include "mnemo/state.h"
#include "support/memory_testing.h"

namespace mnemo::testing {

inline constexpr uint32_t kLayers = 2;
inline constexpr uint32_t kHead = 32;  // rotation size used by the tests

/// Two layers with different widths (K 64 / V 64, K 128 / V 64): per-layer layout is exercised.
inline KvCacheConfig state_config(uint32_t n_ctx, uint32_t n_seq_max, bool unified,
                                  GgmlType k = GgmlType::F16, GgmlType v = GgmlType::F16,
                                  uint32_t rotation_dim = 0) {
  KvCacheConfig c;
  c.n_ctx = n_ctx;
  c.n_seq_max = n_seq_max;
  c.unified = unified;
  c.k_type = k;
  c.v_type = v;
  c.n_embd_k_gqa = {64, 128};
  c.n_embd_v_gqa = {64, 64};
  c.head_dim_v = kHead;  // V as 2 planes (kv_storage.h) for every type
  c.n_pad = 8;
  c.rotation_dim = rotation_dim;
  return c;
}

/// A sliding-window cache of the state_config layers: a standard window of 8 on layer 0, n_ctx
/// cells per stream, ubatches of at most 16 rows.
inline SwaKvCacheConfig swa_state_config(uint32_t n_ctx, uint32_t n_seq_max, bool unified) {
  SwaKvCacheConfig c;
  c.kv.n_ctx = n_ctx;
  c.kv.n_seq_max = n_seq_max;
  c.kv.unified = unified;
  c.kv.n_embd_k_gqa = {64, 128};
  c.kv.n_embd_v_gqa = {64, 64};
  c.kv.head_dim_v = kHead;
  c.is_swa_layer = [](uint32_t il) { return il == 0; };
  c.kv.swa_type = SwaType::kStandard;
  c.kv.n_swa = 8;
  c.n_ubatch = 16;
  c.kv.n_pad = 8;
  return c;
}

inline ModelFingerprint test_fingerprint() {
  ModelFingerprint fp;
  fp.arch = "test";
  fp.n_embd_k_gqa = {64, 128};
  fp.n_embd_v_gqa = {64, 64};
  fp.hparams_hash = 0x1234abcd5678ef00ull;
  return fp;
}

/// The state of sequence s of m (state_seq_get_data) under fp, of the size state_seq_get_size
/// announced. CHECK-fails on an error.
inline std::vector<uint8_t> save_seq(const Memory& m, SeqId s,
                                     const ModelFingerprint& fp = test_fingerprint()) {
  Result<size_t> n = state_seq_get_size(m, fp, s);
  CHECK(n.ok()) << n.status().to_string();
  std::vector<uint8_t> buf(*n);
  Result<size_t> w = state_seq_get_data(m, fp, s, buf);
  CHECK(w.ok()) << w.status().to_string();
  CHECK_EQ(*w, *n);
  return buf;
}

/// The state of the whole of m (state_get_data) under fp, as save_seq.
inline std::vector<uint8_t> save_whole(const Memory& m,
                                       const ModelFingerprint& fp = test_fingerprint()) {
  Result<size_t> n = state_get_size(m, fp);
  CHECK(n.ok()) << n.status().to_string();
  std::vector<uint8_t> buf(*n);
  Result<size_t> w = state_get_data(m, fp, buf);
  CHECK(w.ok()) << w.status().to_string();
  CHECK_EQ(*w, *n);
  return buf;
}

/// A KvCache of a valid config (create_or_die).
inline std::unique_ptr<KvCache> make_cache(const KvCacheConfig& c) {
  return create_or_die<KvCache>(c);
}

/// Element j of the K or V row written for `tag` in layer il: uniform-ish in [-1, 1] from a hash,
/// with one outlier channel per 32 (x 12) as real K/V activations have.
inline float kv_value(uint64_t tag, uint32_t il, char kind, uint32_t j) {
  uint64_t x = tag * 0x9E3779B97F4A7C15ull ^ (uint64_t(il) << 40) ^ (uint64_t(kind) << 48) ^ j;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  const float u = float(x & 0xFFFFFF) / float(0xFFFFFF) * 2.0f - 1.0f;
  return (j % 32 == 7) ? u * 12.0f : u;
}

/// y = H_d x per block of d, with H[i][j] = (-1)^popcount(i & j) / sqrt(d) built explicitly.
inline std::vector<float> ref_hadamard(const std::vector<float>& x, uint32_t d) {
  std::vector<float> y(x.size(), 0.0f);
  const double norm = 1.0 / std::sqrt(double(d));
  for (size_t b = 0; b < x.size(); b += d) {
    for (uint32_t i = 0; i < d; ++i) {
      double acc = 0;
      for (uint32_t j = 0; j < d; ++j) {
        acc += (std::popcount(i & j) % 2 ? -1.0 : 1.0) * x[b + j];
      }
      y[b + i] = float(acc * norm);
    }
  }
  return y;
}

/// The fake forward pass with real values: writes kv_value rows of make_tag(gen, batch_row),
/// rotated per kHead-element head when the stream is rotated, quantized to the stream's type.
inline void write_real_kv(const MemoryContext& ctx, uint32_t n_layer, uint64_t generation) {
  const Ubatch& ub = ctx.ubatch();
  for (uint32_t il = 0; il < n_layer; ++il) {
    const KvCacheContext* kv = ctx.kv_for_layer(il);
    if (kv == nullptr) continue;
    for (const StreamSlots& sl : kv->placement()) {
      const uint32_t rot = kv->cache().storage().rotation(sl.stream);
      for (char kind : {'K', 'V'}) {
        const KvRows view = kind == 'K' ? kv->k_view(il, sl.stream) : kv->v_view(il, sl.stream);
        for (size_t j = 0; j < sl.rows.size(); ++j) {
          const uint64_t tag = make_tag(generation, ub.batch_row[sl.rows[j]]);
          std::vector<float> x(view.n_embd);
          for (uint32_t e = 0; e < view.n_embd; ++e) x[e] = kv_value(tag, il, kind, e);
          if (rot != 0) x = ref_hadamard(x, rot);
          std::vector<uint8_t> row(view.row_bytes);
          CHECK(quantize_row(view.type, x.data(), row.data(), view.n_embd).ok());
          view.set_rows(sl.cells[j], 1, row.data());
        }
      }
    }
  }
}

/// Decodes n tokens at the end of sequence s (fake model: real values or byte patterns).
inline void fill(Memory& m, SeqId s, int n, uint64_t gen, bool real = true) {
  Batch b;
  const Pos p0 = m.seq_pos_max(s) + 1;
  for (int i = 0; i < n; ++i) b.add(1, p0 + i, {s}, false);
  auto ctx = m.init_batch(b, 16);
  CHECK(ctx->ok()) << ctx->message();
  do {
    CHECK(ctx->apply().ok());
    if (real) {
      write_real_kv(*ctx, kLayers, gen);
    } else {
      write_fake_kv(*ctx, kLayers, gen);
    }
  } while (ctx->next());
}

/// One cell of a sequence as stored: position, pending shift, K and V row bytes of every layer.
struct StoredCell {
  Pos pos = 0;
  int32_t shift = 0;
  std::string rows;
  bool operator==(const StoredCell&) const = default;
};

/// Sequence s's cells in position order, as stored bytes (exact comparisons).
inline std::vector<StoredCell> seq_bytes(const KvCache& c, SeqId s) {
  std::vector<StoredCell> out;
  const uint32_t st = c.stream_of(s);
  std::vector<uint32_t> cells;
  c.cells(st).seq_cells(s, 0, INT32_MAX, &cells);
  for (uint32_t cell : cells) {
    StoredCell sc{c.cells(st).pos(cell), c.cells(st).shift(cell), {}};
    for (uint32_t l = 0; l < c.storage().n_layer(); ++l) {
      const KvRows k = c.storage().k(l, st);
      const KvRows v = c.storage().v(l, st);
      for (const KvRows& view : {k, v}) {
        std::vector<uint8_t> row(view.row_bytes);
        view.get_rows(cell, 1, row.data());
        sc.rows.append(reinterpret_cast<const char*>(row.data()), row.size());
      }
    }
    out.push_back(std::move(sc));
  }
  return out;
}

/// Sequence s's values in position order: per cell, every layer's K then V row dequantized and
/// un-rotated with the explicit matrix (what the model would see).
inline std::vector<std::vector<float>> seq_values(const KvCache& c, SeqId s,
                                                  std::vector<Pos>* pos = nullptr) {
  std::vector<std::vector<float>> out;
  const uint32_t st = c.stream_of(s);
  const uint32_t rot = c.storage().rotation(st);
  std::vector<uint32_t> cells;
  c.cells(st).seq_cells(s, 0, INT32_MAX, &cells);
  for (uint32_t cell : cells) {
    if (pos) pos->push_back(c.cells(st).pos(cell));
    std::vector<float> all;
    for (uint32_t l = 0; l < c.storage().n_layer(); ++l) {
      for (const KvRows& view : {c.storage().k(l, st), c.storage().v(l, st)}) {
        std::vector<float> x(view.n_embd);
        std::vector<uint8_t> row(view.row_bytes);
        view.get_rows(cell, 1, row.data());
        CHECK(dequantize_row(view.type, row.data(), x.data(), view.n_embd).ok());
        if (rot != 0) x = ref_hadamard(x, rot);
        all.insert(all.end(), x.begin(), x.end());
      }
    }
    out.push_back(std::move(all));
  }
  return out;
}

/// The values kv_value generated for the tags of a sequence filled by fill(): per cell in
/// position order, layer by layer K then V (the independent reference of seq_values).
inline std::vector<float> ref_cell_values(uint64_t tag) {
  std::vector<float> all;
  const uint32_t widths[2][2] = {{64, 64}, {128, 64}};
  for (uint32_t l = 0; l < kLayers; ++l) {
    for (int kind = 0; kind < 2; ++kind) {
      for (uint32_t e = 0; e < widths[l][kind]; ++e) {
        all.push_back(kv_value(tag, l, kind == 0 ? 'K' : 'V', e));
      }
    }
  }
  return all;
}

/// Relative RMS error of a against the reference r.
inline double rel_rms(const std::vector<float>& a, const std::vector<float>& r) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += double(a[i] - r[i]) * double(a[i] - r[i]);
    den += double(r[i]) * double(r[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

/// Everything observable: cells, rows (testing::snapshot) plus every stream's types and rotation.
inline std::string full_snapshot(const KvCache& c) {
  std::string s = snapshot(c);
  for (uint32_t st = 0; st < c.n_stream(); ++st) {
    s += std::to_string(uint32_t(c.storage().k_type(st))) + "/" +
         std::to_string(uint32_t(c.storage().v_type(st))) + "/" +
         std::to_string(c.storage().rotation(st)) + ";";
  }
  return s;
}
inline std::string full_snapshot(const SwaKvCache& c) {
  return full_snapshot(c.base()) + "|" + full_snapshot(c.swa());
}

/// Checks what KvCells keeps derived (used, used_max, per-sequence min / max) against the cells
/// themselves; "" or what differs. After a successful restore the cache must be consistent.
inline std::string check_consistent(const KvCache& c) {
  for (uint32_t st = 0; st < c.n_stream(); ++st) {
    const KvCells& cells = c.cells(st);
    uint32_t used = 0, used_max = 0;
    std::map<SeqId, std::pair<Pos, Pos>> range;
    for (uint32_t i = 0; i < cells.size(); ++i) {
      if (cells.is_empty(i)) continue;
      ++used;
      used_max = i + 1;
      cells.seqs(i).for_each([&](SeqId q) {
        auto it = range.find(q);
        if (it == range.end()) {
          range[q] = {cells.pos(i), cells.pos(i)};
        } else {
          it->second.first = std::min(it->second.first, cells.pos(i));
          it->second.second = std::max(it->second.second, cells.pos(i));
        }
      });
    }
    if (used != cells.used() || used_max != cells.used_max()) return "stream counters";
    for (SeqId q = 0; q < SeqId(c.n_seq_max()); ++q) {
      auto it = range.find(q);
      const Pos lo = it == range.end() ? -1 : it->second.first;
      const Pos hi = it == range.end() ? -1 : it->second.second;
      if (cells.seq_pos_min(q) != lo || cells.seq_pos_max(q) != hi) return "seq range";
    }
  }
  return "";
}

/// The memories the fuzz target restores into (tests/fuzz/fuzz_state.cc), filled the same way
/// every time: a split KvCache (2 sequences x 16 cells, K q8_0 / V f16, rotation 32) and a
/// unified sliding-window cache (window 8 on layer 0, 2 sequences, 32 cells). Its seed corpus
/// (tests/fuzz/corpus/state/) is written by StateTest.FuzzCorpusIsValid.
struct FuzzMemories {
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<SwaKvCache> swa;
};

inline FuzzMemories make_fuzz_memories() {
  FuzzMemories m;
  m.kv = make_cache(state_config(16, 2, false, GgmlType::Q8_0, GgmlType::F16, kHead));
  fill(*m.kv, 0, 5, 1, false);
  fill(*m.kv, 1, 3, 2, false);
  m.swa = create_or_die<SwaKvCache>(swa_state_config(32, 2, true));
  fill(*m.swa, 0, 10, 3, false);
  fill(*m.swa, 1, 4, 4, false);
  return m;
}

}  // namespace mnemo::testing
