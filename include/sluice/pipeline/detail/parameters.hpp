// Where the trainer reads its parameters (pipeline_options::parameters): its own spans, which the
// trainer's thread writes inside step(), or two pipeline-owned buffers the apply thread fills
// ahead of time, handed over by pointer. Policy-independent, compiled once for every pipeline.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <sluice/bucket/layout.hpp>
#include <sluice/config.hpp>
#include <sluice/pipeline/options.hpp>

namespace sluice::detail::pipeline {

class published_parameters {
 public:
  /// parameter_home::trainer: `user` (the spans given to attach) is where every update goes.
  /// parameter_home::pipeline: two buffers, each tensor contiguous in layout order; update u goes
  /// to buffer u % 2 (the apply of u waits for the trainer to hold u - 1, so it never writes the
  /// buffer the trainer reads).
  void reset(parameter_home home, layout const& l, std::span<std::span<float> const> user);

  /// Whether the pipeline owns the parameters (the apply thread writes each update's buffer).
  [[nodiscard]] bool owned() const noexcept { return owned_; }
  /// Where update `update` is written: the trainer's spans, or buffer update % 2.
  [[nodiscard]] std::span<std::span<float> const> buffer(std::uint64_t update) const noexcept {
    return owned_ ? std::span<std::span<float> const>(spans_[update % 2]) : std::span<std::span<float> const>(user_);
  }
  /// The trainer holds update `update` from now on.
  void make_current(std::uint64_t update) noexcept {
    if (owned_) current_ = static_cast<std::size_t>(update % 2);
  }
  /// The parameters the trainer reads now, tensor by tensor.
  [[nodiscard]] std::span<std::span<float const> const> current() const noexcept {
    return owned_ ? std::span<std::span<float const> const>(views_[current_])
                  : std::span<std::span<float const> const>(views_[0]);
  }

 private:
  bool owned_ = false;
  std::size_t current_ = 0;
  std::vector<std::span<float>> user_;
  std::array<std::vector<float>, 2> storage_{};
  std::array<std::vector<std::span<float>>, 2> spans_{};
  std::array<std::vector<std::span<float const>>, 2> views_{};
};

}  // namespace sluice::detail::pipeline

#if SLUICE_HEADER_ONLY
#include <sluice/pipeline/impl/parameters.ipp>
#endif
