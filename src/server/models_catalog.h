// The models a router serves (`mnemo serve` without -m): every GGUF file of --models-dir and
// the sections of --models-preset, llama-server's models.ini format:
//
//   [*]                      ; optional: flags for every model
//   c = 4096
//   [coder]                  ; a model named "coder"
//   model = /models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
//   ctx-size = 8192          ; the model's own `mnemo serve` flags, without dashes
//   jinja = true             ; true: a flag alone; false: left out
//
// A key of one character becomes "-k", a longer one "--key"; `model` (or `m`) names the file.
// A preset section named as a --models-dir file adds its flags to that file's model. Parsed with
// inih (Debian's libinih): a line starting with `;` or `#` is a comment, and so is the rest of
// a line after " ;"; keys and values are trimmed.
#pragma once

#include <string>
#include <vector>

#include "mnemo/status.h"

namespace mnemo::server {

/// One model of a router.
struct ModelEntry {
  std::string name;               // file stem (--models-dir) or section name (--models-preset)
  std::string path;               // the GGUF file
  std::vector<std::string> args;  // its flags from the preset, as command-line arguments
  std::string source;             // "models_dir" or "preset"
};

/// The models of `dir` (non-recursive: regular files, or links to them, named *.gguf) and of
/// the INI file `preset`, either may be empty; sorted by name. Errors: InvalidArgument for a
/// directory that cannot be listed, a preset that cannot be read or parsed (its line named), a
/// preset section without `model`, or no model at all.
Result<std::vector<ModelEntry>> list_models(const std::string& dir, const std::string& preset);

}  // namespace mnemo::server
