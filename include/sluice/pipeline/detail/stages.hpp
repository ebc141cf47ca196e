// The pipeline's scheduler: three stage threads (encode, exchange, apply), the queues and
// per-bucket progress counters that order them, the first failure, and the telemetry they emit.
// It knows nothing of codecs, optimizers or transports (the pipeline hands it three loops), so it
// is compiled once for every pipeline type.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include <sluice/config.hpp>
#include <sluice/core/element.hpp>
#include <sluice/core/error.hpp>
#include <sluice/feedback/state.hpp>
#include <sluice/pipeline/concepts.hpp>
#include <sluice/pipeline/detail/scheduling.hpp>
#include <sluice/pipeline/options.hpp>

#if SLUICE_HAS_OPENMP
#include <omp.h>
#endif

namespace sluice::detail::pipeline {

/// Type-erased telemetry sink (one virtual call per sample).
struct sink_base {
  virtual ~sink_base() = default;
  virtual void record(stage_sample const&) noexcept = 0;
  virtual void record(step_report const&) noexcept = 0;
};
template <TelemetrySink S>
struct sink_ref final : sink_base {
  S* s;
  explicit sink_ref(S& x) noexcept : s(&x) {}
  void record(stage_sample const& x) noexcept override { s->record(x); }
  void record(step_report const& x) noexcept override { s->record(x); }
};

/// One unit of stage work: bucket `bucket` of step `step`.
struct work {
  std::uint64_t step = 0;
  std::size_t bucket = 0;
};

/// What a bucket has done: steps whose gradient was read / encoded / exchanged / applied, the
/// update whose compensated view is computed, and the figures of the last of each (the step
/// report's terms).
struct bucket_progress {
  std::uint64_t read = 0, encoded = 0, exchanged = 0, applied = 0, viewed = 0;
  std::size_t dense_bytes = 0, encoded_bytes = 0, sent_bytes = 0;
  double encode_s = 0, exchange_s = 0, apply_s = 0, residual_sq = 0;
};

/// What the exchange thread does with bucket b of a step: run it, skip it (a restore put the
/// bucket past that step), or stop.
enum class exchange_turn : std::uint8_t { run, skip, stop };

/// The encode thread's jobs: read a bucket's gradient out of the trainer's memory (first: the
/// trainer waits for it), or encode it.
enum class encode_job : std::uint8_t { read, encode };
/// The apply thread's jobs: apply a bucket's sum, or compute its compensated parameters (the view
/// the trainer will be handed when staleness compensation is on).
enum class apply_job : std::uint8_t { apply, view };

/// Sum of squares of a feedback slice's first buffer (the residual): step_report::residual_norm.
SLUICE_DECL double squared_norm(feedback_slice const& s, std::size_t buffers);

using clock = std::chrono::steady_clock;
inline double seconds_since(clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); }

/// Values the trainer's thread sets as a step begins and the stage threads read (the codec in
/// force, the batch sizes): steps in flight are at most staleness + 2 <= 4 apart, and step - 4 has
/// left the exchange.
template <class V>
class step_ring {
 public:
  void set(std::uint64_t step, V v) {
    std::lock_guard lock(m_);
    ring_[step % ring_.size()] = std::move(v);
  }
  [[nodiscard]] V get(std::uint64_t step) const {
    std::lock_guard lock(m_);
    return ring_[step % ring_.size()];
  }

 private:
  mutable std::mutex m_;
  std::array<V, 4> ring_{};
};

/// The scheduler. Thread-safety: the trainer's calls (push_encode, wait_*, publish, restore) come
/// from one thread; the stage calls from the stage threads it runs; everything shared is guarded
/// by one mutex and one condition variable.
class stages {
 public:
  stages() = default;
  stages(stages const&) = delete;
  stages& operator=(stages const&) = delete;
  ~stages();

  /// Sizes the counters for `dense_bytes.size()` buckets; before start(). `view_lag` > 0: the
  /// apply thread computes each update's compensated view once the gradients of the `view_lag`
  /// steps after it are read (the staleness; 0: no views).
  void reset(std::span<std::size_t const> dense_bytes, int rank, bool measure_residual, unsigned view_lag);

  /// Starts one thread per loop (encode, exchange, apply), each limited to `kernel_threads`
  /// OpenMP threads when > 0 and scheduled as `scheduling` says. A loop returns when told to stop
  /// (its waits return false); a throw is the pipeline's failure, rethrown by the trainer's next call.
  void start(std::array<std::function<void()>, 3> loops, int kernel_threads, stage_scheduling const& scheduling);
  void stop();
  void fail(std::exception_ptr e);
  void rethrow_failure();

  // --- the trainer's side --------------------------------------------------------------------

  /// Buckets whose gradients are all in: the encode thread may read (`read`; else they count as
  /// read now: the encode reads them where they lie), then encode them.
  void push_encode(std::uint64_t step, std::span<std::size_t const> buckets, bool read = true);
  /// Waits until every bucket's gradient of steps [0, steps) was read (the trainer's gradient
  /// memory is its own again).
  void wait_read(std::uint64_t steps, std::uint64_t trainer_step);
  /// Waits until every bucket's compensated view of update `update` is computed.
  void wait_viewed(std::uint64_t update, std::uint64_t trainer_step);
  /// Waits until every bucket has encoded `steps` steps (its gradient buffer is free again).
  void wait_encoded(std::uint64_t steps, std::uint64_t trainer_step);
  /// Waits until every bucket has applied `updates` steps.
  void wait_applied(std::uint64_t updates, std::uint64_t trainer_step);
  /// The trainer holds `updates` updates: the apply of step `updates` may begin.
  void publish(std::uint64_t updates);
  /// Waits until no stage can go on without the trainer: steps [0, steps) encoded and exchanged,
  /// every apply the published count allows done.
  void wait_idle(std::uint64_t steps);
  /// A restore: every bucket has encoded and exchanged `steps` steps; those in `pending` have not
  /// applied the last one yet (their sum is queued for the apply thread).
  void restore(std::uint64_t steps, std::uint64_t published, std::span<std::uint8_t const> pending);

  // --- the stage threads' side ---------------------------------------------------------------

  /// The encode thread's next job: a gradient to read, else a bucket to encode once the frame of
  /// its previous step has left (its gradient was read: reads go first, in the same order);
  /// false on stop.
  bool next_encode(work& w, encode_job& job);
  void read(work w);
  /// A trainer's call is failing: waits until no read of its gradients runs or will run (they are
  /// all read, or the stages stopped), so the trainer may free them as the error unwinds.
  void drain_reads();
  void encoded(work w, std::size_t bytes, double seconds, double residual_sq);
  /// Waits until bucket b of `step` is encoded and its previous step applied (its sum buffer is
  /// free), or was restored past.
  exchange_turn next_exchange(std::uint64_t step, std::size_t b);
  void exchanged(work w, std::size_t sent, double seconds);
  /// The apply thread's next job: a view to compute (w.step: the update, which bucket w.bucket
  /// holds, not yet published, the gradients of the view_lag steps from it read), else the next
  /// exchanged bucket whose step the trainer's published parameters allow; false on stop.
  bool next_apply(work& w, apply_job& job);
  void viewed(work w);
  /// Bucket w.bucket applied step w.step; the step's report goes out when it was the last bucket.
  void applied(work w, double seconds);

  // --- telemetry -----------------------------------------------------------------------------

  void set_sink(std::shared_ptr<sink_base> sink);
  void emit(stage which, work w, stage_thread thread, clock::time_point t0, double seconds, std::size_t bytes);
  [[nodiscard]] step_report last_report() const;

 private:
  // A bucket whose last update still needs its view: not yet published (a synchronize() publishes
  // without one), and the gradients of the view_lag steps from it read.
  std::size_t next_view_locked() const;
  template <class Pred>
  bool stage_wait(std::unique_lock<std::mutex>& lock, Pred&& ready) {
    cv_.wait(lock, [&] { return stop_ || failure_ || ready(); });
    return !(stop_ || failure_);
  }
  // The trainer's waits: rethrow a stage's failure, report the time blocked as stage::wait.
  template <class Pred>
  void wait_for(std::uint64_t trainer_step, Pred&& ready) {
    auto const t0 = clock::now();
    {
      std::unique_lock lock(m_);
      cv_.wait(lock, [&] { return failure_ || ready(); });
      if (failure_) std::rethrow_exception(failure_);
    }
    double const waited = seconds_since(t0);
    wait_seconds_ += waited;
    if (waited > 0) emit(stage::wait, {trainer_step, 0}, stage_thread::trainer, t0, waited, 0);
  }
  step_report report_locked(std::uint64_t step);

  mutable std::mutex m_;
  std::condition_variable cv_;
  std::vector<bucket_progress> progress_;
  std::deque<work> read_queue_, encode_queue_, apply_queue_;
  unsigned view_lag_ = 0;
  bool reading_ = false;  // the encode thread is reading a gradient out of the trainer's memory
  std::uint64_t published_ = 0;
  bool stop_ = false;
  std::exception_ptr failure_;
  int rank_ = 0;
  bool measure_residual_ = false;
  clock::time_point epoch_ = clock::now();
  std::atomic<double> wait_seconds_{0.0};
  step_report last_report_{};
  std::shared_ptr<sink_base> sink_;
  std::vector<std::thread> threads_;
};

}  // namespace sluice::detail::pipeline

#if SLUICE_HEADER_ONLY
#include <sluice/pipeline/impl/stages.ipp>
#endif
