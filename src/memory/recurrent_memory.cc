// RecurrentMemory: creation, the split at checkpoint boundaries, the journaled commit of a
// ubatch, sequence operations with checkpoints, accounting. Contract:
// src/memory/recurrent_memory.h.

#include "memory/recurrent_memory.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "memory/pos_range.h"

namespace mnemo {

// The undo log of one transaction: what apply() overwrote, saved the first time.
struct RsJournal {
  struct SeqSave {
    SeqId seq = 0;
    RecurrentMemory::SeqMeta meta;
    std::vector<float> cell;  // [n_floats] the cell before the forward pass wrote it
  };
  struct PoolSave {
    uint32_t cell = 0;
    std::vector<float> bytes;  // [n_floats] a live checkpoint before it was replaced
  };
  std::vector<SeqSave> seqs;
  std::vector<PoolSave> pool;
  std::vector<uint32_t> spec_overwritten;  // live speculative cells this transaction reused
  std::vector<uint8_t> seq_saved;   // [n_seq_max]
  std::vector<uint8_t> pool_saved;  // [n_seq_max * n_checkpoints]

  bool empty() const { return seqs.empty() && pool.empty(); }
};

namespace {

// Rows [b, e) of a single-sequence ubatch, as a ubatch of its own.
Ubatch slice_ubatch(const Ubatch& u, uint32_t b, uint32_t e) {
  Ubatch o;
  o.strategy = u.strategy;
  o.n_embd = u.n_embd;
  o.seqs = u.seqs;
  o.n_seq_tokens = e - b;
  if (!u.token.empty()) o.token.assign(u.token.begin() + b, u.token.begin() + e);
  if (!u.embd.empty()) {
    o.embd.assign(u.embd.begin() + size_t(b) * u.n_embd, u.embd.begin() + size_t(e) * u.n_embd);
  }
  o.pos.assign(u.pos.begin() + b, u.pos.begin() + e);
  o.output.assign(u.output.begin() + b, u.output.begin() + e);
  o.batch_row.assign(u.batch_row.begin() + b, u.batch_row.begin() + e);
  o.seq_begin.push_back(0);
  for (uint32_t i = b; i < e; ++i) {
    for (SeqId s : u.seq_ids(i)) o.seq_id_flat.push_back(s);
    o.seq_begin.push_back(static_cast<uint32_t>(o.seq_id_flat.size()));
  }
  return o;
}

std::string pos_list(const std::vector<Pos>& v) {
  if (v.empty()) return "none";
  std::string s;
  for (Pos p : v) s += (s.empty() ? "" : ", ") + std::to_string(p);
  return s;
}

}  // namespace

// --- context -----------------------------------------------------------------------------------

RecurrentMemoryContext::RecurrentMemoryContext(RecurrentMemory* state, Mode mode,
                                               MemoryStatus status, std::string message)
    : PlannedContext(status, std::move(message)),
      state_(state),
      mode_(mode),
      journal_(std::make_unique<RsJournal>()) {}

RecurrentMemoryContext::~RecurrentMemoryContext() = default;

Status RecurrentMemoryContext::apply() {
  if (!ok()) return MemoryContext::apply();
  CHECK(!spent_) << "apply() after rollback()";
  if (mode_ == Mode::kFull) return Status();
  CHECK(state_->epoch_ == epoch_) << "the recurrent state changed since init_batch";
  CHECK(n_applied_ == cur_) << "ubatch " << cur_ << " applied out of order (" << n_applied_
                            << " applied)";
  const Ubatch& ub = (*ubatches_)[cur_];
  state_->apply_ubatch(ub, journal_.get());
  cur_spec_.clear();
  if (cur_ < spec_rows_.size() && !spec_rows_[cur_].empty()) {
    cur_spec_ = state_->take_spec(ub, spec_rows_[cur_], journal_.get());
  }
  n_applied_ = cur_ + 1;
  epoch_ = ++state_->epoch_;
  return Status();
}

void RecurrentMemoryContext::rollback() {
  if (!ok() || spent_) return;
  spent_ = true;
  if (journal_->empty()) return;
  CHECK(state_->epoch_ == epoch_) << "the recurrent state changed after this context's apply()";
  state_->undo(journal_.get());
  ++state_->epoch_;
}

const RecurrentMemoryContext* RecurrentMemoryContext::rs_for_layer(uint32_t il) const {
  return state_->holds_layer(il) ? this : nullptr;
}

SeqId RecurrentMemoryContext::seq() const {
  const Ubatch& ub = ubatch();
  CHECK(ub.n_tokens() > 0) << "no current ubatch";
  return ub.seq_id(0);
}

float* RecurrentMemoryContext::conv_state(uint32_t il) const {
  return state_->conv_state(il, seq());
}

float* RecurrentMemoryContext::ssm_state(uint32_t il) const { return state_->ssm_state(il, seq()); }

void RecurrentMemoryContext::for_segments(uint32_t il, RsPart part, int64_t T,
                                          const std::function<void(int64_t, int64_t)>& fn) const {
  if (cur_spec_.empty()) {
    fn(0, T);
    return;
  }
  CHECK(state_->holds_layer(il)) << "model layer " << il << " is not recurrent";
  const bool conv = part == RsPart::kConv;
  const int64_t off = conv ? state_->layer_off_r_[il] : state_->layer_off_s_[il];
  const uint32_t n = conv ? state_->n_embd_r(il) : state_->n_embd_s(il);
  const float* cell = conv ? conv_state(il) : ssm_state(il);
  int64_t b = 0;
  for (const auto& [row, dst] : cur_spec_) {
    CHECK_LT(int64_t(row), T);
    fn(b, int64_t(row) + 1);
    std::memcpy(dst + off, cell, size_t(n) * sizeof(float));
    b = int64_t(row) + 1;
  }
  if (b < T) fn(b, T);
}

// --- creation ----------------------------------------------------------------------------------

RecurrentMemory::RecurrentMemory(RecurrentMemoryConfig config, std::vector<int64_t> off_r,
                                 std::vector<int64_t> off_s, size_t n_floats, AlignedBuffer cells,
                                 AlignedBuffer ckpt_pool, AlignedBuffer spec_pool)
    : config_(std::move(config)),
      layer_off_r_(std::move(off_r)),
      layer_off_s_(std::move(off_s)),
      n_floats_(n_floats),
      cells_(std::move(cells)),
      ckpt_pool_(std::move(ckpt_pool)),
      spec_pool_(std::move(spec_pool)),
      seqs_(config_.n_seq_max) {}

RecurrentMemory::~RecurrentMemory() = default;

Result<std::unique_ptr<RecurrentMemory>> RecurrentMemory::create(RecurrentMemoryConfig config) {
  const auto bad = [](const std::string& m) {
    return Status::invalid_argument("RecurrentMemory: " + m);
  };
  if (config.n_seq_max == 0 || config.n_seq_max > kMaxSeq) {
    return bad("n_seq_max = " + std::to_string(config.n_seq_max) + " is outside [1, " +
               std::to_string(kMaxSeq) + "]");
  }
  if (config.n_embd_r.size() != config.n_embd_s.size()) {
    return bad("n_embd_r has " + std::to_string(config.n_embd_r.size()) +
               " layers but n_embd_s has " + std::to_string(config.n_embd_s.size()));
  }
  if ((config.checkpoint_interval == 0) != (config.n_checkpoints == 0)) {
    return bad("checkpoint_interval (" + std::to_string(config.checkpoint_interval) +
               ") and n_checkpoints (" + std::to_string(config.n_checkpoints) +
               ") must both be zero or both positive");
  }
  const size_t n_layer = config.n_embd_r.size();
  std::vector<int64_t> off_r(n_layer, -1), off_s(n_layer, -1);
  size_t n = 0;
  for (uint32_t il = 0; il < n_layer; ++il) {
    if (config.layer_filter && !config.layer_filter(il)) continue;
    if (uint64_t{config.n_embd_r[il]} + config.n_embd_s[il] == 0) {
      return bad("recurrent layer " + std::to_string(il) +
                 " has no state (n_embd_r = n_embd_s = 0)");
    }
    off_r[il] = static_cast<int64_t>(n);
    n += config.n_embd_r[il];
    off_s[il] = static_cast<int64_t>(n);
    n += config.n_embd_s[il];
  }
  if (n == 0) return bad("no recurrent layer");
  const uint64_t bytes_per_seq = uint64_t{n} * sizeof(float);
  if (config.n_spec > 256) return bad("n_spec = " + std::to_string(config.n_spec) + " > 256");
  const uint64_t n_ckpt_cells = uint64_t{config.n_seq_max} * config.n_checkpoints;
  const uint64_t n_spec_cells = uint64_t{config.n_seq_max} * config.n_spec;
  if (bytes_per_seq * (config.n_seq_max + n_ckpt_cells + n_spec_cells) > (uint64_t{1} << 46)) {
    return Status::no_space("RecurrentMemory: " + std::to_string(bytes_per_seq) +
                            " bytes per state times " +
                            std::to_string(config.n_seq_max + n_ckpt_cells + n_spec_cells) +
                            " states is too large");
  }
  Result<AlignedBuffer> cells = AlignedBuffer::allocate(bytes_per_seq * config.n_seq_max);
  if (!cells.ok()) return cells.status().with_context("RecurrentMemory cells");
  Result<AlignedBuffer> pool = AlignedBuffer::allocate(bytes_per_seq * n_ckpt_cells);
  if (!pool.ok()) return pool.status().with_context("RecurrentMemory checkpoints");
  Result<AlignedBuffer> spec = AlignedBuffer::allocate(bytes_per_seq * n_spec_cells);
  if (!spec.ok()) return spec.status().with_context("RecurrentMemory speculative states");
  return std::unique_ptr<RecurrentMemory>(new RecurrentMemory(
      std::move(config), std::move(off_r), std::move(off_s), n, std::move(cells).value(),
      std::move(pool).value(), std::move(spec).value()));
}

Result<std::unique_ptr<RecurrentMemory>> RecurrentMemory::copy() const {
  MNEMO_ASSIGN_OR_RETURN(AlignedBuffer cells, cells_.copy());
  MNEMO_ASSIGN_OR_RETURN(AlignedBuffer pool, ckpt_pool_.copy());
  MNEMO_ASSIGN_OR_RETURN(AlignedBuffer spec, spec_pool_.copy());
  std::unique_ptr<RecurrentMemory> c(new RecurrentMemory(config_, layer_off_r_, layer_off_s_,
                                                         n_floats_, std::move(cells),
                                                         std::move(pool), std::move(spec)));
  c->seqs_ = seqs_;
  return c;
}

// --- storage access ----------------------------------------------------------------------------

float* RecurrentMemory::cell_ptr(SeqId seq) const {
  CHECK(seq >= 0 && static_cast<uint32_t>(seq) < config_.n_seq_max) << "seq_id " << seq;
  // The buffer is owned by this object; the const accessors hand out the bytes the forward pass
  // writes, as KvCache's views do.
  return reinterpret_cast<float*>(const_cast<uint8_t*>(cells_.data())) + size_t(seq) * n_floats_;
}

float* RecurrentMemory::ckpt_ptr(uint32_t pool_cell) const {
  CHECK_LT(pool_cell, config_.n_seq_max * config_.n_checkpoints);
  return reinterpret_cast<float*>(const_cast<uint8_t*>(ckpt_pool_.data())) +
         size_t(pool_cell) * n_floats_;
}

float* RecurrentMemory::spec_ptr(uint32_t pool_cell) const {
  CHECK_LT(pool_cell, config_.n_seq_max * config_.n_spec);
  return reinterpret_cast<float*>(const_cast<uint8_t*>(spec_pool_.data())) +
         size_t(pool_cell) * n_floats_;
}

float* RecurrentMemory::conv_state(uint32_t il, SeqId seq) const {
  CHECK(holds_layer(il)) << "model layer " << il << " is not recurrent";
  return cell_ptr(seq) + layer_off_r_[il];
}

float* RecurrentMemory::ssm_state(uint32_t il, SeqId seq) const {
  CHECK(holds_layer(il)) << "model layer " << il << " is not recurrent";
  return cell_ptr(seq) + layer_off_s_[il];
}

std::vector<Pos> RecurrentMemory::checkpoints(SeqId seq) const {
  std::vector<Pos> out;
  if (seq < 0 || static_cast<uint32_t>(seq) >= config_.n_seq_max) return out;
  for (const Checkpoint& c : seqs_[seq].ckpts) out.push_back(c.pos);
  return out;
}

std::vector<Pos> RecurrentMemory::spec_states(SeqId seq) const {
  std::vector<Pos> out;
  if (seq < 0 || static_cast<uint32_t>(seq) >= config_.n_seq_max) return out;
  for (const Checkpoint& c : seqs_[seq].spec) out.push_back(c.pos);
  return out;
}

std::span<const float> RecurrentMemory::cell(SeqId seq) const { return {cell_ptr(seq), n_floats_}; }

std::span<const float> RecurrentMemory::checkpoint(SeqId seq, Pos pos) const {
  if (seq < 0 || static_cast<uint32_t>(seq) >= config_.n_seq_max) return {};
  for (const Checkpoint& c : seqs_[seq].ckpts) {
    if (c.pos == pos) return {ckpt_ptr(c.cell), n_floats_};
  }
  return {};
}

std::span<const float> RecurrentMemory::spec_state(SeqId seq, Pos pos) const {
  if (seq < 0 || static_cast<uint32_t>(seq) >= config_.n_seq_max) return {};
  for (const Checkpoint& c : seqs_[seq].spec) {
    if (c.pos == pos) return {spec_ptr(c.cell), n_floats_};
  }
  return {};
}

uint32_t RecurrentMemory::take_cell(std::vector<Checkpoint>& list, uint32_t first, uint32_t n,
                                    bool* evicted) {
  *evicted = list.size() >= n;
  if (*evicted) {  // the oldest goes
    const uint32_t cell = list.front().cell;
    list.erase(list.begin());
    return cell;
  }
  std::vector<uint8_t> used(n, 0);
  for (const Checkpoint& c : list) used[c.cell - first] = 1;
  uint32_t cell = first;
  while (used[cell - first]) ++cell;
  return cell;
}

RecurrentMemory::SavedState RecurrentMemory::find_checkpoint(SeqId seq, Pos pos) const {
  SavedState best;
  for (const Checkpoint& c : seqs_[seq].ckpts) {
    if (c.pos <= pos && c.pos > best.pos) best = {c.pos, ckpt_ptr(c.cell)};
  }
  for (const Checkpoint& c : seqs_[seq].spec) {
    if (c.pos <= pos && c.pos > best.pos) best = {c.pos, spec_ptr(c.cell)};
  }
  return best;
}

void RecurrentMemory::reset_seq(SeqId seq) { seqs_[seq] = SeqMeta{}; }

// --- contexts ----------------------------------------------------------------------------------

BatchLimits RecurrentMemory::batch_limits(const BatchLimits& base) const {
  BatchLimits l = base;
  l.n_seq_max = config_.n_seq_max;
  l.allow_multi_seq_rows = false;  // one state per sequence: share a prefix with seq_cp
  return l;
}

Result<std::vector<Ubatch>> RecurrentMemory::split(const PreparedBatch& batch,
                                                   uint32_t n_ubatch) const {
  MNEMO_ASSIGN_OR_RETURN(std::vector<Ubatch> ubs,
                         split_batch(batch, SplitStrategy::kSeq, n_ubatch));
  const uint32_t n = config_.checkpoint_interval;
  if (n == 0) return ubs;
  // A checkpoint is the state after position k*N - 1, which exists between two forward passes
  // only if a ubatch starts at k*N: cut there.
  std::vector<Ubatch> out;
  out.reserve(ubs.size());
  for (Ubatch& u : ubs) {
    uint32_t b = 0;
    for (uint32_t i = 1; i < u.n_tokens(); ++i) {
      if (u.pos[i] % static_cast<Pos>(n) == 0) {
        out.push_back(slice_ubatch(u, b, i));
        b = i;
      }
    }
    if (b == 0) {
      out.push_back(std::move(u));
    } else {
      out.push_back(slice_ubatch(u, b, u.n_tokens()));
    }
  }
  return out;
}

std::unique_ptr<RecurrentMemoryContext> RecurrentMemory::prepare(
    std::shared_ptr<const std::vector<Ubatch>> ubatches) {
  CHECK(ubatches != nullptr);
  for (const Ubatch& ub : *ubatches) {  // prepare() takes validated, split ubatches
    CHECK(ub.n_tokens() > 0 && ub.seqs.size() == 1) << "a recurrent ubatch holds one sequence";
    for (uint32_t r = 0; r < ub.n_tokens(); ++r) {
      CHECK(ub.seq_ids(r).size() == 1 && ub.seq_id(r) == ub.seqs[0] && ub.pos[r] >= 0);
    }
  }
  std::unique_ptr<RecurrentMemoryContext> ctx(
      new RecurrentMemoryContext(this, RecurrentMemoryContext::Mode::kBatch));
  if (config_.n_spec > 0) ctx->spec_rows_ = plan_spec_rows(*ubatches);
  ctx->ubatches_ = std::move(ubatches);
  ctx->epoch_ = epoch_;
  return ctx;
}

std::vector<std::vector<uint32_t>> RecurrentMemory::plan_spec_rows(
    const std::vector<Ubatch>& ubs) const {
  std::vector<std::vector<uint32_t>> rows(ubs.size());
  // Per sequence, its output rows in order, as (ubatch, row); the last row of the sequence in
  // the batch is dropped (its state is the cell), and only the last n_spec are kept.
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> per_seq(config_.n_seq_max);
  std::vector<std::pair<uint32_t, uint32_t>> last(config_.n_seq_max, {UINT32_MAX, 0});
  for (uint32_t u = 0; u < ubs.size(); ++u) {
    const SeqId s = ubs[u].seqs[0];
    for (uint32_t r = 0; r < ubs[u].n_tokens(); ++r) {
      if (ubs[u].output[r]) per_seq[s].emplace_back(u, r);
    }
    last[s] = {u, ubs[u].n_tokens() - 1};
  }
  for (SeqId s = 0; s < static_cast<SeqId>(config_.n_seq_max); ++s) {
    auto& v = per_seq[s];
    if (!v.empty() && v.back() == last[s]) v.pop_back();
    const size_t from = v.size() > config_.n_spec ? v.size() - config_.n_spec : 0;
    for (size_t i = from; i < v.size(); ++i) rows[v[i].first].push_back(v[i].second);
  }
  return rows;
}

std::vector<std::pair<uint32_t, float*>> RecurrentMemory::take_spec(
    const Ubatch& ub, const std::vector<uint32_t>& rows, RsJournal* journal) {
  const SeqId s = ub.seqs[0];
  SeqMeta& m = seqs_[s];
  std::vector<std::pair<uint32_t, float*>> out;
  for (uint32_t r : rows) {
    bool evicted = false;
    const uint32_t cell =
        take_cell(m.spec, static_cast<uint32_t>(s) * config_.n_spec, config_.n_spec, &evicted);
    // An evicted state's bytes are not saved: if the transaction rolls back, the state it held
    // is dropped instead (a speculative state is a cache of a recent state).
    if (evicted) journal->spec_overwritten.push_back(cell);
    m.spec.push_back({ub.pos[r], cell});
    out.emplace_back(r, spec_ptr(cell));
  }
  return out;
}

std::unique_ptr<MemoryContext> RecurrentMemory::init_batch(const Batch& batch, uint32_t n_ubatch,
                                                           const BatchLimits& limits) {
  Result<PreparedBatch> pb =
      prepare_batch(batch, batch_limits(limits), [this](SeqId s) { return seq_pos_max(s); });
  if (!pb.ok()) {
    return std::make_unique<MemoryContext>(MemoryStatus::kInvalidBatch, pb.status().message());
  }
  Result<std::vector<Ubatch>> ubs = split(*pb, n_ubatch);
  if (!ubs.ok()) {
    return std::make_unique<MemoryContext>(MemoryStatus::kInvalidBatch, ubs.status().message());
  }
  return prepare(std::make_shared<const std::vector<Ubatch>>(std::move(ubs).value()));
}

std::unique_ptr<MemoryContext> RecurrentMemory::init_full() {
  std::unique_ptr<RecurrentMemoryContext> ctx(
      new RecurrentMemoryContext(this, RecurrentMemoryContext::Mode::kFull));
  ctx->epoch_ = epoch_;
  return ctx;
}

std::unique_ptr<MemoryContext> RecurrentMemory::init_update() {
  return std::make_unique<MemoryContext>(MemoryStatus::kNoUpdate,
                                         "recurrent state has no pending shifts");
}

void RecurrentMemory::apply_ubatch(const Ubatch& ub, RsJournal* journal) {
  const SeqId s = ub.seqs[0];
  SeqMeta& m = seqs_[s];
  const size_t bytes = n_floats_ * sizeof(float);
  if (journal->seq_saved.empty()) {
    journal->seq_saved.assign(config_.n_seq_max, 0);
    journal->pool_saved.assign(size_t(config_.n_seq_max) * config_.n_checkpoints, 0);
  }
  if (!journal->seq_saved[s]) {
    journal->seq_saved[s] = 1;
    RsJournal::SeqSave& save = journal->seqs.emplace_back();
    save.seq = s;
    save.meta = m;
    save.cell.assign(cell_ptr(s), cell_ptr(s) + n_floats_);
  }
  const Pos p = ub.pos[0];
  CHECK(p == m.pos_max + 1) << "seq_id " << s << " continues at " << p << ", holds up to "
                            << m.pos_max;
  if (m.pos_max < 0) {
    std::memset(cell_ptr(s), 0, bytes);  // a new sequence starts from the zero state
    m.pos_min = p;
  }
  const uint32_t n = config_.checkpoint_interval;
  if (n > 0 && p > 0 && p % static_cast<Pos>(n) == 0 &&
      (m.ckpts.empty() || m.ckpts.back().pos != p - 1)) {
    // Snapshot the state after p - 1 (the cell, before this ubatch's forward pass writes it).
    bool evicted = false;
    const uint32_t cell = take_cell(m.ckpts, static_cast<uint32_t>(s) * config_.n_checkpoints,
                                    config_.n_checkpoints, &evicted);
    if (evicted && !journal->pool_saved[cell]) {
      journal->pool_saved[cell] = 1;
      journal->pool.push_back(
          {cell, std::vector<float>(ckpt_ptr(cell), ckpt_ptr(cell) + n_floats_)});
    }
    std::memcpy(ckpt_ptr(cell), cell_ptr(s), bytes);
    m.ckpts.push_back({p - 1, cell});
  }
  m.pos_max = ub.pos.back();
}

void RecurrentMemory::undo(RsJournal* journal) {
  for (auto it = journal->pool.rbegin(); it != journal->pool.rend(); ++it) {
    std::memcpy(ckpt_ptr(it->cell), it->bytes.data(), n_floats_ * sizeof(float));
  }
  for (auto it = journal->seqs.rbegin(); it != journal->seqs.rend(); ++it) {
    seqs_[it->seq] = it->meta;
    std::memcpy(cell_ptr(it->seq), it->cell.data(), n_floats_ * sizeof(float));
    std::vector<Checkpoint>& spec = seqs_[it->seq].spec;
    std::erase_if(spec, [&](const Checkpoint& c) {
      return std::find(journal->spec_overwritten.begin(), journal->spec_overwritten.end(),
                       c.cell) != journal->spec_overwritten.end();
    });
  }
  *journal = RsJournal{};
}

// --- sequence operations -----------------------------------------------------------------------

Status RecurrentMemory::check_seq(SeqId seq, const char* op, const char* what) const {
  return check_seq_id(seq, config_.n_seq_max, op, what);
}

Status RecurrentMemory::check_seq_rm(SeqId seq, Pos p0, Pos p1) const {
  if (seq < 0) {
    for (SeqId s = 0; s < static_cast<SeqId>(config_.n_seq_max); ++s) {
      MNEMO_RETURN_IF_ERROR(check_seq_rm(s, p0, p1));
    }
    return Status();
  }
  MNEMO_RETURN_IF_ERROR(check_seq(seq, "seq_rm", "seq_id"));
  const SeqMeta& m = seqs_[seq];
  const PosRange r = open_range(p0, p1);
  if (r.misses(m.pos_min, m.pos_max)) return Status();
  if (r.covers(m.pos_min, m.pos_max)) return Status();  // the whole sequence
  if (r.hi <= m.pos_max) {
    return Status::not_supported(
        "seq_rm: positions [" + std::to_string(r.lo) + ", " + std::to_string(r.hi) +
        ") of seq_id " + std::to_string(seq) +
        " cannot be removed from a recurrent state holding [" + std::to_string(m.pos_min) + ", " +
        std::to_string(m.pos_max) +
        "]: a state can only be cut back to a checkpoint (a tail), or emptied");
  }
  if (find_checkpoint(seq, r.lo - 1).data == nullptr) {
    return Status::out_of_range(
        "seq_rm: seq_id " + std::to_string(seq) + " cannot be cut back to position " +
        std::to_string(r.lo - 1) + ": no checkpoint at or before it (checkpoints: " +
        pos_list(checkpoints(seq)) + "); remove the whole sequence and decode it again");
  }
  return Status();
}

Status RecurrentMemory::seq_rm(SeqId seq, Pos p0, Pos p1) {
  MNEMO_RETURN_IF_ERROR(check_seq_rm(seq, p0, p1));
  const PosRange r = open_range(p0, p1);
  auto rm_one = [&](SeqId s) {
    SeqMeta& m = seqs_[s];
    if (r.misses(m.pos_min, m.pos_max)) return;
    if (r.lo <= m.pos_min) {
      reset_seq(s);
      return;
    }
    const SavedState c = find_checkpoint(s, r.lo - 1);
    CHECK(c.data != nullptr);
    const Pos keep = c.pos;
    std::memcpy(cell_ptr(s), c.data, n_floats_ * sizeof(float));
    m.pos_max = keep;
    const auto newer = [keep](const Checkpoint& k) { return k.pos > keep; };
    m.ckpts.erase(std::remove_if(m.ckpts.begin(), m.ckpts.end(), newer), m.ckpts.end());
    m.spec.erase(std::remove_if(m.spec.begin(), m.spec.end(), newer), m.spec.end());
  };
  for_each_seq(seq, config_.n_seq_max, rm_one);
  ++epoch_;
  return Status();
}

Status RecurrentMemory::check_seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) const {
  MNEMO_RETURN_IF_ERROR(check_seq(src, "seq_cp", "source seq_id"));
  MNEMO_RETURN_IF_ERROR(check_seq(dst, "seq_cp", "destination seq_id"));
  const SeqMeta& m = seqs_[src];
  const PosRange r = open_range(p0, p1);
  if (src == dst || r.misses(m.pos_min, m.pos_max)) {
    return Status();
  }
  if (r.lo > m.pos_min) {
    return Status::not_supported("seq_cp: a recurrent state of seq_id " + std::to_string(src) +
                                 " covers positions from " + std::to_string(m.pos_min) +
                                 " on; copying only positions from " + std::to_string(r.lo) +
                                 " is not possible");
  }
  if (r.hi <= m.pos_max && find_checkpoint(src, r.hi - 1).data == nullptr) {
    return Status::out_of_range(
        "seq_cp: seq_id " + std::to_string(src) + " has no checkpoint at or before position " +
        std::to_string(r.hi - 1) + " (checkpoints: " + pos_list(checkpoints(src)) + ")");
  }
  return Status();
}

Status RecurrentMemory::seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) {
  MNEMO_RETURN_IF_ERROR(check_seq_cp(src, dst, p0, p1));
  const SeqMeta& m = seqs_[src];
  const PosRange r = open_range(p0, p1);
  if (src == dst || r.misses(m.pos_min, m.pos_max)) {
    return Status();
  }
  const size_t bytes = n_floats_ * sizeof(float);
  SeqMeta d;
  d.pos_min = m.pos_min;
  if (r.hi > m.pos_max) {
    d.pos_max = m.pos_max;
    std::memcpy(cell_ptr(dst), cell_ptr(src), bytes);
  } else {
    const SavedState c = find_checkpoint(src, r.hi - 1);
    d.pos_max = c.pos;
    std::memcpy(cell_ptr(dst), c.data, bytes);
  }
  const uint32_t first = static_cast<uint32_t>(dst) * config_.n_checkpoints;
  for (const Checkpoint& c : m.ckpts) {
    if (c.pos > d.pos_max) break;
    const uint32_t cell = first + static_cast<uint32_t>(d.ckpts.size());
    std::memcpy(ckpt_ptr(cell), ckpt_ptr(c.cell), bytes);
    d.ckpts.push_back({c.pos, cell});
  }
  seqs_[dst] = std::move(d);
  ++epoch_;
  return Status();
}

Status RecurrentMemory::check_seq_keep(SeqId seq) const {
  return check_seq(seq, "seq_keep", "seq_id");
}

Status RecurrentMemory::seq_keep(SeqId seq) {
  MNEMO_RETURN_IF_ERROR(check_seq_keep(seq));
  for (SeqId s = 0; s < static_cast<SeqId>(config_.n_seq_max); ++s) {
    if (s != seq) reset_seq(s);
  }
  ++epoch_;
  return Status();
}

Status RecurrentMemory::check_seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) const {
  MNEMO_RETURN_IF_ERROR(check_seq(seq, "seq_add", "seq_id"));
  const SeqMeta& m = seqs_[seq];
  const PosRange r = open_range(p0, p1);
  if (delta == 0 || r.misses(m.pos_min, m.pos_max)) {
    return Status();
  }
  if (!r.covers(m.pos_min, m.pos_max)) {
    return Status::not_supported(
        "seq_add: a recurrent state moves as a whole; [" + std::to_string(r.lo) + ", " +
        std::to_string(r.hi) + ") covers only part of seq_id " + std::to_string(seq) + "'s [" +
        std::to_string(m.pos_min) + ", " + std::to_string(m.pos_max) + "]");
  }
  const int64_t lo = int64_t{m.pos_min} + delta;
  const int64_t hi = int64_t{m.pos_max} + delta;
  if (lo < 0 || hi > kPosMax) {
    return Status::invalid_argument("seq_add: moving seq_id " + std::to_string(seq) + " by " +
                                    std::to_string(delta) + " puts positions outside [0, " +
                                    std::to_string(kPosMax) + "]");
  }
  return Status();
}

Status RecurrentMemory::seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) {
  MNEMO_RETURN_IF_ERROR(check_seq_add(seq, p0, p1, delta));
  SeqMeta& m = seqs_[seq];
  const PosRange r = open_range(p0, p1);
  if (delta == 0 || r.misses(m.pos_min, m.pos_max)) {
    return Status();
  }
  m.pos_min += delta;
  m.pos_max += delta;
  for (Checkpoint& c : m.ckpts) c.pos += delta;
  for (Checkpoint& c : m.spec) c.pos += delta;
  ++epoch_;
  return Status();
}

Status RecurrentMemory::check_seq_div(SeqId seq, Pos p0, Pos p1, int32_t d) const {
  MNEMO_RETURN_IF_ERROR(check_seq(seq, "seq_div", "seq_id"));
  if (d < 1) return Status::invalid_argument("seq_div: divisor " + std::to_string(d) + " < 1");
  const SeqMeta& m = seqs_[seq];
  const PosRange r = open_range(p0, p1);
  if (d == 1 || r.misses(m.pos_min, m.pos_max)) {
    return Status();
  }
  if (!r.covers(m.pos_min, m.pos_max)) {
    return Status::not_supported(
        "seq_div: a recurrent state moves as a whole; the range covers "
        "only part of seq_id " +
        std::to_string(seq));
  }
  return Status();
}

Status RecurrentMemory::seq_div(SeqId seq, Pos p0, Pos p1, int32_t d) {
  MNEMO_RETURN_IF_ERROR(check_seq_div(seq, p0, p1, d));
  SeqMeta& m = seqs_[seq];
  const PosRange r = open_range(p0, p1);
  if (d == 1 || r.misses(m.pos_min, m.pos_max)) {
    return Status();
  }
  m.pos_min /= d;
  m.pos_max /= d;
  for (Checkpoint& c : m.ckpts) c.pos /= d;
  m.spec.clear();
  // Checkpoints that now share a position: keep the newest of each.
  std::vector<Checkpoint> kept;
  for (const Checkpoint& c : m.ckpts) {
    if (!kept.empty() && kept.back().pos == c.pos) kept.pop_back();
    kept.push_back(c);
  }
  m.ckpts = std::move(kept);
  ++epoch_;
  return Status();
}

Pos RecurrentMemory::seq_pos_min(SeqId seq) const {
  if (seq < 0 || static_cast<uint32_t>(seq) >= config_.n_seq_max) return -1;
  return seqs_[seq].pos_min;
}

Pos RecurrentMemory::seq_pos_max(SeqId seq) const {
  if (seq < 0 || static_cast<uint32_t>(seq) >= config_.n_seq_max) return -1;
  return seqs_[seq].pos_max;
}

Result<TruncatePlan> RecurrentMemory::plan_truncate(SeqId seq, Pos p) const {
  if (seq < 0 || static_cast<uint32_t>(seq) >= config_.n_seq_max || p < 0) {
    return Status::invalid_argument("plan_truncate: seq_id " + std::to_string(seq) +
                                    " or position " + std::to_string(p) + " is out of range");
  }
  const SeqMeta& m = seqs_[seq];
  Pos keep = 0;
  if (p > m.pos_max) {
    keep = m.pos_max + 1;  // nothing past p is held (0 for an empty sequence)
  } else if (p > m.pos_min) {
    const SavedState c = find_checkpoint(seq, p - 1);
    keep = c.data != nullptr ? c.pos + 1 : 0;
  }
  return TruncatePlan{keep, static_cast<uint32_t>(p - keep)};
}

void RecurrentMemory::clear() {
  for (SeqId s = 0; s < static_cast<SeqId>(config_.n_seq_max); ++s) reset_seq(s);
  ++epoch_;
}

MemoryBreakdown RecurrentMemory::breakdown() const {
  MemoryBreakdown b;
  const uint32_t n_ckpt_rows = config_.n_seq_max * config_.n_checkpoints;
  const uint32_t n_spec_rows = config_.n_seq_max * config_.n_spec;
  for (const std::string part : {"rs", "rs_ckpt", "rs_spec"}) {
    const bool ckpt = part == "rs_ckpt", spec = part == "rs_spec";
    const uint32_t rows = ckpt ? n_ckpt_rows : spec ? n_spec_rows : config_.n_seq_max;
    if (rows == 0) continue;
    MemoryBreakdown::Stream st;
    st.part = part;
    st.n_cells = rows;
    for (const SeqMeta& m : seqs_) {
      st.used += ckpt ? uint32_t(m.ckpts.size()) : spec ? uint32_t(m.spec.size()) : (m.pos_max >= 0);
    }
    st.free = rows - st.used;
    st.k_type = GgmlType::F32;
    st.v_type = GgmlType::F32;
    st.mapped_bytes = ckpt   ? ckpt_pool_.mapped_bytes()
                      : spec ? spec_pool_.mapped_bytes()
                             : cells_.mapped_bytes();
    std::vector<MemoryBreakdown::Tensor> tensors;
    for (uint32_t il = 0; il < layer_off_r_.size(); ++il) {
      if (!holds_layer(il)) continue;
      for (char kind : {'R', 'S'}) {
        MemoryBreakdown::Tensor& t = tensors.emplace_back();
        t.layer = il;
        t.kind = kind;
        t.type = GgmlType::F32;
        t.n_embd = kind == 'R' ? config_.n_embd_r[il] : config_.n_embd_s[il];
        t.bytes = size_t(t.n_embd) * rows * sizeof(float);
      }
    }
    b.add_stream(std::move(st), std::move(tensors));
  }
  return b;
}

Result<SeqMemoryInfo> RecurrentMemory::seq_info(SeqId seq) const {
  MNEMO_RETURN_IF_ERROR(check_seq(seq, "seq_info", "seq_id"));
  SeqMemoryInfo info;
  info.seq_id = seq;
  // Sequence s owns cell s and checkpoint cells [s * n_checkpoints, (s + 1) * n_checkpoints),
  // all allocated at create(): they serve s whether it holds data or not.
  info.bytes =
      (size_t{1} + config_.n_checkpoints + config_.n_spec) * n_floats_ * sizeof(float);
  return info;
}

}  // namespace mnemo
