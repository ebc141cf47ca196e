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
#include <sluice/pipeline/detail/flat_plan.hpp>
#include <sluice/pipeline/options.hpp>

namespace sluice::detail::pipeline {

class published_parameters {
 public:
  /// parameter_home::trainer: `user` (the spans given to attach) is where every update goes.
  /// parameter_home::pipeline: two buffers, each tensor contiguous in layout order; update u goes
  /// to buffer u % 2 (the apply of u waits for the trainer to hold u - 1, so it never writes the
  /// buffer the trainer reads). `buckets`: the flat plan's bucket count.
  void reset(parameter_home home, layout const& l, std::span<std::span<float> const> user, std::size_t buckets);

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

  // What each owned buffer holds, per bucket, so that an update that changed few blocks is
  // written as those blocks only. The trainer's thread and the apply thread call these in the
  // order the stages impose (the apply of update u + 1 follows the trainer's hold of u), each on
  // the buffer it writes.

  /// Every bucket of buffer `update` % 2 now holds the master weights after `update` updates.
  void holds_master(std::uint64_t update) noexcept;
  /// Bucket b of buffer `update` % 2 now holds something else (a compensated view, restored bytes).
  void holds_other(std::size_t b, std::uint64_t update) noexcept { holds_[b][update % 2] = none; }
  /// Forgets what both buffers hold (a restore wrote one of them with the saved parameters).
  void holds_nothing() noexcept;
  /// The apply thread: writes bucket b of `master` (which holds `update` updates) into buffer
  /// `update` % 2. `blocks` (of `block` elements) are the blocks update `update` changed, for a
  /// sparse step; empty for a dense one. When the buffer holds update - 2 and the blocks of
  /// update - 1 are known, only those and `blocks` are copied; else the whole bucket.
  void write_bucket(flat_plan const& flat, std::size_t b, std::span<float const> master, std::uint64_t update,
                    std::span<std::uint32_t const> blocks, std::size_t block);

 private:
  static constexpr std::uint64_t none = ~std::uint64_t{0};
  bool owned_ = false;
  std::size_t current_ = 0;
  std::vector<std::span<float>> user_;
  std::array<std::vector<float>, 2> storage_{};
  std::array<std::vector<std::span<float>>, 2> spans_{};
  std::array<std::vector<std::span<float const>>, 2> views_{};
  std::vector<std::array<std::uint64_t, 2>> holds_;  // per bucket and buffer: the update it holds, or none
  struct changed_blocks {
    std::uint64_t update = none;        // the update these blocks are of (none: unknown, or dense)
    std::vector<std::uint32_t> blocks;  // capacity kept: no allocation once warm
  };
  std::vector<changed_blocks> changed_;  // per bucket: the blocks the last sparse update changed
};

}  // namespace sluice::detail::pipeline

#if SLUICE_HEADER_ONLY
#include <sluice/pipeline/impl/parameters.ipp>
#endif
