// The bodies of sluice/pipeline/detail/stages.hpp: header-only, included at its end; with
// sluice::kernels, compiled there once.
#pragma once

#include <algorithm>
#include <cmath>
#include <thread>

#include <omp.h>

#include <sluice/pipeline/detail/stages.hpp>

namespace sluice::detail::pipeline {

SLUICE_DECL stages::~stages() { stop(); }

SLUICE_DECL double squared_norm(feedback_slice const& s, std::size_t buffers) {
  double sum = 0;
  if (buffers == 0) return sum;
  if (s.precision() == element_type::bf16) {
    for (auto x : s.template buffer<bfloat16>(0)) sum += double(float(x)) * double(float(x));
  } else {
    for (float x : s.template buffer<float>(0)) sum += double(x) * double(x);
  }
  return sum;
}

SLUICE_DECL void stages::reset(std::span<std::size_t const> dense_bytes, int rank, bool measure_residual,
                               unsigned view_lag) {
  progress_.assign(dense_bytes.size(), {});
  for (std::size_t b = 0; b < dense_bytes.size(); ++b) progress_[b].dense_bytes = dense_bytes[b];
  rank_ = rank;
  measure_residual_ = measure_residual;
  view_lag_ = view_lag;
  epoch_ = clock::now();
}

SLUICE_DECL void stages::start(std::array<std::function<void()>, 3> loops, int kernel_threads,
                               stage_scheduling const& scheduling) {
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

SLUICE_DECL void stages::stop() {
  {
    std::lock_guard lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& th : threads_)
    if (th.joinable()) th.join();
  threads_.clear();
}

SLUICE_DECL void stages::fail(std::exception_ptr e) {
  {
    std::lock_guard lock(m_);
    if (!failure_) failure_ = std::move(e);
  }
  cv_.notify_all();
}

SLUICE_DECL void stages::rethrow_failure() {
  std::lock_guard lock(m_);
  if (failure_) std::rethrow_exception(failure_);
}

SLUICE_DECL void stages::push_encode(std::uint64_t step, std::span<std::size_t const> buckets, bool read) {
  if (buckets.empty()) return;
  {
    std::lock_guard lock(m_);
    for (std::size_t b : buckets) {
      if (read)
        read_queue_.push_back({step, b});
      else
        progress_[b].read = step + 1;  // the trainer's step() waited for every earlier read
      encode_queue_.push_back({step, b});
    }
  }
  cv_.notify_all();
}

SLUICE_DECL void stages::wait_read(std::uint64_t steps, std::uint64_t trainer_step) {
  wait_for(trainer_step, [&] {
    return std::all_of(progress_.begin(), progress_.end(), [&](auto const& p) { return p.read >= steps; });
  });
}

SLUICE_DECL void stages::wait_viewed(std::uint64_t update, std::uint64_t trainer_step) {
  wait_for(trainer_step, [&] {
    return std::all_of(progress_.begin(), progress_.end(), [&](auto const& p) { return p.viewed >= update; });
  });
}

SLUICE_DECL void stages::wait_encoded(std::uint64_t steps, std::uint64_t trainer_step) {
  wait_for(trainer_step, [&] {
    return std::all_of(progress_.begin(), progress_.end(), [&](auto const& p) { return p.encoded >= steps; });
  });
}

SLUICE_DECL void stages::wait_applied(std::uint64_t updates, std::uint64_t trainer_step) {
  wait_for(trainer_step, [&] {
    return std::all_of(progress_.begin(), progress_.end(), [&](auto const& p) { return p.applied >= updates; });
  });
}

SLUICE_DECL void stages::publish(std::uint64_t updates) {
  {
    std::lock_guard lock(m_);
    published_ = updates;
  }
  cv_.notify_all();
}

SLUICE_DECL void stages::wait_idle(std::uint64_t steps) {
  wait_for(steps, [&] {
    return std::all_of(progress_.begin(), progress_.end(), [&](auto const& p) {
      return p.encoded >= steps && p.exchanged >= steps && p.applied >= std::min<std::uint64_t>(steps, published_ + 1);
    });
  });
}

SLUICE_DECL void stages::restore(std::uint64_t steps, std::uint64_t published, std::span<std::uint8_t const> pending) {
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

SLUICE_DECL bool stages::next_encode(work& w, encode_job& job) {
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

SLUICE_DECL void stages::read(work w) {
  {
    std::lock_guard lock(m_);
    progress_[w.bucket].read = w.step + 1;
    reading_ = false;
  }
  cv_.notify_all();
}

SLUICE_DECL void stages::drain_reads() {
  std::unique_lock lock(m_);
  cv_.wait(lock, [&] { return !reading_ && (read_queue_.empty() || stop_ || failure_); });
}

SLUICE_DECL void stages::encoded(work w, std::size_t bytes, double seconds, double residual_sq) {
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

SLUICE_DECL exchange_turn stages::next_exchange(std::uint64_t step, std::size_t b) {
  std::unique_lock lock(m_);
  auto const& p = progress_[b];
  if (!stage_wait(lock, [&] { return p.exchanged > step || (p.encoded > step && p.applied >= step); }))
    return exchange_turn::stop;
  return p.exchanged > step ? exchange_turn::skip : exchange_turn::run;
}

SLUICE_DECL void stages::exchanged(work w, std::size_t sent, double seconds) {
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

SLUICE_DECL bool stages::next_apply(work& w, apply_job& job) {
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

SLUICE_DECL void stages::viewed(work w) {
  {
    std::lock_guard lock(m_);
    progress_[w.bucket].viewed = w.step;
  }
  cv_.notify_all();
}

SLUICE_DECL void stages::applied(work w, double seconds) {
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

SLUICE_DECL void stages::set_sink(std::shared_ptr<sink_base> sink) {
  std::lock_guard lock(m_);
  sink_ = std::move(sink);
}

SLUICE_DECL void stages::emit(stage which, work w, stage_thread thread, clock::time_point t0, double seconds,
                              std::size_t bytes) {
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

SLUICE_DECL step_report stages::last_report() const {
  std::lock_guard lock(m_);
  return last_report_;
}

SLUICE_DECL std::size_t stages::next_view_locked() const {
  if (view_lag_ == 0) return progress_.size();
  for (std::size_t b = 0; b < progress_.size(); ++b) {
    auto const& p = progress_[b];
    if (p.applied > published_ && p.viewed < p.applied && p.read >= p.applied + view_lag_) return b;
  }
  return progress_.size();
}

SLUICE_DECL step_report stages::report_locked(std::uint64_t step) {
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

}  // namespace sluice::detail::pipeline
