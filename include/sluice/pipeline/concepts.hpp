// Pipeline vocabulary: the three units one bucket goes through (encode, exchange, apply), the
// telemetry samples the staged runtime emits (with start time, rank and thread, so overlap can be
// seen), the per-step report, and the TelemetrySink concept through which a bandwidth monitor or a
// log receives them.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace sluice {

/// What a telemetry sample measured. encode = error feedback + codec (one fused call), exchange =
/// the collective including aggregation as messages arrive, apply = the optimizer step of one
/// bucket, wait = the trainer blocked inside the pipeline (for an update or a free buffer), read =
/// the encode thread copying a bucket's gradient out of the trainer's memory, view = the apply
/// thread computing a bucket's staleness-compensated parameters, publish = the trainer's thread
/// writing the parameters to its spans (the one pass the pipeline runs there).
enum class stage : std::uint8_t { encode, exchange, apply, wait, read, view, publish };

/// Name of a stage for logs and telemetry ("encode", ...).
constexpr std::string_view to_string(stage s) noexcept {
  switch (s) {
    case stage::encode:
      return "encode";
    case stage::exchange:
      return "exchange";
    case stage::apply:
      return "apply";
    case stage::wait:
      return "wait";
    case stage::read:
      return "read";
    case stage::view:
      return "view";
    case stage::publish:
      return "publish";
  }
  return "unknown";
}

/// One measurement of one stage for one bucket of one step.
struct stage_sample {
  stage which = stage::encode;
  std::uint64_t step = 0;    ///< training step
  std::uint64_t bucket = 0;  ///< bucket id (the whole step for stage::wait)
  int rank = 0;              ///< rank of the pipeline that measured it
  std::uint32_t thread = 0;  ///< 0: the trainer's thread; 1, 2, 3: the encode, exchange and apply threads
  double start = 0;          ///< seconds since the pipeline was attached (steady clock)
  double seconds = 0;        ///< wall-clock duration, >= 0
  std::size_t bytes = 0;  ///< encode: frame bytes written; exchange: bytes sent; apply, read, view, publish: bytes read
  friend constexpr bool operator==(stage_sample const&, stage_sample const&) = default;
};

/// What one step did on one rank, reported once all of its buckets are applied.
struct step_report {
  std::uint64_t step = 0;
  int rank = 0;
  std::size_t dense_bytes = 0;    ///< fp32 bytes of the gradient (what dense training would send once)
  std::size_t encoded_bytes = 0;  ///< bytes of this rank's encoded frames
  std::size_t sent_bytes = 0;     ///< bytes this rank put on the wire
  double compression_ratio = 0;   ///< dense_bytes / encoded_bytes (compressed buckets and bypass together)
  double residual_norm = -1;      ///< L2 norm of the error-feedback state after the step; -1 when not measured
  double encode_seconds = 0;      ///< summed over buckets
  double exchange_seconds = 0;    ///< summed over buckets
  double apply_seconds = 0;       ///< summed over buckets
  double wait_seconds = 0;        ///< time the trainer spent blocked in the pipeline during this step's calls
  friend constexpr bool operator==(step_report const&, step_report const&) = default;
};

/// Receives telemetry. `sink.record(sample)` and `sink.record(report)` are called from the
/// pipeline's stage threads and the trainer's thread concurrently: the sink provides its own
/// synchronisation. Neither may throw.
template <class S>
concept TelemetrySink = requires(S& s, stage_sample const& sample, step_report const& report) {
  { s.record(sample) }
  noexcept;
  { s.record(report) }
  noexcept;
};

/// The sink that discards everything (the default).
struct null_telemetry {
  void record(stage_sample const&) noexcept {}
  void record(step_report const&) noexcept {}
};
static_assert(TelemetrySink<null_telemetry>);

}  // namespace sluice
