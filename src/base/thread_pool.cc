// ThreadPool: spin-then-sleep workers around one generation counter (see thread_pool.h).
#include "mnemo/thread_pool.h"

#include <chrono>

#include "mnemo/check.h"

namespace mnemo {
namespace {

// One polite busy-wait step: tells the core we are spinning (frees the sibling hyper-thread and
// saves power) without giving up the time slice.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#else
  std::this_thread::yield();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads) {
  CHECK(n_threads >= 1) << "ThreadPool needs at least one thread, got " << n_threads;
  workers_.reserve(n_threads - 1);
  for (int t = 1; t < n_threads; ++t) workers_.emplace_back([this, t] { worker_main(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    generation_.fetch_add(1, std::memory_order_seq_cst);
  }
  wake_.notify_all();
  for (std::thread& w : workers_) w.join();
}

namespace {
constexpr uint64_t kFieldBits = 20;
constexpr uint64_t kFieldMask = (uint64_t{1} << kFieldBits) - 1;
}  // namespace

void ThreadPool::run_tasks(int thread) {
  for (;;) {
    uint64_t v = work_.load(std::memory_order_acquire);
    uint64_t task;
    for (;;) {
      task = v & kFieldMask;
      if (task >= ((v >> kFieldBits) & kFieldMask)) return;  // all tasks claimed
      if (work_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        break;
      }
    }
    fn_(ctx_, static_cast<int64_t>(task), thread);
    n_done_.fetch_add(1, std::memory_order_release);
  }
}

void ThreadPool::run(int64_t n_tasks, TaskFn fn, void* ctx) {
  if (n_tasks <= 0) return;
  CHECK(n_tasks <= static_cast<int64_t>(kFieldMask)) << "ThreadPool::run: too many tasks";
  std::unique_lock<std::mutex> turn(call_mu_, std::defer_lock);
  if (shared_) turn.lock();
  CHECK(!in_call_.exchange(true, std::memory_order_acquire))
      << "ThreadPool::run called concurrently or from inside a task";
  fn_ = fn;
  ctx_ = ctx;
  n_done_.store(0, std::memory_order_relaxed);
  serial_ = (serial_ + 1) & ((uint64_t{1} << 24) - 1);
  work_.store((serial_ << (2 * kFieldBits)) | (static_cast<uint64_t>(n_tasks) << kFieldBits),
              std::memory_order_release);
  // seq_cst pairs with the workers' seq_cst n_sleeping_ increment: either we see the sleeper
  // and notify (under the mutex, so it is already waiting or has not checked the generation
  // yet), or the sleeper's check, which comes after its increment, sees the new generation.
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (n_sleeping_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(wake_mu_); }
    wake_.notify_all();
  }

  run_tasks(0);
  // Only tasks still running on other threads remain; they finish within microseconds unless
  // their thread was preempted, and then yielding lets it have this core.
  for (uint32_t i = 1; n_done_.load(std::memory_order_acquire) != n_tasks; ++i) {
    if ((i & 1023) == 0) {
      std::this_thread::yield();
    } else {
      cpu_relax();
    }
  }
  in_call_.store(false, std::memory_order_release);
}

void ThreadPool::worker_main(int thread) {
  // Generation 0 is "no job yet". Not a load: a job posted before this thread got going must
  // still be seen as new.
  uint32_t seen = 0;
  for (;;) {
    // Spin for spin_us, checking the clock only every 64 steps, then sleep.
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    const int64_t spin_us = spin_us_.load(std::memory_order_relaxed);
    uint32_t g = generation_.load(std::memory_order_acquire);
    for (uint32_t i = 1; g == seen; ++i) {
      if ((i & 63) == 0 &&
          std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count() >=
              spin_us) {
        std::unique_lock<std::mutex> lock(wake_mu_);
        n_sleeping_.fetch_add(1, std::memory_order_seq_cst);
        wake_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != seen; });
        n_sleeping_.fetch_sub(1, std::memory_order_relaxed);
      } else {
        cpu_relax();
      }
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load(std::memory_order_relaxed)) return;
    run_tasks(thread);
  }
}

}  // namespace mnemo
