// libFuzzer target for model loading and the first forward passes: a malformed or inconsistent
// GGUF model must be refused with an error or run, never abort or read outside its buffers.
//
// The input is an edit script over one of the tiny models our writer makes (every architecture
// mnemo loads: llama, qwen2, qwen3, qwen3moe, gemma3, mamba2, granitehybrid, qwen35, qwen35moe;
// written once per process by write_tiny_model). Bytes are read in order, 0 once exhausted:
//   byte 0      which model
//   byte 1      context: bit 0 kv_unified, bit 1 swa_full, bits 2-3 K/V type (f16, q8_0, q4_0,
//               f32), bits 4-5 n_ubatch (1, 2, 3, 8), bit 6 two sequences, bit 7 no repacking
//   then edits, 6 bytes each: op, a, b, c, d, e
//     0 set an integer key to an interesting value (same GGUF type)  1 set a float key
//     2 delete a key          3 give a key another type           4 add a key of another model
//     5 resize an array key / set one of its items                6 set general.architecture
//     7 change one dimension of a tensor (data refilled)          8 change a tensor's type
//     9 delete a tensor       10 rename a tensor to another one's name (after deleting that one)
// The edited file is written with the Writer (an edit it refuses ends the input), loaded with
// Model::load and, when it loads, its tokenizer is built, a Context is created and two decodes
// run (a 5-token prompt, one more token; the second sequence too when asked), then the tail is
// cut with plan_truncate / seq_rm and decoded again; the sequence's state is saved and restored
// into the last seq_id (which must succeed) and decoded once more. Errors are fine; a crash, an
// abort (CHECK) or a sanitizer report is a finding. Seed corpus: tests/fuzz/corpus/model/. Run:
// scripts/fuzz. FUZZ_MODEL_TRACE=1 prints each input's load result (to see how far inputs get).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "mnemo/context.h"
#include "mnemo/gguf.h"
#include "mnemo/model.h"
#include "mnemo/quant.h"
#include "mnemo/state.h"
#include "mnemo/tokenizer.h"
#include "support/tiny_model.h"

namespace {

using namespace mnemo;
using gguf::Value;
using gguf::ValueType;

struct Tensor {
  std::string name;
  std::vector<int64_t> dims;
  GgmlType type;
  std::span<const uint8_t> data;  // into the base file, or into `owned`
  std::vector<uint8_t> owned;
};

struct Base {
  std::vector<uint8_t> bytes;  // the file, kept alive for File::from_memory
  std::vector<std::pair<std::string, Value>> kv;
  std::vector<Tensor> tensors;
  uint64_t alignment = gguf::kDefaultAlignment;
};

std::vector<Base>* g_bases = nullptr;
std::vector<std::pair<std::string, Value>>* g_all_keys = nullptr;  // one of each key name
std::string* g_path = nullptr;

constexpr int64_t kMaxTensorBytes = int64_t{8} << 20;

bool read_file(const std::string& path, std::vector<uint8_t>* out) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  uint8_t buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out->insert(out->end(), buf, buf + n);
  std::fclose(f);
  return true;
}

// Writes one base model with the test writer; false when it could not be made or parsed.
bool add_base(const std::string& arch, const std::string& path) {
  if (!testing::write_tiny_model(arch, path).ok()) return false;
  Base base;
  if (!read_file(path, &base.bytes)) return false;
  std::remove(path.c_str());
  g_bases->push_back(std::move(base));
  Base& b = g_bases->back();
  auto file = gguf::File::from_memory(b.bytes);
  if (!file.ok()) return false;
  b.alignment = file->alignment();
  for (const auto& [k, v] : file->metadata()) {
    if (k == "general.alignment") continue;
    b.kv.emplace_back(k, v);
  }
  for (const gguf::TensorInfo& t : file->tensors()) {
    b.tensors.push_back({t.name, t.dims, t.type, {t.data, t.n_bytes}, {}});
  }
  return true;
}

void require(bool cond) {
  if (!cond) std::abort();
}

class Input {
 public:
  Input(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool empty() const { return n_ == 0; }
  uint8_t byte() {
    if (n_ == 0) return 0;
    --n_;
    return *p_++;
  }
  uint32_t u32() {
    uint32_t x = 0;
    for (int i = 0; i < 4; ++i) x |= uint32_t(byte()) << (8 * i);
    return x;
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

uint64_t interesting_uint(uint8_t sel, uint64_t orig) {
  static constexpr uint64_t kValues[] = {
      0,   1,    2,    3,    4,     5,     7,        8,           9,           15,         16,  31,
      32,  33,   63,   64,   65,    127,   128,      255,         256,         257,        511, 512,
      513, 1023, 1024, 4096, 65535, 65536, 1u << 24, 0x7fffffffu, 0x80000000u, 0xffffffffu};
  constexpr size_t n = sizeof kValues / sizeof kValues[0];
  if (sel < n) return kValues[sel];
  switch (sel % 6) {
    case 0:
      return orig + 1;
    case 1:
      return orig - 1;
    case 2:
      return orig * 2;
    case 3:
      return orig / 2;
    case 4:
      return orig * 3;
    default:
      return std::numeric_limits<uint64_t>::max();
  }
}

double interesting_float(uint8_t sel, double orig) {
  static const double kValues[] = {0.0,   -0.0, 1.0,   -1.0, 0.5,   1e-30, 1e30,  -1e30,
                                   1e-45, 3e38, 1e300, 2.0,  10000, 1e6,   0.125, -0.5};
  constexpr size_t n = sizeof kValues / sizeof kValues[0];
  if (sel < n) return kValues[sel];
  switch (sel % 4) {
    case 0:
      return std::numeric_limits<double>::quiet_NaN();
    case 1:
      return std::numeric_limits<double>::infinity();
    case 2:
      return -orig;
    default:
      return orig * 1024;
  }
}

// The value `v` with its payload replaced by an interesting one of the same GGUF type (an
// unsigned value is wrapped to its type's width; the Writer refuses out-of-range ones).
Value mutate_value(const Value& v, uint8_t sel, uint8_t sel2) {
  Value out = v;
  if (auto* u = std::get_if<uint64_t>(&out.v)) {
    uint64_t x = interesting_uint(sel, *u);
    if (v.type == ValueType::UINT8) x &= 0xff;
    if (v.type == ValueType::UINT16) x &= 0xffff;
    if (v.type == ValueType::UINT32) x &= 0xffffffffu;
    *u = x;
  } else if (auto* i = std::get_if<int64_t>(&out.v)) {
    int64_t x = static_cast<int64_t>(interesting_uint(sel, static_cast<uint64_t>(*i)));
    if (sel2 & 1) x = -x;
    if (v.type == ValueType::INT8) x = static_cast<int8_t>(x);
    if (v.type == ValueType::INT16) x = static_cast<int16_t>(x);
    if (v.type == ValueType::INT32) x = static_cast<int32_t>(x);
    *i = x;
  } else if (auto* d = std::get_if<double>(&out.v)) {
    double x = interesting_float(sel, *d);
    if (v.type == ValueType::FLOAT32) x = static_cast<double>(static_cast<float>(x));
    *d = x;
  } else if (auto* b = std::get_if<bool>(&out.v)) {
    *b = !*b;
  } else if (auto* s = std::get_if<std::string>(&out.v)) {
    if (sel % 3 == 0) s->clear();
    if (sel % 3 == 1 && !s->empty()) s->resize(s->size() / 2);
    if (sel % 3 == 2) s->push_back(static_cast<char>(sel2));
  } else if (auto* a = std::get_if<gguf::Array>(&out.v)) {
    const size_t n = a->items.size();
    if (sel2 % 4 == 0) {
      a->items.resize(std::min<size_t>(n, sel % 8));  // shorter
    } else if (sel2 % 4 == 1 && n > 0) {
      a->items.resize(n + 1 + sel % 7, a->items[0]);  // longer
    } else if (n > 0 && a->items[0].type != ValueType::ARRAY) {
      const size_t i = (sel2 / 4) % n;
      a->items[i] = mutate_value(a->items[i], sel, 0);
    }
  }
  return out;
}

// v converted to another GGUF type chosen by `sel` (integers kept where they fit).
Value retype_value(const Value& v, uint8_t sel) {
  const double d = v.as_double().value_or(0.0);
  const uint64_t u = v.as_uint().value_or(0);
  switch (sel % 7) {
    case 0:
      return Value::i32(static_cast<int32_t>(u));
    case 1:
      return Value::u64(u);
    case 2:
      return Value::f32(static_cast<float>(d));
    case 3:
      return Value::str("7");
    case 4:
      return Value::array(ValueType::UINT32, {Value::u32(static_cast<uint32_t>(u))});
    case 5:
      return Value::boolean(u != 0);
    default:
      return Value::u8(static_cast<uint8_t>(u));
  }
}

const GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                           GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                           GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL};

// Refills t.data for its (new) dims and type by repeating its old bytes; false when too large.
bool refill(Tensor& t) {
  const int64_t bs = block_size(t.type);
  if (t.dims.empty() || t.dims[0] < 1) return false;
  if (t.dims[0] % bs != 0) t.dims[0] = (t.dims[0] / bs + 1) * bs;
  int64_t rows = 1;
  for (size_t i = 1; i < t.dims.size(); ++i) {
    if (t.dims[i] < 1 || t.dims[i] > kMaxTensorBytes) return false;
    rows *= t.dims[i];
    if (rows > kMaxTensorBytes) return false;
  }
  if (t.dims[0] > kMaxTensorBytes) return false;
  const int64_t row = static_cast<int64_t>(row_size(t.type, t.dims[0]));
  if (row > kMaxTensorBytes || rows > kMaxTensorBytes / row) return false;
  std::vector<uint8_t> data(static_cast<size_t>(row * rows));
  for (size_t i = 0; i < data.size(); ++i) {
    data[i] = t.data.empty() ? uint8_t(i * 37) : t.data[i % t.data.size()];
  }
  t.owned = std::move(data);
  t.data = t.owned;
  return true;
}

// Applies one 6-byte edit; false when the edit cannot be applied (the input ends there).
bool apply_edit(Input& in, std::vector<std::pair<std::string, Value>>& kv,
                std::vector<Tensor>& tensors) {
  const uint8_t op = in.byte() % 11, a = in.byte(), b = in.byte(), c = in.byte(), d = in.byte(),
                e = in.byte();
  const uint32_t pick = (uint32_t(a) << 8) | b;
  switch (op) {
    case 0:
    case 1:
    case 5: {
      // Keys of the wanted kind; edit one.
      std::vector<size_t> idx;
      for (size_t i = 0; i < kv.size(); ++i) {
        const Value& v = kv[i].second;
        const bool want = op == 0   ? v.is_integer()
                          : op == 1 ? v.is_float()
                                    : v.as_array() != nullptr;
        if (want) idx.push_back(i);
      }
      if (idx.empty()) return true;
      Value& v = kv[idx[pick % idx.size()]].second;
      v = mutate_value(v, c, d);
      (void)e;
      return true;
    }
    case 2:
      if (!kv.empty()) kv.erase(kv.begin() + pick % kv.size());
      return true;
    case 3:
      if (!kv.empty()) {
        Value& v = kv[pick % kv.size()].second;
        v = retype_value(v, c);
      }
      return true;
    case 4: {
      const auto& [k, v] = (*g_all_keys)[pick % g_all_keys->size()];
      // Its {arch} prefix renamed to this file's architecture.
      std::string key = k;
      std::string arch;
      for (const auto& [kk, vv] : kv) {
        if (kk == "general.architecture" && vv.as_string()) arch = *vv.as_string();
      }
      const size_t dot = key.find('.');
      if (c & 1 && dot != std::string::npos && key.compare(0, 8, "general.") != 0 &&
          key.compare(0, 10, "tokenizer.") != 0) {
        key = arch + key.substr(dot);
      }
      for (const auto& [kk, vv] : kv) {
        if (kk == key) return true;
      }
      kv.emplace_back(key, mutate_value(v, d, e));
      return true;
    }
    case 6: {
      static const char* kArchs[] = {"llama",     "qwen2",      "qwen3",         "qwen3moe",
                                     "gemma3",    "mamba2",     "granitehybrid", "qwen35",
                                     "qwen35moe", "nonexistent"};
      for (auto& [k, v] : kv) {
        if (k == "general.architecture") v = Value::str(kArchs[a % 10]);
      }
      return true;
    }
    case 7: {
      if (tensors.empty()) return true;
      Tensor& t = tensors[pick % tensors.size()];
      const size_t dim = c % (t.dims.size() + 1);
      if (dim == t.dims.size()) {
        if (t.dims.size() < 4) t.dims.push_back(1 + d % 4);  // one more dimension
      } else {
        t.dims[dim] = static_cast<int64_t>(interesting_uint(d, static_cast<uint64_t>(t.dims[dim])));
      }
      return refill(t);
    }
    case 8: {
      if (tensors.empty()) return true;
      Tensor& t = tensors[pick % tensors.size()];
      t.type = kTypes[c % (sizeof kTypes / sizeof kTypes[0])];
      return refill(t);
    }
    case 9:
      if (!tensors.empty()) tensors.erase(tensors.begin() + pick % tensors.size());
      return true;
    default: {
      if (tensors.size() < 2) return true;
      const size_t i = pick % tensors.size();
      const size_t j = (uint32_t(c) << 8 | d) % tensors.size();
      if (i == j) return true;
      tensors[i].name = tensors[j].name;
      tensors.erase(tensors.begin() + j);
      return true;
    }
  }
}

void run_model(const Model& model, uint8_t opts) {
  if (auto tok = Tokenizer::from_gguf(model.file()); tok.ok()) {
    const std::vector<TokenId> ids = tok->tokenize("Hello world, 12 tokens!", true, true);
    (void)tok->detokenize(ids, true);
  }
  static const GgmlType kKv[] = {GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::F32};
  static const uint32_t kUbatch[] = {1, 2, 3, 8};
  ContextParams cp;
  cp.n_ctx = 64;
  cp.n_batch = 16;
  cp.n_threads = 1;
  cp.kv_unified = opts & 1;
  cp.swa_full = opts & 2;
  cp.type_k = cp.type_v = kKv[(opts >> 2) & 3];
  cp.n_ubatch = kUbatch[(opts >> 4) & 3];
  cp.n_seq_max = (opts & 64) ? 2 : 1;
  cp.rs_checkpoint_interval = 2;
  auto ctx = Context::create(model, cp);
  if (!ctx.ok()) return;
  const int64_t n_vocab = std::max<int64_t>(1, model.hparams().n_vocab);
  Batch batch;
  for (SeqId s = 0; s < static_cast<SeqId>(cp.n_seq_max); ++s) {
    for (Pos p = 0; p < 5; ++p) {
      batch.add(static_cast<int32_t>((3 + 7 * p + s) % n_vocab), p, {s}, p == 4);
    }
  }
  if (!(*ctx)->decode(batch).ok()) return;
  batch.clear();
  batch.add(static_cast<int32_t>(11 % n_vocab), 5, {0}, true);
  if (!(*ctx)->decode(batch).ok()) return;
  Memory& mem = (*ctx)->memory();
  auto plan = mem.plan_truncate(0, 3);
  if (!plan.ok()) return;
  if (!mem.seq_rm(0, plan->keep, -1).ok()) return;
  batch.clear();
  for (Pos p = plan->keep; p < 6; ++p) {
    batch.add(static_cast<int32_t>((5 + p) % n_vocab), p, {0}, p == 5);
  }
  if (!(*ctx)->decode(batch).ok()) return;
  // The sequence's own state, saved and restored into the last seq_id, must be accepted.
  auto size = state_seq_get_size((*ctx)->memory(), (*ctx)->fingerprint(), 0);
  if (!size.ok()) return;
  std::vector<uint8_t> state(*size);
  auto got = state_seq_get_data((*ctx)->memory(), (*ctx)->fingerprint(), 0, state);
  require(got.ok() && *got == state.size());
  const SeqId dst = static_cast<SeqId>(cp.n_seq_max - 1);
  require(state_seq_set_data((*ctx)->memory(), (*ctx)->fingerprint(), state, dst).ok());
  batch.clear();
  batch.add(static_cast<int32_t>(13 % n_vocab), 6, {dst}, true);
  (void)(*ctx)->decode(batch);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_bases = new std::vector<Base>();
  g_all_keys = new std::vector<std::pair<std::string, Value>>();
  const char* tmp = std::getenv("TMPDIR");
  g_path = new std::string(std::string(tmp != nullptr ? tmp : "/tmp") + "/fuzz_model." +
                           std::to_string(getpid()) + ".gguf");
  for (const char* arch : {"llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "mamba2",
                           "granitehybrid", "qwen35", "qwen35moe"}) {
    if (!add_base(arch, *g_path)) {
      std::fprintf(stderr, "fuzz_model: could not write the tiny %s model\n", arch);
      std::abort();
    }
  }
  std::atexit([] { std::remove(g_path->c_str()); });
  std::set<std::string> seen;
  for (const Base& b : *g_bases) {
    for (const auto& [k, v] : b.kv) {
      if (seen.insert(k).second) g_all_keys->emplace_back(k, v);
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  const Base& base = (*g_bases)[in.byte() % g_bases->size()];
  const uint8_t opts = in.byte();
  auto kv = base.kv;
  std::vector<Tensor> tensors;
  tensors.reserve(base.tensors.size());
  for (const Tensor& t : base.tensors) tensors.push_back({t.name, t.dims, t.type, t.data, {}});
  for (int n_edits = 0; !in.empty() && n_edits < 16; ++n_edits) {
    if (!apply_edit(in, kv, tensors)) return 0;
  }
  gguf::Writer w(base.alignment);
  for (auto& [k, v] : kv) {
    if (!w.add(k, v).ok()) return 0;
  }
  for (const Tensor& t : tensors) {
    if (!w.add_tensor(t.name, t.dims, t.type, t.data).ok()) return 0;
  }
  if (!w.write(*g_path).ok()) return 0;
  ModelParams mp;
  mp.repack = !(opts & 128);
  mp.n_threads = 1;
  auto model = Model::load(*g_path, mp);
  if (std::getenv("FUZZ_MODEL_TRACE") != nullptr) {
    std::fprintf(stderr, "fuzz_model: load: %s\n",
                 model.ok() ? "ok" : model.status().to_string().c_str());
  }
  if (model.ok()) run_model(**model, opts);
  return 0;
}
