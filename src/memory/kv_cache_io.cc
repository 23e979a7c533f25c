// KvCache state parts: KVPT, then per stream block KVCL (cell records) and one KVLY per held
// layer (K rows then V rows). Byte layout: docs/formats/state.md; protocol: memory.h.
//
// Reading is done twice by state.cc, by KvPartReader in four steps: parse, plan, rows, commit
// (below). The dry run parses, bounds-checks, verifies checksums and plans placement without
// changing anything; the apply run repeats the same parse and plan, writes rows into the planned
// cells (converting types and rotation when they differ) and commits the cell metadata.
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
    std::vector<uint8_t> row_in, row_out;
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
          row_in.resize(view.row_bytes);
          row_out.resize(out_bytes);
          scratch.resize(view.n_embd);
          for (uint32_t cell : b.cells) {
            view.get_rows(cell, 1, row_in.data());
            MNEMO_RETURN_IF_ERROR(kv_row_convert(view.type, src_rot, row_in.data(), ot, out_rot,
                                                 row_out.data(), view.n_embd, scratch.data()));
            MNEMO_RETURN_IF_ERROR(w.put(row_out.data(), out_bytes));
          }
          continue;
        }
        // Planes are gathered into rows, up to kGatherRows at a time.
        constexpr size_t kGatherRows = 256;
        size_t i = 0;
        while (i < b.cells.size()) {
          size_t e = i + 1;
          const size_t cap = view.is_rows() ? b.cells.size() : i + kGatherRows;
          while (e < std::min(cap, b.cells.size()) && b.cells[e] == b.cells[e - 1] + 1) ++e;
          if (view.is_rows()) {
            MNEMO_RETURN_IF_ERROR(w.put(view.row(b.cells[i]), (e - i) * view.row_bytes));
          } else {
            row_in.resize((e - i) * view.row_bytes);
            view.get_rows(b.cells[i], uint32_t(e - i), row_in.data());
            MNEMO_RETURN_IF_ERROR(w.put(row_in.data(), row_in.size()));
          }
          i = e;
        }
      }
      MNEMO_RETURN_IF_ERROR(w.end_section());
    }
  }
  return Status();
}

// --- reading -----------------------------------------------------------------------------------
//
// One KVPT part is read in four steps, as a log reader reads records, validates them, then
// applies them: parse (KVPT, then per stream block its KVCL: layers and cell records, every field
// checked), plan (which destination cells the block's cells take), rows (its KVLY sections: the
// K/V rows copied into the planned cells, or skipped in the dry run) and commit (the cell
// records written into the bookkeeping). The dry run stops before commit and changes nothing.

namespace {

// KVPT as read.
struct PartHeader {
  uint32_t unified = 0;
  uint32_t n_stream = 0;
  uint32_t swa_type = 0;
  uint32_t n_blocks = 0;
};

// One stream block as its KVCL records it.
struct Block {
  uint32_t src_stream = 0;
  uint32_t rotation = 0;          // of the rows as stored (0 or the head size)
  std::vector<LayerInfo> layers;  // [the cache's n_layer]
  std::vector<CellInfo> cells;
};

// Where a block's rows go: the targets of cell i are targets[begin[i], begin[i + 1]) (none for a
// cell left out, several for a shared cell copied into several streams).
struct BlockPlan {
  std::vector<uint32_t> begin;  // [n_cells + 1]
  std::vector<Target> targets;
};

}  // namespace

// The reader of one KVPT part into a KvCache (state_read_part). Holds what the steps share: the
// destination's free cells (seq scope) or each stream's next cell (whole scope, where the part
// refills every stream from cell 0).
class KvPartReader {
 public:
  KvPartReader(KvCache& cache, StateReader& r, const StateReadSpec& spec, sf::PartRole role)
      : c_(cache),
        r_(r),
        spec_(spec),
        role_(role),
        part_(role_name(role)),
        seq_scope_(spec.scope == sf::Scope::kSequence),
        apply_(!spec.dry_run) {}

  Status read() {
    MNEMO_ASSIGN_OR_RETURN(const PartHeader h, parse_header());
    find_room();
    if (apply_ && !seq_scope_) {
      for (KvCells& c : c_.cells_) c.clear();
      ++c_.epoch_;
    }
    Block b;
    BlockPlan plan;
    for (uint32_t i = 0; i < h.n_blocks; ++i) {
      MNEMO_RETURN_IF_ERROR(fail(parse_block(h, &b)));
      summarize(b);
      MNEMO_RETURN_IF_ERROR(fail(plan_block(b, &plan)));
      MNEMO_RETURN_IF_ERROR(fail(read_rows(b, plan)));
      if (apply_ && !seq_scope_) commit_block(b, plan);
    }
    if (!apply_) return Status();
    commit(b, plan);
    return Status();
  }

 private:
  Status mismatch(const std::string& what) const {
    return r_.error(StatusCode::kInvalidArgument, "part " + part_ + ": " + what);
  }

  // A failed apply (possible only if the source changed after the dry run) empties the
  // destination (memory.h): rows of dst_seq's own cells may have been overwritten already.
  Status fail(Status st) {
    if (!st.ok() && apply_) {
      if (!seq_scope_) {
        for (KvCells& c : c_.cells_) c.clear();
      } else {
        CHECK(c_.seq_rm(spec_.dst_seq, -1, -1).ok());
      }
      ++c_.epoch_;
    }
    return st;
  }

  // --- parse ---

  Result<PartHeader> parse_header();
  Status parse_block(const PartHeader& h, Block* b);
  Status parse_layer(uint32_t l, uint32_t rotation, LayerInfo* li);
  Status parse_cells(std::vector<CellInfo>* cells);
  // Dry run of a sequence state: the positions the part holds, for the caller's check.
  void summarize(const Block& b) const;

  // --- plan ---

  void find_room();
  std::vector<uint8_t> cells_to_keep(const Block& b) const;
  Status plan_block(const Block& b, BlockPlan* plan);

  // --- rows ---

  Status read_rows(const Block& b, const BlockPlan& plan);
  void write_rows(uint32_t l, int kind, const Block& b, const BlockPlan& plan, uint32_t first,
                  const uint8_t* src, uint32_t m, std::vector<float>* scratch);

  // --- commit ---

  void commit_block(const Block& b, const BlockPlan& plan);
  void commit(const Block& last, const BlockPlan& plan);

  KvCache& c_;
  StateReader& r_;
  const StateReadSpec& spec_;
  const sf::PartRole role_;
  const std::string part_;
  const bool seq_scope_;
  const bool apply_;
  uint32_t dst_stream_ = 0;
  // Whole scope: the next cell of each stream.
  std::vector<uint32_t> cursor_;
  // Seq scope: cells of the destination stream that may receive rows: empty ones first, then
  // those held by dst_seq alone (they are freed when the restore commits).
  std::vector<uint32_t> room_;
  uint32_t n_empty_ = 0;
};

Result<PartHeader> KvPartReader::parse_header() {
  MNEMO_RETURN_IF_ERROR(r_.expect_section(sf::kTagKvPart).status());
  uint32_t f[7];
  for (uint32_t& x : f) MNEMO_RETURN_IF_ERROR(r_.get_u32(&x));
  PartHeader h{f[1], f[2], f[4], f[6]};
  if (f[0] != uint32_t(role_)) {
    return r_.corrupt("part role " + std::to_string(f[0]) + ", expected " +
                      std::to_string(uint32_t(role_)) + " (" + part_ + ")");
  }
  if (h.unified > 1 || h.n_stream == 0 || h.n_stream > kMaxSeq || h.swa_type > 2) {
    return r_.corrupt("writer geometry (unified " + std::to_string(h.unified) + ", " +
                      std::to_string(h.n_stream) + " streams, swa type " +
                      std::to_string(h.swa_type) + ") is invalid");
  }
  if (h.n_blocks > h.n_stream || (seq_scope_ && h.n_blocks != 1)) {
    return r_.corrupt(std::to_string(h.n_blocks) + " stream blocks for " +
                      std::to_string(h.n_stream) + " streams");
  }
  MNEMO_RETURN_IF_ERROR(r_.end_section());
  return h;
}

Status KvPartReader::parse_block(const PartHeader& h, Block* b) {
  MNEMO_RETURN_IF_ERROR(r_.expect_section(sf::kTagKvCells).status());
  const uint32_t n_layer = c_.storage_.n_layer();
  uint32_t n_layer_saved = 0;
  MNEMO_RETURN_IF_ERROR(r_.get_u32(&b->src_stream));
  MNEMO_RETURN_IF_ERROR(r_.get_u32(&b->rotation));
  MNEMO_RETURN_IF_ERROR(r_.get_u32(&n_layer_saved));
  if (b->src_stream >= h.n_stream) {
    return r_.corrupt("source stream " + std::to_string(b->src_stream) + " of " +
                      std::to_string(h.n_stream));
  }
  if (!is_valid_kv_rotation(b->rotation)) {
    return r_.corrupt("rotation " + std::to_string(b->rotation) + " is not 0 or a power of 2");
  }
  if (n_layer_saved != n_layer) {
    return mismatch("the state holds " + std::to_string(n_layer_saved) +
                    " layers, this cache holds " + std::to_string(n_layer));
  }
  b->layers.assign(n_layer, LayerInfo{});
  for (uint32_t l = 0; l < n_layer; ++l) {
    MNEMO_RETURN_IF_ERROR(parse_layer(l, b->rotation, &b->layers[l]));
  }
  MNEMO_RETURN_IF_ERROR(parse_cells(&b->cells));
  return r_.end_section();
}

Status KvPartReader::parse_layer(uint32_t l, uint32_t rotation, LayerInfo* li) {
  uint32_t kt = 0, vt = 0;
  MNEMO_RETURN_IF_ERROR(r_.get_u32(&li->il));
  MNEMO_RETURN_IF_ERROR(r_.get_u32(&kt));
  MNEMO_RETURN_IF_ERROR(r_.get_u32(&vt));
  MNEMO_RETURN_IF_ERROR(r_.get_u32(&li->n_embd_k));
  MNEMO_RETURN_IF_ERROR(r_.get_u32(&li->n_embd_v));
  MNEMO_RETURN_IF_ERROR(r_.get_u64(&li->k_row));
  MNEMO_RETURN_IF_ERROR(r_.get_u64(&li->v_row));
  const KvStorage::Layer& mine = c_.storage_.layer(l);
  if (li->il != mine.il || li->n_embd_k != mine.n_embd_k || li->n_embd_v != mine.n_embd_v) {
    return mismatch("layer entry " + std::to_string(l) + " is model layer " +
                    std::to_string(li->il) + " with K/V widths " + std::to_string(li->n_embd_k) +
                    "/" + std::to_string(li->n_embd_v) + "; this cache has layer " +
                    std::to_string(mine.il) + " with " + std::to_string(mine.n_embd_k) + "/" +
                    std::to_string(mine.n_embd_v));
  }
  for (int kind = 0; kind < 2; ++kind) {
    const uint32_t id = kind == 0 ? kt : vt;
    const uint32_t n = kind == 0 ? li->n_embd_k : li->n_embd_v;
    const uint64_t row = kind == 0 ? li->k_row : li->v_row;
    const char* what = kind == 0 ? "K" : "V";
    const auto tr = type_traits(id);
    if (!tr || !is_supported_kv_type(tr->type)) {
      return r_.corrupt(std::string(what) + " type id " + std::to_string(id) + " of layer " +
                        std::to_string(li->il) + " is not a KV cache type");
    }
    if (!check_row_shape(tr->type, n).ok() || row != row_size(tr->type, n)) {
      return r_.corrupt(std::string(what) + " row size " + std::to_string(row) + " of layer " +
                        std::to_string(li->il) + " does not match " + std::string(tr->name) +
                        " x " + std::to_string(n));
    }
    if (rotation != 0 && n % rotation != 0) {
      return r_.corrupt("rotation " + std::to_string(rotation) + " does not divide " +
                        std::to_string(n));
    }
    (kind == 0 ? li->k_type : li->v_type) = tr->type;
  }
  return Status();
}

Status KvPartReader::parse_cells(std::vector<CellInfo>* cells) {
  uint32_t n_cells = 0;
  MNEMO_RETURN_IF_ERROR(r_.get_u32(&n_cells));
  if (uint64_t(n_cells) * sf::kKvCellFixedBytes > r_.remaining()) {
    return r_.corrupt(std::to_string(n_cells) + " cells do not fit the section");
  }
  cells->assign(n_cells, CellInfo{});
  for (uint32_t i = 0; i < n_cells; ++i) {
    CellInfo& ci = (*cells)[i];
    uint32_t n_seq = 0;
    MNEMO_RETURN_IF_ERROR(r_.get_i32(&ci.pos));
    MNEMO_RETURN_IF_ERROR(r_.get_i32(&ci.shift));
    MNEMO_RETURN_IF_ERROR(r_.get_u32(&n_seq));
    const std::string cell = "cell " + std::to_string(i);
    if (ci.pos < 0 || ci.pos > kPosMax) {
      return r_.corrupt(cell + " has position " + std::to_string(ci.pos));
    }
    if (n_seq == 0 || n_seq > kMaxSeq) {
      return r_.corrupt(cell + " belongs to " + std::to_string(n_seq) + " sequences");
    }
    for (uint32_t k = 0; k < n_seq; ++k) {
      SeqId q = 0;
      MNEMO_RETURN_IF_ERROR(r_.get_i32(&q));
      if (q < 0 || uint32_t(q) >= kMaxSeq || ci.seqs.test(q)) {
        return r_.corrupt(cell + " has seq_id " + std::to_string(q) +
                          " (out of range or repeated)");
      }
      ci.seqs.set(q);
    }
    if (seq_scope_ && !(ci.seqs == SeqSet::of(spec_.src_seq))) {
      return r_.corrupt(cell + " of a sequence state belongs to other sequences than the saved " +
                        "seq_id " + std::to_string(spec_.src_seq));
    }
    if (!seq_scope_) {
      SeqId top = 0;
      ci.seqs.for_each([&](SeqId q) { top = q; });
      if (uint32_t(top) >= c_.config_.n_seq_max) {
        return mismatch("the state holds seq_id " + std::to_string(top) +
                        ", this memory has n_seq_max " + std::to_string(c_.config_.n_seq_max));
      }
    }
  }
  return Status();
}

void KvPartReader::summarize(const Block& b) const {
  if (!seq_scope_ || apply_ || spec_.summary == nullptr || spec_.summary->set) return;
  spec_.summary->set = true;
  for (const CellInfo& ci : b.cells) {
    const Pos p = ci.pos;
    if (spec_.summary->pos_min < 0 || p < spec_.summary->pos_min) spec_.summary->pos_min = p;
    if (p > spec_.summary->pos_max) spec_.summary->pos_max = p;
  }
}

void KvPartReader::find_room() {
  cursor_.assign(c_.n_stream(), 0);
  if (!seq_scope_) return;
  dst_stream_ = c_.stream_of(spec_.dst_seq);
  const KvCells& c = c_.cells_[dst_stream_];
  for (uint32_t i = 0; i < c.size(); ++i) {
    if (c.is_empty(i)) room_.push_back(i);
  }
  n_empty_ = uint32_t(room_.size());
  const SeqSet only_dst = SeqSet::of(spec_.dst_seq);
  for (uint32_t i = 0; i < c.used_max(); ++i) {
    if (c.seqs(i) == only_dst) room_.push_back(i);
  }
}

// A sliding-window cache that reuses masked cells needs only the cells the window still shows to
// each sequence's next token. A state saved from a cache with more window cells (a larger
// n_ubatch) may hold more; when they do not fit here, the masked ones are left out (their rows
// are read and dropped): the continuation reads none of them. 1: the cell is restored.
std::vector<uint8_t> KvPartReader::cells_to_keep(const Block& b) const {
  const KvCacheConfig& cfg = c_.config_;
  const uint32_t n_cells = uint32_t(b.cells.size());
  std::vector<uint8_t> keep(n_cells, 1);
  if (cfg.swa_type == SwaType::kNone || !cfg.swa_reuse) return keep;
  bool fits = true;
  if (seq_scope_) {
    fits = n_cells <= room_.size();
  } else {
    std::vector<uint64_t> need(c_.n_stream(), 0);
    for (const CellInfo& ci : b.cells) {
      if (cfg.unified) {
        ++need[0];
      } else {
        ci.seqs.for_each([&](SeqId q) { ++need[uint32_t(q) % c_.n_stream()]; });
      }
    }
    for (uint32_t st = 0; st < c_.n_stream(); ++st) {
      fits = fits && need[st] + cursor_[st] <= cfg.n_ctx;
    }
  }
  if (fits) return keep;
  std::vector<Pos> pos_max(kMaxSeq, -1);
  for (const CellInfo& ci : b.cells) {
    ci.seqs.for_each([&](SeqId q) { pos_max[q] = std::max(pos_max[q], ci.pos); });
  }
  for (uint32_t i = 0; i < n_cells; ++i) {
    bool masked = true;
    b.cells[i].seqs.for_each([&](SeqId q) {
      masked = masked && is_masked_swa(cfg.swa_type, cfg.n_swa, b.cells[i].pos, pos_max[q] + 1);
    });
    if (masked) keep[i] = 0;
  }
  return keep;
}

// One target per cell (seq scope; whole scope into a unified cache), or one per sequence of the
// cell (whole scope into a split cache: a shared cell is copied per stream).
Status KvPartReader::plan_block(const Block& b, BlockPlan* plan) {
  const KvCacheConfig& cfg = c_.config_;
  const std::vector<uint8_t> keep = cells_to_keep(b);
  const uint32_t n_keep = uint32_t(std::count(keep.begin(), keep.end(), uint8_t{1}));
  plan->begin.assign(1, 0);
  plan->targets.clear();
  uint32_t n_placed = 0;
  for (uint32_t i = 0; i < b.cells.size(); ++i) {
    if (!keep[i]) {
      plan->begin.push_back(uint32_t(plan->targets.size()));
      continue;
    }
    if (seq_scope_) {
      if (n_placed >= room_.size()) {
        return r_.error(StatusCode::kNoSpace,
                        "restoring " + std::to_string(n_keep) + " cells into seq_id " +
                            std::to_string(spec_.dst_seq) + " needs as many free cells in stream " +
                            std::to_string(dst_stream_) + " of " + part_ + "; it has " +
                            std::to_string(n_empty_) + " empty and " +
                            std::to_string(room_.size() - n_empty_) + " held by seq_id " +
                            std::to_string(spec_.dst_seq) + " alone");
      }
      plan->targets.push_back({dst_stream_, room_[n_placed++]});
    } else {
      auto place = [&](uint32_t s) -> bool {
        if (cursor_[s] >= cfg.n_ctx) return false;
        plan->targets.push_back({s, cursor_[s]++});
        return true;
      };
      bool ok = true;
      if (cfg.unified) {
        ok = place(0);
      } else {
        b.cells[i].seqs.for_each([&](SeqId q) { ok = ok && place(uint32_t(q)); });
      }
      if (!ok) {
        return r_.error(StatusCode::kNoSpace, "the state's cells do not fit: a stream of " + part_ +
                                                  " has " + std::to_string(cfg.n_ctx) + " cells");
      }
    }
    plan->begin.push_back(uint32_t(plan->targets.size()));
  }
  return Status();
}

// KVLY per layer: il, then the K rows and the V rows of every cell of the block (also the ones
// left out, whose rows are read and dropped).
Status KvPartReader::read_rows(const Block& b, const BlockPlan& plan) {
  const uint32_t n_cells = uint32_t(b.cells.size());
  std::vector<float> scratch;
  for (uint32_t l = 0; l < b.layers.size(); ++l) {
    const LayerInfo& li = b.layers[l];
    MNEMO_RETURN_IF_ERROR(r_.expect_section(sf::kTagKvLayer).status());
    uint32_t il = 0;
    MNEMO_RETURN_IF_ERROR(r_.get_u32(&il));
    if (il != li.il) {
      return r_.corrupt("layer section for model layer " + std::to_string(il) + ", expected " +
                        std::to_string(li.il));
    }
    const uint64_t need = uint64_t(n_cells) * (li.k_row + li.v_row);
    if (need != r_.remaining()) {
      return r_.corrupt(std::to_string(r_.remaining()) + " bytes of rows, expected " +
                        std::to_string(need));
    }
    if (!apply_) {
      MNEMO_RETURN_IF_ERROR(r_.skip(need));
      MNEMO_RETURN_IF_ERROR(r_.end_section());
      continue;
    }
    for (int kind = 0; kind < 2; ++kind) {
      const size_t row = size_t(kind == 0 ? li.k_row : li.v_row);
      scratch.resize(kind == 0 ? li.n_embd_k : li.n_embd_v);
      const uint32_t per_view = uint32_t(std::max<size_t>(1, kChunkBytes / row));
      for (uint32_t i = 0; i < n_cells;) {
        const uint32_t m = std::min(per_view, n_cells - i);
        const uint8_t* p = nullptr;
        MNEMO_RETURN_IF_ERROR(r_.view(size_t(m) * row, &p));
        write_rows(l, kind, b, plan, i, p, m, &scratch);
        i += m;
      }
    }
    MNEMO_RETURN_IF_ERROR(r_.end_section());
  }
  return Status();
}

// Rows of cells [first, first + m) of layer l's K (kind 0) or V (kind 1), read contiguously at
// src, into their targets: converted to the target stream's type and rotation where they differ
// (validated by the dry run, so a conversion cannot fail).
void KvPartReader::write_rows(uint32_t l, int kind, const Block& b, const BlockPlan& plan,
                              uint32_t first, const uint8_t* src, uint32_t m,
                              std::vector<float>* scratch) {
  const LayerInfo& li = b.layers[l];
  const GgmlType src_type = kind == 0 ? li.k_type : li.v_type;
  const uint32_t n_embd = kind == 0 ? li.n_embd_k : li.n_embd_v;
  const size_t row = size_t(kind == 0 ? li.k_row : li.v_row);
  KvStorage& storage = c_.storage_;
  const auto& begin = plan.begin;
  std::vector<uint8_t> converted;  // a converted row bound for planes
  for (uint32_t j = 0; j < m; ++j) {
    const uint8_t* s = src + size_t(j) * row;
    const uint32_t i = first + j;
    // Fast path: a run of cells with one target each, in consecutive cells of one stream of the
    // same format, is one memcpy.
    if (begin[i + 1] == begin[i] + 1) {
      const Target& t0 = plan.targets[begin[i]];
      const KvRows dv = kind == 0 ? storage.k(l, t0.stream) : storage.v(l, t0.stream);
      if (dv.type == src_type && storage.rotation(t0.stream) == b.rotation) {
        uint32_t e = j + 1;
        while (e < m && begin[first + e + 1] == begin[first + e] + 1) {
          const Target& te = plan.targets[begin[first + e]];
          if (te.stream != t0.stream || te.cell != t0.cell + (e - j)) break;
          ++e;
        }
        dv.set_rows(t0.cell, e - j, s);
        j = e - 1;
        continue;
      }
    }
    for (uint32_t t = begin[i]; t < begin[i + 1]; ++t) {
      const Target& tg = plan.targets[t];
      const KvRows dv = kind == 0 ? storage.k(l, tg.stream) : storage.v(l, tg.stream);
      converted.resize(dv.is_rows() ? 0 : dv.row_bytes);
      const Status st = kv_row_convert(
          src_type, b.rotation, s, dv.type, storage.rotation(tg.stream),
          dv.is_rows() ? dv.row(tg.cell) : converted.data(), n_embd, scratch->data());
      CHECK(st.ok()) << st.to_string();
      if (!dv.is_rows()) dv.set_rows(tg.cell, 1, converted.data());
    }
  }
}

// Whole scope: the block's cell records, into the cells its rows went to (a split cache keeps
// one sequence per stream).
void KvPartReader::commit_block(const Block& b, const BlockPlan& plan) {
  for (uint32_t i = 0; i < b.cells.size(); ++i) {
    const CellInfo& ci = b.cells[i];
    for (uint32_t t = plan.begin[i]; t < plan.begin[i + 1]; ++t) {
      const Target& tg = plan.targets[t];
      const SeqSet seqs = c_.config_.unified ? ci.seqs : SeqSet::of(SeqId(tg.stream));
      c_.cells_[tg.stream].set(tg.cell, ci.pos, seqs, ci.shift);
    }
  }
}

// The end of an applied part. Seq scope (one block): dst_seq's old cells go, then the restored
// cells take their records. Whole scope: every stream's head after its last restored cell.
void KvPartReader::commit(const Block& last, const BlockPlan& plan) {
  if (seq_scope_) {
    CHECK(c_.seq_rm(spec_.dst_seq, -1, -1).ok());
    KvCells& c = c_.cells_[dst_stream_];
    for (uint32_t i = 0; i < last.cells.size(); ++i) {
      for (uint32_t t = plan.begin[i]; t < plan.begin[i + 1]; ++t) {
        c.set(plan.targets[t].cell, last.cells[i].pos, SeqSet::of(spec_.dst_seq),
              last.cells[i].shift);
      }
    }
    if (!plan.targets.empty()) {
      const uint32_t next = plan.targets.back().cell + 1;
      c.set_head(next == c.size() ? 0 : next);
    }
  } else {
    for (uint32_t s = 0; s < c_.n_stream(); ++s) {
      c_.cells_[s].set_head(cursor_[s] >= c_.config_.n_ctx ? 0 : cursor_[s]);
    }
  }
  ++c_.epoch_;
}

Status KvCache::state_read(StateReader& r, const StateReadSpec& spec) {
  return state_read_part(r, spec, sf::PartRole::kKv);
}

Status KvCache::state_read_part(StateReader& r, const StateReadSpec& spec, sf::PartRole role) {
  return KvPartReader(*this, r, spec, role).read();
}

}  // namespace mnemo
