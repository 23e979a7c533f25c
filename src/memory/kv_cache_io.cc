// KvCache state parts: KVPT, then per stream block KVCL (cell records) and one KVLY per held
// layer (K rows then V rows). Byte layout: docs/formats/state.md; protocol: memory.h.
//
// Reading is done twice by state.cc. The dry run parses, bounds-checks, verifies checksums and
// plans placement without changing anything; the apply run repeats the same parse, writes rows
// into the planned cells (converting types and rotation when they differ) and commits the cell
// metadata at the end.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "memory/kv_cache.h"
#include "memory/kv_rotation.h"
#include "memory/pos_range.h"
#include "mnemo/state_io.h"

namespace mnemo {

namespace sf = state_format;

namespace {

// Rows are read in views of at most this many bytes (one buffer for file sources).
constexpr size_t kChunkBytes = size_t{1} << 20;

const char* role_name(sf::PartRole r) {
  switch (r) {
    case sf::PartRole::kKv:
      return "kv";
    case sf::PartRole::kKvBase:
      return "kv_base";
    case sf::PartRole::kKvSwa:
      return "kv_swa";
  }
  return "unknown";
}

// One layer as recorded in KVCL.
struct LayerInfo {
  uint32_t il = 0;
  GgmlType k_type = GgmlType::F16;
  GgmlType v_type = GgmlType::F16;
  uint32_t n_embd_k = 0;
  uint32_t n_embd_v = 0;
  uint64_t k_row = 0;
  uint64_t v_row = 0;
};

// One cell record of KVCL.
struct CellInfo {
  Pos pos = 0;
  int32_t shift = 0;
  SeqSet seqs;
};

// A destination row: (stream, cell).
struct Target {
  uint32_t stream;
  uint32_t cell;
};

}  // namespace

uint32_t KvCache::rotation_for(GgmlType k_type, GgmlType v_type) const {
  return kv_rotation_for(config_.rotation_dim, k_type, v_type);
}

// --- writing -----------------------------------------------------------------------------------

Status KvCache::state_write(StateWriter& w, const StateWriteSpec& spec) const {
  return state_write_part(w, spec, sf::PartRole::kKv);
}

Status KvCache::state_write_part(StateWriter& w, const StateWriteSpec& spec,
                                 sf::PartRole role) const {
  struct Block {
    uint32_t stream;
    std::vector<uint32_t> cells;  // in the order written
  };
  std::vector<Block> blocks;
  if (spec.scope == sf::Scope::kSequence) {
    CHECK(spec.seq >= 0 && uint32_t(spec.seq) < config_.n_seq_max);
    Block& b = blocks.emplace_back();
    b.stream = stream_of(spec.seq);
    cells_[b.stream].seq_cells(spec.seq, 0, INT32_MAX, &b.cells);  // ascending (pos, cell)
  } else {
    for (uint32_t s = 0; s < n_stream(); ++s) {
      const KvCells& c = cells_[s];
      if (c.used() == 0) continue;
      Block& b = blocks.emplace_back();
      b.stream = s;
      for (uint32_t i = 0; i < c.used_max(); ++i) {
        if (!c.is_empty(i)) b.cells.push_back(i);
      }
    }
  }

  for (const auto& t : {spec.k_type, spec.v_type}) {
    if (t && !is_supported_kv_type(*t)) {
      return Status::invalid_argument(std::string("state: ") + std::string(type_name(*t)) +
                                      " is not a K/V cache type");
    }
  }
  const bool convert = spec.k_type.has_value() || spec.v_type.has_value();
  for (uint32_t l = 0; convert && l < storage_.n_layer(); ++l) {
    const KvStorage::Layer& li = storage_.layer(l);
    if (spec.k_type) MNEMO_RETURN_IF_ERROR(check_row_shape(*spec.k_type, li.n_embd_k));
    if (spec.v_type) MNEMO_RETURN_IF_ERROR(check_row_shape(*spec.v_type, li.n_embd_v));
  }

  MNEMO_RETURN_IF_ERROR(w.begin_section(sf::kTagKvPart, sf::kKvPartBytes));
  MNEMO_RETURN_IF_ERROR(w.put_u32(uint32_t(role)));
  MNEMO_RETURN_IF_ERROR(w.put_u32(config_.unified ? 1 : 0));
  MNEMO_RETURN_IF_ERROR(w.put_u32(n_stream()));
  MNEMO_RETURN_IF_ERROR(w.put_u32(config_.n_ctx));
  MNEMO_RETURN_IF_ERROR(w.put_u32(uint32_t(config_.swa_type)));
  MNEMO_RETURN_IF_ERROR(w.put_u32(config_.n_swa));
  MNEMO_RETURN_IF_ERROR(w.put_u32(uint32_t(blocks.size())));
  MNEMO_RETURN_IF_ERROR(w.end_section());

  const uint32_t n_layer = storage_.n_layer();
  for (const Block& b : blocks) {
    const KvCells& c = cells_[b.stream];
    const uint32_t s = b.stream;
    // The rows as written: the stream's own types and rotation, or the spec's (converted).
    const uint32_t src_rot = storage_.rotation(s);
    auto out_type = [&](const KvRows& view, bool is_k) {
      return (is_k ? spec.k_type : spec.v_type).value_or(view.type);
    };
    const uint32_t out_rot =
        !convert || n_layer == 0
            ? src_rot
            : rotation_for(out_type(storage_.k(0, s), true), out_type(storage_.v(0, s), false));
    // KVCL: src_stream, rotation, n_layer, layer infos, n_cells, cell records.
    uint64_t len = 3 * 4 + uint64_t(n_layer) * sf::kKvLayerInfoBytes + 4;
    for (uint32_t cell : b.cells) {
      const uint32_t n_seq = spec.scope == sf::Scope::kSequence ? 1 : c.seqs(cell).count();
      len += sf::kKvCellFixedBytes + 4 * uint64_t(n_seq);
    }
    MNEMO_RETURN_IF_ERROR(w.begin_section(sf::kTagKvCells, len));
    MNEMO_RETURN_IF_ERROR(w.put_u32(s));
    MNEMO_RETURN_IF_ERROR(w.put_u32(out_rot));
    MNEMO_RETURN_IF_ERROR(w.put_u32(n_layer));
    for (uint32_t l = 0; l < n_layer; ++l) {
      const KvRows k = storage_.k(l, s);
      const KvRows v = storage_.v(l, s);
      const GgmlType kt = out_type(k, true);
      const GgmlType vt = out_type(v, false);
      MNEMO_RETURN_IF_ERROR(w.put_u32(storage_.layer(l).il));
      MNEMO_RETURN_IF_ERROR(w.put_u32(uint32_t(kt)));
      MNEMO_RETURN_IF_ERROR(w.put_u32(uint32_t(vt)));
      MNEMO_RETURN_IF_ERROR(w.put_u32(k.n_embd));
      MNEMO_RETURN_IF_ERROR(w.put_u32(v.n_embd));
      MNEMO_RETURN_IF_ERROR(w.put_u64(row_size(kt, k.n_embd)));
      MNEMO_RETURN_IF_ERROR(w.put_u64(row_size(vt, v.n_embd)));
    }
    MNEMO_RETURN_IF_ERROR(w.put_u32(uint32_t(b.cells.size())));
    for (uint32_t cell : b.cells) {
      MNEMO_RETURN_IF_ERROR(w.put_i32(c.pos(cell)));
      MNEMO_RETURN_IF_ERROR(w.put_i32(c.shift(cell)));
      if (spec.scope == sf::Scope::kSequence) {
        MNEMO_RETURN_IF_ERROR(w.put_u32(1));
        MNEMO_RETURN_IF_ERROR(w.put_i32(spec.seq));
      } else {
        MNEMO_RETURN_IF_ERROR(w.put_u32(c.seqs(cell).count()));
        Status st;
        c.seqs(cell).for_each([&](SeqId q) {
          if (st.ok()) st = w.put_i32(q);
        });
        MNEMO_RETURN_IF_ERROR(st);
      }
    }
    MNEMO_RETURN_IF_ERROR(w.end_section());

    // KVLY per layer: il, K rows, V rows. Runs of consecutive cells are one contiguous put;
    // converted rows go one by one through a scratch row.
    const uint64_t n = b.cells.size();
    std::vector<uint8_t> row_out;
    std::vector<float> scratch;
    for (uint32_t l = 0; l < n_layer; ++l) {
      const KvRows k = storage_.k(l, s);
      const KvRows v = storage_.v(l, s);
      const size_t k_out = row_size(out_type(k, true), k.n_embd);
      const size_t v_out = row_size(out_type(v, false), v.n_embd);
      MNEMO_RETURN_IF_ERROR(w.begin_section(sf::kTagKvLayer, 4 + n * (uint64_t(k_out) + v_out)));
      MNEMO_RETURN_IF_ERROR(w.put_u32(storage_.layer(l).il));
      for (int kind = 0; kind < 2; ++kind) {
        const KvRows& view = kind == 0 ? k : v;
        const GgmlType ot = out_type(view, kind == 0);
        const size_t out_bytes = kind == 0 ? k_out : v_out;
        if (w.counts_only()) {
          MNEMO_RETURN_IF_ERROR(w.skip(n * out_bytes));
          continue;
        }
        if (ot != view.type || out_rot != src_rot) {
          row_out.resize(out_bytes);
          scratch.resize(view.n_embd);
          for (uint32_t cell : b.cells) {
            MNEMO_RETURN_IF_ERROR(kv_row_convert(view.type, src_rot, view.row(cell), ot, out_rot,
                                                 row_out.data(), view.n_embd, scratch.data()));
            MNEMO_RETURN_IF_ERROR(w.put(row_out.data(), out_bytes));
          }
          continue;
        }
        size_t i = 0;
        while (i < b.cells.size()) {
          size_t e = i + 1;
          while (e < b.cells.size() && b.cells[e] == b.cells[e - 1] + 1) ++e;
          MNEMO_RETURN_IF_ERROR(w.put(view.row(b.cells[i]), (e - i) * view.row_bytes));
          i = e;
        }
      }
      MNEMO_RETURN_IF_ERROR(w.end_section());
    }
  }
  return Status();
}

// --- reading -----------------------------------------------------------------------------------

Status KvCache::state_read(StateReader& r, const StateReadSpec& spec) {
  return state_read_part(r, spec, sf::PartRole::kKv);
}

Status KvCache::state_read_part(StateReader& r, const StateReadSpec& spec, sf::PartRole role) {
  const bool seq_scope = spec.scope == sf::Scope::kSequence;
  const bool apply = !spec.dry_run;
  const std::string part = role_name(role);
  auto mismatch = [&](const std::string& what) {
    return r.error(StatusCode::kInvalidArgument, "part " + part + ": " + what);
  };

  // KVPT.
  MNEMO_RETURN_IF_ERROR(r.expect_section(sf::kTagKvPart).status());
  uint32_t f[7];
  for (uint32_t& x : f) MNEMO_RETURN_IF_ERROR(r.get_u32(&x));
  const uint32_t n_blocks = f[6];
  if (f[0] != uint32_t(role)) {
    return r.corrupt("part role " + std::to_string(f[0]) + ", expected " +
                     std::to_string(uint32_t(role)) + " (" + part + ")");
  }
  if (f[1] > 1 || f[2] == 0 || f[2] > kMaxSeq || f[4] > 2) {
    return r.corrupt("writer geometry (unified " + std::to_string(f[1]) + ", " +
                     std::to_string(f[2]) + " streams, swa type " + std::to_string(f[4]) +
                     ") is invalid");
  }
  if (n_blocks > f[2] || (seq_scope && n_blocks != 1)) {
    return r.corrupt(std::to_string(n_blocks) + " stream blocks for " + std::to_string(f[2]) +
                     " streams");
  }
  MNEMO_RETURN_IF_ERROR(r.end_section());

  const uint32_t n_layer = storage_.n_layer();
  const uint32_t dst_stream = seq_scope ? stream_of(spec.dst_seq) : 0;
  // Placement state. Whole scope: streams are refilled from cell 0 (the memory is replaced).
  std::vector<uint32_t> cursor(n_stream(), 0);
  // Seq scope: cells of the destination stream that may receive rows: empty ones first, then
  // those held by dst_seq alone (they are freed when the restore commits).
  std::vector<uint32_t> seq_slots;
  uint32_t n_empty_slots = 0;
  if (seq_scope) {
    const KvCells& c = cells_[dst_stream];
    for (uint32_t i = 0; i < c.size(); ++i) {
      if (c.is_empty(i)) seq_slots.push_back(i);
    }
    n_empty_slots = uint32_t(seq_slots.size());
    const SeqSet only_dst = SeqSet::of(spec.dst_seq);
    for (uint32_t i = 0; i < c.used_max(); ++i) {
      if (c.seqs(i) == only_dst) seq_slots.push_back(i);
    }
  }
  if (apply && !seq_scope) {
    for (KvCells& c : cells_) c.clear();
    ++epoch_;
  }
  // A failed apply (possible only if the source changed after the dry run) empties the
  // destination (memory.h): rows of dst_seq's own cells may have been overwritten already.
  auto fail = [&](Status st) {
    if (!st.ok() && apply) {
      if (!seq_scope) {
        for (KvCells& c : cells_) c.clear();
      } else {
        CHECK(seq_rm(spec.dst_seq, -1, -1).ok());
      }
      ++epoch_;
    }
    return st;
  };

  std::vector<LayerInfo> layers(n_layer);
  std::vector<CellInfo> cells;
  std::vector<uint32_t> tbegin;  // [n_cells + 1] targets of cell i: targets[tbegin[i], tbegin[i+1])
  std::vector<Target> targets;
  std::vector<float> scratch;
  for (uint32_t b = 0; b < n_blocks; ++b) {
    // KVCL.
    Status st = r.expect_section(sf::kTagKvCells).status();
    if (!st.ok()) return fail(st);
    uint32_t src_stream = 0, rotation = 0, n_layer_saved = 0, n_cells = 0;
    MNEMO_RETURN_IF_ERROR(fail(r.get_u32(&src_stream)));
    MNEMO_RETURN_IF_ERROR(fail(r.get_u32(&rotation)));
    MNEMO_RETURN_IF_ERROR(fail(r.get_u32(&n_layer_saved)));
    if (src_stream >= f[2]) {
      return fail(
          r.corrupt("source stream " + std::to_string(src_stream) + " of " + std::to_string(f[2])));
    }
    if (!is_valid_kv_rotation(rotation)) {
      return fail(r.corrupt("rotation " + std::to_string(rotation) + " is not 0 or a power of 2"));
    }
    if (n_layer_saved != n_layer) {
      return fail(mismatch("the state holds " + std::to_string(n_layer_saved) +
                           " layers, this cache holds " + std::to_string(n_layer)));
    }
    for (uint32_t l = 0; l < n_layer; ++l) {
      LayerInfo& li = layers[l];
      uint32_t kt = 0, vt = 0;
      MNEMO_RETURN_IF_ERROR(fail(r.get_u32(&li.il)));
      MNEMO_RETURN_IF_ERROR(fail(r.get_u32(&kt)));
      MNEMO_RETURN_IF_ERROR(fail(r.get_u32(&vt)));
      MNEMO_RETURN_IF_ERROR(fail(r.get_u32(&li.n_embd_k)));
      MNEMO_RETURN_IF_ERROR(fail(r.get_u32(&li.n_embd_v)));
      MNEMO_RETURN_IF_ERROR(fail(r.get_u64(&li.k_row)));
      MNEMO_RETURN_IF_ERROR(fail(r.get_u64(&li.v_row)));
      const KvStorage::Layer& mine = storage_.layer(l);
      if (li.il != mine.il || li.n_embd_k != mine.n_embd_k || li.n_embd_v != mine.n_embd_v) {
        return fail(mismatch("layer entry " + std::to_string(l) + " is model layer " +
                             std::to_string(li.il) + " with K/V widths " +
                             std::to_string(li.n_embd_k) + "/" + std::to_string(li.n_embd_v) +
                             "; this cache has layer " + std::to_string(mine.il) + " with " +
                             std::to_string(mine.n_embd_k) + "/" + std::to_string(mine.n_embd_v)));
      }
      for (int kind = 0; kind < 2; ++kind) {
        const uint32_t id = kind == 0 ? kt : vt;
        const uint32_t n = kind == 0 ? li.n_embd_k : li.n_embd_v;
        const uint64_t row = kind == 0 ? li.k_row : li.v_row;
        const char* what = kind == 0 ? "K" : "V";
        const auto tr = type_traits(id);
        if (!tr || !is_supported_kv_type(tr->type)) {
          return fail(r.corrupt(std::string(what) + " type id " + std::to_string(id) +
                                " of layer " + std::to_string(li.il) + " is not a KV cache type"));
        }
        if (!check_row_shape(tr->type, n).ok() || row != row_size(tr->type, n)) {
          return fail(r.corrupt(std::string(what) + " row size " + std::to_string(row) +
                                " of layer " + std::to_string(li.il) + " does not match " +
                                std::string(tr->name) + " x " + std::to_string(n)));
        }
        if (rotation != 0 && n % rotation != 0) {
          return fail(r.corrupt("rotation " + std::to_string(rotation) + " does not divide " +
                                std::to_string(n)));
        }
        (kind == 0 ? li.k_type : li.v_type) = tr->type;
      }
    }
    MNEMO_RETURN_IF_ERROR(fail(r.get_u32(&n_cells)));
    if (uint64_t(n_cells) * sf::kKvCellFixedBytes > r.remaining()) {
      return fail(r.corrupt(std::to_string(n_cells) + " cells do not fit the section"));
    }
    cells.assign(n_cells, CellInfo{});
    for (uint32_t i = 0; i < n_cells; ++i) {
      CellInfo& ci = cells[i];
      uint32_t n_seq = 0;
      MNEMO_RETURN_IF_ERROR(fail(r.get_i32(&ci.pos)));
      MNEMO_RETURN_IF_ERROR(fail(r.get_i32(&ci.shift)));
      MNEMO_RETURN_IF_ERROR(fail(r.get_u32(&n_seq)));
      if (ci.pos < 0 || ci.pos > kPosMax) {
        return fail(
            r.corrupt("cell " + std::to_string(i) + " has position " + std::to_string(ci.pos)));
      }
      if (n_seq == 0 || n_seq > kMaxSeq) {
        return fail(r.corrupt("cell " + std::to_string(i) + " belongs to " + std::to_string(n_seq) +
                              " sequences"));
      }
      for (uint32_t k = 0; k < n_seq; ++k) {
        SeqId q = 0;
        MNEMO_RETURN_IF_ERROR(fail(r.get_i32(&q)));
        if (q < 0 || uint32_t(q) >= kMaxSeq || ci.seqs.test(q)) {
          return fail(r.corrupt("cell " + std::to_string(i) + " has seq_id " + std::to_string(q) +
                                " (out of range or repeated)"));
        }
        ci.seqs.set(q);
      }
      if (seq_scope && !(ci.seqs == SeqSet::of(spec.src_seq))) {
        return fail(r.corrupt("cell " + std::to_string(i) + " of a sequence state belongs to " +
                              "other sequences than the saved seq_id " +
                              std::to_string(spec.src_seq)));
      }
      if (!seq_scope) {
        SeqId top = 0;
        ci.seqs.for_each([&](SeqId q) { top = q; });
        if (uint32_t(top) >= config_.n_seq_max) {
          return fail(mismatch("the state holds seq_id " + std::to_string(top) +
                               ", this memory has n_seq_max " + std::to_string(config_.n_seq_max)));
        }
      }
    }
    st = r.end_section();
    if (!st.ok()) return fail(st);
    if (seq_scope && !apply && spec.summary != nullptr && !spec.summary->set) {
      spec.summary->set = true;
      for (const CellInfo& ci : cells) {
        const Pos p = ci.pos;
        if (spec.summary->pos_min < 0 || p < spec.summary->pos_min) spec.summary->pos_min = p;
        if (p > spec.summary->pos_max) spec.summary->pos_max = p;
      }
    }

    // A sliding-window cache that reuses masked cells needs only the cells the window still
    // shows to each sequence's next token. A state saved from a cache with more window cells
    // (a larger n_ubatch) may hold more; when they do not fit here, the masked ones are left
    // out (their rows are read and dropped): the continuation reads none of them.
    std::vector<uint8_t> keep(n_cells, 1);
    uint32_t n_keep = n_cells;
    if (config_.swa_type != SwaType::kNone && config_.swa_reuse) {
      bool fits = true;
      if (seq_scope) {
        fits = n_cells <= seq_slots.size();
      } else {
        std::vector<uint64_t> need(n_stream(), 0);
        for (const CellInfo& ci : cells) {
          if (config_.unified) {
            ++need[0];
          } else {
            ci.seqs.for_each([&](SeqId q) { ++need[uint32_t(q) % n_stream()]; });
          }
        }
        for (uint32_t st = 0; st < n_stream(); ++st) {
          fits = fits && need[st] + cursor[st] <= config_.n_ctx;
        }
      }
      if (!fits) {
        std::vector<Pos> pos_max(kMaxSeq, -1);
        for (const CellInfo& ci : cells) {
          ci.seqs.for_each([&](SeqId q) { pos_max[q] = std::max(pos_max[q], ci.pos); });
        }
        for (uint32_t i = 0; i < n_cells; ++i) {
          bool masked = true;
          cells[i].seqs.for_each([&](SeqId q) {
            masked = masked &&
                     is_masked_swa(config_.swa_type, config_.n_swa, cells[i].pos, pos_max[q] + 1);
          });
          if (masked) {
            keep[i] = 0;
            --n_keep;
          }
        }
      }
    }

    // Placement: one target per cell (seq scope; whole scope into a unified cache), or one per
    // sequence of the cell (whole scope into a split cache: a shared cell is copied per stream).
    tbegin.assign(1, 0);
    targets.clear();
    uint32_t n_placed = 0;
    for (uint32_t i = 0; i < n_cells; ++i) {
      if (!keep[i]) {
        tbegin.push_back(uint32_t(targets.size()));
        continue;
      }
      if (seq_scope) {
        if (n_placed >= seq_slots.size()) {
          return fail(r.error(StatusCode::kNoSpace,
                              "restoring " + std::to_string(n_keep) + " cells into seq_id " +
                                  std::to_string(spec.dst_seq) +
                                  " needs as many free cells in stream " +
                                  std::to_string(dst_stream) + " of " + part + "; it has " +
                                  std::to_string(n_empty_slots) + " empty and " +
                                  std::to_string(seq_slots.size() - n_empty_slots) +
                                  " held by seq_id " + std::to_string(spec.dst_seq) + " alone"));
        }
        targets.push_back({dst_stream, seq_slots[n_placed++]});
      } else {
        auto place = [&](uint32_t s) -> bool {
          if (cursor[s] >= config_.n_ctx) return false;
          targets.push_back({s, cursor[s]++});
          return true;
        };
        bool ok = true;
        if (config_.unified) {
          ok = place(0);
        } else {
          cells[i].seqs.for_each([&](SeqId q) { ok = ok && place(uint32_t(q)); });
        }
        if (!ok) {
          return fail(r.error(StatusCode::kNoSpace, "the state's cells do not fit: a stream of " +
                                                        part + " has " +
                                                        std::to_string(config_.n_ctx) + " cells"));
        }
      }
      tbegin.push_back(uint32_t(targets.size()));
    }

    // KVLY per layer.
    for (uint32_t l = 0; l < n_layer; ++l) {
      const LayerInfo& li = layers[l];
      st = r.expect_section(sf::kTagKvLayer).status();
      if (!st.ok()) return fail(st);
      uint32_t il = 0;
      MNEMO_RETURN_IF_ERROR(fail(r.get_u32(&il)));
      if (il != li.il) {
        return fail(r.corrupt("layer section for model layer " + std::to_string(il) +
                              ", expected " + std::to_string(li.il)));
      }
      const uint64_t need = uint64_t(n_cells) * (li.k_row + li.v_row);
      if (need != r.remaining()) {
        return fail(r.corrupt(std::to_string(r.remaining()) + " bytes of rows, expected " +
                              std::to_string(need)));
      }
      if (!apply) {
        st = r.skip(need);
        if (st.ok()) st = r.end_section();
        if (!st.ok()) return fail(st);
        continue;
      }
      for (int kind = 0; kind < 2; ++kind) {
        const GgmlType src_type = kind == 0 ? li.k_type : li.v_type;
        const uint32_t n_embd = kind == 0 ? li.n_embd_k : li.n_embd_v;
        const size_t row = size_t(kind == 0 ? li.k_row : li.v_row);
        scratch.resize(n_embd);
        const uint32_t per_view = uint32_t(std::max<size_t>(1, kChunkBytes / row));
        uint32_t i = 0;
        while (i < n_cells) {
          const uint32_t m = std::min(per_view, n_cells - i);
          const uint8_t* p = nullptr;
          st = r.view(size_t(m) * row, &p);
          if (!st.ok()) return fail(st);
          for (uint32_t j = 0; j < m; ++j) {
            const uint8_t* src = p + size_t(j) * row;
            // Fast path: a run of cells with one target each, in consecutive cells of one
            // stream of the same format, is one memcpy.
            if (tbegin[i + j + 1] == tbegin[i + j] + 1) {
              const Target& t0 = targets[tbegin[i + j]];
              const KvRows dv = kind == 0 ? storage_.k(l, t0.stream) : storage_.v(l, t0.stream);
              if (dv.type == src_type && storage_.rotation(t0.stream) == rotation) {
                uint32_t e = j + 1;
                while (e < m && tbegin[i + e + 1] == tbegin[i + e] + 1) {
                  const Target& te = targets[tbegin[i + e]];
                  if (te.stream != t0.stream || te.cell != t0.cell + (e - j)) break;
                  ++e;
                }
                std::memcpy(dv.row(t0.cell), src, size_t(e - j) * row);
                j = e - 1;
                continue;
              }
            }
            for (uint32_t t = tbegin[i + j]; t < tbegin[i + j + 1]; ++t) {
              const Target& tg = targets[t];
              const KvRows dv = kind == 0 ? storage_.k(l, tg.stream) : storage_.v(l, tg.stream);
              // Validated in the dry run: both types convert and the widths fit.
              st = kv_row_convert(src_type, rotation, src, dv.type, storage_.rotation(tg.stream),
                                  dv.row(tg.cell), n_embd, scratch.data());
              CHECK(st.ok()) << st.to_string();
            }
          }
          i += m;
        }
      }
      st = r.end_section();
      if (!st.ok()) return fail(st);
    }

    if (apply && !seq_scope) {
      for (uint32_t i = 0; i < n_cells; ++i) {
        for (uint32_t t = tbegin[i]; t < tbegin[i + 1]; ++t) {
          const Target& tg = targets[t];
          const SeqSet seqs = config_.unified ? cells[i].seqs : SeqSet::of(SeqId(tg.stream));
          cells_[tg.stream].set(tg.cell, cells[i].pos, seqs, cells[i].shift);
        }
      }
    }
  }

  if (!apply) return Status();
  if (seq_scope) {
    // Commit: dst_seq's old cells go, then the restored cells take their records.
    CHECK(seq_rm(spec.dst_seq, -1, -1).ok());
    KvCells& c = cells_[dst_stream];
    for (uint32_t i = 0; i < cells.size(); ++i) {
      for (uint32_t t = tbegin[i]; t < tbegin[i + 1]; ++t) {
        c.set(targets[t].cell, cells[i].pos, SeqSet::of(spec.dst_seq), cells[i].shift);
      }
    }
    if (!targets.empty())
      c.set_head(targets.back().cell + 1 == c.size() ? 0 : targets.back().cell + 1);
  } else {
    for (uint32_t s = 0; s < n_stream(); ++s) {
      cells_[s].set_head(cursor[s] >= config_.n_ctx ? 0 : cursor[s]);
    }
  }
  ++epoch_;
  return Status();
}

}  // namespace mnemo
