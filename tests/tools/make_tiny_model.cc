// make_tiny_model ARCH OUT.gguf [--seed N] [--f32]: writes a tiny random-weight model (see
// tiny_model.h) for tests against the numpy reference forward pass (tests/reference/forward.py)
// and llama.cpp.
// make_tiny_model qwen3moe-bench OUT.gguf [--layers N] [--seed N]: a qwen3moe file with
// Qwen3-30B-A3B's shapes and N blocks (default 2), for benchmarks (write_moe_bench_model).
// make_tiny_model qwen35-bench | qwen35moe-bench OUT.gguf [--layers N]: Qwen3.5-0.8B's and
// Qwen3.5-35B-A3B's shapes (tiny_ssm_model.h).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tiny_model.h"
#include "tiny_ssm_model.h"  // mamba2, granitehybrid, qwen35, qwen35moe

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: make_tiny_model ARCH OUT.gguf [--seed N] [--f32]\n");
    return 2;
  }
  const std::string arch = argv[1];
  if (arch == "mamba2" || arch == "granitehybrid") {
    return mnemo::tools::write_tiny_ssm_model(argc, argv);
  }
  if (arch == "qwen35" || arch == "qwen35moe" || arch == "qwen35-bench" ||
      arch == "qwen35moe-bench") {
    return mnemo::tools::write_tiny_qwen35_model(argc, argv);
  }
  uint32_t seed = 1;
  bool all_f32 = false;
  int layers = 2;
  for (int i = 3; i < argc; ++i) {
    if (std::strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
      seed = uint32_t(std::atoi(argv[++i]));
    else if (std::strcmp(argv[i], "--f32") == 0)
      all_f32 = true;
    else if (std::strcmp(argv[i], "--layers") == 0 && i + 1 < argc)
      layers = std::max(1, std::atoi(argv[++i]));
  }
  mnemo::Status st = arch == "qwen3moe-bench"
                         ? mnemo::testing::write_moe_bench_model(argv[2], seed, layers)
                         : mnemo::testing::write_tiny_model(argv[1], argv[2], seed, all_f32);
  if (!st.ok()) {
    std::fprintf(stderr, "make_tiny_model: %s\n", st.to_string().c_str());
    return 1;
  }
  return 0;
}
