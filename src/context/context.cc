#include "mnemo/context.h"

#include <fmt/format.h>

#include <new>
#include <thread>

#include "base/buffer.h"
#include "context/memory_params.h"
#include "memory/make_memory.h"
#include "mnemo/model_fingerprint.h"
#include "mnemo/ubatch.h"
#include "model/forward.h"

namespace mnemo {

Status ContextParams::validate() const {
  if (n_ctx == 0) return Status::invalid_argument("n_ctx must be at least 1");
  if (n_batch == 0 || n_ubatch == 0) {
    return Status::invalid_argument("n_batch and n_ubatch must be at least 1");
  }
  if (n_ubatch > n_batch) {
    return Status::invalid_argument(
        fmt::format("n_ubatch ({}) must not exceed n_batch ({})", n_ubatch, n_batch));
  }
  if (n_seq_max < 1 || n_seq_max > kMaxSeq) {
    return Status::invalid_argument(
        fmt::format("n_seq_max {} is outside [1, {}]", n_seq_max, kMaxSeq));
  }
  if (!kv_unified && n_ctx / n_seq_max == 0) {
    return Status::invalid_argument(
        fmt::format("n_ctx {} is too small for {} sequences in split mode", n_ctx, n_seq_max));
  }
  for (auto [name, t] : {std::pair{"K", type_k}, std::pair{"V", type_v}}) {
    if (!is_kv_cache_type(t)) {
      return Status::invalid_argument(fmt::format("{} cache type {} is not supported ({})", name,
                                                  type_name(t), kv_cache_type_names()));
    }
  }
  if (n_threads < 0 || n_threads > 1024) {
    return Status::invalid_argument(fmt::format("n_threads {} is out of range", n_threads));
  }
  return Status();
}

Context::Context(const Model& model, const ContextParams& params)
    : model_(model),
      params_(params),
      fingerprint_(std::make_unique<const ModelFingerprint>(model_fingerprint(model))) {}

Context::~Context() = default;

Result<std::unique_ptr<Context>> Context::create(const Model& model, const ContextParams& params) {
  MNEMO_RETURN_IF_ERROR(params.validate());
  const HParams& hp = model.hparams();
  if (hp.head_dim_k != hp.head_dim_v) {
    return Status::not_supported("models whose key and value head sizes differ");
  }
  std::unique_ptr<Context> ctx(new Context(model, params));
  const int n_threads = params.pool          ? params.pool->n_threads()
                        : params.n_threads > 0 ? params.n_threads
                                               : std::max(1, int(std::thread::hardware_concurrency()));
  ctx->params_.n_threads = n_threads;
  ctx->pool_ = params.pool ? params.pool : std::make_shared<ThreadPool>(n_threads);

  ctx->n_ctx_seq_ = params.kv_unified ? params.n_ctx : params.n_ctx / params.n_seq_max;
  MNEMO_ASSIGN_OR_RETURN(ctx->memory_,
                         make_memory(memory_params(hp, params, ctx->n_ctx_seq_, ctx->pool_.get())));
  // The forward pass's scratch grows with n_ubatch (rows of n_embd, attention and feed-forward
  // widths): a huge -ub is an error to report, not a crash. Checked against the physical memory
  // first (an overcommitting kernel would hand out the address space and kill the process when
  // the zero-filling touches it), then the allocation itself.
  const size_t scratch = Forward::scratch_sizes(model, params.n_ubatch).bytes();
  const size_t phys = physical_memory_bytes();
  if (phys > 0 && scratch > phys) {
    return Status::no_space(fmt::format(
        "the forward pass's scratch for n_ubatch {} ({:.0f} MiB) exceeds this machine's memory: "
        "lower -ub",
        params.n_ubatch, scratch / (1024.0 * 1024.0)));
  }
  try {
    ctx->forward_ = std::make_unique<Forward>(model, ctx->pool_.get(), params.n_ubatch);
  } catch (const std::bad_alloc&) {
    return Status::no_space(
        fmt::format("the forward pass's scratch for n_ubatch {} does not fit in memory: lower -ub",
                    params.n_ubatch));
  }
  return ctx;
}

Status Context::reserve(size_t available_bytes) {
  auto full = memory_->init_full();
  if (full->status() != MemoryStatus::kSuccess) {
    return Status::no_space(
        fmt::format("the memory cannot hold n_ctx {}: {}", params_.n_ctx, full->message()));
  }
  const size_t need = memory_->breakdown().mapped_bytes;
  if (need > available_bytes) {
    constexpr double kMiB = 1024.0 * 1024.0;
    return Status::no_space(fmt::format(
        "the K/V cache for n_ctx {} ({} sequences, K {} / V {}) needs {:.0f} MiB and this "
        "machine has {:.0f} MiB available: lower -c or -np, or use a smaller K/V type "
        "(-ctk / -ctv q8_0)",
        params_.n_ctx, params_.n_seq_max, type_name(params_.type_k), type_name(params_.type_v),
        need / kMiB, available_bytes / kMiB));
  }
  return Status();
}

Status Context::set_output_subset(uint32_t n_head, std::span<const int32_t> extra) {
  const uint32_t n_vocab = model_.hparams().n_vocab;
  std::vector<int32_t> above;
  for (int32_t id : extra) {
    if (id < 0 || uint32_t(id) >= n_vocab) {
      return Status::invalid_argument("output subset: token id " + std::to_string(id) +
                                      " is outside [0, " + std::to_string(n_vocab) + ")");
    }
    if (uint32_t(id) >= n_head) above.push_back(id);
  }
  forward_->set_output_subset(n_head, above);
  return Status();
}

std::span<const float> Context::logits(uint32_t i) const {
  CHECK_LT(i, n_outputs_);
  const size_t n_vocab = model_.hparams().n_vocab;
  return {logits_.data() + size_t(i) * n_vocab, n_vocab};
}

Status Context::decode(const Batch& batch) {
  n_outputs_ = 0;
  // Pending position shifts first: K rows are re-rotated, then the shifts are cleared.
  {
    auto upd = memory_->init_update();
    if (upd->status() == MemoryStatus::kSuccess) {
      forward_->apply_shifts(*upd);
      MNEMO_RETURN_IF_ERROR(upd->apply());
    }
  }

  BatchLimits limits;
  limits.n_batch = params_.n_batch;
  limits.n_vocab = model_.hparams().n_vocab;
  limits.n_embd = model_.hparams().n_embd;
  auto mctx = memory_->init_batch(batch, params_.n_ubatch, limits);
  switch (mctx->status()) {
    case MemoryStatus::kSuccess:
      break;
    case MemoryStatus::kInvalidBatch:
      return Status::invalid_argument(mctx->message());
    case MemoryStatus::kFailedPrepare:
      return Status::no_space(mctx->message());
    default:
      return Status::internal(mctx->message());
  }

  const std::vector<uint32_t> order = output_order(mctx->ubatches());
  const size_t n_vocab = model_.hparams().n_vocab;
  logits_.resize(order.size() * n_vocab);
  size_t k = 0;  // outputs produced so far
  do {
    if (abort_ && abort_()) {
      mctx->rollback();
      return Status::aborted("decode aborted by the caller");
    }
    Status st = mctx->apply();
    if (!st.ok()) {
      mctx->rollback();
      return st;
    }
    const Ubatch& ub = mctx->ubatch();
    out_rows_.resize(ub.n_outputs());
    for (size_t j = 0; j < out_rows_.size(); ++j) {
      out_rows_[j] = logits_.data() + size_t(order[k + j]) * n_vocab;
    }
    st = forward_->run(*mctx, ub, out_rows_, abort_);
    if (!st.ok()) {
      mctx->rollback();
      return st;
    }
    k += out_rows_.size();
  } while (mctx->next());
  n_outputs_ = uint32_t(order.size());
  return Status();
}

}  // namespace mnemo
