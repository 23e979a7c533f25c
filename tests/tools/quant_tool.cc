// quant_tool: drives mnemo's scalar reference quantize / dequantize on raw files, for the Python
// tests (tests/python/test_quant.py) that compare them with gguf-py and with ggml itself.
//
//   quant_tool traits
//       one line per known type id: "ID NAME BLOCK_SIZE TYPE_SIZE CAN_DEQUANTIZE CAN_QUANTIZE"
//   quant_tool dequantize TYPE IN OUT N
//       IN holds row_size(TYPE, N) bytes; OUT gets N little-endian float32
//   quant_tool quantize TYPE IN OUT N
//       IN holds N float32; OUT gets row_size(TYPE, N) bytes
//   quant_tool ggml-dequantize LIB TYPE IN OUT N
//   quant_tool ggml-quantize LIB TYPE IN OUT N
//       the same through ggml's own reference functions (dequantize_row_<type>,
//       quantize_row_<type>_ref, ggml_fp16_to_fp32_row, ...), loaded with dlopen() from LIB
//       (a libggml-base.so); used only as an independent reference by the tests.
//
// TYPE is a ggml type name (case-insensitive: "q4_0", "Q4_K", "iq4_nl"). The N elements are
// treated as one row (blocks are independent, so this equals any split into rows). Exit status:
// 0 on success, 1 on a failed conversion or I/O error, 2 on bad usage; errors go to stderr.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "mnemo/quant.h"

namespace {

using mnemo::GgmlType;
using mnemo::Status;

int usage() {
  std::cerr << "usage: quant_tool traits\n"
               "       quant_tool dequantize|quantize TYPE IN OUT N\n"
               "       quant_tool ggml-dequantize|ggml-quantize LIB TYPE IN OUT N\n";
  return 2;
}

bool read_file(const std::string& path, std::vector<uint8_t>* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  out->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return true;
}

bool write_file(const std::string& path, const void* data, size_t size) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  return static_cast<bool>(f);
}

int fail(const std::string& msg) {
  std::cerr << "quant_tool: " << msg << "\n";
  return 1;
}

int print_traits() {
  for (uint32_t id = 0; id < 64; ++id) {
    const auto t = mnemo::type_traits(id);
    if (!t) continue;
    std::cout << id << ' ' << t->name << ' ' << t->block_size << ' ' << t->type_size << ' '
              << (t->can_dequantize ? 1 : 0) << ' ' << (t->can_quantize ? 1 : 0) << '\n';
  }
  return 0;
}

// The row function of ggml for `type` (same ABI for every one: src, dst, element count).
using GgmlRowFn = void (*)(const void* src, void* dst, int64_t n);

GgmlRowFn ggml_row_fn(void* lib, GgmlType type, bool quantize) {
  const std::string name(mnemo::type_name(type));
  std::string sym;
  if (type == GgmlType::F16) {
    sym = quantize ? "ggml_fp32_to_fp16_row" : "ggml_fp16_to_fp32_row";
  } else if (type == GgmlType::BF16) {
    sym = quantize ? "ggml_fp32_to_bf16_row_ref" : "ggml_bf16_to_fp32_row";
  } else {
    sym = quantize ? "quantize_row_" + name + "_ref" : "dequantize_row_" + name;
  }
  return reinterpret_cast<GgmlRowFn>(dlsym(lib, sym.c_str()));
}

int convert(const std::vector<std::string>& args, bool quantize, const char* ggml_lib) {
  const auto type = mnemo::type_from_name(args[0]);
  if (!type) return fail("unknown type '" + args[0] + "'");
  char* end = nullptr;
  const long long n = std::strtoll(args[3].c_str(), &end, 10);
  if (end == args[3].c_str() || *end != '\0') return fail("bad element count '" + args[3] + "'");
  if (Status st = mnemo::check_row_shape(*type, n); !st.ok()) return fail(st.to_string());

  std::vector<uint8_t> in;
  if (!read_file(args[1], &in)) return fail("cannot read " + args[1]);
  const size_t row_bytes = mnemo::row_size(*type, n);
  const size_t float_bytes = static_cast<size_t>(n) * sizeof(float);
  const size_t in_bytes = quantize ? float_bytes : row_bytes;
  const size_t out_bytes = quantize ? row_bytes : float_bytes;
  if (in.size() != in_bytes) {
    return fail(args[1] + " has " + std::to_string(in.size()) + " bytes, expected " +
                std::to_string(in_bytes));
  }
  // Copy into float-aligned storage: block data needs alignof(block) <= alignof(float).
  std::vector<float> in_aligned((in_bytes + 3) / 4);
  std::copy(in.begin(), in.end(), reinterpret_cast<uint8_t*>(in_aligned.data()));
  std::vector<float> out((out_bytes + 3) / 4);

  if (ggml_lib != nullptr) {
    void* lib = dlopen(ggml_lib, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return fail(std::string("dlopen: ") + dlerror());
    GgmlRowFn fn = ggml_row_fn(lib, *type, quantize);
    if (fn == nullptr) return fail("ggml has no row function for " + args[0]);
    fn(in_aligned.data(), out.data(), n);
  } else {
    const Status st = quantize ? mnemo::quantize_row(*type, in_aligned.data(), out.data(), n)
                               : mnemo::dequantize_row(*type, in_aligned.data(), out.data(), n);
    if (!st.ok()) return fail(st.to_string());
  }
  if (!write_file(args[2], out.data(), out_bytes)) return fail("cannot write " + args[2]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "traits" && args.empty()) return print_traits();
  if ((cmd == "dequantize" || cmd == "quantize") && args.size() == 4) {
    return convert(args, cmd == "quantize", nullptr);
  }
  if ((cmd == "ggml-dequantize" || cmd == "ggml-quantize") && args.size() == 5) {
    const std::string lib = args[0];
    args.erase(args.begin());
    return convert(args, cmd == "ggml-quantize", lib.c_str());
  }
  return usage();
}
