// Staleness compensation (pipeline/staleness.hpp): the parameters handed to the trainer when
// updates lag behind. Runs on the trainer's thread inside publish(), while no apply can run (the
// apply of the next update waits for the publish), so the master weights and every bucket's
// optimizer state are still.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <sluice/optim/state.hpp>
#include <sluice/optim/step.hpp>
#include <sluice/pipeline/staleness.hpp>

namespace sluice::detail::pipeline {

template <class O>
class compensator {
 public:
  /// Sizes the buffers for a model of `elements` at `staleness`.
  void reset(staleness_compensation c, unsigned staleness, std::size_t elements) {
    method_ = staleness > 0 ? c.method : compensation_method::none;
    staleness_ = staleness;
    if (method_ != compensation_method::none) ahead_.assign(elements, 0.0f);
    if (method_ == compensation_method::weight_prediction) previous_.assign(elements, 0.0f);
  }
  [[nodiscard]] bool is(compensation_method m) const noexcept { return method_ == m; }

  /// The master weights hold a new update (or were attached or restored): weight_prediction's
  /// last update is measured from here.
  void published(std::vector<float> const& master) {
    if (is(compensation_method::weight_prediction)) previous_ = master;
  }

  /// The parameters for the trainer when `master` holds `updates` updates and steps updates ..
  /// steps - 1 are in flight; grads[k % (staleness + 1)] is this rank's gradient of step k.
  template <class Buckets>
  std::vector<float> const& view(O const& opt, std::vector<float> const& master, Buckets const& buckets,
                                 std::vector<std::vector<float>> const& grads, std::uint64_t updates,
                                 std::uint64_t steps) {
    std::uint64_t const ahead = steps - updates;
    if (method_ == compensation_method::none || ahead == 0) return master;
    if (method_ == compensation_method::weight_prediction) {
      auto const k = static_cast<float>(ahead);
      for (std::size_t i = 0; i < master.size(); ++i) ahead_[i] = master[i] + k * (master[i] - previous_[i]);
      return ahead_;
    }
    ahead_ = master;
    state_.resize(buckets.size(), buckets.empty() ? optimizer_state<O>() : buckets[0].ostate);
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      auto const& bk = buckets[b];
      state_[b] = bk.ostate;  // a scratch copy: the real state is the exchange's
      std::span<float> const params(ahead_.data() + bk.first, bk.elements);
      for (std::uint64_t k = updates; k < steps; ++k)
        sluice::step(opt, state_[b], params,
                     std::span<float const>(grads[static_cast<std::size_t>(k % (staleness_ + 1))])
                         .subspan(bk.first, bk.elements));
    }
    return ahead_;
  }

  /// local_step's gradients a checkpoint keeps after `steps` steps: those of steps
  /// kept_from(steps) .. steps - 1, which a later publish steps again.
  [[nodiscard]] std::uint64_t kept_from(std::uint64_t steps) const noexcept {
    if (!is(compensation_method::local_step)) return steps;
    return steps + 1 > staleness_ ? steps + 1 - staleness_ : 0;
  }

 private:
  compensation_method method_ = compensation_method::none;
  unsigned staleness_ = 0;
  std::vector<float> ahead_, previous_;
  std::vector<optimizer_state<O>> state_;
};

}  // namespace sluice::detail::pipeline
