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
inline double squared_norm(feedback_slice const& s, std::size_t buffers) {
  double sum = 0;
  if (buffers == 0) return sum;
  if (s.precision() == element_type::bf16) {
    for (auto x : s.template buffer<bfloat16>(0)) sum += double(float(x)) * double(float(x));
  } else {
    for (float x : s.template buffer<float>(0)) sum += double(x) * double(x);
  }
  return sum;
}

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
  ~stages() { stop(); }

  /// Sizes the counters for `dense_bytes.size()` buckets; before start(). `view_lag` > 0: the
  /// apply thread computes each update's compensated view once the gradients of the `view_lag`
  /// steps after it are read (the staleness; 0: no views).
  void reset(std::span<std::size_t const> dense_bytes, int rank, bool measure_residual, unsigned view_lag) {
    progress_.assign(dense_bytes.size(), {});
    for (std::size_t b = 0; b < dense_bytes.size(); ++b) progress_[b].dense_bytes = dense_bytes[b];
    rank_ = rank;
    measure_residual_ = measure_residual;
    view_lag_ = view_lag;
    epoch_ = clock::now();
  }

  /// Starts one thread per loop (encode, exchange, apply), each limited to `kernel_threads`
  /// OpenMP threads when > 0 and scheduled as `scheduling` says. A loop returns when told to stop
  /// (its waits return false); a throw is the pipeline's failure, rethrown by the trainer's next call.
  void start(std::array<std::function<void()>, 3> loops, int kernel_threads, stage_scheduling const& scheduling) {
    constexpr std::array<stage_thread, 3> which{stage_thread::encode, stage_thread::exchange, stage_thread::apply};
    for (std::size_t k = 0; k < loops.size(); ++k)
      threads_.emplace_back([this, kernel_threads, scheduling, thread = which[k], body = std::move(loops[k])] {
#if SLUICE_HAS_OPENMP
        if (kernel_threads > 0) omp_set_num_threads(kernel_threads);
#else
        (void)kernel_threads;
#endif
        try {
          apply_scheduling(scheduling, thread);
          body();
        } catch (...) {
          fail(std::current_exception());
        }
      });
  }
  void stop() {
    {
      std::lock_guard lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& th : threads_)
      if (th.joinable()) th.join();
    threads_.clear();
  }
  void fail(std::exception_ptr e) {
    {
      std::lock_guard lock(m_);
      if (!failure_) failure_ = std::move(e);
    }
    cv_.notify_all();
  }
  void rethrow_failure() {
    std::lock_guard lock(m_);
    if (failure_) std::rethrow_exception(failure_);
  }

  // --- the trainer's side --------------------------------------------------------------------

  /// Buckets whose gradients are all in: the encode thread may read, then encode them.
  void push_encode(std::uint64_t step, std::span<std::size_t const> buckets) {
    if (buckets.empty()) return;
    {
      std::lock_guard lock(m_);
      for (std::size_t b : buckets) {
        read_queue_.push_back({step, b});
        encode_queue_.push_back({step, b});
      }
    }
    cv_.notify_all();
  }
  /// Waits until every bucket's gradient of steps [0, steps) was read (the trainer's gradient
  /// memory is its own again).
  void wait_read(std::uint64_t steps, std::uint64_t trainer_step) {
    wait_for(trainer_step, [&] {
      return std::all_of(progress_.begin(), progress_.end(), [&](auto const& p) { return p.read >= steps; });
    });
  }
  /// Waits until every bucket's compensated view of update `update` is computed.
  void wait_viewed(std::uint64_t update, std::uint64_t trainer_step) {
    wait_for(trainer_step, [&] {
      return std::all_of(progress_.begin(), progress_.end(), [&](auto const& p) { return p.viewed >= update; });
    });
  }
  /// Waits until every bucket has encoded `steps` steps (its gradient buffer is free again).
  void wait_encoded(std::uint64_t steps, std::uint64_t trainer_step) {
    wait_for(trainer_step, [&] {
      return std::all_of(progress_.begin(), progress_.end(), [&](auto const& p) { return p.encoded >= steps; });
    });
  }
  /// Waits until every bucket has applied `updates` steps.
  void wait_applied(std::uint64_t updates, std::uint64_t trainer_step) {
    wait_for(trainer_step, [&] {
      return std::all_of(progress_.begin(), progress_.end(), [&](auto const& p) { return p.applied >= updates; });
    });
  }
  /// The trainer holds `updates` updates: the apply of step `updates` may begin.
  void publish(std::uint64_t updates) {
    {
      std::lock_guard lock(m_);
      published_ = updates;
    }
    cv_.notify_all();
  }
  /// Waits until no stage can go on without the trainer: steps [0, steps) encoded and exchanged,
  /// every apply the published count allows done.
  void wait_idle(std::uint64_t steps) {
    wait_for(steps, [&] {
      return std::all_of(progress_.begin(), progress_.end(), [&](auto const& p) {
        return p.encoded >= steps && p.exchanged >= steps &&
               p.applied >= std::min<std::uint64_t>(steps, published_ + 1);
      });
    });
  }
  /// A restore: every bucket has encoded and exchanged `steps` steps; those in `pending` have not
  /// applied the last one yet (their sum is queued for the apply thread).
  void restore(std::uint64_t steps, std::uint64_t published, std::span<std::uint8_t const> pending) {
    {
      std::lock_guard lock(m_);
      published_ = published;
      for (std::size_t b = 0; b < progress_.size(); ++b) {
        auto& p = progress_[b];
        p.read = p.encoded = p.exchanged = steps;
        p.viewed = published;
        p.applied = pending[b] != 0 ? steps - 1 : steps;
        if (pending[b] != 0) apply_queue_.push_back({steps - 1, b});
      }
    }
    cv_.notify_all();
  }

  // --- the stage threads' side ---------------------------------------------------------------

  /// The encode thread's next job: a gradient to read, else a bucket to encode once the frame of
  /// its previous step has left (its gradient was read: reads go first, in the same order);
  /// false on stop.
  bool next_encode(work& w, encode_job& job) {
    std::unique_lock lock(m_);
    if (!stage_wait(lock, [&] {
          return !read_queue_.empty() || (!encode_queue_.empty() && progress_[encode_queue_.front().bucket].exchanged >=
                                                                        encode_queue_.front().step);
        }))
      return false;
    auto& q = read_queue_.empty() ? encode_queue_ : read_queue_;
    job = read_queue_.empty() ? encode_job::encode : encode_job::read;
    reading_ = job == encode_job::read;
    w = q.front();
    q.pop_front();
    return true;
  }
  void read(work w) {
    {
      std::lock_guard lock(m_);
      progress_[w.bucket].read = w.step + 1;
      reading_ = false;
    }
    cv_.notify_all();
  }
  /// A trainer's call is failing: waits until no read of its gradients runs or will run (they are
  /// all read, or the stages stopped), so the trainer may free them as the error unwinds.
  void drain_reads() {
    std::unique_lock lock(m_);
    cv_.wait(lock, [&] { return !reading_ && (read_queue_.empty() || stop_ || failure_); });
  }
  void encoded(work w, std::size_t bytes, double seconds, double residual_sq) {
    {
      std::lock_guard lock(m_);
      auto& p = progress_[w.bucket];
      p.encoded_bytes = bytes;
      p.encode_s = seconds;
      p.residual_sq = residual_sq;
      p.encoded = w.step + 1;
    }
    cv_.notify_all();
  }
  /// Waits until bucket b of `step` is encoded and its previous step applied (its sum buffer is
  /// free), or was restored past.
  exchange_turn next_exchange(std::uint64_t step, std::size_t b) {
    std::unique_lock lock(m_);
    auto const& p = progress_[b];
    if (!stage_wait(lock, [&] { return p.exchanged > step || (p.encoded > step && p.applied >= step); }))
      return exchange_turn::stop;
    return p.exchanged > step ? exchange_turn::skip : exchange_turn::run;
  }
  void exchanged(work w, std::size_t sent, double seconds) {
    {
      std::lock_guard lock(m_);
      auto& p = progress_[w.bucket];
      p.sent_bytes = sent;
      p.exchange_s = seconds;
      p.exchanged = w.step + 1;
      apply_queue_.push_back(w);
    }
    cv_.notify_all();
  }
  /// The apply thread's next job: a view to compute (w.step: the update, which bucket w.bucket
  /// holds, not yet published, the gradients of the view_lag steps from it read), else the next
  /// exchanged bucket whose step the trainer's published parameters allow; false on stop.
  bool next_apply(work& w, apply_job& job) {
    std::unique_lock lock(m_);
    std::size_t view = progress_.size();
    if (!stage_wait(lock, [&] {
          view = next_view_locked();
          return view < progress_.size() || (!apply_queue_.empty() && published_ >= apply_queue_.front().step);
        }))
      return false;
    if (view < progress_.size()) {
      job = apply_job::view;
      w = {progress_[view].applied, view};
      return true;
    }
    job = apply_job::apply;
    w = apply_queue_.front();
    apply_queue_.pop_front();
    return true;
  }
  void viewed(work w) {
    {
      std::lock_guard lock(m_);
      progress_[w.bucket].viewed = w.step;
    }
    cv_.notify_all();
  }
  /// Bucket w.bucket applied step w.step; the step's report goes out when it was the last bucket.
  void applied(work w, double seconds) {
    std::shared_ptr<sink_base> sink;
    step_report rep;
    bool complete = false;
    {
      std::lock_guard lock(m_);
      auto& p = progress_[w.bucket];
      p.apply_s = seconds;
      p.applied = w.step + 1;
      complete = std::all_of(progress_.begin(), progress_.end(), [&](auto const& x) { return x.applied > w.step; });
      if (complete) {
        rep = report_locked(w.step);  // in the same critical section: a trainer woken by this step sees it
        sink = sink_;
      }
    }
    cv_.notify_all();
    if (complete && sink) sink->record(rep);
  }

  // --- telemetry -----------------------------------------------------------------------------

  void set_sink(std::shared_ptr<sink_base> sink) {
    std::lock_guard lock(m_);
    sink_ = std::move(sink);
  }
  void emit(stage which, work w, stage_thread thread, clock::time_point t0, double seconds, std::size_t bytes) {
    std::shared_ptr<sink_base> sink;
    {
      std::lock_guard lock(m_);
      sink = sink_;
    }
    if (sink)
      sink->record(stage_sample{.which = which,
                                .step = w.step,
                                .bucket = w.bucket,
                                .rank = rank_,
                                .thread = static_cast<std::uint32_t>(thread),
                                .start = std::chrono::duration<double>(t0 - epoch_).count(),
                                .seconds = seconds,
                                .bytes = bytes});
  }
  [[nodiscard]] step_report last_report() const {
    std::lock_guard lock(m_);
    return last_report_;
  }

 private:
  // A bucket whose last update still needs its view: not yet published (a synchronize() publishes
  // without one), and the gradients of the view_lag steps from it read.
  std::size_t next_view_locked() const {
    if (view_lag_ == 0) return progress_.size();
    for (std::size_t b = 0; b < progress_.size(); ++b) {
      auto const& p = progress_[b];
      if (p.applied > published_ && p.viewed < p.applied && p.read >= p.applied + view_lag_) return b;
    }
    return progress_.size();
  }
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
  step_report report_locked(std::uint64_t step) {
    step_report rep{.step = step, .rank = rank_};
    double residual_sq = 0;
    for (auto const& p : progress_) {
      rep.dense_bytes += p.dense_bytes;
      rep.encoded_bytes += p.encoded_bytes;
      rep.sent_bytes += p.sent_bytes;
      rep.encode_seconds += p.encode_s;
      rep.exchange_seconds += p.exchange_s;
      rep.apply_seconds += p.apply_s;
      residual_sq += p.residual_sq;
    }
    if (measure_residual_) rep.residual_norm = std::sqrt(residual_sq);
    rep.compression_ratio =
        rep.encoded_bytes == 0 ? 0.0 : static_cast<double>(rep.dense_bytes) / static_cast<double>(rep.encoded_bytes);
    rep.wait_seconds = wait_seconds_.exchange(0.0);
    last_report_ = rep;
    return rep;
  }

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
