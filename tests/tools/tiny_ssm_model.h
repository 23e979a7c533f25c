// make_tiny_model's recurrent architectures: tiny_ssm_model.cc describes the files.
#pragma once

namespace mnemo::tools {

/// make_tiny_model ARCH OUT.gguf [--seed N] [--f32] [--rope] for ARCH mamba2 / granitehybrid:
/// writes the file and returns the process exit code (0 on success).
int write_tiny_ssm_model(int argc, char** argv);

}  // namespace mnemo::tools
