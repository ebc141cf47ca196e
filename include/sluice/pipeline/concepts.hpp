// Pipeline vocabulary: the stages of one worker step and the TelemetrySink concept through
// which the staged runtime reports bytes and times to the bandwidth monitor and the solver.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace sluice {

/// The stages of one step, in data-flow order (DESIGN.md, "One step, one worker").
enum class stage : std::uint8_t { compensate, encode, communicate, aggregate, optimize };

/// Name of a stage for logs and telemetry ("compensate", ...).
constexpr std::string_view to_string(stage s) noexcept {
  switch (s) {
    case stage::compensate:
      return "compensate";
    case stage::encode:
      return "encode";
    case stage::communicate:
      return "communicate";
    case stage::aggregate:
      return "aggregate";
    case stage::optimize:
      return "optimize";
  }
  return "unknown";
}

/// One measurement: how long a stage took for one tensor or bucket, and the bytes it moved.
struct stage_sample {
  stage which = stage::encode;
  std::uint64_t step = 0;    ///< training step
  std::uint64_t tensor = 0;  ///< tensor or bucket id
  std::size_t bytes = 0;     ///< bytes read + written (or sent, for communicate)
  double seconds = 0;        ///< wall-clock duration, >= 0
  friend constexpr bool operator==(stage_sample const&, stage_sample const&) = default;
};

/// Receives stage samples. Requirements: `sink.record(sample)` must be callable concurrently from
/// the pipeline's stage threads (the sink provides its own synchronisation) and must not throw.
template <class S>
concept TelemetrySink = requires(S& s, stage_sample const& sample) {
  { s.record(sample) }
  noexcept;
};

/// The sink that discards everything (the default when no monitor is attached).
struct null_telemetry {
  void record(stage_sample const&) noexcept {}
};
static_assert(TelemetrySink<null_telemetry>);

}  // namespace sluice
