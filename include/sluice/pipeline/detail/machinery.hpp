// The pipeline's machinery: its buffers, the policies and the transport it runs, and the three
// stage threads' loops (encode, exchange, apply) that work on them per bucket. sluice::pipeline
// derives from it and adds the trainer's calls (attach, gradient_ready, step, synchronize, save,
// restore); the scheduler that orders the loops is detail/stages.hpp, and it knows no policy.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include <sluice/bucket/layout.hpp>
#include <sluice/bucket/plan.hpp>
#include <sluice/core/error.hpp>
#include <sluice/feedback/non_finite.hpp>
#include <sluice/optim/state.hpp>
#include <sluice/optim/step.hpp>
#include <sluice/pipeline/concepts.hpp>
#include <sluice/pipeline/detail/agreement.hpp>
#include <sluice/pipeline/detail/buckets.hpp>
#include <sluice/pipeline/detail/compensation.hpp>
#include <sluice/pipeline/detail/flat_plan.hpp>
#include <sluice/pipeline/detail/parameters.hpp>
#include <sluice/pipeline/detail/rules.hpp>
#include <sluice/pipeline/detail/stages.hpp>
#include <sluice/pipeline/exchange.hpp>
#include <sluice/pipeline/options.hpp>

namespace sluice::detail::pipeline {

/// What sluice::pipeline<C, F, O, T, Collective> holds and what its stage threads run. Its first
/// base checks the rules, so a refused combination says so before anything else is instantiated.
template <class C, class F, class O, class T, class Collective>
class machinery : public rules<C, F, O, T, Collective> {
  using rules = detail::pipeline::rules<C, F, O, T, Collective>;

 protected:
  using transport_type = std::remove_cvref_t<T>;
  using bucket = detail::pipeline::bucket<C, O, Collective>;
  using clock = detail::pipeline::clock;

  machinery(C codec, F feedback, O optimizer, T&& transport, pipeline_options options, int group_size,
            bool gather_frames)
      : codec_(std::move(codec)),
        feedback_(std::move(feedback)),
        opt_(std::move(optimizer)),
        t_(std::forward<T>(transport)),
        options_(options),
        group_size_(group_size),
        gather_frames_(gather_frames) {}
  machinery(machinery const&) = delete;
  machinery& operator=(machinery const&) = delete;
  ~machinery() = default;  // the pipeline stops the stages first

  [[nodiscard]] collective_context context(std::uint64_t step, std::size_t b) const {
    return {
        .step = step, .tensor = b, .seed = options_.seed, .timeout = options_.timeout, .tag = pipeline_tags::bucket(b)};
  }

  void encode_loop() {
    work w;
    detail::pipeline::encode_job job{};
    while (stages_.next_encode(w, job)) {
      auto& bk = buckets_[w.bucket];
      auto& g = grads_[static_cast<std::size_t>(w.step % (options_.staleness + 1))];
      auto const t0 = clock::now();
      std::span<float const> const grad(g.data() + bk.first, bk.elements);
      if (job == detail::pipeline::encode_job::read) {  // out of the trainer's memory, its step() waits
        // (Gradients in the pipeline's buffers come here only to be scaled in place by a batch
        // weight other than 1: handed_ points into g then.)
        bool const finite = flat_.gather_bucket(w.bucket, handed_, g, in_force_.get(w.step).weight);
        finite_[finite_slot(w)] = finite ? 1 : 0;
        stages_.emit(stage::read, w, stage_thread::encode, t0, detail::pipeline::seconds_since(t0),
                     bk.elements * sizeof(float));
        stages_.read(w);  // the trainer's memory is no longer read, whatever follows
        if (!finite && rules::checks_finite(feedback_)) throw_non_finite(w, grad);
        continue;
      }
      C const codec = in_force_.get(w.step).codec;
      collective_context const ctx = context(w.step, w.bucket);
      std::size_t bytes = 0;
      bucket_encoder<F, C> const enc{feedback_, *fstate_, w.bucket, bk.fws, finite_[finite_slot(w)] != 0};
      try {
        bytes = bk.compressed ? bk.cx.encode(enc, codec, grad, ctx, t_.rank())
                              : bk.dx.encode(enc, codec, grad, ctx, t_.rank());
      } catch (error const& e) {
        if (e.kind() != errc::non_finite) throw;
        throw_non_finite(w, grad);
      }
      if (bytes == 0 && bk.elements > 0) throw_non_finite(w, grad);
      double const residual_sq =
          options_.measure_residual ? detail::pipeline::squared_norm(fstate_->slice(w.bucket), F::state_buffers) : 0.0;
      double const secs = detail::pipeline::seconds_since(t0);
      stages_.emit(stage::encode, w, stage_thread::encode, t0, secs, bytes);
      stages_.encoded(w, bytes, secs, residual_sq);
    }
  }
  // Whether the read of bucket w.bucket's gradient of step w.step found it finite (the encode
  // thread's own record, per gradient buffer: a later step's read may come first).
  [[nodiscard]] std::size_t finite_slot(work w) const noexcept {
    return static_cast<std::size_t>(w.step % grads_.size()) * buckets_.size() + w.bucket;
  }
  // The error names the parameter and the element, whichever layer found the value.
  [[noreturn]] void throw_non_finite(work w, std::span<float const> grad) const {
    std::size_t const at = std::min(first_non_finite(grad), grad.size() - 1);
    auto const o = flat_.locate(buckets_[w.bucket].first + at);
    throw_error(errc::non_finite,
                "pipeline: step {}, rank {}: the gradient of parameter '{}' is {} at element {}; nothing was sent. "
                "Find where it comes from (a loss that overflows, a learning rate too high: clip the gradient or "
                "scale the loss), or build the feedback with non_finite_policy::propagate to sum NaN/Inf like any "
                "value",
                w.step, t_.rank(), layout_[o.tensor].name, grad[at], o.element);
  }

  void exchange_loop() {
    std::uint64_t hooked = 0;  // steps the step hook has run for
    bool resumed = false;      // the ranks agreed on the run and the first step
    std::uint64_t agreed = 0;  // the batch sizes they agreed on
    for (std::uint64_t step = 0;; ++step) {
      for (std::size_t b = 0; b < buckets_.size(); ++b) {
        auto const turn = stages_.next_exchange(step, b);
        if (turn == detail::pipeline::exchange_turn::stop) return;
        if (turn == detail::pipeline::exchange_turn::skip) continue;  // restored past it
        if (std::uint64_t const batches = in_force_.get(step).batches; !resumed || batches != agreed) {
          detail::pipeline::agree_on_resume(t_, run_, step, batches, options_.timeout);
          resumed = true;
          agreed = batches;
        }
        if (hook_ && hooked <= step) {
          hook_->before_exchange(t_, step);
          hooked = step + 1;
        }
        auto& bk = buckets_[b];
        C const codec = in_force_.get(step).codec;
        auto const t0 = clock::now();
        collective_context const ctx = context(step, b);
        bucket_encoder<F, C> const enc{feedback_, *fstate_, b, bk.fws};
        std::size_t const sent =
            bk.compressed ? bk.cx.exchange(t_, codec, ctx, bk.sum, enc) : bk.dx.exchange(t_, codec, ctx, bk.sum, enc);
        double const secs = detail::pipeline::seconds_since(t0);
        stages_.emit(stage::exchange, {step, b}, stage_thread::exchange, t0, secs, sent);
        stages_.exchanged({step, b}, sent, secs);
      }
    }
  }

  void apply_loop() {
    work w;
    detail::pipeline::apply_job job{};
    while (stages_.next_apply(w, job)) {
      auto& bk = buckets_[w.bucket];
      auto const t0 = clock::now();
      if (job == detail::pipeline::apply_job::view) {  // w.step: the update bucket w.bucket holds
        ahead_.view(opt_, master_, bk, grads_, w.step);
        if (params_.owned()) {
          flat_.scatter_bucket(w.bucket, ahead_.ahead(), params_.buffer(w.step));
          params_.holds_other(w.bucket, w.step);
        }
        stages_.emit(stage::view, w, stage_thread::apply, t0, detail::pipeline::seconds_since(t0),
                     bk.elements * sizeof(float));
        stages_.viewed(w);
        continue;
      }
      ahead_.before_apply(master_, bk.first, bk.elements);
      float const world = static_cast<float>(t_.size());
      std::span<float> const params(master_.data() + bk.first, bk.elements);
      std::span<std::uint32_t const> changed;  // the blocks a sparse step changed
      if (bk.sum.sparse) {
        for (float& x : bk.sum.sparse_values.values()) x /= world;
        auto const v = bk.sum.sparse_values.view();
        sluice::step(opt_, bk.ostate, params, v);
        changed = v.indices;
      } else {
        for (float& x : bk.sum.dense) x /= world;
        sluice::step(opt_, bk.ostate, params, std::span<float const>(bk.sum.dense));
      }
      // The owned buffer of update w.step + 1 (with compensation on, the view goes there instead):
      // after a sparse step, only the blocks of this update and the last one.
      if (params_.owned() && !ahead_.active())
        params_.write_bucket(flat_, w.bucket, master_, w.step + 1, changed, bk.sum.sparse_values.block_size());
      double const secs = detail::pipeline::seconds_since(t0);
      stages_.emit(stage::apply, w, stage_thread::apply, t0, secs, bk.elements * sizeof(float));
      stages_.applied(w, secs);
    }
  }

  C codec_;
  struct in_force {  // what a step runs with, set as it begins
    C codec{};
    std::uint64_t batches = 0;  // identity of the batch sizes
    float weight = 1.0f;        // this rank's gradient weight
  };
  detail::pipeline::step_ring<in_force> in_force_;
  float weight_ = 1.0f;           // this rank's gradient weight from the next step on
  std::uint64_t batches_id_ = 0;  // identity of the batch sizes from the next step on
  F feedback_;
  O opt_;
  T t_;
  pipeline_options options_;
  int group_size_ = 1;          // by_hierarchical: ranks per group
  bool gather_frames_ = false;  // by_hierarchical, sparse codec: hierarchical_sparse::gather_frames
  layout layout_{};
  bucket_plan plan_{};
  bool attached_ = false;
  std::uint64_t run_ = 0;
  detail::pipeline::published_parameters params_;
  detail::pipeline::flat_plan flat_;
  detail::pipeline::compensator<O> ahead_;  // staleness compensation
  std::vector<bucket> buckets_;
  std::unique_ptr<feedback_state> fstate_;
  std::vector<float> master_;
  std::vector<std::vector<float>> grads_;
  std::vector<std::uint8_t> reported_;
  std::vector<std::span<float const>> handed_;  // this step's gradients, in the trainer's memory (or owned_grads_)
  std::vector<std::vector<std::span<float>>> owned_grads_;  // gradient_home::pipeline: grads_[k]'s tensors
  bool begun_ = false;                                      // the current step began (its codec is in force)
  bool lent_ = false;                                       // gradients() handed out the current step's buffer
  std::vector<std::uint8_t> finite_;                        // per gradient buffer and bucket: the read found no NaN/Inf
  std::size_t reported_count_ = 0;
  std::vector<std::size_t> pending_, ready_;
  std::uint64_t step_ = 0, published_ = 0;
  std::shared_ptr<step_hook<C, transport_type>> hook_;  // set before attach, read-only afterwards
  detail::pipeline::stages stages_;                     // last: its threads stop before the rest goes
};

}  // namespace sluice::detail::pipeline
