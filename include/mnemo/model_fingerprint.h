// model_fingerprint(): what a state file records to recognise the model it belongs to
// (include/mnemo/state.h; definition of the hash: docs/formats/state.md, "Model fingerprint").
#pragma once

#include "mnemo/model.h"
#include "mnemo/state.h"

namespace mnemo {

/// The fingerprint of a loaded model: its architecture name, per-layer K/V row widths
/// (n_embd_k_gqa / n_embd_v_gqa of every layer) and hparams_hash = XXH3-64 (seed 0) of a
/// canonical little-endian serialization of the hyper-parameters and of every tensor's name,
/// type and shape, in file order (exact byte layout in the doc). Tensor data is not hashed, so
/// two fine-tunes with identical shapes share a fingerprint. Cost: O(number of tensors).
/// Deterministic across runs and machines.
ModelFingerprint model_fingerprint(const Model& model);

}  // namespace mnemo
