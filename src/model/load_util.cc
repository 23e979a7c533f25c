#include "model/load_util.h"

#include <fmt/format.h>

#include <cmath>

namespace mnemo::model_load {

Status read_u32_key(const gguf::File& f, const char* suffix, uint32_t* out, bool required) {
  const std::string key = f.arch_key(suffix);
  if (f.find(key) == nullptr) {
    if (required) return Status::invalid_argument("missing hyper-parameter " + key);
    return Status();
  }
  auto v = f.get_uint(key);
  if (!v.ok()) return v.status();
  if (*v > 0xFFFFFFFFull) {
    return Status::invalid_argument(fmt::format("{} = {} is too large", key, *v));
  }
  *out = static_cast<uint32_t>(*v);
  return Status();
}

Status read_f32_key(const gguf::File& f, const char* suffix, float* out) {
  const std::string key = f.arch_key(suffix);
  if (f.find(key) == nullptr) return Status();
  auto v = f.get_float(key);
  if (!v.ok()) return v.status();
  if (!std::isfinite(*v)) return Status::invalid_argument(key + " is not a finite number");
  *out = static_cast<float>(*v);
  return Status();
}

Status read_n_vocab(const gguf::File& f, uint32_t* out) {
  if (const gguf::Value* v = f.find(f.arch_key("vocab_size"))) {
    auto n = v->as_uint();
    if (!n || *n == 0 || *n > (1u << 24)) return Status::invalid_argument("bad vocab_size");
    *out = static_cast<uint32_t>(*n);
  } else if (auto tokens = f.get_array("tokenizer.ggml.tokens"); tokens.ok()) {
    *out = static_cast<uint32_t>((*tokens)->items.size());
  }
  return Status();
}

Status bind_tensor(const gguf::File& f, const std::string& name, int64_t ne0, int64_t ne1,
                   bool required, bool f32_only, Weight* out) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (t == nullptr) {
    return required ? Status::invalid_argument("missing tensor " + name) : Status();
  }
  const int64_t t_ne0 = t->dims.empty() ? 1 : t->dims[0];
  int64_t t_ne1 = 1;
  for (size_t i = 1; i < t->dims.size(); ++i) t_ne1 *= t->dims[i];
  if (t_ne0 != ne0 || t_ne1 != ne1) {
    return Status::invalid_argument(fmt::format("tensor {} has shape [{}, {}], expected [{}, {}]",
                                                name, t_ne0, t_ne1, ne0, ne1));
  }
  if (f32_only ? t->type != GgmlType::F32 : !traits(t->type).can_dequantize) {
    return Status::not_supported(fmt::format("tensor {}: type {} is not supported{}", name,
                                             type_name(t->type), f32_only ? " (must be f32)" : ""));
  }
  out->data = t->data;
  out->type = t->type;
  out->ne0 = ne0;
  out->ne1 = ne1;
  out->row_bytes = row_size(t->type, ne0);
  return Status();
}

}  // namespace mnemo::model_load
