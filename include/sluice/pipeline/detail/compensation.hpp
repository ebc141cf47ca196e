// Staleness compensation (pipeline/staleness.hpp): the parameters handed to the trainer when
// updates lag behind. The apply thread computes them bucket by bucket, once the update is applied
// and the gradients it needs are read, while no apply can change that bucket (the next apply
// waits for the trainer's publish); the trainer's thread only copies the result.
#pragma once

#include <algorithm>
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
  /// Whether the trainer gets views (the apply thread computes one per update, per bucket).
  [[nodiscard]] bool active() const noexcept { return method_ != compensation_method::none; }
  /// The steps of gradients a view needs after its update (0: no views).
  [[nodiscard]] unsigned view_lag() const noexcept { return active() ? staleness_ : 0; }

  /// The master weights were attached or restored (the trainer's thread, no stage running):
  /// weight_prediction's last update is measured from here.
  void published(std::vector<float> const& master) {
    if (is(compensation_method::weight_prediction)) previous_ = master;
  }
  /// The apply thread, before it applies the next update to master[first, first + n): remembers
  /// the range as published (weight_prediction measures the next update against it).
  void before_apply(std::vector<float> const& master, std::size_t first, std::size_t n) {
    if (is(compensation_method::weight_prediction))
      std::copy(master.begin() + static_cast<std::ptrdiff_t>(first),
                master.begin() + static_cast<std::ptrdiff_t>(first + n),
                previous_.begin() + static_cast<std::ptrdiff_t>(first));
  }

  /// The apply thread: bucket `bk`'s range of the parameters the trainer gets when `master` holds
  /// `updates` updates and the `staleness` steps from `updates` on are in flight;
  /// grads[k % (staleness + 1)] is this rank's gradient of step k. The master weights and the
  /// bucket's optimizer state are still (the next apply waits for the trainer's publish).
  template <class Bucket>
  void view(O const& opt, std::vector<float> const& master, Bucket const& bk,
            std::vector<std::vector<float>> const& grads, std::uint64_t updates) {
    auto const first = static_cast<std::ptrdiff_t>(bk.first), last = first + static_cast<std::ptrdiff_t>(bk.elements);
    if (method_ == compensation_method::weight_prediction) {
      auto const k = static_cast<float>(staleness_);
      for (auto i = first; i < last; ++i) {
        auto const u = static_cast<std::size_t>(i);
        ahead_[u] = master[u] + k * (master[u] - previous_[u]);
      }
      return;
    }
    std::copy(master.begin() + first, master.begin() + last, ahead_.begin() + first);
    scratch_ = bk.ostate;  // the real state is the exchange's
    std::span<float> const params(ahead_.data() + bk.first, bk.elements);
    for (std::uint64_t k = updates; k < updates + staleness_; ++k)
      sluice::step(
          opt, scratch_, params,
          std::span<float const>(grads[static_cast<std::size_t>(k % (staleness_ + 1))]).subspan(bk.first, bk.elements));
  }
  /// The views the apply thread computed (valid for the update it last viewed, per bucket).
  [[nodiscard]] std::vector<float> const& ahead() const noexcept { return ahead_; }

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
  optimizer_state<O> scratch_{};
};

}  // namespace sluice::detail::pipeline
