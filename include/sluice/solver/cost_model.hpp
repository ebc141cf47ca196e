// The cost model: plain, deterministic functions that predict one training step's time from
// measured compute fits, CPU stage rates, per-level link bandwidth and latency, and the exact frame
// sizes of the codecs (max_encoded_bytes). docs/solver.md writes the model down.
//
// Integration: feed compute_samples::observe(batch, seconds) with each step's forward/backward time
// per worker, cpu_rate::observe(bytes, seconds) with the encode and optimizer stage times, and a
// bandwidth_monitor (solver/monitor.hpp) per link level with communication completions; the
// solver (solver/solve.hpp) turns their estimates into a configuration.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include <fmt/core.h>

#include <sluice/compress/block_top_k.hpp>
#include <sluice/compress/identity.hpp>
#include <sluice/compress/maxmin_quantize.hpp>
#include <sluice/compress/top_k.hpp>
#include <sluice/core/detail/spec_formatter.hpp>
#include <sluice/core/error.hpp>

namespace sluice {

/// A worker's compute time per step as a function of its batch size b (samples):
/// f(b) = fixed_seconds + per_sample_seconds * b, with fixed_seconds >= 0 and per_sample_seconds > 0.
/// The fixed part is what a GPU spends whatever the batch (launches, the saturated-occupancy floor
/// at small b); the slope is its throughput once saturated.
struct compute_fit {
  double fixed_seconds = 0;          ///< seconds, >= 0
  double per_sample_seconds = 1e-3;  ///< seconds per sample, > 0

  /// Predicted seconds of one forward/backward pass over b samples.
  [[nodiscard]] constexpr double seconds(std::size_t b) const noexcept {
    return fixed_seconds + per_sample_seconds * static_cast<double>(b);
  }
  /// errc::invalid_argument for a negative or non-finite part or a slope that is not > 0.
  void validate(std::size_t worker) const {
    require(std::isfinite(fixed_seconds) && fixed_seconds >= 0, errc::invalid_argument,
            "compute_fit: worker {} has fixed_seconds {}; it must be finite and >= 0", worker, fixed_seconds);
    require(std::isfinite(per_sample_seconds) && per_sample_seconds > 0, errc::invalid_argument,
            "compute_fit: worker {} has per_sample_seconds {}; it must be finite and > 0 (measure a step first)",
            worker, per_sample_seconds);
  }
  friend bool operator==(compute_fit const&, compute_fit const&) = default;
};

/// Measured (batch, seconds) samples of one worker, fitted by least squares to compute_fit. Keeps
/// the last `capacity` samples so the fit follows a GPU that throttles. A negative intercept is refitted through the
/// origin; with a single distinct batch size the fit is the line through the origin and the mean.
class compute_samples {
 public:
  explicit compute_samples(std::size_t capacity = 64) : capacity_(std::max<std::size_t>(capacity, 2)) {}

  /// Adds one measured step. errc::invalid_argument for b == 0 or seconds not finite and > 0.
  void observe(std::size_t batch, double seconds) {
    require(batch > 0, errc::invalid_argument, "compute_samples: batch size 0; time steps of at least one sample");
    require(std::isfinite(seconds) && seconds > 0, errc::invalid_argument,
            "compute_samples: step time {} s; it must be finite and > 0", seconds);
    if (samples_.size() == capacity_) samples_.pop_front();
    samples_.push_back({static_cast<double>(batch), seconds});
  }
  [[nodiscard]] std::size_t size() const noexcept { return samples_.size(); }

  /// The least-squares fit; errc::invalid_argument when no sample was observed yet.
  [[nodiscard]] compute_fit fit() const {
    require(!samples_.empty(), errc::invalid_argument, "compute_samples: no samples; observe at least one step");
    // Two unknowns: the closed form on centred sums, which is how a QR solve of the 2-column
    // system behaves numerically (no normal equations of uncentred sums, which cancel badly when
    // the batch sizes are large and close together).
    double const n = static_cast<double>(samples_.size());
    double mb = 0, ms = 0;
    for (auto const& s : samples_) mb += s.batch, ms += s.seconds;
    mb /= n, ms /= n;
    double sbb = 0, sbs = 0;
    for (auto const& s : samples_) sbb += (s.batch - mb) * (s.batch - mb), sbs += (s.batch - mb) * (s.seconds - ms);
    if (sbb > 0) {  // at least two distinct batch sizes
      double const c = sbs / sbb, a = ms - c * mb;
      if (a >= 0 && c > 0) return {a, c};
    }
    // Through the origin: minimises sum (y - c b)^2.
    double sb2 = 0, sby = 0;
    for (auto const& s : samples_) sb2 += s.batch * s.batch, sby += s.batch * s.seconds;
    return {0.0, sby / sb2};
  }

 private:
  struct sample {
    double batch, seconds;
  };
  std::size_t capacity_;
  std::deque<sample> samples_{};
};

/// A CPU stage's cost in seconds per byte of dense gradient, from measured (bytes, seconds) pairs:
/// an exponentially weighted mean of seconds / bytes. Deterministic in the order of samples.
class cpu_rate {
 public:
  explicit cpu_rate(double seconds_per_byte = 0, double alpha = 0.2) : rate_(seconds_per_byte), alpha_(alpha) {}

  /// Adds one measurement. errc::invalid_argument for zero bytes or a negative or non-finite time.
  void observe(std::size_t bytes, double seconds) {
    require(bytes > 0 && std::isfinite(seconds) && seconds >= 0, errc::invalid_argument,
            "cpu_rate: {} bytes in {} s; bytes must be > 0 and seconds finite and >= 0", bytes, seconds);
    double const r = seconds / static_cast<double>(bytes);
    rate_ = seen_ ? rate_ + alpha_ * (r - rate_) : r;
    seen_ = true;
  }
  /// Seconds per dense byte.
  [[nodiscard]] double seconds_per_byte() const noexcept { return rate_; }

 private:
  double rate_;
  double alpha_;
  bool seen_ = false;
};

/// One level of the network, innermost first. `group` ranks exchange over links of this level (a
/// single-level world of N ranks: group = N; two levels of 4 nodes x 8 GPUs: {8, intra}, {4, inter}).
struct link_level {
  std::size_t group = 2;            ///< ranks per group at this level, >= 1
  double bytes_per_second = 125e6;  ///< goodput per rank, > 0 (1 Gbit/s = 125e6)
  double latency_seconds = 50e-6;   ///< per message, >= 0
  friend bool operator==(link_level const&, link_level const&) = default;
};

/// The codecs the solver chooses between: regular policy values, swapped between steps.
using codec_value = std::variant<identity, top_k, block_top_k, maxmin_quantize>;

/// The fraction of the gradient's information a codec keeps, the x axis of the statistical
/// efficiency curve: 1 for identity, the ratio for sparsifiers, bits / 32 for quantizers.
inline double density(codec_value const& c) noexcept {
  return std::visit(
      [](auto const& v) -> double {
        using C = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<C, identity>)
          return 1.0;
        else if constexpr (std::is_same_v<C, maxmin_quantize>)
          return static_cast<double>(v.bits) / 32.0;
        else
          return v.ratio;
      },
      c);
}

/// Checks a codec's policy values (the codecs' own validate()).
inline void validate(codec_value const& c) {
  std::visit(
      [](auto const& v) {
        if constexpr (requires { v.validate(); }) v.validate();
      },
      c);
}

/// Frame bytes for n elements (fp32 gradients): the codec's exact max_encoded_bytes(n).
inline std::size_t frame_bytes(codec_value const& c, std::size_t n) noexcept {
  return std::visit([n](auto const& v) { return v.max_encoded_bytes(n); }, c);
}

/// Bytes one rank sends, and messages it sends one after the other, for one bucket of n elements
/// over a group of g ranks, with the collective each codec is built for (docs/collective.md):
/// identity: ring allreduce, 2 (g-1) frames of ceil(n/g) elements; quantizers: CGX
/// scatter-reduce-allgather, the same count of encoded chunks; sparsifiers: sparse allgather,
/// (g-1) copies of the whole frame times `frames` (frames gathered at inner levels travel on).
struct traffic {
  double bytes = 0;     ///< bytes sent by one rank
  double messages = 0;  ///< messages on the critical path (each pays the level's latency)
  double received = 0;  ///< bytes received on the critical path while nothing is sent (a leader's sum)
};
inline traffic bucket_traffic(codec_value const& c, std::size_t n, std::size_t g, std::size_t frames) noexcept {
  if (g <= 1 || n == 0) return {};
  auto const hops = static_cast<double>(g - 1);
  if (std::holds_alternative<identity>(c) || std::holds_alternative<maxmin_quantize>(c)) {
    std::size_t const chunk = (n + g - 1) / g;
    return {2 * hops * static_cast<double>(frame_bytes(c, chunk)), 2 * hops};
  }
  return {hops * static_cast<double>(frames * frame_bytes(c, n)), hops};
}

/// Whether frames are gathered (and so grow level by level) rather than reduced.
inline bool gathers(codec_value const& c) noexcept {
  return std::holds_alternative<top_k>(c) || std::holds_alternative<block_top_k>(c);
}

/// One phase of a bucket's exchange: the load on each link level's uplinks (innermost first),
/// which carry it at the same time, so the phase lasts as long as its slowest level.
using exchange_phase = std::vector<traffic>;

/// One bucket of n elements exchanged by the codec's collective over every rank of `links` at
/// once (sluice::by_codec over one transport; ranks numbered group by group, as launchers number
/// them), phase by phase. Level l's uplink serves the s_l = group_0 x ... x group_(l-1) ranks
/// below it (s_0 = 1: a rank's own link) and carries what they send to ranks outside them: one
/// item per step of a ring (identity's ring allreduce; the allgather that ends the quantizers' and
/// the sparsifiers' collectives), and s_l (N - s_l) chunks in the quantizers' pairwise
/// reduce-scatter. One level of N ranks gives bucket_traffic(c, n, N, 1), split into phases.
inline std::vector<exchange_phase> flat_exchange(codec_value const& c, std::size_t n,
                                                 std::span<link_level const> links) {
  std::size_t ranks = 1;
  for (auto const& l : links) ranks *= l.group;
  if (ranks <= 1 || n == 0) return {};
  auto const steps = static_cast<double>(ranks - 1);
  // Per level: the ranks below its uplink, when some lie outside them (else 0: not crossed).
  std::vector<std::size_t> below(links.size(), 0);
  for (std::size_t l = 0, s = 1; l < links.size(); s *= links[l].group, ++l) below[l] = s < ranks ? s : 0;
  auto const ring = [&](double item, double count) {
    exchange_phase ph(links.size());
    for (std::size_t l = 0; l < links.size(); ++l)
      if (below[l] != 0) ph[l] = {count * item, count};
    return ph;
  };
  if (gathers(c)) return {ring(static_cast<double>(frame_bytes(c, n)), steps)};
  auto const chunk = static_cast<double>(frame_bytes(c, (n + ranks - 1) / ranks));
  if (std::holds_alternative<identity>(c)) return {ring(chunk, 2 * steps)};
  exchange_phase pairwise(links.size());
  for (std::size_t l = 0; l < links.size(); ++l)
    if (below[l] != 0) pairwise[l] = {static_cast<double>(below[l] * (ranks - below[l])) * chunk, steps};
  return {std::move(pairwise), ring(chunk, steps)};
}

/// How the ranks use the link levels (docs/solver.md, "Tiers").
enum class exchange_kind : std::uint8_t {
  flat,          ///< the codec's collective over every rank at once (flat_exchange)
  hierarchical,  ///< sluice::by_hierarchical: the innermost level sums fp32 on each group's leader;
                 ///< the leaders alone run the codec's collective over the outer levels
};

/// by_hierarchical's innermost level, for one bucket of n elements and groups of g ranks: the
/// leader receives the g - 1 members' fp32 frames one after the other, sums them, and (after the
/// leaders' exchange) sends each member the fp32 result. Bytes are the leader's, the busiest rank;
/// its link carries the members' frames in and the results out, one after the other.
inline traffic leader_traffic(std::size_t n, std::size_t g) noexcept {
  if (g <= 1 || n == 0) return {};
  auto const members = static_cast<double>(g - 1);
  auto const dense = static_cast<double>(frame_bytes(identity{}, n));
  return {members * dense, members + 1, members * dense};
}

/// The density the statistical-efficiency curve is read at. Flat: density(c). Hierarchical: a
/// sparsifier's leader keeps `ratio` of its group's sum of `group` gradients, so the information
/// per worker is density / group (measured: 1 % per leader costs steps that 2 % restores,
/// docs/performance/tiers.md); quantizers and identity keep every coordinate, as flat.
inline double effective_density(codec_value const& c, exchange_kind x, std::size_t group) noexcept {
  double const d = density(c);
  if (x == exchange_kind::hierarchical && gathers(c) && group > 1) return d / static_cast<double>(group);
  return d;
}

/// Seconds of each stage of one step (all buckets), and the step time under a staleness.
struct stage_seconds {
  double compute = 0;    ///< slowest worker's forward/backward
  double encode = 0;     ///< error feedback + codec, all buckets
  double exchange = 0;   ///< collectives, all buckets and levels
  double apply = 0;      ///< optimizer, all buckets
  double pipelined = 0;  ///< one step's encode -> exchange -> apply over the buckets as a flow shop
};

/// Step time (docs/solver.md, "Step time"):
///  s = 0: compute + pipelined (the buckets of a step flow through encode, exchange and apply
///         while the next step waits);
///  s = 1: max(compute, pipelined) (the next forward/backward overlaps this step's pipeline);
///  s >= 2: max(compute, encode, exchange, apply) (each stage works on a different step).
constexpr double step_seconds(stage_seconds const& t, int staleness) noexcept {
  if (staleness <= 0) return t.compute + t.pipelined;
  if (staleness == 1) return std::max(t.compute, t.pipelined);
  return std::max({t.compute, t.encode, t.exchange, t.apply});
}

/// Makespan of buckets flowing through three stages in order (a permutation flow shop, buckets in
/// plan order): C[s][j] = max(C[s-1][j], C[s][j-1]) + t[s][j].
inline double flow_shop(std::span<double const> e, std::span<double const> x, std::span<double const> o) noexcept {
  double c0 = 0, c1 = 0, c2 = 0;
  for (std::size_t j = 0; j < e.size(); ++j) {
    c0 += e[j];
    c1 = std::max(c0, c1) + x[j];
    c2 = std::max(c1, c2) + o[j];
  }
  return c2;
}

}  // namespace sluice

/// Prints a codec value as "top_k{.ratio = 0.01}".
template <>
struct fmt::formatter<sluice::codec_value> : sluice::detail::spec_formatter {
  auto format(sluice::codec_value const& c, format_context& ctx) const {
    std::string s = std::visit(
        [](auto const& v) -> std::string {
          using C = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<C, sluice::identity>)
            return "identity{}";
          else if constexpr (std::is_same_v<C, sluice::top_k>)
            return fmt::format("top_k{{.ratio = {}}}", v.ratio);
          else if constexpr (std::is_same_v<C, sluice::block_top_k>)
            return fmt::format("block_top_k{{.ratio = {}, .block = {}}}", v.ratio, v.block);
          else
            return fmt::format("maxmin_quantize{{.bits = {}, .bucket = {}}}", v.bits, v.bucket);
        },
        c);
    return format_with_spec(s, ctx);
  }
};
