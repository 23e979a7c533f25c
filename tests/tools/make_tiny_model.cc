// make_tiny_model ARCH OUT.gguf [--seed N] [--f32] [--rope] [--layers N]: writes a tiny
// random-weight model with write_tiny_model (tests/support/tiny_model.h lists the
// architectures and the flags' meaning), for the Python tests (numpy reference, llama.cpp
// fixtures, the server on recurrent models) and benchmarks (the *-bench shapes).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "support/tiny_model.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: make_tiny_model ARCH OUT.gguf [--seed N] [--f32] [--rope] [--layers N]\n");
    return 2;
  }
  mnemo::testing::TinyModelOptions options;
  for (int i = 3; i < argc; ++i) {
    if (std::strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
      options.seed = uint32_t(std::atoi(argv[++i]));
    else if (std::strcmp(argv[i], "--f32") == 0)
      options.all_f32 = true;
    else if (std::strcmp(argv[i], "--rope") == 0)
      options.rope = true;
    else if (std::strcmp(argv[i], "--layers") == 0 && i + 1 < argc)
      options.n_layer = std::max(1, std::atoi(argv[++i]));
  }
  const mnemo::Status st = mnemo::testing::write_tiny_model(argv[1], argv[2], options);
  if (!st.ok()) {
    std::fprintf(stderr, "make_tiny_model: %s\n", st.to_string().c_str());
    return 1;
  }
  return 0;
}
