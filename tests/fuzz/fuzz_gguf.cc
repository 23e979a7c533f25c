// libFuzzer target for the GGUF reader: parses arbitrary bytes with File::from_memory and, when
// they parse, touches every metadata value (recursively) and every tensor byte, so ASan / UBSan
// see any read outside the buffer. A file that parses is also written again with the Writer and
// re-read: the round trip must give the same metadata and tensors. Invariants are checked with
// abort(). Seed corpus: tests/fuzz/corpus/gguf/ (make_gguf_corpus.py). Run: scripts/fuzz [SECONDS].
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "mnemo/gguf.h"

namespace {

using mnemo::gguf::Array;
using mnemo::gguf::File;
using mnemo::gguf::Value;

void require(bool cond) {
  if (!cond) std::abort();
}

// Folds a value into `acc` so no read is optimized away. depth = arrays enclosing v.
void walk(const Value& v, uint64_t* acc, int depth) {
  if (auto u = v.as_uint()) *acc += *u;
  if (auto d = v.as_double()) *acc += static_cast<uint64_t>(*d != 0);
  if (auto b = v.as_bool()) *acc += *b;
  if (const std::string* s = v.as_string()) {
    for (char c : *s) *acc += static_cast<unsigned char>(c);
  }
  if (const Array* a = v.as_array()) {
    require(depth < mnemo::gguf::kMaxArrayDepth);
    for (const Value& item : a->items) {
      require(item.type == a->elem_type);
      walk(item, acc, depth + 1);
    }
  }
}

// Value equality where two NaNs are equal (a float NaN may come back with its quiet bit set).
bool same(const Value& a, const Value& b) {
  if (a.type != b.type) return false;
  const auto* da = std::get_if<double>(&a.v);
  const auto* db = std::get_if<double>(&b.v);
  if (da && db) return (std::isnan(*da) && std::isnan(*db)) || *da == *db;
  const Array* aa = a.as_array();
  const Array* ab = b.as_array();
  if (aa && ab) {
    if (aa->elem_type != ab->elem_type || aa->items.size() != ab->items.size()) return false;
    for (size_t i = 0; i < aa->items.size(); ++i) {
      if (!same(aa->items[i], ab->items[i])) return false;
    }
    return true;
  }
  return a == b;
}

// Writes `f` again with the Writer and checks the re-read file matches. Skips files the Writer
// is stricter about (empty keys, tensor names outside 1..63 bytes).
void check_round_trip(const File& f) {
  // The Writer pads the data section to the alignment, as the format says: a 40-byte file with
  // general.alignment 2^31 and no tensors (which the reader accepts) would be rewritten as 2 GiB,
  // past the fuzzer's memory limit. Round-trip only alignments up to 1 MiB.
  if (f.alignment() > (uint64_t{1} << 20)) return;
  mnemo::gguf::Writer w(f.alignment());
  for (const auto& [key, value] : f.metadata()) {
    if (key == "general.alignment" && f.alignment() != mnemo::gguf::kDefaultAlignment) continue;
    if (!w.add(key, value).ok()) {
      require(key.empty());
      return;
    }
  }
  for (const auto& t : f.tensors()) {
    if (!w.add_tensor(t.name, t.dims, t.type, {t.data, t.n_bytes}).ok()) {
      require(t.name.empty() || t.name.size() >= 64);
      return;
    }
  }
  const std::vector<uint8_t> bytes = w.serialize();
  auto r = File::from_memory(bytes);
  require(r.ok());
  require(r->alignment() == f.alignment());
  require(r->metadata().size() == f.metadata().size());
  for (const auto& [key, value] : f.metadata()) {
    const Value* v = r->find(key);
    require(v != nullptr && same(*v, value));
  }
  require(r->tensors().size() == f.tensors().size());
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const auto& a = f.tensors()[i];
    const auto& b = r->tensors()[i];
    require(a.name == b.name && a.dims == b.dims && a.type == b.type && a.n_bytes == b.n_bytes);
    require(std::memcmp(a.data, b.data, a.n_bytes) == 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = File::from_memory(std::span<const uint8_t>(data, size));
  if (!r.ok()) {
    require(r.status().message().find("byte offset") != std::string::npos);
    return 0;
  }
  const File& f = *r;
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
  check_round_trip(f);
  return 0;
}
