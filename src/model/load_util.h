// Helpers of the model loaders (model.cc, model_ssm.cc, model_qwen35.cc): typed reads of
// {arch}.* hyper-parameters and binding of a GGUF tensor to a Weight with its shape checked.
#pragma once

#include <cstdint>
#include <string>

#include "mnemo/gguf.h"
#include "mnemo/model.h"
#include "mnemo/status.h"

namespace mnemo::model_load {

/// Reads the unsigned key "{arch}.{suffix}" into *out. Absent: InvalidArgument when `required`,
/// else *out is left as it is. Present with another type, or above 2^32 - 1: InvalidArgument.
Status read_u32_key(const gguf::File& f, const char* suffix, uint32_t* out, bool required);

/// Reads the optional float key "{arch}.{suffix}" into *out (left as it is when absent).
/// InvalidArgument for another type or a value that is not finite.
Status read_f32_key(const gguf::File& f, const char* suffix, float* out);

/// The vocabulary size into *out: "{arch}.vocab_size" (InvalidArgument "bad vocab_size" unless
/// an unsigned in [1, 2^24]), else the length of the tokenizer's list "tokenizer.ggml.tokens";
/// with neither, *out is left as it is (the loader then takes token_embd's rows).
Status read_n_vocab(const gguf::File& f, uint32_t* out);

/// Binds tensor `name` to *out, checking that its shape is [ne0, ne1] (ne1: the product of the
/// dimensions after the first; 1 for vectors). Absent: InvalidArgument when `required`, else
/// *out stays absent. A wrong shape is InvalidArgument naming the tensor; a type mnemo cannot
/// compute with (or, with `f32_only`, any type but f32) is NotSupported.
Status bind_tensor(const gguf::File& f, const std::string& name, int64_t ne0, int64_t ne1,
                   bool required, bool f32_only, Weight* out);

}  // namespace mnemo::model_load
