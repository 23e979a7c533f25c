// libFuzzer target for the GGUF reader: parses arbitrary bytes with File::from_memory and, when
// they parse, touches every metadata value (recursively) and every tensor byte, so ASan / UBSan
// see any read outside the buffer. Invariants of a successful parse are checked with abort().
// Seed corpus: tests/fuzz/corpus/gguf/. Run: scripts/fuzz [SECONDS].
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "mnemo/gguf.h"

namespace {

using mnemo::gguf::Array;
using mnemo::gguf::Value;

void require(bool cond) {
  if (!cond) std::abort();
}

// Folds a value into `acc` so no read is optimized away; returns the nesting depth seen.
int walk(const Value& v, uint64_t* acc, int depth) {
  require(depth < mnemo::gguf::kMaxArrayDepth);
  if (auto u = v.as_uint()) *acc += *u;
  if (auto d = v.as_double()) *acc += static_cast<uint64_t>(*d != 0);
  if (auto b = v.as_bool()) *acc += *b;
  if (const std::string* s = v.as_string()) {
    for (char c : *s) *acc += static_cast<unsigned char>(c);
  }
  int deepest = depth;
  if (const Array* a = v.as_array()) {
    for (const Value& item : a->items) {
      require(item.type == a->elem_type);
      const int d = walk(item, acc, depth + 1);
      if (d > deepest) deepest = d;
    }
  }
  return deepest;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = mnemo::gguf::File::from_memory(std::span<const uint8_t>(data, size));
  if (!r.ok()) {
    require(!r.status().message().empty());
    return 0;
  }
  const mnemo::gguf::File& f = *r;
  uint64_t acc = 0;
  for (const auto& [key, value] : f.metadata()) {
    require(f.find(key) == &value);
    walk(value, &acc, 0);
  }
  (void)f.architecture();
  (void)f.get_arch_uint("context_length");
  (void)f.get_arch_float("rope.freq_base");
  const uint64_t align = f.alignment();
  require(align != 0 && (align & (align - 1)) == 0);
  require(f.data_offset() % align == 0);
  for (const auto& t : f.tensors()) {
    require(f.find_tensor(t.name) == &t);
    require(t.offset % align == 0);
    require(t.n_elements() >= 1);
    require(t.data >= data && t.data + t.n_bytes <= data + size);
    for (uint64_t i = 0; i < t.n_bytes; ++i) acc += t.data[i];
  }
  volatile uint64_t sink = acc;
  (void)sink;
  return 0;
}
