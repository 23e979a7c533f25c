// make_tiny_model ARCH OUT.gguf [--seed N] [--f32]: writes a tiny random-weight model (see
// tiny_model.h) for tests against the numpy reference forward pass (tests/reference/forward.py).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tiny_model.h"
#include "tiny_ssm_model.h"  // mamba2, granitehybrid

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: make_tiny_model ARCH OUT.gguf [--seed N] [--f32]\n");
    return 2;
  }
  const std::string arch = argv[1];
  if (arch == "mamba2" || arch == "granitehybrid") {
    return mnemo::tools::write_tiny_ssm_model(argc, argv);
  }
  uint32_t seed = 1;
  bool all_f32 = false;
  for (int i = 3; i < argc; ++i) {
    if (std::strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
      seed = uint32_t(std::atoi(argv[++i]));
    else if (std::strcmp(argv[i], "--f32") == 0)
      all_f32 = true;
  }
  mnemo::Status st = mnemo::testing::write_tiny_model(argv[1], argv[2], seed, all_f32);
  if (!st.ok()) {
    std::fprintf(stderr, "make_tiny_model: %s\n", st.to_string().c_str());
    return 1;
  }
  return 0;
}
