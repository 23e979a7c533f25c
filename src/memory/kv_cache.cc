// KvCache: creation, batch / full / update contexts, sequence operations, accounting.
// Placement lives in kv_cache_place.cc, the context in kv_cache_context.cc.

#include "memory/kv_cache.h"

#include <algorithm>
#include <string>
#include <utility>

#include "memory/kv_journal.h"
#include "memory/kv_rotation.h"
#include "memory/pos_range.h"

namespace mnemo {

std::string_view swa_type_name(SwaType t) {
  switch (t) {
    case SwaType::kNone:
      return "none";
    case SwaType::kStandard:
      return "standard";
    case SwaType::kChunked:
      return "chunked";
  }
  return "unknown";
}

KvCache::KvCache(KvCacheConfig config, KvStorage storage, std::vector<int32_t> layer_index)
    : config_(std::move(config)),
      storage_(std::move(storage)),
      layer_index_(std::move(layer_index)),
      pos_max_before_(config_.n_seq_max, INT32_MIN) {
  const uint32_t n_stream = config_.unified ? 1 : config_.n_seq_max;
  cells_.reserve(n_stream);
  for (uint32_t s = 0; s < n_stream; ++s) cells_.emplace_back(config_.n_ctx, config_.n_seq_max);
}

KvCache::~KvCache() = default;

Result<std::unique_ptr<KvCache>> KvCache::create(KvCacheConfig config) {
  const auto bad = [](const std::string& m) { return Status::invalid_argument("KvCache: " + m); };
  if (config.n_ctx == 0) return bad("n_ctx must be at least 1");
  if (config.n_seq_max == 0 || config.n_seq_max > kMaxSeq) {
    return bad("n_seq_max = " + std::to_string(config.n_seq_max) + " is outside [1, " +
               std::to_string(kMaxSeq) + "]");
  }
  if (config.n_embd_k_gqa.size() != config.n_embd_v_gqa.size()) {
    return bad("n_embd_k_gqa has " + std::to_string(config.n_embd_k_gqa.size()) +
               " layers but n_embd_v_gqa has " + std::to_string(config.n_embd_v_gqa.size()));
  }
  if (config.swa_type != SwaType::kNone &&
      (config.n_swa == 0 || config.n_swa > static_cast<uint32_t>(kPosMax))) {
    return bad(std::string("swa_type ") + std::string(swa_type_name(config.swa_type)) +
               " needs n_swa in [1, " + std::to_string(kPosMax) + "]");
  }
  if (config.n_pad == 0) return bad("n_pad must be at least 1");
  if (!is_valid_kv_rotation(config.rotation_dim)) {
    return bad("rotation_dim " + std::to_string(config.rotation_dim) +
               " is not 0 or a power of two");
  }
  const uint32_t n_stream = config.unified ? 1 : config.n_seq_max;
  if (!config.stream_types.empty() && config.stream_types.size() != n_stream) {
    return bad("stream_types has " + std::to_string(config.stream_types.size()) +
               " entries, the cache has " + std::to_string(n_stream) + " streams");
  }

  std::vector<KvStorage::Layer> layers;
  std::vector<int32_t> layer_index(config.n_embd_k_gqa.size(), -1);
  for (uint32_t il = 0; il < config.n_embd_k_gqa.size(); ++il) {
    if (config.layer_filter && !config.layer_filter(il)) continue;
    layer_index[il] = static_cast<int32_t>(layers.size());
    layers.push_back({il, config.n_embd_k_gqa[il], config.n_embd_v_gqa[il], config.head_dim_v});
  }
  std::vector<KvStorage::StreamTypes> types = config.stream_types;
  if (types.empty()) types.assign(n_stream, {config.k_type, config.v_type});
  for (KvStorage::StreamTypes& t : types) {
    t.rotation = kv_rotation_for(config.rotation_dim, t.k_type, t.v_type);
  }
  Result<KvStorage> storage = KvStorage::create(config.n_ctx, std::move(layers), std::move(types));
  if (!storage.ok()) return storage.status().with_context("KvCache");
  return std::unique_ptr<KvCache>(
      new KvCache(std::move(config), std::move(storage).value(), std::move(layer_index)));
}

Result<std::unique_ptr<KvCache>> KvCache::copy() const {
  MNEMO_ASSIGN_OR_RETURN(KvStorage storage, storage_.copy());
  std::unique_ptr<KvCache> c(new KvCache(config_, std::move(storage), layer_index_));
  c->cells_ = cells_;
  return c;
}

uint32_t KvCache::layer_index(uint32_t il) const {
  CHECK(holds_layer(il)) << "model layer " << il << " is not held by this KV cache";
  return static_cast<uint32_t>(layer_index_[il]);
}

KvRows KvCache::k_view(uint32_t il, uint32_t stream) const {
  CHECK_LT(stream, n_stream());
  return storage_.k(layer_index(il), stream);
}

KvRows KvCache::v_view(uint32_t il, uint32_t stream) const {
  CHECK_LT(stream, n_stream());
  return storage_.v(layer_index(il), stream);
}

// --- contexts ----------------------------------------------------------------------------------

BatchLimits KvCache::batch_limits(const BatchLimits& base) const {
  BatchLimits l = base;
  l.n_seq_max = config_.n_seq_max;
  l.allow_multi_seq_rows = config_.unified;
  return l;
}

SplitStrategy KvCache::split_strategy() const {
  return config_.unified ? SplitStrategy::kSimple : SplitStrategy::kEqual;
}

std::unique_ptr<MemoryContext> KvCache::init_batch(const Batch& batch, uint32_t n_ubatch,
                                                   const BatchLimits& limits) {
  Result<PreparedBatch> pb =
      prepare_batch(batch, batch_limits(limits), [this](SeqId s) { return seq_pos_max(s); });
  if (!pb.ok()) {
    return std::make_unique<MemoryContext>(MemoryStatus::kInvalidBatch, pb.status().message());
  }
  Result<std::vector<Ubatch>> ubs = split_batch(*pb, split_strategy(), n_ubatch);
  if (!ubs.ok()) {
    return std::make_unique<MemoryContext>(MemoryStatus::kInvalidBatch, ubs.status().message());
  }
  return prepare(std::make_shared<const std::vector<Ubatch>>(std::move(ubs).value()));
}

std::unique_ptr<MemoryContext> KvCache::init_full() {
  std::unique_ptr<KvCacheContext> ctx(new KvCacheContext(this, KvCacheContext::Mode::kFull));
  ctx->epoch_ = epoch_;
  return ctx;
}

std::unique_ptr<MemoryContext> KvCache::init_update() {
  std::unique_ptr<KvCacheContext> ctx;
  for (uint32_t s = 0; s < n_stream(); ++s) {
    const KvCells& c = cells_[s];
    if (c.n_shifted() == 0) continue;
    if (!ctx) ctx.reset(new KvCacheContext(this, KvCacheContext::Mode::kUpdate));
    KvCacheContext::StreamShifts& sh = ctx->shifts_.emplace_back();
    sh.stream = s;
    for (uint32_t i = 0; i < c.used_max(); ++i) {
      if (c.shift(i) != 0) {
        sh.cells.push_back(i);
        sh.deltas.push_back(c.shift(i));
      }
    }
    DCHECK(sh.cells.size() == c.n_shifted());
  }
  if (!ctx) {
    return std::unique_ptr<KvCacheContext>(new KvCacheContext(
        this, KvCacheContext::Mode::kUpdate, MemoryStatus::kNoUpdate, "no pending shifts"));
  }
  ctx->epoch_ = epoch_;
  return ctx;
}

// --- sequence operations -----------------------------------------------------------------------

Status KvCache::check_seq(SeqId seq, const char* op, const char* what) const {
  return check_seq_id(seq, config_.n_seq_max, op, what);
}

void KvCache::note_freed(uint32_t stream, uint32_t cell) {
  // Refill holes first: the next placement starts at the lowest freed cell before head.
  if (cell < cells_[stream].head()) cells_[stream].set_head(cell);
}

Status KvCache::check_seq_rm(SeqId seq, Pos p0, Pos p1) const {
  if (seq >= 0) return check_seq(seq, "seq_rm", "seq_id");
  return Status();
}

Status KvCache::seq_rm(SeqId seq, Pos p0, Pos p1) {
  MNEMO_RETURN_IF_ERROR(check_seq_rm(seq, p0, p1));
  const PosRange r = open_range(p0, p1);
  if (r.empty()) return Status();
  auto rm_one = [&](SeqId s) {
    const uint32_t st = stream_of(s);
    KvCells& c = cells_[st];
    scratch_cells_.clear();
    c.seq_cells(s, r.lo, r.hi, &scratch_cells_);
    for (uint32_t cell : scratch_cells_) {
      SeqSet seqs = c.seqs(cell);
      seqs.reset(s);
      c.set(cell, c.pos(cell), seqs, c.shift(cell));
      if (seqs.none()) note_freed(st, cell);
    }
  };
  for_each_seq(seq, config_.n_seq_max, rm_one);
  ++epoch_;
  return Status();
}

Status KvCache::check_seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) const {
  MNEMO_RETURN_IF_ERROR(check_seq(src, "seq_cp", "source seq_id"));
  MNEMO_RETURN_IF_ERROR(check_seq(dst, "seq_cp", "destination seq_id"));
  const PosRange r = open_range(p0, p1);
  if (src == dst || r.empty() || config_.unified) return Status();
  const KvCells& cs = cells_[stream_of(src)];
  const KvCells& cd = cells_[stream_of(dst)];
  std::vector<uint32_t> cells;
  cs.seq_cells(src, r.lo, r.hi, &cells);
  const uint32_t n_free = cd.size() - cd.used();
  if (cells.size() > n_free) {
    return Status::no_space("seq_cp: copying " + std::to_string(cells.size()) +
                            " cells of seq_id " + std::to_string(src) + " into stream " +
                            std::to_string(stream_of(dst)) + " needs as many free cells; it has " +
                            std::to_string(n_free));
  }
  return Status();
}

Status KvCache::seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) {
  MNEMO_RETURN_IF_ERROR(check_seq_cp(src, dst, p0, p1));
  const PosRange r = open_range(p0, p1);
  if (src == dst || r.empty()) return Status();
  const uint32_t ss = stream_of(src);
  const uint32_t ds = stream_of(dst);
  KvCells& cs = cells_[ss];
  std::vector<uint32_t> cells;
  cs.seq_cells(src, r.lo, r.hi, &cells);
  if (cells.empty()) return Status();
  if (ss == ds) {
    // One stream: dst joins the cells (shared prefix; no K/V copy).
    for (uint32_t cell : cells) {
      SeqSet seqs = cs.seqs(cell);
      seqs.set(dst);
      cs.set(cell, cs.pos(cell), seqs, cs.shift(cell));
    }
  } else {
    // Another stream: copy rows into free cells of dst's stream, from its head on.
    KvCells& cd = cells_[ds];
    uint32_t cursor = cd.head();
    uint32_t last = cursor;
    for (uint32_t cell : cells) {
      while (!cd.is_empty(cursor)) cursor = cursor + 1 == cd.size() ? 0 : cursor + 1;
      storage_.copy_cell(ss, cell, ds, cursor);
      cd.set(cursor, cs.pos(cell), SeqSet::of(dst), cs.shift(cell));
      last = cursor;
    }
    cd.set_head(last + 1 == cd.size() ? 0 : last + 1);
  }
  ++epoch_;
  return Status();
}

Status KvCache::check_seq_keep(SeqId seq) const { return check_seq(seq, "seq_keep", "seq_id"); }

Status KvCache::seq_keep(SeqId seq) {
  MNEMO_RETURN_IF_ERROR(check_seq_keep(seq));
  for (SeqId s = 0; s < static_cast<SeqId>(config_.n_seq_max); ++s) {
    if (s == seq) continue;
    const uint32_t st = stream_of(s);
    KvCells& c = cells_[st];
    if (c.seq_n_cells(s) == 0) continue;
    scratch_cells_.clear();
    c.seq_cells(s, 0, INT32_MAX, &scratch_cells_);
    for (uint32_t cell : scratch_cells_) {
      SeqSet seqs = c.seqs(cell);
      seqs.reset(s);
      c.set(cell, c.pos(cell), seqs, c.shift(cell));
      if (seqs.none()) note_freed(st, cell);
    }
  }
  ++epoch_;
  return Status();
}

Status KvCache::check_seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) const {
  MNEMO_RETURN_IF_ERROR(check_seq(seq, "seq_add", "seq_id"));
  const PosRange r = open_range(p0, p1);
  if (delta == 0 || r.empty()) return Status();
  std::vector<uint32_t> cells;
  const KvCells& c = cells_[stream_of(seq)];
  c.seq_cells(seq, r.lo, r.hi, &cells);
  for (uint32_t cell : cells) {
    const int64_t np = static_cast<int64_t>(c.pos(cell)) + delta;
    const int64_t ns = static_cast<int64_t>(c.shift(cell)) + delta;
    if (np > kPosMax || ns > INT32_MAX || ns < INT32_MIN) {
      return Status::out_of_range("seq_add: moving position " + std::to_string(c.pos(cell)) +
                                  " of seq_id " + std::to_string(seq) + " by " +
                                  std::to_string(delta) + " overflows the position range");
    }
  }
  return Status();
}

Status KvCache::seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) {
  MNEMO_RETURN_IF_ERROR(check_seq_add(seq, p0, p1, delta));
  const PosRange r = open_range(p0, p1);
  if (delta == 0 || r.empty()) return Status();
  const uint32_t st = stream_of(seq);
  KvCells& c = cells_[st];
  scratch_cells_.clear();
  c.seq_cells(seq, r.lo, r.hi, &scratch_cells_);
  for (uint32_t cell : scratch_cells_) {
    const Pos np = c.pos(cell) + delta;
    if (np < 0) {
      c.clear_cell(cell);  // shifted out of the sequence: the whole cell goes
      note_freed(st, cell);
    } else {
      c.set(cell, np, c.seqs(cell), c.shift(cell) + delta);
    }
  }
  ++epoch_;
  return Status();
}

Status KvCache::check_seq_div(SeqId seq, Pos p0, Pos p1, int32_t d) const {
  MNEMO_RETURN_IF_ERROR(check_seq(seq, "seq_div", "seq_id"));
  if (d < 1) {
    return Status::invalid_argument("seq_div: divisor " + std::to_string(d) +
                                    " must be at least 1");
  }
  const PosRange r = open_range(p0, p1);
  if (d == 1 || r.empty()) return Status();
  std::vector<uint32_t> cells;
  const KvCells& c = cells_[stream_of(seq)];
  c.seq_cells(seq, r.lo, r.hi, &cells);
  for (uint32_t cell : cells) {
    const int64_t ns = static_cast<int64_t>(c.shift(cell)) + c.pos(cell) / d - c.pos(cell);
    if (ns < INT32_MIN) {
      return Status::out_of_range("seq_div: the pending shift of position " +
                                  std::to_string(c.pos(cell)) + " of seq_id " +
                                  std::to_string(seq) + " overflows");
    }
  }
  return Status();
}

Status KvCache::seq_div(SeqId seq, Pos p0, Pos p1, int32_t d) {
  MNEMO_RETURN_IF_ERROR(check_seq_div(seq, p0, p1, d));
  const PosRange r = open_range(p0, p1);
  if (d == 1 || r.empty()) return Status();
  KvCells& c = cells_[stream_of(seq)];
  scratch_cells_.clear();
  c.seq_cells(seq, r.lo, r.hi, &scratch_cells_);
  for (uint32_t cell : scratch_cells_) {
    const Pos np = c.pos(cell) / d;
    c.set(cell, np, c.seqs(cell), c.shift(cell) + (np - c.pos(cell)));
  }
  ++epoch_;
  return Status();
}

Pos KvCache::seq_pos_min(SeqId seq) const {
  if (seq < 0 || static_cast<uint32_t>(seq) >= config_.n_seq_max) return -1;
  return cells_[stream_of(seq)].seq_pos_min(seq);
}

Pos KvCache::seq_pos_max(SeqId seq) const {
  if (seq < 0 || static_cast<uint32_t>(seq) >= config_.n_seq_max) return -1;
  return cells_[stream_of(seq)].seq_pos_max(seq);
}

void KvCache::clear() {
  for (KvCells& c : cells_) c.clear();
  ++epoch_;
}

// --- accounting --------------------------------------------------------------------------------

MemoryBreakdown KvCache::breakdown() const {
  MemoryBreakdown b;
  for (uint32_t s = 0; s < n_stream(); ++s) {
    MemoryBreakdown::Stream st;
    st.part = "kv";
    st.stream = s;
    st.n_cells = cells_[s].size();
    st.used = cells_[s].used();
    st.free = st.n_cells - st.used;
    st.k_type = storage_.k_type(s);
    st.v_type = storage_.v_type(s);
    st.rotation = storage_.rotation(s);
    st.mapped_bytes = storage_.mapped_bytes(s);
    std::vector<MemoryBreakdown::Tensor> tensors;
    for (uint32_t l = 0; l < storage_.n_layer(); ++l) {
      for (char kind : {'K', 'V'}) {
        MemoryBreakdown::Tensor& t = tensors.emplace_back();
        t.layer = storage_.layer(l).il;
        t.kind = kind;
        t.type = kind == 'K' ? st.k_type : st.v_type;
        t.n_embd = kind == 'K' ? storage_.layer(l).n_embd_k : storage_.layer(l).n_embd_v;
        t.bytes = storage_.tensor_bytes(l, s, kind);
      }
    }
    b.add_stream(std::move(st), std::move(tensors));
  }
  return b;
}

Result<SeqMemoryInfo> KvCache::seq_info(SeqId seq) const {
  MNEMO_RETURN_IF_ERROR(check_seq(seq, "seq_info", "seq_id"));
  SeqMemoryInfo info;
  info.seq_id = seq;
  info.has_kv = true;
  info.stream = stream_of(seq);
  info.k_type = storage_.k_type(info.stream);
  info.v_type = storage_.v_type(info.stream);
  const KvCells& cells = cells_[info.stream];
  info.cells = cells.seq_n_cells(seq);
  info.free_cells = cells.size() - cells.used();
  size_t stream_bytes = 0;
  for (uint32_t l = 0; l < storage_.n_layer(); ++l) {
    stream_bytes += storage_.tensor_bytes(l, info.stream, 'K');
    stream_bytes += storage_.tensor_bytes(l, info.stream, 'V');
  }
  // A unified stream serves every sequence: charge each its share by cells held. The product
  // fits in 64 bits for any stream up to 1 TiB with up to 16 Mi cells.
  info.bytes = config_.unified ? stream_bytes * info.cells / cells.size() : stream_bytes;
  return info;
}

}  // namespace mnemo
