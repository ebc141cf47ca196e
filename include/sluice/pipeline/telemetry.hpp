// Telemetry sinks for the pipeline: JSON lines to a FILE* (one object per sample or report, what
// a bandwidth monitor or a plotting script reads) and an in-memory recorder; fmt formatters for
// stage_sample and step_report.
#pragma once

#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/core.h>

#include <sluice/core/detail/spec_formatter.hpp>
#include <sluice/pipeline/concepts.hpp>

template <>
struct fmt::formatter<sluice::stage> : sluice::detail::spec_formatter {
  template <class Ctx>
  auto format(sluice::stage s, Ctx& ctx) const {
    return format_with_spec(sluice::to_string(s), ctx);
  }
};

/// {"stage":"encode","step":3,"bucket":1,"rank":0,"thread":1,"start":0.012345,"seconds":0.000456,"bytes":1024}
template <>
struct fmt::formatter<sluice::stage_sample> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(sluice::stage_sample const& s, Ctx& ctx) const {
    return fmt::format_to(
        ctx.out(),
        R"({{"stage":"{}","step":{},"bucket":{},"rank":{},"thread":{},"start":{:.6f},"seconds":{:.6f},"bytes":{}}})",
        sluice::to_string(s.which), s.step, s.bucket, s.rank, s.thread, s.start, s.seconds, s.bytes);
  }
};

/// {"report":"step","step":3,"rank":0,"dense_bytes":...,"compression_ratio":...,...}
template <>
struct fmt::formatter<sluice::step_report> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(sluice::step_report const& r, Ctx& ctx) const {
    return fmt::format_to(
        ctx.out(),
        R"({{"report":"step","step":{},"rank":{},"dense_bytes":{},"encoded_bytes":{},"sent_bytes":{},"compression_ratio":{:.3f},"residual_norm":{:.6g},"encode_seconds":{:.6f},"exchange_seconds":{:.6f},"apply_seconds":{:.6f},"wait_seconds":{:.6f}}})",
        r.step, r.rank, r.dense_bytes, r.encoded_bytes, r.sent_bytes, r.compression_ratio, r.residual_norm,
        r.encode_seconds, r.exchange_seconds, r.apply_seconds, r.wait_seconds);
  }
};

namespace sluice {

/// Writes every sample and report as one JSON object per line to a FILE* the caller owns.
/// Thread-safe (one mutex); `reports_only` skips the per-bucket samples.
class json_lines_sink {
 public:
  explicit json_lines_sink(std::FILE* out, bool reports_only = false) noexcept
      : out_(out), reports_only_(reports_only) {}
  void record(stage_sample const& s) noexcept {
    if (!reports_only_) write(s);
  }
  void record(step_report const& r) noexcept { write(r); }

 private:
  template <class X>
  void write(X const& x) noexcept {
    try {
      std::string const line = fmt::format("{}\n", x);
      std::lock_guard lock(m_);
      std::fputs(line.c_str(), out_);
    } catch (...) {  // a sink never throws into the pipeline; a lost line is the lesser harm
    }
  }
  std::FILE* out_;
  bool reports_only_;
  std::mutex m_;
};
static_assert(TelemetrySink<json_lines_sink>);

/// Keeps every sample and report in memory (tests, timelines). Thread-safe; copy out with
/// samples() / reports() between steps.
class recording_sink {
 public:
  void record(stage_sample const& s) noexcept {
    std::lock_guard lock(m_);
    try {
      samples_.push_back(s);
    } catch (...) {
    }
  }
  void record(step_report const& r) noexcept {
    std::lock_guard lock(m_);
    try {
      reports_.push_back(r);
    } catch (...) {
    }
  }
  [[nodiscard]] std::vector<stage_sample> samples() const {
    std::lock_guard lock(m_);
    return samples_;
  }
  [[nodiscard]] std::vector<step_report> reports() const {
    std::lock_guard lock(m_);
    return reports_;
  }

 private:
  mutable std::mutex m_;
  std::vector<stage_sample> samples_;
  std::vector<step_report> reports_;
};
static_assert(TelemetrySink<recording_sink>);

}  // namespace sluice
