// StashWorker (stash_worker.h): a queue under one mutex, a thread, and a count of pending jobs
// per sequence.
#include "server/stash_worker.h"

#include <utility>

namespace mnemo::server {

StashWorker::StashWorker(std::function<void()> on_done)
    : on_done_(std::move(on_done)), thread_([this] { run(); }) {}

StashWorker::~StashWorker() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    paced_ = false;
  }
  cv_.notify_all();
  budget_cv_.notify_all();
  thread_.join();
}

void StashWorker::submit(SeqId seq, std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.emplace_back(seq, std::move(job));
    ++pending_[seq];
  }
  cv_.notify_all();
}

bool StashWorker::pending(SeqId seq) const {
  std::lock_guard<std::mutex> lk(mu_);
  return pending_.count(seq) != 0;
}

bool StashWorker::any_pending() const {
  std::lock_guard<std::mutex> lk(mu_);
  return !pending_.empty();
}

void StashWorker::wait(SeqId seq) {
  std::unique_lock<std::mutex> lk(mu_);
  // The caller waits for it, so it runs freely meanwhile.
  const bool paced = std::exchange(paced_, false);
  budget_cv_.notify_all();
  done_cv_.wait(lk, [&] { return pending_.count(seq) == 0; });
  paced_ = paced;
}

void StashWorker::wait_all() {
  std::unique_lock<std::mutex> lk(mu_);
  const bool paced = std::exchange(paced_, false);
  budget_cv_.notify_all();
  done_cv_.wait(lk, [&] { return pending_.empty(); });
  paced_ = paced;
}

void StashWorker::set_paced(bool paced) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    paced_ = paced;
  }
  budget_cv_.notify_all();
}

void StashWorker::run_slice(size_t bytes) {
  std::unique_lock<std::mutex> lk(mu_);
  budget_ = bytes;
  budget_cv_.notify_all();
  // Only a job that waits for budget is run here; one busy with something else (a gate, its
  // end) takes the budget when it gets to its next write, beside the loop.
  if (!waiting_for_budget_) return;
  waiting_for_budget_ = false;
  const uint64_t done = jobs_done_;
  done_cv_.wait(lk, [&] { return waiting_for_budget_ || jobs_done_ != done || !paced_; });
}

bool StashWorker::waits_for_budget() const {
  std::lock_guard<std::mutex> lk(mu_);
  return waiting_for_budget_;
}

void StashWorker::before_write(size_t n) {
  std::unique_lock<std::mutex> lk(mu_);
  if (paced_ && budget_ == 0) {
    waiting_for_budget_ = true;
    done_cv_.notify_all();
    budget_cv_.wait(lk, [&] { return !paced_ || stop_ || budget_ > 0; });
    waiting_for_budget_ = false;
  }
  budget_ = budget_ > n ? budget_ - n : 0;
}

void StashWorker::run() {
  std::unique_lock<std::mutex> lk(mu_);
  while (true) {
    cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_, and every job ran
    auto [seq, job] = std::move(queue_.front());
    queue_.pop_front();
    lk.unlock();
    job();
    lk.lock();
    if (auto it = pending_.find(seq); it != pending_.end() && --it->second == 0) {
      pending_.erase(it);
    }
    ++jobs_done_;
    done_cv_.notify_all();
    lk.unlock();
    if (on_done_) on_done_();
    lk.lock();
  }
}

}  // namespace mnemo::server
