// StashWorker: the thread that serializes finished slots' sequences into the prompt cache and
// the store, so the engine's loop never waits for a long context to be written (docs/design.md
// §3.9). Used by PromptReuse.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include "mnemo/batch.h"

namespace mnemo::server {

/// One thread running stash jobs in submission order. A job reads one sequence's state; the
/// caller promises that nothing changes that sequence while the job is pending (it asks
/// pending() before changing it, or wait()s), and that the memory allows the read beside its
/// other work (Memory::seq_isolated). Thread-safe.
class StashWorker {
 public:
  /// Starts the thread. `on_done` runs on it after every job (the engine's loop wakes and
  /// admits the requests that waited for that sequence).
  explicit StashWorker(std::function<void()> on_done);
  /// Runs the jobs still queued, then joins the thread.
  ~StashWorker();
  StashWorker(const StashWorker&) = delete;
  StashWorker& operator=(const StashWorker&) = delete;

  /// Queues `job`, which reads sequence `seq`.
  void submit(SeqId seq, std::function<void()> job);
  /// Whether a job of `seq` is queued or running.
  bool pending(SeqId seq) const;
  /// Whether any job is queued or running.
  bool any_pending() const;
  /// Blocks until no job of `seq` is queued or running.
  void wait(SeqId seq);
  /// Blocks until every job queued so far has run.
  void wait_all();

  /// Pacing, for when the thread would compete with the decode for cores and memory bandwidth:
  /// while paced, a job's writes (before_write) wait for budget that run_slice grants, so the
  /// loop copies a slice per step instead of the whole state at once or beside its compute;
  /// unpaced (the loop idle, or waiting for a stash) they run freely. Loop thread.
  void set_paced(bool paced);
  /// Grants the running job `bytes` of writes. When it waits for budget, runs it: returns once
  /// it waits again or its job ended; otherwise (no job, or one busy before or after its
  /// writes) returns at once. Loop thread.
  void run_slice(size_t bytes);
  /// Called by a job before it writes `n` bytes: waits while paced and out of budget. The job's
  /// thread.
  void before_write(size_t n);
  /// Whether the running job waits in before_write for budget.
  bool waits_for_budget() const;

 private:
  void run();

  std::function<void()> on_done_;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // a job queued, or stop_
  std::condition_variable done_cv_;  // a job ran
  std::deque<std::pair<SeqId, std::function<void()>>> queue_;
  std::unordered_map<SeqId, uint32_t> pending_;  // queued or running jobs per sequence
  bool stop_ = false;
  bool paced_ = false;
  size_t budget_ = 0;                // bytes the running job may still write while paced
  bool waiting_for_budget_ = false;  // the running job waits in before_write
  uint64_t jobs_done_ = 0;
  std::condition_variable budget_cv_;  // budget granted, pacing off, or stop_
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace mnemo::server
