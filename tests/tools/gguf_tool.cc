// gguf_tool: drives mnemo's GGUF reader and writer from tests/python/test_gguf.py, which compares
// its output with the `gguf` PyPI package.
//
//   gguf_tool write-sample PATH [--alignment N]
//       Writes a GGUF v3 file covering every metadata value type (scalars at their limits, empty
//       and non-ASCII strings, arrays of each type, an empty array, arrays nested 2 and 3 deep)
//       and tensors of plain, integer and quantized types (incl. 4-D and 0-D), alignment N
//       (default 64, so general.alignment is written).
//   gguf_tool dump PATH [--data]
//       Prints the parsed file as JSON on stdout:
//         {"version", "alignment", "data_offset", "file_size",
//          "metadata": [{"key", "type", "value"}],   // array value: {"elem_type", "items": [...]}
//          "tensors": [{"name", "dims", "type", "type_id", "offset", "n_bytes", "data"?}]}
//       offset is relative to the data section; "data" (hex) only with --data.
//       A file the reader rejects: the status on stderr, exit code 1.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mnemo/gguf.h"

namespace {

using mnemo::GgmlType;
using mnemo::Status;
using mnemo::gguf::Array;
using mnemo::gguf::Value;
using mnemo::gguf::ValueType;
using json = nlohmann::ordered_json;

json value_json(const Value& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.v)) return *u;
  if (const auto* s = std::get_if<int64_t>(&v.v)) return *s;
  if (const auto* d = std::get_if<double>(&v.v)) return *d;
  if (const auto* b = std::get_if<bool>(&v.v)) return *b;
  if (const auto* str = std::get_if<std::string>(&v.v)) return *str;
  const Array& a = std::get<Array>(v.v);
  json items = json::array();
  for (const Value& item : a.items) items.push_back(value_json(item));
  return json{{"elem_type", mnemo::gguf::value_type_name(a.elem_type)}, {"items", items}};
}

std::string hex(const uint8_t* p, uint64_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (uint64_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  return out;
}

int dump(const std::string& path, bool with_data) {
  auto r = mnemo::gguf::File::open(path);
  if (!r.ok()) {
    std::cerr << r.status().to_string() << "\n";
    return 1;
  }
  const mnemo::gguf::File& f = *r;
  json out;
  out["version"] = f.version();
  out["alignment"] = f.alignment();
  out["data_offset"] = f.data_offset();
  out["file_size"] = f.file_size();
  json md = json::array();
  for (const auto& [key, value] : f.metadata()) {
    md.push_back({{"key", key},
                  {"type", mnemo::gguf::value_type_name(value.type)},
                  {"value", value_json(value)}});
  }
  out["metadata"] = md;
  json ts = json::array();
  for (const auto& t : f.tensors()) {
    json tj = {{"name", t.name},
               {"dims", t.dims},
               {"type", mnemo::type_name(t.type)},
               {"type_id", static_cast<uint32_t>(t.type)},
               {"offset", t.offset},
               {"n_bytes", t.n_bytes}};
    if (with_data) tj["data"] = hex(t.data, t.n_bytes);
    ts.push_back(tj);
  }
  out["tensors"] = ts;
  // Strings from a file need not be UTF-8; replace bad bytes rather than fail (Python's
  // errors="replace" matches).
  std::cout << out.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  return 0;
}

bool check(const Status& st) {
  if (!st.ok()) std::cerr << st.to_string() << "\n";
  return st.ok();
}

// Deterministic filler bytes (a 64-bit LCG), so the sample file is the same on every run.
std::vector<uint8_t> filler(size_t n, uint64_t seed) {
  std::vector<uint8_t> out(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& b : out) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<uint8_t>(x >> 56);
  }
  return out;
}

int write_sample(const std::string& path, uint64_t alignment) {
  using V = Value;
  mnemo::gguf::Writer w(alignment);
  const std::vector<std::pair<std::string, Value>> kv = {
      {"general.architecture", V::str("llama")},
      {"general.name", V::str("mnemo gguf sample")},
      {"sample.u8", V::u8(255)},
      {"sample.i8", V::i8(-128)},
      {"sample.u16", V::u16(65535)},
      {"sample.i16", V::i16(-32768)},
      {"sample.u32", V::u32(4294967295u)},
      {"sample.i32", V::i32(std::numeric_limits<int32_t>::min())},
      {"sample.u64", V::u64(std::numeric_limits<uint64_t>::max())},
      {"sample.i64", V::i64(std::numeric_limits<int64_t>::min())},
      {"sample.f32", V::f32(0.1f)},
      {"sample.f64", V::f64(-2.718281828459045)},
      {"sample.true", V::boolean(true)},
      {"sample.false", V::boolean(false)},
      {"sample.str", V::str("h\xC3\xA9llo \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x99\x82")},
      {"sample.empty_str", V::str("")},
      {"sample.arr_u8", V::array(ValueType::UINT8, {V::u8(0), V::u8(1), V::u8(255)})},
      {"sample.arr_i8", V::array(ValueType::INT8, {V::i8(-128), V::i8(127)})},
      {"sample.arr_u16", V::array(ValueType::UINT16, {V::u16(0), V::u16(65535)})},
      {"sample.arr_i16", V::array(ValueType::INT16, {V::i16(-1), V::i16(300)})},
      {"sample.arr_u32", V::array(ValueType::UINT32, {V::u32(7), V::u32(8), V::u32(9)})},
      {"sample.arr_i32", V::array(ValueType::INT32, {V::i32(-7), V::i32(2147483647)})},
      {"sample.arr_u64", V::array(ValueType::UINT64, {V::u64(1ull << 63), V::u64(0)})},
      {"sample.arr_i64", V::array(ValueType::INT64, {V::i64(-1), V::i64(1ll << 62)})},
      {"sample.arr_f32",
       V::array(ValueType::FLOAT32, {V::f32(1.5f), V::f32(-0.0f), V::f32(3e38f)})},
      {"sample.arr_f64", V::array(ValueType::FLOAT64, {V::f64(1e-300), V::f64(0.1)})},
      {"sample.arr_bool", V::array(ValueType::BOOL, {V::boolean(false), V::boolean(true)})},
      {"sample.arr_str",
       V::array(ValueType::STRING, {V::str("a"), V::str(""), V::str("\xC3\xBC")})},
      {"sample.arr_empty", V::array(ValueType::FLOAT32, {})},
      {"sample.arr_nested",
       V::array(ValueType::ARRAY,
                {V::array(ValueType::INT32, {V::i32(1), V::i32(2)}), V::array(ValueType::INT32, {}),
                 V::array(ValueType::INT32, {V::i32(-3)})})},
      {"sample.arr_nested3",
       V::array(
           ValueType::ARRAY,
           {V::array(ValueType::ARRAY, {V::array(ValueType::STRING, {V::str("x"), V::str("yz")}),
                                        V::array(ValueType::STRING, {V::str("w")})}),
            V::array(ValueType::ARRAY, {})})},
      {"llama.context_length", V::u32(128)},
      {"llama.rope.freq_base", V::f32(10000.0f)},
  };
  for (const auto& [k, v] : kv) {
    if (!check(w.add(k, v))) return 1;
  }
  struct T {
    const char* name;
    std::vector<int64_t> dims;
    GgmlType type;
  };
  const std::vector<T> tensors = {
      {"f32.weight", {8, 3}, GgmlType::F32},
      {"f16.weight", {5}, GgmlType::F16},
      {"bf16.weight", {4, 2}, GgmlType::BF16},
      {"f64.weight", {3}, GgmlType::F64},
      {"q4_0.weight", {64, 2}, GgmlType::Q4_0},
      {"q4_1.weight", {32}, GgmlType::Q4_1},
      {"q8_0.weight", {32, 1, 2}, GgmlType::Q8_0},
      {"q4_k.weight", {256, 2}, GgmlType::Q4_K},
      {"q6_k.weight", {256}, GgmlType::Q6_K},
      {"i8.ids", {7}, GgmlType::I8},
      {"i16.ids", {3, 2}, GgmlType::I16},
      {"i32.ids", {2, 1, 1, 3}, GgmlType::I32},
      {"i64.ids", {2}, GgmlType::I64},
      {"scalar", {}, GgmlType::F32},
  };
  uint64_t seed = 1;
  for (const T& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.dims) n *= d;
    const int64_t row = t.dims.empty() ? 1 : t.dims[0];
    const auto data = filler(mnemo::row_size(t.type, row) * (n / row), seed++);
    if (!check(w.add_tensor(t.name, t.dims, t.type, data))) return 1;
  }
  return check(w.write(path)) ? 0 : 1;
}

int usage() {
  std::cerr << "usage: gguf_tool write-sample PATH [--alignment N]\n"
               "       gguf_tool dump PATH [--data]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() < 2) return usage();
  if (args[0] == "dump") {
    const bool with_data = args.size() == 3 && args[2] == "--data";
    if (args.size() > 3 || (args.size() == 3 && !with_data)) return usage();
    return dump(args[1], with_data);
  }
  if (args[0] == "write-sample") {
    uint64_t alignment = 64;
    if (args.size() == 4 && args[2] == "--alignment") {
      alignment = std::strtoull(args[3].c_str(), nullptr, 10);
      if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > (1u << 30)) {
        std::cerr << "--alignment must be a power of two\n";
        return 2;
      }
    } else if (args.size() != 2) {
      return usage();
    }
    return write_sample(args[1], alignment);
  }
  return usage();
}
