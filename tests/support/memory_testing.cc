#include "support/memory_testing.h"

#include <cstring>
#include <map>
#include <tuple>

namespace mnemo::testing {

namespace {

uint64_t splitmix(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t key(uint32_t il, char kind) {
  uint64_t x = il * 2 + (kind == 'K' ? 0 : 1) + 0x1234;
  return splitmix(x);
}

template <typename T>
void put(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}

void put_seqs(std::string* out, const SeqSet& s) {
  s.for_each([&](SeqId id) { put(out, static_cast<int16_t>(id)); });
  put(out, int16_t{-1});
}

}  // namespace

bool ref_window_hides(SwaType t, uint32_t n_swa, Pos pos_cell, Pos pos_token) {
  const int64_t p = pos_token, c = pos_cell, w = n_swa;
  if (t == SwaType::kStandard) return !(c > p - w);
  if (t == SwaType::kChunked) return !(c >= p - p % w);
  return false;
}

void fill_row(uint8_t* row, size_t n_bytes, uint32_t il, char kind, uint64_t tag) {
  uint64_t state = tag * 31 + key(il, kind);
  const uint64_t head = tag ^ key(il, kind);
  for (size_t b = 0; b < n_bytes; b += 8) {
    const uint64_t w = b == 0 ? head : splitmix(state);
    std::memcpy(row + b, &w, std::min<size_t>(8, n_bytes - b));
  }
}

bool decode_row(const uint8_t* row, size_t n_bytes, uint32_t il, char kind, uint64_t* tag) {
  CHECK(n_bytes >= 8);
  uint64_t head;
  std::memcpy(&head, row, 8);
  *tag = head ^ key(il, kind);
  // Regenerate fill_row's stream word by word and compare as we go.
  uint64_t state = *tag * 31 + key(il, kind);
  for (size_t b = 8; b < n_bytes; b += 8) {
    const uint64_t w = splitmix(state);
    if (std::memcmp(row + b, &w, std::min<size_t>(8, n_bytes - b)) != 0) return false;
  }
  return true;
}

void write_fake_kv(const MemoryContext& ctx, uint32_t n_layer, uint64_t generation) {
  const Ubatch& ub = ctx.ubatch();
  for (uint32_t il = 0; il < n_layer; ++il) {
    const KvCacheContext* kv = ctx.kv_for_layer(il);
    if (kv == nullptr) continue;
    for (const StreamSlots& sl : kv->placement()) {
      const KvRows k = kv->k_view(il, sl.stream);
      const KvRows v = kv->v_view(il, sl.stream);
      for (size_t j = 0; j < sl.rows.size(); ++j) {
        const uint64_t tag = make_tag(generation, ub.batch_row[sl.rows[j]]);
        for (char kind : {'K', 'V'}) {
          const KvRows& view = kind == 'K' ? k : v;
          std::vector<uint8_t> row(view.row_bytes);
          fill_row(row.data(), row.size(), il, kind, tag);
          view.set_rows(sl.cells[j], 1, row.data());
        }
      }
    }
  }
}

void scribble_kv(const MemoryContext& ctx, uint32_t n_layer) {
  for (uint32_t il = 0; il < n_layer; ++il) {
    const KvCacheContext* kv = ctx.kv_for_layer(il);
    if (kv == nullptr) continue;
    for (const StreamSlots& sl : kv->placement()) {
      for (uint32_t cell : sl.cells) {
        for (char kind : {'K', 'V'}) {
          const KvRows view = kind == 'K' ? kv->k_view(il, sl.stream) : kv->v_view(il, sl.stream);
          const std::vector<uint8_t> row(view.row_bytes, kind == 'K' ? 0xAB : 0xCD);
          view.set_rows(cell, 1, row.data());
        }
      }
    }
  }
}

std::string snapshot(const KvCache& cache) {
  std::string out;
  const uint32_t n_layer = static_cast<uint32_t>(cache.config().n_embd_k_gqa.size());
  for (uint32_t s = 0; s < cache.n_stream(); ++s) {
    const KvCells& c = cache.cells(s);
    put(&out, c.head());
    put(&out, c.used());
    put(&out, c.used_max());
    put(&out, c.n_shifted());
    for (uint32_t i = 0; i < c.size(); ++i) {
      put(&out, c.pos(i));
      put(&out, c.shift(i));
      put_seqs(&out, c.seqs(i));
      if (c.is_empty(i)) continue;
      for (uint32_t il = 0; il < n_layer; ++il) {
        if (!cache.holds_layer(il)) continue;
        const KvRows k = cache.k_view(il, s);
        const KvRows v = cache.v_view(il, s);
        for (const KvRows& view : {k, v}) {
          std::vector<uint8_t> row(view.row_bytes);
          view.get_rows(i, 1, row.data());
          out.append(reinterpret_cast<const char*>(row.data()), row.size());
        }
      }
    }
    for (SeqId q = 0; q < static_cast<SeqId>(cache.n_seq_max()); ++q) {
      put(&out, c.seq_pos_min(q));
      put(&out, c.seq_pos_max(q));
      put(&out, c.seq_n_cells(q));
    }
  }
  return out;
}

std::string snapshot(const SwaKvCache& cache) {
  return snapshot(cache.base()) + "|" + snapshot(cache.swa());
}

// --- reference ---------------------------------------------------------------------------------

namespace {

bool in_range(Pos p, Pos p0, Pos p1) { return (p0 < 0 || p >= p0) && (p1 < 0 || p < p1); }

}  // namespace

Pos RefMemory::pos_min(SeqId s) const {
  Pos m = -1;
  for (const RefEntry& e : entries_) {
    if (e.seqs.test(s) && (m < 0 || e.pos < m)) m = e.pos;
  }
  return m;
}

Pos RefMemory::pos_max(SeqId s) const {
  Pos m = -1;
  for (const RefEntry& e : entries_) {
    if (e.seqs.test(s) && e.pos > m) m = e.pos;
  }
  return m;
}

std::vector<Pos> RefMemory::all_pos_max() const {
  std::vector<Pos> m(n_seq_max_);
  for (uint32_t s = 0; s < n_seq_max_; ++s) m[s] = pos_max(static_cast<SeqId>(s));
  return m;
}

void RefMemory::seq_rm(SeqId seq, Pos p0, Pos p1) {
  std::vector<RefEntry> kept;
  for (RefEntry e : entries_) {
    if (in_range(e.pos, p0, p1)) {
      if (seq < 0) {
        e.seqs = SeqSet();
      } else {
        e.seqs.reset(seq);
      }
    }
    if (e.seqs.any()) kept.push_back(e);
  }
  entries_ = std::move(kept);
}

void RefMemory::seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) {
  if (src == dst) return;
  std::vector<RefEntry> copies;
  for (RefEntry& e : entries_) {
    if (!e.seqs.test(src) || !in_range(e.pos, p0, p1)) continue;
    if (unified_) {
      e.seqs.set(dst);  // shared cell
    } else {
      copies.push_back({e.pos, SeqSet::of(dst), e.shift, e.tag});  // a copy in dst's stream
    }
  }
  entries_.insert(entries_.end(), copies.begin(), copies.end());
}

uint32_t RefMemory::count(SeqId seq, Pos p0, Pos p1) const {
  uint32_t n = 0;
  for (const RefEntry& e : entries_) n += e.seqs.test(seq) && in_range(e.pos, p0, p1);
  return n;
}

void RefMemory::seq_keep(SeqId seq) {
  std::vector<RefEntry> kept;
  for (RefEntry e : entries_) {
    if (e.seqs.test(seq)) kept.push_back({e.pos, SeqSet::of(seq), e.shift, e.tag});
  }
  entries_ = std::move(kept);
}

void RefMemory::seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) {
  if (delta == 0) return;
  std::vector<RefEntry> kept;
  for (RefEntry e : entries_) {
    if (e.seqs.test(seq) && in_range(e.pos, p0, p1)) {
      e.pos += delta;
      e.shift += delta;
      if (e.pos < 0) continue;  // the whole cell goes, for every sequence in it
    }
    kept.push_back(e);
  }
  entries_ = std::move(kept);
}

void RefMemory::seq_div(SeqId seq, Pos p0, Pos p1, int32_t d) {
  for (RefEntry& e : entries_) {
    if (e.seqs.test(seq) && in_range(e.pos, p0, p1)) {
      const Pos np = e.pos / d;
      e.shift += np - e.pos;
      e.pos = np;
    }
  }
}

void RefMemory::clear_shifts() {
  for (RefEntry& e : entries_) e.shift = 0;
}

std::string RefMemory::reconcile(const KvCache& cache, const std::vector<Pos>& pos_max_before,
                                 bool swa_evict) {
  using Key = std::tuple<uint32_t, Pos, std::string, int32_t, uint64_t>;
  auto seq_key = [](const SeqSet& s) {
    std::string k;
    s.for_each([&](SeqId id) { k += std::to_string(id) + ","; });
    return k;
  };
  const uint32_t n_layer = static_cast<uint32_t>(cache.config().n_embd_k_gqa.size());
  std::map<Key, int> cells;
  for (uint32_t s = 0; s < cache.n_stream(); ++s) {
    const KvCells& c = cache.cells(s);
    for (uint32_t i = 0; i < c.size(); ++i) {
      if (c.is_empty(i)) continue;
      uint64_t tag = 0;
      bool have_tag = false;
      for (uint32_t il = 0; il < n_layer; ++il) {
        if (!cache.holds_layer(il)) continue;
        for (char kind : {'K', 'V'}) {
          const KvRows v = kind == 'K' ? cache.k_view(il, s) : cache.v_view(il, s);
          uint64_t t = 0;
          std::vector<uint8_t> row(v.row_bytes);
          v.get_rows(i, 1, row.data());
          if (!decode_row(row.data(), row.size(), il, kind, &t) || (have_tag && t != tag)) {
            return "stream " + std::to_string(s) + " cell " + std::to_string(i) + " pos " +
                   std::to_string(c.pos(i)) + ": layer " + std::to_string(il) + " " + kind +
                   " row does not hold the pattern of its token";
          }
          tag = t;
          have_tag = true;
        }
      }
      ++cells[Key{s, c.pos(i), seq_key(c.seqs(i)), c.shift(i), tag}];
    }
  }
  std::vector<RefEntry> kept;
  std::vector<RefEntry> missing;
  for (const RefEntry& e : entries_) {
    auto it = cells.find(Key{stream_of(e), e.pos, seq_key(e.seqs), e.shift, e.tag});
    if (it == cells.end()) {
      missing.push_back(e);
      continue;
    }
    if (--it->second == 0) cells.erase(it);
    kept.push_back(e);
  }
  if (!cells.empty()) {
    const Key& k = cells.begin()->first;
    return "the cache holds a cell the reference does not: stream " +
           std::to_string(std::get<0>(k)) + " pos " + std::to_string(std::get<1>(k)) + " seqs {" +
           std::get<2>(k) + "} shift " + std::to_string(std::get<3>(k));
  }
  const KvCacheConfig& cfg = cache.config();
  for (const RefEntry& e : missing) {
    std::string why;
    if (!swa_evict) why = "a cache without a window lost it";
    e.seqs.for_each([&](SeqId s) {
      if (!why.empty()) return;
      if (!ref_window_hides(cfg.swa_type, cfg.n_swa, e.pos, pos_max_before[s] + 1)) {
        why = "seq " + std::to_string(s) + " (pos_max " + std::to_string(pos_max_before[s]) +
              ") still sees it";
      } else if (cache.seq_pos_min(s) >= 0 && e.pos > cache.seq_pos_min(s)) {
        why = "seq " + std::to_string(s) + " still holds older position " +
              std::to_string(cache.seq_pos_min(s));
      }
    });
    if (!why.empty()) {
      return "pos " + std::to_string(e.pos) + " seqs {" + seq_key(e.seqs) +
             "} is missing from the cache: " + why;
    }
  }
  n_evicted_ += missing.size();
  entries_ = std::move(kept);
  return "";
}

}  // namespace mnemo::testing
