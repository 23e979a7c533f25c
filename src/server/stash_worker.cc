// StashWorker (stash_worker.h): a queue under one mutex, a thread, and a count of pending jobs
// per sequence.
#include "server/stash_worker.h"

namespace mnemo::server {

StashWorker::StashWorker(std::function<void()> on_done)
    : on_done_(std::move(on_done)), thread_([this] { run(); }) {}

StashWorker::~StashWorker() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
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
  done_cv_.wait(lk, [&] { return pending_.count(seq) == 0; });
}

void StashWorker::wait_all() {
  std::unique_lock<std::mutex> lk(mu_);
  done_cv_.wait(lk, [&] { return pending_.empty(); });
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
    done_cv_.notify_all();
    lk.unlock();
    if (on_done_) on_done_();
    lk.lock();
  }
}

}  // namespace mnemo::server
