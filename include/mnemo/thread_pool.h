// A small fixed pool of threads for data-parallel kernels (matmul rows, attention heads).
//
//   ThreadPool pool(2);                       // the caller + 1 worker, created once
//   pool.parallel_for(n_tasks, [&](int64_t task, int thread) { ... });
//
// Threads are created once, in the constructor, and reused by every call: a call costs a few
// atomic operations, no thread creation and no allocation. Between calls the workers spin for a
// short while (spin_us, default 1000 us) because in inference the next call comes within
// microseconds; after that they sleep on a condition variable until the next call.
//
// A call returns as soon as every task has finished: it waits only for the threads that took a
// task, never for an idle worker that has not woken up yet (on an oversubscribed machine a
// preempted worker would otherwise stall every call by a scheduler time slice).
//
// Thread-safety: one call at a time. parallel_for must not be called concurrently from two
// threads nor from inside a task (CHECKed), except on a shared pool (set_shared): there calls
// from several threads (several models' contexts) take turns, whole call by whole call. The
// destructor joins the workers.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace mnemo {

class ThreadPool {
 public:
  /// A task body: ctx is the caller's closure, task in [0, n_tasks), thread in [0, n_threads)
  /// (0 is the calling thread). Distinct tasks may run on the same thread, one after another.
  using TaskFn = void (*)(void* ctx, int64_t task, int thread);

  /// n_threads >= 1 threads in all, the caller included (n_threads - 1 workers are started).
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// Threads taking part in each call, the caller included.
  int n_threads() const { return n_threads_; }

  /// A pool several contexts use (a router's models): run() then takes a lock, so calls from
  /// different threads take turns instead of CHECK-failing. A call from inside a task still
  /// must not happen (it would wait for itself). Set before the pool is handed out.
  void set_shared(bool shared) { shared_ = shared; }

  /// How long idle workers spin before they sleep, in microseconds (0: sleep at once).
  void set_spin_us(int64_t spin_us) { spin_us_.store(spin_us, std::memory_order_relaxed); }

  /// Runs fn(task, thread) for every task in [0, n_tasks) and returns when all are done. Tasks
  /// are handed out dynamically (an atomic counter), so uneven tasks balance themselves. With
  /// one thread or one task, runs inline on the caller.
  template <class F>
  void parallel_for(int64_t n_tasks, F&& fn) {
    if (n_tasks <= 0) return;
    if (n_threads_ == 1 || n_tasks == 1) {
      for (int64_t i = 0; i < n_tasks; ++i) fn(i, 0);
      return;
    }
    using Fn = std::remove_reference_t<F>;
    run(
        n_tasks,
        [](void* ctx, int64_t task, int thread) { (*static_cast<Fn*>(ctx))(task, thread); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

  /// The untyped form of parallel_for. n_tasks < 2^20.
  void run(int64_t n_tasks, TaskFn fn, void* ctx);

 private:
  void worker_main(int thread);
  void run_tasks(int thread);

  const int n_threads_;
  std::vector<std::thread> workers_;

  // The current job. fn_ / ctx_ are written by run() before work_ is published (release); a
  // thread reads them only after claiming a task from work_ (acquire), and the job cannot
  // finish (so they cannot change) before that task is done.
  TaskFn fn_ = nullptr;
  void* ctx_ = nullptr;

  // [job serial: 24 bits][n_tasks: 20 bits][next task: 20 bits]. Tasks are claimed with a CAS
  // that bumps `next task`; the serial makes a stale CAS from a previous job fail.
  alignas(64) std::atomic<uint64_t> work_{0};
  alignas(64) std::atomic<int64_t> n_done_{0};       // tasks of the current job finished
  alignas(64) std::atomic<uint32_t> generation_{0};  // bumped once per job: wakes workers
  uint64_t serial_ = 0;                              // caller-owned job counter
  std::atomic<int> n_sleeping_{0};                   // workers blocked on wake_
  std::mutex wake_mu_;                               // guards the sleep / wake handshake
  std::condition_variable wake_;
  std::atomic<bool> in_call_{false};  // guards against nested / concurrent use
  bool shared_ = false;               // set_shared: callers take turns on call_mu_
  std::mutex call_mu_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> spin_us_{1000};
};

}  // namespace mnemo
