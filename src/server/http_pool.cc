#include "server/http_pool.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace mnemo::server {
namespace {

// The task queue of new_elastic_pool (http_pool.h).
class ElasticPool : public httplib::TaskQueue {
 public:
  ElasticPool(size_t n_core, size_t n_max) : n_core_(n_core), n_max_(std::max(n_core, n_max)) {
    std::lock_guard<std::mutex> lk(mu_);
    for (size_t i = 0; i < n_core_; ++i) spawn(/*extra=*/false);
  }

  void enqueue(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lk(mu_);
    jobs_.push_back(std::move(fn));
    if (jobs_.size() > idle_ && live_ < n_max_) spawn(/*extra=*/true);
    cv_.notify_one();
  }

  // Runs the queued connections, then returns when every thread has ended.
  void shutdown() override {
    std::unique_lock<std::mutex> lk(mu_);
    shutdown_ = true;
    cv_.notify_all();
    ended_.wait(lk, [&] { return live_ == 0; });
  }

 private:
  static constexpr auto kIdle = std::chrono::seconds(10);

  // Under mu_. The threads are detached: shutdown() waits for live_ to reach 0 instead.
  void spawn(bool extra) {
    ++live_;
    std::thread([this, extra] { work(extra); }).detach();
  }

  void work(bool extra) {
    std::unique_lock<std::mutex> lk(mu_);
    while (true) {
      ++idle_;
      const auto ready = [&] { return shutdown_ || !jobs_.empty(); };
      const bool got = extra ? cv_.wait_for(lk, kIdle, ready) : (cv_.wait(lk, ready), true);
      --idle_;
      if (jobs_.empty() && (shutdown_ || !got)) break;
      std::function<void()> fn = std::move(jobs_.front());
      jobs_.pop_front();
      lk.unlock();
      fn();
      lk.lock();
    }
    --live_;
    ended_.notify_all();  // under mu_: shutdown() cannot return (and free *this) before unlock
  }

  const size_t n_core_, n_max_;
  std::mutex mu_;
  std::condition_variable cv_, ended_;
  std::deque<std::function<void()>> jobs_;
  size_t live_ = 0, idle_ = 0;
  bool shutdown_ = false;
};

}  // namespace

httplib::TaskQueue* new_elastic_pool(size_t n_core, size_t n_max) {
  return new ElasticPool(n_core, n_max);
}

}  // namespace mnemo::server
