// Model loading: hyper-parameters from {arch}.* metadata, weights bound to tensors by the names
// llama.cpp's converter writes ("token_embd.weight", "blk.N.attn_q.weight", ...).
#include "mnemo/model.h"

#include "base/buffer.h"
#include "kernels/kernels.h"
#include "mnemo/thread_pool.h"
#include "model/load_util.h"
#include "model/repack_cache.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <thread>

namespace mnemo {
namespace {

struct ArchName {
  Arch arch;
  const char* name;
};
constexpr ArchName kArchNames[] = {{Arch::kLlama, "llama"},
                                   {Arch::kQwen2, "qwen2"},
                                   {Arch::kQwen3, "qwen3"},
                                   {Arch::kQwen3Moe, "qwen3moe"},
                                   {Arch::kGemma3, "gemma3"},
                                   {Arch::kMamba2, "mamba2"},
                                   {Arch::kGraniteHybrid, "granitehybrid"},
                                   {Arch::kQwen35, "qwen35"},
                                   {Arch::kQwen35Moe, "qwen35moe"}};

using model_load::read_f32_key;
using model_load::read_u32_key;

}  // namespace

const char* arch_name(Arch arch) {
  for (const auto& a : kArchNames) {
    if (a.arch == arch) return a.name;
  }
  return "unknown";
}

Result<Arch> arch_from_name(const std::string& name) {
  std::string supported;
  for (const auto& a : kArchNames) {
    if (name == a.name) return a.arch;
    supported += supported.empty() ? a.name : std::string(", ") + a.name;
  }
  return Status::not_supported(fmt::format("architecture '{}' is not supported (supported: {})",
                                           name.empty() ? "(none)" : name, supported));
}

const float* Weight::f32() const {
  CHECK(type == GgmlType::F32) << "weight is " << type_name(type) << ", not f32";
  return reinterpret_cast<const float*>(data);
}

Model::Model(gguf::File file) : file_(std::move(file)) {}
Model::~Model() = default;

Result<std::unique_ptr<Model>> Model::load(const std::string& path, const ModelParams& params) {
  auto file = gguf::File::open(path);
  if (!file.ok()) return file.status();
  std::unique_ptr<Model> m(new Model(std::move(file).value()));
  MNEMO_RETURN_IF_ERROR(m->load_hparams().with_context(path));
  MNEMO_RETURN_IF_ERROR(m->bind_weights().with_context(path));
  if (params.repack) {
    struct stat sb {};
    const int64_t mtime_ns = ::stat(path.c_str(), &sb) == 0
                                 ? int64_t(sb.st_mtim.tv_sec) * 1000000000 + sb.st_mtim.tv_nsec
                                 : 0;
    m->repack_weights(params.n_threads, params.repack_cache_dir, mtime_ns);
  }
  return m;
}

namespace {

// Where n matrices of size_of(i) packed bytes start in the arena, one after another, each rounded
// up to 64 bytes so that every matrix starts 64-byte aligned; the last entry is the total.
template <class SizeOf>
std::vector<size_t> arena_offsets(size_t n, SizeOf size_of) {
  std::vector<size_t> offset(n + 1, 0);
  for (size_t i = 0; i < n; ++i) offset[i + 1] = offset[i] + (size_of(i) + 63) / 64 * 64;
  return offset;
}

}  // namespace

void Model::copy_packed_to_arena(std::vector<kernels::PackedMatrix>& made, ThreadPool* pool) {
  const std::vector<size_t> offset =
      arena_offsets(made.size(), [&](size_t i) { return made[i].packed_bytes(); });
  if (offset.back() == 0) {  // nothing packed (a target without packed layouts)
    repack_file_.reset();
    repack_note_ = "read from the repack cache";
    return;
  }
  Result<AlignedBuffer> arena = AlignedBuffer::allocate(offset.back());
  if (!arena.ok()) return;  // keep reading the mapping
  std::vector<kernels::PackedImage> images(made.size());
  for (size_t i = 0; i < made.size(); ++i) {
    images[i] = kernels::packed_image(made[i]);
    if (images[i].data == nullptr) continue;
    images[i].data = arena->data() + offset[i];
  }
  // Chunks of about 8 MiB, so that the threads share the copy of a large matrix too.
  struct Chunk {
    size_t i, begin, end;
  };
  std::vector<Chunk> chunks;
  constexpr size_t kChunk = size_t{8} << 20;
  for (size_t i = 0; i < made.size(); ++i) {
    for (size_t b = 0; b < made[i].packed_bytes(); b += kChunk) {
      chunks.push_back({i, b, std::min(made[i].packed_bytes(), b + kChunk)});
    }
  }
  pool->parallel_for(int64_t(chunks.size()), [&](int64_t c, int) {
    const Chunk& k = chunks[size_t(c)];
    const auto* src = static_cast<const uint8_t*>(kernels::packed_image(made[k.i]).data);
    std::memcpy(arena->data() + offset[k.i] + k.begin, src + k.begin, k.end - k.begin);
  });
  for (size_t i = 0; i < made.size(); ++i) {
    if (images[i].data == nullptr) continue;
    made[i] = kernels::adopt_packed(made[i].source(), images[i]);
  }
  packed_arena_ = std::make_unique<AlignedBuffer>(std::move(arena).value());
  repack_file_.reset();
  repack_note_ = "read from the repack cache";
}

void Model::repack_weights(int n_threads, const std::string& cache_dir, int64_t mtime_ns) {
  if (n_threads <= 0) n_threads = std::max(1, int(std::thread::hardware_concurrency()));
  ThreadPool pool(n_threads);
  // The matrices to pack, in a fixed order (the repack cache's entries follow it): experts
  // first, each expert's matrix on its own (moe_ffn multiplies one expert at a time), then every
  // weight the forward passes multiply with (Forward::matmul); the token embedding is read by
  // rows (get_rows) and stays as it is, but a tied output matrix is repacked.
  struct Job {
    Weight* w;
    kernels::WeightMatrix src;
    int64_t expert;  // -1: the whole matrix
  };
  std::vector<Job> jobs;
  if (hp_.is_moe()) {
    for (LayerWeights& l : layers_) {
      const std::pair<Weight*, int64_t> exps[] = {{&l.ffn_gate_exps, hp_.n_ff_exp},
                                                  {&l.ffn_up_exps, hp_.n_ff_exp},
                                                  {&l.ffn_down_exps, hp_.n_embd}};
      for (auto [w, rows] : exps) {
        if (!w->present()) continue;
        for (int64_t e = 0; e < int64_t(hp_.n_expert); ++e) {
          jobs.push_back({w, {w->type, w->data + size_t(e * rows) * w->row_bytes, rows, w->ne0}, e});
        }
      }
    }
  }
  std::vector<Weight*> linear = {&output_};
  for (LayerWeights& l : layers_) {
    for (Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down, &l.ssm_in,
                      &l.ssm_out, &l.ssm_qkv, &l.ssm_z, &l.ssm_beta, &l.ssm_alpha,
                      &l.ffn_gate_shexp, &l.ffn_up_shexp, &l.ffn_down_shexp}) {
      linear.push_back(w);
    }
  }
  for (Weight* w : linear) {
    if (!w->present() || w->ne1 < 2) continue;
    jobs.push_back({w, {w->type, w->data, w->ne1, w->ne0}, -1});
  }

  // From the cache when it holds this file's packing, else packed here (and saved).
  std::vector<kernels::PackedMatrix> made(jobs.size());
  bool from_cache = false;
  std::string key;
  if (!cache_dir.empty()) {
    key = repack_cache_key(file_, mtime_ns);
    auto f = RepackCacheFile::open(cache_dir, key, &pool);
    if (f.ok() && (*f)->images().size() == jobs.size()) {
      from_cache = true;
      for (size_t i = 0; i < jobs.size() && from_cache; ++i) {
        const kernels::PackedImage& img = (*f)->images()[i];
        made[i] = kernels::adopt_packed(jobs[i].src, img);
        from_cache = (img.data == nullptr) || made[i].is_packed();
      }
      if (from_cache) {
        repack_file_ = std::move(f).value();
        repack_note_ = "mapped from the repack cache";
        copy_packed_to_arena(made, &pool);
      } else {
        repack_note_ = "the repack cache entry does not fit this build: packing again";
      }
    } else if (f.ok()) {
      repack_note_ = "the repack cache entry has another matrix count: packing again";
    } else if (f.status().code() != StatusCode::kNotFound) {
      repack_note_ = f.status().message() + ": packing again";
    }
  }
  if (!from_cache) {
    // One mapping for all of them, in job order: every matrix gets transparent huge pages (a
    // matrix alone gets them only from 2 MiB on, and a decode's smaller projections lost a
    // quarter of their read speed to TLB misses in 4 KiB pages), and one layer's matrices lie
    // one after another as the forward pass reads them.
    const std::vector<size_t> offset =
        arena_offsets(jobs.size(), [&](size_t i) { return kernels::packed_size(jobs[i].src); });
    Result<AlignedBuffer> arena = AlignedBuffer::allocate(offset.back());
    if (arena.ok() && offset.back() > 0) {
      packed_arena_ = std::make_unique<AlignedBuffer>(std::move(arena).value());
    }
    for (size_t i = 0; i < jobs.size(); ++i) {
      made[i] =
          packed_arena_ != nullptr
              ? kernels::pack_matrix_into(jobs[i].src, packed_arena_->data() + offset[i], &pool)
              : kernels::pack_matrix(jobs[i].src, &pool);
    }
    if (!cache_dir.empty()) {
      std::vector<kernels::PackedImage> images;
      images.reserve(made.size());
      for (const kernels::PackedMatrix& m : made) images.push_back(kernels::packed_image(m));
      const Status st = write_repack_cache(cache_dir, key, images);
      const std::string before = repack_note_.empty() ? "" : repack_note_ + "; ";
      repack_note_ = before + (st.ok() ? "written to the repack cache"
                                       : "not saved: " + st.message());
    }
  }

  // Hand the packed matrices to their weights. An experts tensor is used packed only when
  // every expert's slice packed (a type or target packing does not serve leaves them all).
  for (size_t i = 0; i < jobs.size();) {
    Weight* w = jobs[i].w;
    if (jobs[i].expert >= 0) {
      const size_t n = hp_.n_expert;
      bool all = true;
      for (size_t e = 0; e < n; ++e) all = all && made[i + e].is_packed();
      if (all) {
        std::vector<const kernels::PackedMatrix*> slices;
        for (size_t e = 0; e < n; ++e) {
          packed_.push_back(std::make_unique<kernels::PackedMatrix>(std::move(made[i + e])));
          slices.push_back(packed_.back().get());
        }
        w->packed_slices = std::move(slices);
        w->slice_rows = jobs[i].src.n_out;
        file_.release_pages(w->data, w->row_bytes * size_t(w->ne1));
      }
      i += n;
      continue;
    }
    if (made[i].is_packed()) {
      packed_.push_back(std::make_unique<kernels::PackedMatrix>(std::move(made[i])));
      w->packed = packed_.back().get();
      // The file's copy is not read any more. A tied output matrix is also the token
      // embedding, whose rows get_rows still reads: those few pages fault back in on use.
      file_.release_pages(w->data, w->row_bytes * size_t(w->ne1));
    }
    ++i;
  }

  // Projections of the same input, packed one after another, read as one matrix
  // (kernels::packed_stack): q | k | v (q | k when v is of another type) and gate | up.
  for (LayerWeights& l : layers_) {
    const auto stack =
        [&](std::initializer_list<const Weight*> ws) -> const kernels::PackedMatrix* {
      std::vector<const kernels::PackedMatrix*> parts;
      for (const Weight* w : ws) {
        if (w->packed == nullptr) return nullptr;
        parts.push_back(w->packed);
      }
      kernels::PackedMatrix m = kernels::packed_stack(parts);
      if (!m.is_packed()) return nullptr;
      stacked_.push_back(std::make_unique<kernels::PackedMatrix>(std::move(m)));
      return stacked_.back().get();
    };
    l.qkv_stack = stack({&l.wq, &l.wk, &l.wv});
    l.qkv_stack_has_v = l.qkv_stack != nullptr;
    if (l.qkv_stack == nullptr) l.qkv_stack = stack({&l.wq, &l.wk});
    l.gate_up_stack = stack({&l.ffn_gate, &l.ffn_up});
  }
}

uint64_t Model::n_decode_bytes() const {
  auto bytes = [](const Weight& w) -> uint64_t {
    if (!w.present()) return 0;
    if (w.packed != nullptr) return w.packed->packed_bytes();
    return uint64_t(w.row_bytes) * uint64_t(std::max<int64_t>(1, w.ne1));
  };
  uint64_t n = bytes(output_norm_) + (token_embd_.present() ? token_embd_.row_bytes : 0);
  // A tied output matrix is the token embedding itself (output_ is bound to it): counted once.
  n += bytes(output_);
  for (const LayerWeights& l : layers_) {
    for (const Weight* w : {&l.attn_norm,
                            &l.wq,
                            &l.wk,
                            &l.wv,
                            &l.wo,
                            &l.bq,
                            &l.bk,
                            &l.bv,
                            &l.attn_q_norm,
                            &l.attn_k_norm,
                            &l.post_attn_norm,
                            &l.ffn_norm,
                            &l.ffn_gate,
                            &l.ffn_up,
                            &l.ffn_down,
                            &l.post_ffn_norm,
                            &l.ffn_gate_inp,
                            &l.ssm_in,
                            &l.ssm_conv1d,
                            &l.ssm_conv1d_b,
                            &l.ssm_dt_b,
                            &l.ssm_a,
                            &l.ssm_d,
                            &l.ssm_norm,
                            &l.ssm_out,
                            &l.bo,
                            &l.ssm_qkv,
                            &l.ssm_z,
                            &l.ssm_beta,
                            &l.ssm_alpha,
                            &l.ffn_gate_inp_shexp,
                            &l.ffn_gate_shexp,
                            &l.ffn_up_shexp,
                            &l.ffn_down_shexp}) {
      n += bytes(*w);
    }
    // A token reads the matrices of the experts it is routed to: n_expert_used of n_expert.
    if (hp_.is_moe()) {
      for (const Weight* w : {&l.ffn_gate_exps, &l.ffn_up_exps, &l.ffn_down_exps}) {
        uint64_t all = bytes(*w);
        if (!w->packed_slices.empty()) {
          all = 0;
          for (const kernels::PackedMatrix* p : w->packed_slices) all += p->packed_bytes();
        }
        n += all / hp_.n_expert * hp_.n_expert_used;
      }
    }
  }
  return n;
}

uint64_t Model::n_packed_bytes() const {
  uint64_t n = 0;
  for (const auto& p : packed_) n += p->packed_bytes();
  return n;
}

Status Model::load_hparams() {
  const gguf::File& f = file_;
  MNEMO_ASSIGN_OR_RETURN(hp_.arch, arch_from_name(f.architecture()));
  if (hp_.arch == Arch::kMamba2 || hp_.arch == Arch::kGraniteHybrid) return load_ssm_hparams();
  MNEMO_RETURN_IF_ERROR(read_u32_key(f, "context_length", &hp_.n_ctx_train, false));
  MNEMO_RETURN_IF_ERROR(read_u32_key(f, "embedding_length", &hp_.n_embd, true));
  MNEMO_RETURN_IF_ERROR(read_u32_key(f, "block_count", &hp_.n_layer, true));
  const bool moe = hp_.arch == Arch::kQwen3Moe || hp_.arch == Arch::kQwen35Moe;
  MNEMO_RETURN_IF_ERROR(read_u32_key(f, "feed_forward_length", &hp_.n_ff, !moe));
  MNEMO_RETURN_IF_ERROR(read_u32_key(f, "attention.head_count", &hp_.n_head, true));
  if (moe) {
    // qwen3moe and qwen35moe (llama.cpp's qwen3moe / qwen35moe graphs): softmax router, top-k
    // experts, gate values renormalized to sum to 1; qwen35moe adds a gated shared expert.
    MNEMO_RETURN_IF_ERROR(read_u32_key(f, "expert_count", &hp_.n_expert, true));
    MNEMO_RETURN_IF_ERROR(read_u32_key(f, "expert_used_count", &hp_.n_expert_used, true));
    MNEMO_RETURN_IF_ERROR(read_u32_key(f, "expert_feed_forward_length", &hp_.n_ff_exp, true));
    if (hp_.n_expert == 0 || hp_.n_expert > 1024 || hp_.n_expert_used == 0 ||
        hp_.n_expert_used > hp_.n_expert || hp_.n_ff_exp == 0 || hp_.n_ff_exp > (1u << 20)) {
      return Status::invalid_argument(fmt::format(
          "expert_count {}, expert_used_count {}, expert_feed_forward_length {}: need 1 <= used "
          "<= count <= 1024 and a positive width",
          hp_.n_expert, hp_.n_expert_used, hp_.n_ff_exp));
    }
    MNEMO_RETURN_IF_ERROR(
        read_u32_key(f, "expert_shared_feed_forward_length", &hp_.n_ff_shexp, false));
    if (hp_.n_ff_shexp > (1u << 20)) {
      return Status::invalid_argument("expert_shared_feed_forward_length is implausibly large");
    }
    hp_.expert_gating = HParams::ExpertGating::kSoftmax;
    hp_.expert_weights_norm = true;
    if (hp_.n_ff == 0) hp_.n_ff = hp_.n_ff_exp;
  }
  if (hp_.n_embd == 0 || hp_.n_layer == 0 || hp_.n_head == 0 || hp_.n_ff == 0) {
    return Status::invalid_argument(
        "embedding_length, block_count, head_count and "
        "feed_forward_length must be positive");
  }
  if (hp_.n_layer > 4096 || hp_.n_embd > (1u << 20) || hp_.n_head > 4096) {
    return Status::invalid_argument("hyper-parameters are implausibly large");
  }
  hp_.n_head_kv = hp_.n_head;
  MNEMO_RETURN_IF_ERROR(read_u32_key(f, "attention.head_count_kv", &hp_.n_head_kv, false));
  if (hp_.n_head_kv == 0 || hp_.n_head % hp_.n_head_kv != 0) {
    return Status::invalid_argument(
        fmt::format("head_count_kv {} must divide head_count {}", hp_.n_head_kv, hp_.n_head));
  }
  hp_.head_dim_k = hp_.n_embd / hp_.n_head;
  MNEMO_RETURN_IF_ERROR(read_u32_key(f, "attention.key_length", &hp_.head_dim_k, false));
  hp_.head_dim_v = hp_.head_dim_k;
  MNEMO_RETURN_IF_ERROR(read_u32_key(f, "attention.value_length", &hp_.head_dim_v, false));
  if (hp_.head_dim_k == 0 || hp_.head_dim_v == 0 || hp_.head_dim_k % 2 != 0) {
    return Status::invalid_argument("key_length / value_length must be positive and even");
  }
  hp_.rope_dim = hp_.head_dim_k;
  MNEMO_RETURN_IF_ERROR(read_u32_key(f, "rope.dimension_count", &hp_.rope_dim, false));
  if (hp_.rope_dim == 0 || hp_.rope_dim > hp_.head_dim_k || hp_.rope_dim % 2 != 0) {
    return Status::invalid_argument(
        "rope.dimension_count must be even, positive and <= key_length");
  }
  MNEMO_RETURN_IF_ERROR(read_f32_key(f, "attention.layer_norm_rms_epsilon", &hp_.rms_eps));
  MNEMO_RETURN_IF_ERROR(read_f32_key(f, "rope.freq_base", &hp_.rope_freq_base));
  float scale_factor = 0.0f;
  MNEMO_RETURN_IF_ERROR(read_f32_key(f, "rope.scaling.factor", &scale_factor));
  if (const gguf::Value* t = f.find(f.arch_key("rope.scaling.type"))) {
    const std::string* s = t->as_string();
    if (s == nullptr || (*s != "none" && *s != "linear")) {
      return Status::not_supported(
          fmt::format("rope scaling type {} is not supported (none, linear)",
                      s ? *s : std::string("(not a string)")));
    }
    if (*s == "none") scale_factor = 0.0f;
  }
  if (scale_factor > 0.0f) hp_.rope_freq_scale = 1.0f / scale_factor;

  // Vocabulary size: {arch}.vocab_size, else the tokenizer's token list, else token_embd rows.
  MNEMO_RETURN_IF_ERROR(model_load::read_n_vocab(f, &hp_.n_vocab));

  hp_.attn_scale = 1.0f / std::sqrt(float(hp_.head_dim_k));
  switch (hp_.arch) {
    case Arch::kLlama:
      hp_.rope_mode = kernels::RopeMode::kNormal;
      break;
    case Arch::kQwen2:
    case Arch::kQwen3:
    case Arch::kQwen3Moe:
      hp_.rope_mode = kernels::RopeMode::kNeox;
      break;
    case Arch::kQwen35:
    case Arch::kQwen35Moe:
      // Interleaved multi-axis RoPE (llama.cpp's IMROPE): for text every axis holds the token's
      // position, which makes it NeoX-style RoPE over rope.dimension_count dims.
      hp_.rope_mode = kernels::RopeMode::kNeox;
      return load_qwen35_hparams();  // src/model/model_qwen35.cc
    case Arch::kMamba2:
    case Arch::kGraniteHybrid:
      break;  // load_ssm_hparams (src/model/model_ssm.cc)
    case Arch::kGemma3:
      // Gemma 3: interleaved local (sliding-window) and global layers, 5 local per global; local
      // layers use RoPE base 10000; embeddings scaled by sqrt(n_embd); Q scaled by
      // 1/sqrt(query_pre_attn_scalar) = 1/sqrt(head_dim) for the small models (Gemma 3 report).
      hp_.rope_mode = kernels::RopeMode::kNeox;
      MNEMO_RETURN_IF_ERROR(read_u32_key(f, "attention.sliding_window", &hp_.n_swa, false));
      if (hp_.n_swa > static_cast<uint32_t>(std::numeric_limits<int32_t>::max() - 1)) {
        // Positions are int32 (Pos): a wider window is no window, and its arithmetic overflows.
        return Status::invalid_argument(
            fmt::format("attention.sliding_window {} is larger than any position", hp_.n_swa));
      }
      hp_.swa_type = hp_.n_swa > 0 ? SwaType::kStandard : SwaType::kNone;
      hp_.swa_period = 6;
      hp_.rope_freq_base_swa = 10000.0f;
      hp_.embd_scale = std::sqrt(float(hp_.n_embd));
      break;
  }
  return Status();
}

Status Model::bind_weights() {
  if (hp_.arch == Arch::kQwen35 || hp_.arch == Arch::kQwen35Moe) {
    return bind_qwen35_weights();  // src/model/model_qwen35.cc
  }
  if (hp_.has_recurrent_layers()) return bind_ssm_weights();  // src/model/model_ssm.cc
  const HParams& hp = hp_;
  auto bind = [&](const std::string& name, int64_t ne0, int64_t ne1, bool required,
                  Weight* out) -> Status {
    return model_load::bind_tensor(file_, name, ne0, ne1, required, false, out);
  };

  const gguf::TensorInfo* embd = file_.find_tensor("token_embd.weight");
  if (embd == nullptr || embd->dims.size() != 2) {
    return Status::invalid_argument("missing or malformed tensor token_embd.weight");
  }
  if (hp_.n_vocab == 0) hp_.n_vocab = static_cast<uint32_t>(embd->dims[1]);
  MNEMO_RETURN_IF_ERROR(bind("token_embd.weight", hp.n_embd, hp.n_vocab, true, &token_embd_));
  MNEMO_RETURN_IF_ERROR(bind("output_norm.weight", hp.n_embd, 1, true, &output_norm_));
  MNEMO_RETURN_IF_ERROR(bind("output.weight", hp.n_embd, hp.n_vocab, false, &output_));
  if (!output_.present()) {
    output_ = token_embd_;
    hp_.tied_output = true;
  }

  const int64_t n_q = int64_t(hp.n_head) * hp.head_dim_k;
  const int64_t n_attn_out = int64_t(hp.n_head) * hp.head_dim_v;
  const bool qk_norm =
      hp.arch == Arch::kQwen3 || hp.arch == Arch::kQwen3Moe || hp.arch == Arch::kGemma3;
  const bool gemma = hp.arch == Arch::kGemma3;
  const bool bias = hp.arch == Arch::kQwen2;
  layers_.resize(hp.n_layer);
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = layers_[il];
    auto name = [il](const char* suffix) { return fmt::format("blk.{}.{}", il, suffix); };
    MNEMO_RETURN_IF_ERROR(bind(name("attn_norm.weight"), hp.n_embd, 1, true, &l.attn_norm));
    MNEMO_RETURN_IF_ERROR(bind(name("attn_q.weight"), hp.n_embd, n_q, true, &l.wq));
    MNEMO_RETURN_IF_ERROR(bind(name("attn_k.weight"), hp.n_embd, hp.n_embd_k_gqa(), true, &l.wk));
    MNEMO_RETURN_IF_ERROR(bind(name("attn_v.weight"), hp.n_embd, hp.n_embd_v_gqa(), true, &l.wv));
    MNEMO_RETURN_IF_ERROR(bind(name("attn_output.weight"), n_attn_out, hp.n_embd, true, &l.wo));
    if (!gemma) {  // gemma3 has no q/k/v biases: any in the file are not used
      MNEMO_RETURN_IF_ERROR(bind(name("attn_q.bias"), n_q, 1, bias, &l.bq));
      MNEMO_RETURN_IF_ERROR(bind(name("attn_k.bias"), hp.n_embd_k_gqa(), 1, bias, &l.bk));
      MNEMO_RETURN_IF_ERROR(bind(name("attn_v.bias"), hp.n_embd_v_gqa(), 1, bias, &l.bv));
    }
    MNEMO_RETURN_IF_ERROR(
        bind(name("attn_q_norm.weight"), hp.head_dim_k, 1, qk_norm, &l.attn_q_norm));
    MNEMO_RETURN_IF_ERROR(
        bind(name("attn_k_norm.weight"), hp.head_dim_k, 1, qk_norm, &l.attn_k_norm));
    MNEMO_RETURN_IF_ERROR(
        bind(name("post_attention_norm.weight"), hp.n_embd, 1, gemma, &l.post_attn_norm));
    MNEMO_RETURN_IF_ERROR(bind(name("ffn_norm.weight"), hp.n_embd, 1, true, &l.ffn_norm));
    if (hp.is_moe()) {
      const int64_t E = hp.n_expert, F = hp.n_ff_exp;
      MNEMO_RETURN_IF_ERROR(bind(name("ffn_gate_inp.weight"), hp.n_embd, E, true, &l.ffn_gate_inp));
      MNEMO_RETURN_IF_ERROR(
          bind(name("ffn_gate_exps.weight"), hp.n_embd, F * E, true, &l.ffn_gate_exps));
      MNEMO_RETURN_IF_ERROR(
          bind(name("ffn_up_exps.weight"), hp.n_embd, F * E, true, &l.ffn_up_exps));
      MNEMO_RETURN_IF_ERROR(
          bind(name("ffn_down_exps.weight"), F, hp.n_embd * E, true, &l.ffn_down_exps));
    } else {
      MNEMO_RETURN_IF_ERROR(bind(name("ffn_gate.weight"), hp.n_embd, hp.n_ff, true, &l.ffn_gate));
      MNEMO_RETURN_IF_ERROR(bind(name("ffn_up.weight"), hp.n_embd, hp.n_ff, true, &l.ffn_up));
      MNEMO_RETURN_IF_ERROR(bind(name("ffn_down.weight"), hp.n_ff, hp.n_embd, true, &l.ffn_down));
    }
    MNEMO_RETURN_IF_ERROR(
        bind(name("post_ffw_norm.weight"), hp.n_embd, 1, gemma, &l.post_ffn_norm));
    for (const Weight* w : {&l.attn_norm, &l.ffn_norm, &l.attn_q_norm, &l.attn_k_norm,
                            &l.post_attn_norm, &l.post_ffn_norm, &l.bq, &l.bk, &l.bv}) {
      if (w->present() && w->type != GgmlType::F32) {
        return Status::not_supported(fmt::format(
            "blk.{}: norm and bias tensors must be f32, got {}", il, type_name(w->type)));
      }
    }
  }
  if (output_norm_.type != GgmlType::F32) {
    return Status::not_supported("output_norm.weight must be f32");
  }
  return Status();
}

uint64_t Model::n_bytes() const {
  uint64_t n = 0;
  for (const auto& t : file_.tensors()) n += t.n_bytes;
  return n;
}

uint64_t Model::n_params() const {
  uint64_t n = 0;
  for (const auto& t : file_.tensors()) n += uint64_t(t.n_elements());
  return n;
}

std::string Model::describe() const {
  std::map<std::string, uint64_t> by_type;
  for (const auto& t : file_.tensors()) by_type[std::string(type_name(t.type))] += t.n_bytes;
  std::string main_type;
  uint64_t best = 0;
  for (const auto& [name, bytes] : by_type) {
    if (bytes > best) best = bytes, main_type = name;
  }
  return fmt::format("{} {} blocks, {:.1f} M params, {:.1f} MiB ({})", arch_name(hp_.arch),
                     hp_.n_layer, n_params() / 1e6, n_bytes() / 1048576.0, main_type);
}

}  // namespace mnemo
