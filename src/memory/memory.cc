#include "mnemo/memory.h"

#include <cstdio>
#include <string>

namespace mnemo {

std::string_view memory_status_name(MemoryStatus s) {
  switch (s) {
    case MemoryStatus::kSuccess:
      return "success";
    case MemoryStatus::kNoUpdate:
      return "no_update";
    case MemoryStatus::kFailedPrepare:
      return "failed_prepare";
    case MemoryStatus::kFailedCompute:
      return "failed_compute";
    case MemoryStatus::kInvalidBatch:
      return "invalid_batch";
  }
  return "unknown";
}

const Ubatch& MemoryContext::ubatch() const {
  static const Ubatch kEmpty;
  return kEmpty;
}

Status MemoryContext::apply() {
  if (ok()) return Status();
  const std::string m = "apply() on a memory context with status " +
                        std::string(memory_status_name(status_)) +
                        (message_.empty() ? std::string() : ": " + message_);
  return status_ == MemoryStatus::kFailedPrepare ? Status::no_space(m)
                                                 : Status::invalid_argument(m);
}

void MemoryBreakdown::add_stream(Stream stream, std::vector<Tensor> stream_tensors) {
  stream.tensor_bytes = 0;
  for (Tensor& t : stream_tensors) {
    t.part = stream.part;
    t.stream = stream.stream;
    t.n_cells = stream.n_cells;
    stream.tensor_bytes += t.bytes;
    tensors.push_back(std::move(t));
  }
  tensor_bytes += stream.tensor_bytes;
  mapped_bytes += stream.mapped_bytes;
  streams.push_back(std::move(stream));
}

std::string MemoryBreakdown::to_string() const {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-8s %6s %8s %8s %8s %-6s %-6s %14s %14s\n", "part", "stream",
                "cells", "used", "free", "k_type", "v_type", "tensor_bytes", "mapped_bytes");
  out += line;
  for (const Stream& s : streams) {
    std::snprintf(line, sizeof line, "%-8s %6u %8u %8u %8u %-6s %-6s %14zu %14zu\n", s.part.c_str(),
                  s.stream, s.n_cells, s.used, s.free, std::string(type_name(s.k_type)).c_str(),
                  std::string(type_name(s.v_type)).c_str(), s.tensor_bytes, s.mapped_bytes);
    out += line;
  }
  std::snprintf(line, sizeof line, "total: %zu tensor bytes in %zu tensors, %zu bytes mapped\n",
                tensor_bytes, tensors.size(), mapped_bytes);
  out += line;
  return out;
}

}  // namespace mnemo
