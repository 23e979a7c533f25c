#include "memory/swa_kv_cache.h"

#include <algorithm>
#include <string>
#include <utility>

namespace mnemo {

// --- context -----------------------------------------------------------------------------------

SwaKvCacheContext::SwaKvCacheContext(MemoryStatus status, std::unique_ptr<KvCacheContext> base,
                                     std::unique_ptr<KvCacheContext> swa)
    : MemoryContext(status, {}), base_(std::move(base)), swa_(std::move(swa)) {}

bool SwaKvCacheContext::next() {
  const bool a = base_->next();
  const bool b = swa_->next();
  CHECK(a == b) << "SWA children out of step";
  return a;
}

Status SwaKvCacheContext::apply() {
  // A child of an update context may have nothing to do (kNoUpdate): skip it.
  if (base_->ok()) MNEMO_RETURN_IF_ERROR(base_->apply());
  if (swa_->ok()) MNEMO_RETURN_IF_ERROR(swa_->apply());
  return Status();
}

void SwaKvCacheContext::rollback() {
  swa_->rollback();
  base_->rollback();
}

const KvCacheContext* SwaKvCacheContext::kv_for_layer(uint32_t il) const {
  if (base_->cache().holds_layer(il)) return base_.get();
  if (swa_->cache().holds_layer(il)) return swa_.get();
  return nullptr;
}

// --- cache -------------------------------------------------------------------------------------

Result<std::unique_ptr<SwaKvCache>> SwaKvCache::create(SwaKvCacheConfig config) {
  if (!config.is_swa_layer) {
    return Status::invalid_argument("SwaKvCache: is_swa_layer must say which layers are local");
  }
  if (config.swa_type == SwaType::kNone || config.n_swa == 0) {
    return Status::invalid_argument(
        "SwaKvCache: needs a window (swa_type standard or chunked, "
        "n_swa >= 1)");
  }
  if (config.n_ubatch == 0) return Status::invalid_argument("SwaKvCache: n_ubatch must be >= 1");

  KvCacheConfig base;
  base.n_ctx = config.n_ctx;
  base.n_seq_max = config.n_seq_max;
  base.unified = config.unified;
  base.k_type = config.k_type;
  base.v_type = config.v_type;
  base.n_embd_k_gqa = config.n_embd_k_gqa;
  base.n_embd_v_gqa = config.n_embd_v_gqa;
  base.causal = config.causal;
  base.n_pad = config.n_pad;
  base.rotation_dim = config.rotation_dim;
  base.pool = config.pool;
  KvCacheConfig swa = base;

  auto is_swa = config.is_swa_layer;
  base.layer_filter = [is_swa](uint32_t il) { return !is_swa(il); };
  swa.layer_filter = is_swa;
  swa.swa_type = config.swa_type;
  swa.n_swa = config.n_swa;
  swa.swa_reuse = !config.swa_full;
  if (!config.swa_full && config.n_pad > 0) {
    // Every sequence of a stream keeps at most n_swa - 1 unmasked cells besides a ubatch.
    const uint64_t per_stream =
        uint64_t{config.n_swa} * (config.unified ? config.n_seq_max : 1) + config.n_ubatch;
    const uint64_t padded = (per_stream + config.n_pad - 1) / config.n_pad * config.n_pad;
    swa.n_ctx = static_cast<uint32_t>(std::min<uint64_t>(padded, config.n_ctx));
  }
  Result<std::unique_ptr<KvCache>> b = KvCache::create(std::move(base));
  if (!b.ok()) return b.status().with_context("SwaKvCache base");
  Result<std::unique_ptr<KvCache>> s = KvCache::create(std::move(swa));
  if (!s.ok()) return s.status().with_context("SwaKvCache swa");
  return std::unique_ptr<SwaKvCache>(
      new SwaKvCache(std::move(config), std::move(b).value(), std::move(s).value()));
}

Result<std::unique_ptr<SwaKvCache>> SwaKvCache::copy() const {
  MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> b, base_->copy());
  MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> s, swa_->copy());
  return std::unique_ptr<SwaKvCache>(new SwaKvCache(config_, std::move(b), std::move(s)));
}

std::unique_ptr<MemoryContext> SwaKvCache::init_batch(const Batch& batch, uint32_t n_ubatch,
                                                      const BatchLimits& limits) {
  if (!config_.swa_full && n_ubatch > config_.n_ubatch) {
    return std::make_unique<MemoryContext>(
        MemoryStatus::kInvalidBatch,
        "n_ubatch " + std::to_string(n_ubatch) + " exceeds the n_ubatch " +
            std::to_string(config_.n_ubatch) + " this SwaKvCache was sized for");
  }
  Result<PreparedBatch> pb =
      prepare_batch(batch, base_->batch_limits(limits), [this](SeqId s) { return seq_pos_max(s); });
  if (!pb.ok()) {
    return std::make_unique<MemoryContext>(MemoryStatus::kInvalidBatch, pb.status().message());
  }
  Result<std::vector<Ubatch>> ubs = split_batch(*pb, base_->split_strategy(), n_ubatch);
  if (!ubs.ok()) {
    return std::make_unique<MemoryContext>(MemoryStatus::kInvalidBatch, ubs.status().message());
  }
  auto shared = std::make_shared<const std::vector<Ubatch>>(std::move(ubs).value());
  // Plan both before either changes (planning itself leaves each child as it was).
  std::unique_ptr<KvCacheContext> b = base_->prepare(shared);
  if (!b->ok()) {
    return std::make_unique<MemoryContext>(b->status(), "full-attention layers: " + b->message());
  }
  std::unique_ptr<KvCacheContext> s = swa_->prepare(shared);
  if (!s->ok()) {
    return std::make_unique<MemoryContext>(s->status(), "sliding-window layers: " + s->message());
  }
  return std::unique_ptr<MemoryContext>(
      new SwaKvCacheContext(MemoryStatus::kSuccess, std::move(b), std::move(s)));
}

namespace {

std::unique_ptr<KvCacheContext> as_kv(std::unique_ptr<MemoryContext> c) {
  return std::unique_ptr<KvCacheContext>(static_cast<KvCacheContext*>(c.release()));
}

}  // namespace

std::unique_ptr<MemoryContext> SwaKvCache::init_full() {
  return std::unique_ptr<MemoryContext>(new SwaKvCacheContext(
      MemoryStatus::kSuccess, as_kv(base_->init_full()), as_kv(swa_->init_full())));
}

std::unique_ptr<MemoryContext> SwaKvCache::init_update() {
  // KvCache::init_update always returns a KvCacheContext (kSuccess or kNoUpdate).
  std::unique_ptr<KvCacheContext> b = as_kv(base_->init_update());
  std::unique_ptr<KvCacheContext> s = as_kv(swa_->init_update());
  const MemoryStatus st = (b->ok() || s->ok()) ? MemoryStatus::kSuccess : MemoryStatus::kNoUpdate;
  return std::unique_ptr<MemoryContext>(new SwaKvCacheContext(st, std::move(b), std::move(s)));
}

Status SwaKvCache::seq_rm(SeqId seq, Pos p0, Pos p1) {
  MNEMO_RETURN_IF_ERROR(base_->check_seq_rm(seq, p0, p1));
  MNEMO_RETURN_IF_ERROR(swa_->check_seq_rm(seq, p0, p1));
  CHECK(base_->seq_rm(seq, p0, p1).ok());
  CHECK(swa_->seq_rm(seq, p0, p1).ok());
  return Status();
}

Status SwaKvCache::seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) {
  MNEMO_RETURN_IF_ERROR(base_->check_seq_cp(src, dst, p0, p1));
  MNEMO_RETURN_IF_ERROR(swa_->check_seq_cp(src, dst, p0, p1).with_context("sliding-window layers"));
  CHECK(base_->seq_cp(src, dst, p0, p1).ok());
  CHECK(swa_->seq_cp(src, dst, p0, p1).ok());
  return Status();
}

Status SwaKvCache::seq_keep(SeqId seq) {
  MNEMO_RETURN_IF_ERROR(base_->check_seq_keep(seq));
  MNEMO_RETURN_IF_ERROR(swa_->check_seq_keep(seq));
  CHECK(base_->seq_keep(seq).ok());
  CHECK(swa_->seq_keep(seq).ok());
  return Status();
}

Status SwaKvCache::seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) {
  MNEMO_RETURN_IF_ERROR(base_->check_seq_add(seq, p0, p1, delta));
  MNEMO_RETURN_IF_ERROR(swa_->check_seq_add(seq, p0, p1, delta));
  CHECK(base_->seq_add(seq, p0, p1, delta).ok());
  CHECK(swa_->seq_add(seq, p0, p1, delta).ok());
  return Status();
}

Status SwaKvCache::seq_div(SeqId seq, Pos p0, Pos p1, int32_t d) {
  MNEMO_RETURN_IF_ERROR(base_->check_seq_div(seq, p0, p1, d));
  MNEMO_RETURN_IF_ERROR(swa_->check_seq_div(seq, p0, p1, d));
  CHECK(base_->seq_div(seq, p0, p1, d).ok());
  CHECK(swa_->seq_div(seq, p0, p1, d).ok());
  return Status();
}

Pos SwaKvCache::seq_pos_min(SeqId seq) const {
  // Both children hold a sequence or neither (the SWA child never evicts a sequence's last cell).
  return std::max(base_->seq_pos_min(seq), swa_->seq_pos_min(seq));
}

Pos SwaKvCache::seq_pos_max(SeqId seq) const { return base_->seq_pos_max(seq); }

void SwaKvCache::clear() {
  base_->clear();
  swa_->clear();
}

MemoryBreakdown SwaKvCache::breakdown() const {
  MemoryBreakdown out = base_->breakdown();
  MemoryBreakdown s = swa_->breakdown();
  for (auto& t : out.tensors) t.part = "kv_base";
  for (auto& st : out.streams) st.part = "kv_base";
  for (auto& t : s.tensors) {
    t.part = "kv_swa";
    out.tensors.push_back(std::move(t));
  }
  for (auto& st : s.streams) {
    st.part = "kv_swa";
    out.streams.push_back(std::move(st));
  }
  out.tensor_bytes += s.tensor_bytes;
  out.mapped_bytes += s.mapped_bytes;
  return out;
}

Result<SeqMemoryInfo> SwaKvCache::seq_info(SeqId seq) const {
  // The base child holds every position, so its cells bound what the sequence can hold; the
  // SWA child's bytes serve the sequence too.
  MNEMO_ASSIGN_OR_RETURN(SeqMemoryInfo info, base_->seq_info(seq));
  MNEMO_ASSIGN_OR_RETURN(const SeqMemoryInfo swa, swa_->seq_info(seq));
  info.bytes += swa.bytes;
  return info;
}

Result<TruncatePlan> SwaKvCache::plan_truncate(SeqId seq, Pos p) const {
  auto plan = Memory::plan_truncate(seq, p);  // validates; keep = min(p, end)
  if (!plan.ok() || plan->keep == 0 || config_.swa_full) return plan;
  const Pos keep = plan->keep;
  const Pos n_swa = static_cast<Pos>(config_.n_swa);
  // Oldest position a token at `keep` attends in the local layers; all of [window_start, keep)
  // must still be held by the SWA child, which holds a gap-free range [its seq_pos_min, end].
  const Pos window_start = config_.swa_type == SwaType::kChunked
                               ? (keep / n_swa) * n_swa
                               : std::max<Pos>(0, keep - n_swa + 1);
  if (window_start < keep && swa_->seq_pos_min(seq) > window_start) {
    return TruncatePlan{0, static_cast<uint32_t>(p)};
  }
  return plan;
}

}  // namespace mnemo
