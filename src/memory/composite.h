// What the composite memories (SwaKvCache: two KvCaches; HybridMemory: a KvCache and a
// RecurrentMemory) share: a sequence operation done on every child, all or nothing; a batch
// validated and split once and planned on every child; child contexts moved in lockstep;
// accounting summed over the children; and CompositeMemory, the base that does these for both.
//
// All or nothing. A composite's sequence operation must change no child when any child refuses
// it (memory.h: "changes nothing" on error). Every child offers, next to each operation, a
// check_* twin that returns the Status the operation would return without doing it, so the
// composite asks every child first and only then applies the operation to each:
//
//   return seq_op_all(SeqAdd{seq, p0, p1, delta}, *base_, *swa_);
//
// A child may be named so that its refusal says which layers refused
// (Named{*swa_, "sliding-window layers"}: "sliding-window layers: <error>").
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mnemo/batch.h"
#include "mnemo/check.h"
#include "mnemo/memory.h"
#include "mnemo/state_io.h"
#include "mnemo/status.h"
#include "mnemo/ubatch.h"

namespace mnemo::composite {

// --- the sequence operations, each as its check and its application --------------------------

/// seq_rm(seq, p0, p1) on one child (memory.h).
struct SeqRm {
  SeqId seq;
  Pos p0, p1;
  template <class M>
  Status check(const M& m) const {
    return m.check_seq_rm(seq, p0, p1);
  }
  template <class M>
  Status apply(M& m) const {
    return m.seq_rm(seq, p0, p1);
  }
};

/// seq_cp(src, dst, p0, p1) on one child.
struct SeqCp {
  SeqId src, dst;
  Pos p0, p1;
  template <class M>
  Status check(const M& m) const {
    return m.check_seq_cp(src, dst, p0, p1);
  }
  template <class M>
  Status apply(M& m) const {
    return m.seq_cp(src, dst, p0, p1);
  }
};

/// seq_keep(seq) on one child.
struct SeqKeep {
  SeqId seq;
  template <class M>
  Status check(const M& m) const {
    return m.check_seq_keep(seq);
  }
  template <class M>
  Status apply(M& m) const {
    return m.seq_keep(seq);
  }
};

/// seq_add(seq, p0, p1, delta) on one child.
struct SeqAdd {
  SeqId seq;
  Pos p0, p1, delta;
  template <class M>
  Status check(const M& m) const {
    return m.check_seq_add(seq, p0, p1, delta);
  }
  template <class M>
  Status apply(M& m) const {
    return m.seq_add(seq, p0, p1, delta);
  }
};

/// seq_div(seq, p0, p1, d) on one child.
struct SeqDiv {
  SeqId seq;
  Pos p0, p1;
  int32_t d;
  template <class M>
  Status check(const M& m) const {
    return m.check_seq_div(seq, p0, p1, d);
  }
  template <class M>
  Status apply(M& m) const {
    return m.seq_div(seq, p0, p1, d);
  }
};

// --- children ----------------------------------------------------------------------------------

/// A child whose refusals carry a context: `context: <the child's message>`.
template <class M>
struct Named {
  M& mem;
  std::string_view context;
};
template <class M>
Named(M&, const char*) -> Named<M>;

/// The memory of a child as passed to seq_op_all: the child itself, or a Named one's memory.
template <class M>
M& child_memory(M& m) {
  return m;
}
template <class M>
M& child_memory(Named<M>& n) {
  return n.mem;
}

/// op's check on one child, with the child's context when it is Named.
template <class Op, class M>
Status check_child(const Op& op, const M& m) {
  return op.check(m);
}
template <class Op, class M>
Status check_child(const Op& op, const Named<M>& n) {
  return op.check(n.mem).with_context(n.context);
}

/// op's check on every child, in order: the first refusal, or OK. Changes nothing.
template <class Op, class... Children>
Status check_all(const Op& op, const Children&... children) {
  Status st;
  ((st.ok() ? void(st = check_child(op, children)) : void()), ...);
  return st;
}

/// The operation on every child, all or nothing: op's check on each (the first refusal is
/// returned and no child changes), then op on each, in order. A child refusing what its check
/// accepted is a bug (CHECK-fails).
template <class Op, class... Children>
Status seq_op_all(const Op& op, Children&&... children) {
  MNEMO_RETURN_IF_ERROR(check_all(op, children...));
  (
      [&](auto& m) {
        const Status st = op.apply(m);
        CHECK(st.ok()) << st.to_string();
      }(child_memory(children)),
      ...);
  return Status();
}

// --- transactions and accounting ------------------------------------------------------------

/// Validates `batch` once for every child (prepare_batch with `limits`, positions continuing
/// `mem`'s sequences) and cuts it with `split` (PreparedBatch -> Result<vector<Ubatch>>): the
/// ubatches every child plans, or the validation / split error (nothing changed).
template <class Split>
Result<std::shared_ptr<const std::vector<Ubatch>>> prepare_and_split(const Batch& batch,
                                                                     const BatchLimits& limits,
                                                                     const Memory& mem,
                                                                     const Split& split) {
  Result<PreparedBatch> pb =
      prepare_batch(batch, limits, [&mem](SeqId s) { return mem.seq_pos_max(s); });
  if (!pb.ok()) return pb.status();
  Result<std::vector<Ubatch>> ubs = split(*pb);
  if (!ubs.ok()) return ubs.status();
  return std::make_shared<const std::vector<Ubatch>>(std::move(ubs).value());
}

/// The context a composite's init_batch returns for a batch that failed validation or split.
inline std::unique_ptr<MemoryContext> invalid_batch(const Status& st) {
  return std::make_unique<MemoryContext>(MemoryStatus::kInvalidBatch, st.message());
}

/// The context a composite's init_batch returns when a child could not plan the ubatches: the
/// child's status, its message after "<layers>: " (the layers that did not fit).
inline std::unique_ptr<MemoryContext> child_failed(const MemoryContext& child,
                                                   std::string_view layers) {
  return std::make_unique<MemoryContext>(child.status(),
                                         std::string(layers) + ": " + child.message());
}

/// A child context as the concrete type its memory is known to return (KvCache::init_full /
/// init_update return KvCacheContext, RecurrentMemory's RecurrentMemoryContext).
template <class T>
std::unique_ptr<T> downcast(std::unique_ptr<MemoryContext> c) {
  return std::unique_ptr<T>(static_cast<T*>(c.release()));
}

/// A composite's state_read reads its children's parts one after the other. When applying, a
/// later part that fails (possible only if the source changed between the passes) leaves the
/// earlier children applied: this empties `applied` too (spec.dst_seq in a sequence restore,
/// everything in a whole one), so a failed restore leaves the destination empty in every child
/// (memory.h). Returns `st`.
template <class M>
Status empty_if_apply_failed(Status st, const StateReadSpec& spec, M& applied) {
  if (!st.ok() && !spec.dry_run) {
    if (spec.scope == state_format::Scope::kSequence) {
      CHECK(applied.seq_rm(spec.dst_seq, -1, -1).ok());
    } else {
      applied.clear();
    }
  }
  return st;
}

/// `more`'s tensors and streams appended to `into`, and its byte totals added.
inline void append_breakdown(MemoryBreakdown& into, MemoryBreakdown more) {
  for (auto& t : more.tensors) into.tensors.push_back(std::move(t));
  for (auto& s : more.streams) into.streams.push_back(std::move(s));
  into.tensor_bytes += more.tensor_bytes;
  into.mapped_bytes += more.mapped_bytes;
}

/// Memory::seq_info of a composite: `primary`'s answer (the child that bounds what the sequence
/// can hold: its stream, types, cells), with `other`'s bytes added; the first error otherwise.
template <class A, class B>
Result<SeqMemoryInfo> seq_info_of(const A& primary, const B& other, SeqId seq) {
  MNEMO_ASSIGN_OR_RETURN(SeqMemoryInfo info, primary.seq_info(seq));
  MNEMO_ASSIGN_OR_RETURN(const SeqMemoryInfo more, other.seq_info(seq));
  info.bytes += more.bytes;
  return info;
}

// --- the transaction ------------------------------------------------------------------------

/// The transaction of a composite memory: one context per child (first / second as the memory
/// orders its children), planned over the same ubatches and moved in lockstep. apply() applies
/// both children's part of the current ubatch in the context's order (a child with nothing to do,
/// kNoUpdate in an update context, is skipped) and rollback() undoes them in the reverse order.
/// A failed composite context (status() not kSuccess) applies nothing and returns its failure.
template <class First, class Second>
class PairContext : public MemoryContext {
 public:
  using FirstContext = First;
  using SecondContext = Second;
  /// Which child's part of a ubatch apply() commits first.
  enum class Order : uint8_t { kFirstThenSecond, kSecondThenFirst };

  std::span<const Ubatch> ubatches() const override { return first_->ubatches(); }
  uint32_t ubatch_index() const override { return first_->ubatch_index(); }
  const Ubatch& ubatch() const override { return first_->ubatch(); }
  bool next() override {
    const bool a = first_->next();
    const bool b = second_->next();
    CHECK(a == b) << "composite memory children out of step";
    return a;
  }
  Status apply() override {
    if (!ok()) return MemoryContext::apply();
    const auto [x, y] = in_apply_order();
    if (x->ok()) MNEMO_RETURN_IF_ERROR(x->apply());
    if (y->ok()) MNEMO_RETURN_IF_ERROR(y->apply());
    return Status();
  }
  void rollback() override {
    const auto [x, y] = in_apply_order();
    y->rollback();
    x->rollback();
  }

 protected:
  PairContext(MemoryStatus status, std::unique_ptr<First> first, std::unique_ptr<Second> second,
              Order order)
      : MemoryContext(status, {}),
        first_(std::move(first)),
        second_(std::move(second)),
        order_(order) {}

  std::unique_ptr<First> first_;
  std::unique_ptr<Second> second_;

 private:
  std::pair<MemoryContext*, MemoryContext*> in_apply_order() const {
    MemoryContext* a = first_.get();
    MemoryContext* b = second_.get();
    return order_ == Order::kFirstThenSecond ? std::pair{a, b} : std::pair{b, a};
  }

  Order order_;
};

// --- the memory ---------------------------------------------------------------------------------

/// Base of a composite memory of two children: what every composite does the same way whatever
/// its children (CRTP). Derived provides, privately (befriending CompositeMemory<Derived>):
///   first(), second()   its children (a KvCache or a RecurrentMemory each), in the order a
///                       sequence operation checks and applies them and a batch is planned;
///   Context             its transaction: a PairContext<first's context, second's context>
///                       whose constructor (status, first's context, second's context) the base
///                       may call;
///   kFirstLayers, kSecondLayers   which layers each child holds, for the message of a batch
///                       that does not fit ("sliding-window layers: ...").
template <class Derived>
class CompositeMemory : public Memory {
 public:
  /// Both children's worst-case views.
  std::unique_ptr<MemoryContext> init_full() override {
    return pair(MemoryStatus::kSuccess, first().init_full(), second().init_full());
  }
  /// On both children, all or nothing (first's refusal before second's).
  Status seq_keep(SeqId seq) override { return seq_op_all(SeqKeep{seq}, first(), second()); }
  Status seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) override {
    return seq_op_all(SeqAdd{seq, p0, p1, delta}, first(), second());
  }
  Status seq_div(SeqId seq, Pos p0, Pos p1, int32_t d) override {
    return seq_op_all(SeqDiv{seq, p0, p1, d}, first(), second());
  }
  /// The lowest position every layer still holds: the larger of the two children's minimums
  /// (a child may have dropped positions the other still holds).
  Pos seq_pos_min(SeqId seq) const override {
    return std::max(first().seq_pos_min(seq), second().seq_pos_min(seq));
  }
  /// The children's sequences (both have the same n_seq_max: the composites' create checks it
  /// or gives both the same config).
  uint32_t n_seq_max() const override { return first().n_seq_max(); }
  /// Empties both children.
  void clear() override {
    first().clear();
    second().clear();
  }

 protected:
  /// init_batch's common part: validates the batch once with `limits`, cuts it with `split`
  /// (PreparedBatch -> Result<vector<Ubatch>>), plans the ubatches on first() then second()
  /// (planning changes nothing) and returns the composite's context, or the first failure:
  /// kInvalidBatch for validation or split, the child's status and message (after the child's
  /// layers) for a child that cannot place them. Nothing changes on failure.
  template <class Split>
  std::unique_ptr<MemoryContext> plan_batch(const Batch& batch, const BatchLimits& limits,
                                            const Split& split) {
    auto ubs = prepare_and_split(batch, limits, *this, split);
    if (!ubs.ok()) return invalid_batch(ubs.status());
    auto a = first().prepare(*ubs);
    if (!a->ok()) return child_failed(*a, Derived::kFirstLayers);
    auto b = second().prepare(*ubs);
    if (!b->ok()) return child_failed(*b, Derived::kSecondLayers);
    return pair(MemoryStatus::kSuccess, std::move(a), std::move(b));
  }

  /// The composite's context over a context of first() and one of second(), of the child
  /// context types Derived::Context holds (KvCache's init_* return KvCacheContext,
  /// RecurrentMemory's RecurrentMemoryContext).
  std::unique_ptr<MemoryContext> pair(MemoryStatus status, std::unique_ptr<MemoryContext> a,
                                      std::unique_ptr<MemoryContext> b) const {
    using Ctx = typename Derived::Context;
    return std::unique_ptr<MemoryContext>(
        new Ctx(status, downcast<typename Ctx::FirstContext>(std::move(a)),
                downcast<typename Ctx::SecondContext>(std::move(b))));
  }

 private:
  auto& first() const { return static_cast<const Derived&>(*this).first(); }
  auto& second() const { return static_cast<const Derived&>(*this).second(); }
};

}  // namespace mnemo::composite
