// PlannedContext: what the transactions of the two basic memories (KvCacheContext,
// RecurrentMemoryContext) share: the ubatches init_batch planned, which a composite's children
// share, and the current one (module-private).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "mnemo/memory.h"
#include "mnemo/ubatch.h"

namespace mnemo {

/// A MemoryContext over a planned list of ubatches, walked in order by next(). Without a list
/// (a failed or full context) it has no ubatch.
class PlannedContext : public MemoryContext {
 public:
  std::span<const Ubatch> ubatches() const override {
    if (!ubatches_) return {};
    return {ubatches_->data(), ubatches_->size()};
  }
  uint32_t ubatch_index() const override { return cur_; }
  const Ubatch& ubatch() const override {
    if (!ubatches_ || ubatches_->empty()) return MemoryContext::ubatch();
    return (*ubatches_)[cur_];
  }
  bool next() override {
    if (!ubatches_ || cur_ + 1 >= ubatches_->size()) return false;
    ++cur_;
    return true;
  }

 protected:
  PlannedContext(MemoryStatus status, std::string message)
      : MemoryContext(status, std::move(message)) {}

  std::shared_ptr<const std::vector<Ubatch>> ubatches_;  // null: no ubatch
  uint32_t cur_ = 0;                                     // the current ubatch
};

}  // namespace mnemo
