// model_fingerprint(): the model identity recorded in state files (docs/formats/state.md).
#include <xxhash.h>

#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include "mnemo/model_fingerprint.h"

namespace mnemo {
namespace {

// Little-endian serialization of the hashed fields (the order is part of the format).
class Canon {
 public:
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) buf_.push_back(uint8_t(v >> (8 * i)));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) buf_.push_back(uint8_t(v >> (8 * i)));
  }
  void f32(float v) { u32(std::bit_cast<uint32_t>(v)); }
  void str(const std::string& s) {
    u32(uint32_t(s.size()));
    buf_.insert(buf_.end(), s.begin(), s.end());
  }
  uint64_t hash() const { return XXH3_64bits(buf_.data(), buf_.size()); }

 private:
  std::vector<uint8_t> buf_;
};

}  // namespace

ModelFingerprint model_fingerprint(const Model& model) {
  const HParams& hp = model.hparams();
  ModelFingerprint fp;
  fp.arch = arch_name(hp.arch);
  fp.n_embd_k_gqa.assign(hp.n_layer, hp.n_embd_k_gqa());
  fp.n_embd_v_gqa.assign(hp.n_layer, hp.n_embd_v_gqa());

  Canon c;
  c.str("mnemo-model-fingerprint-1");
  c.str(fp.arch);
  for (uint32_t v : {hp.n_vocab, hp.n_ctx_train, hp.n_embd, hp.n_layer, hp.n_head, hp.n_head_kv,
                     hp.head_dim_k, hp.head_dim_v, hp.n_ff, hp.rope_dim, hp.n_swa, hp.swa_period,
                     uint32_t(hp.swa_type), uint32_t(hp.rope_mode), uint32_t(hp.tied_output)}) {
    c.u32(v);
  }
  for (float v : {hp.rms_eps, hp.rope_freq_base, hp.rope_freq_base_swa, hp.rope_freq_scale,
                  hp.attn_scale, hp.embd_scale}) {
    c.f32(v);
  }
  const auto& tensors = model.file().tensors();
  c.u64(tensors.size());
  for (const gguf::TensorInfo& t : tensors) {
    c.str(t.name);
    c.u32(uint32_t(t.type));
    c.u32(uint32_t(t.dims.size()));
    for (int64_t d : t.dims) c.u64(uint64_t(d));
  }
  fp.hparams_hash = c.hash();
  return fp;
}

}  // namespace mnemo
