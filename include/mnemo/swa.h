// Sliding-window attention: which positions a window hides (SwaType, is_masked_swa). Shared by
// the model's hyper-parameters (which layers use a window, of what kind) and the memory (which
// cells a window masks and may reuse), without either including the other.
#pragma once

#include <cstdint>
#include <string_view>

#include "mnemo/batch.h"  // Pos

namespace mnemo {

/// The kind of sliding window of a model's local layers (GGUF metadata of the architecture).
enum class SwaType : uint8_t {
  kNone = 0,  // full attention
  kStandard,  // a token at p sees positions (p - n_swa, p]
  kChunked,   // a token at p sees positions [(p / n_swa) * n_swa, p]
};
std::string_view swa_type_name(SwaType t);

/// True when the window hides a cell at pos_cell from a token at pos_token (see SwaType).
inline bool is_masked_swa(SwaType t, uint32_t n_swa, Pos pos_cell, Pos pos_token) {
  switch (t) {
    case SwaType::kNone:
      return false;
    case SwaType::kStandard:
      return static_cast<int64_t>(pos_token) - pos_cell >= static_cast<int64_t>(n_swa);
    case SwaType::kChunked:
      return pos_cell < (pos_token / static_cast<Pos>(n_swa)) * static_cast<Pos>(n_swa);
  }
  return false;
}

}  // namespace mnemo
