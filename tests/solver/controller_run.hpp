// One rank's run for the controller tests (local threads and MPI): a small job whose link drops
// from 1 Gbit/s to 1 Mbit/s at step 30; every step encodes with error feedback under the
// configuration the controller returns and sums every rank's frame (a sparse allgather by hand).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <sluice/solver/controller.hpp>
#include <sluice/solver/monitor.hpp>

namespace sluice::test {

inline constexpr std::uint64_t controller_steps = 80, controller_drop_at = 30;

inline problem controller_job(int world) {
  problem p;
  for (int i = 0; i < world; ++i) p.workers.push_back({{0.01, 0.0005}, 64});
  p.links = {{static_cast<std::size_t>(world), 125e6, 50e-6}};
  p.model.add("w", {256, 256});
  p.codecs = {
      {identity{}, 0}, {top_k{.ratio = 0.1}, 1e-9}, {top_k{.ratio = 0.01}, 1e-9}, {maxmin_quantize{.bits = 4}, 1e-9}};
  p.global_batches = {16 * static_cast<std::size_t>(world)};
  p.bucket_caps = {std::size_t{1} << 20};
  return p;
}

inline double controller_bandwidth(std::uint64_t step) { return step < controller_drop_at ? 125e6 : 125e3; }

struct rank_record {
  std::vector<codec_value> codecs{};  // per step
  std::vector<switch_event> log{};
  std::vector<float> aggregate{};  // the last step's sum of all ranks' decoded frames
  double max_mass_error = 0;       // worst |sum of gradients - (sent + residual)| over elements
};

inline float controller_gradient(int rank, std::uint64_t step, std::size_t i) {
  auto const x = static_cast<double>((rank + 1) * 7919 + static_cast<int>(step) * 104729 + static_cast<int>(i));
  return static_cast<float>(std::sin(x * 0.618));
}

template <Transport T>
rank_record controller_run(T& t, solver const& s) {
  int const me = t.rank(), world = t.size();
  controller ctl(s, {}, controller_options{.switch_delay = 3, .min_dwell = 5});
  bandwidth_monitor mon;
  std::size_t const n = 256 * 256;
  std::vector<float> residual(n, 0), acc(n), agg(n, 0), decoded(n);
  std::vector<double> grad_sum(n, 0), sent_sum(n, 0);
  std::vector<std::byte> frame, in;
  rank_record r;
  for (std::uint64_t k = 0; k < controller_steps; ++k) {
    // Rank 0's estimate decides; the others pass a wrong one on purpose.
    std::vector<double> est{me == 0 ? (mon.samples() ? mon.estimate() : 125e6) : 1.0};
    plan const& cfg = ctl.step(t, k, est);
    r.codecs.push_back(cfg.codec);
    encode_context const ctx{.seed = 1, .rank = static_cast<std::uint32_t>(me), .step = k, .tensor = 0};
    for (std::size_t i = 0; i < n; ++i) {
      float const g = controller_gradient(me, k, i);
      grad_sum[i] += g;
      acc[i] = residual[i] + g;
    }
    std::visit(
        [&](auto const& c) {
          using C = std::decay_t<decltype(c)>;
          codec_workspace<C, float> ws;
          frame.resize(c.max_encoded_bytes(n));
          frame.resize(c.encode(std::span<float const>(acc), ctx, ws, frame));
          sluice::decode(c, frame, ctx, ws, std::span<float>(decoded));
          for (std::size_t i = 0; i < n; ++i) {
            residual[i] = acc[i] - decoded[i];  // error feedback: what was not sent is kept
            sent_sum[i] += decoded[i];
          }
          std::vector<typename T::request> reqs;
          for (int peer = 0; peer < world; ++peer)
            if (peer != me) reqs.push_back(t.send(peer, message_tag{100}, frame));
          std::fill(agg.begin(), agg.end(), 0.0f);
          for (int peer = 0; peer < world; ++peer) {  // summed in rank order on every rank
            std::span<std::byte const> msg = frame;
            if (peer != me) msg = t.recv(peer, message_tag{100}, in, deadline::after(std::chrono::seconds(60)));
            encode_context const pctx{.seed = 1, .rank = static_cast<std::uint32_t>(peer), .step = k, .tensor = 0};
            sluice::decode_add(c, msg, pctx, ws, std::span<float>(agg));
          }
          for (auto& q : reqs) q.wait(deadline::after(std::chrono::seconds(60)));
        },
        cfg.codec);
    if (me == 0) {
      std::size_t const bytes = frame.size() * static_cast<std::size_t>(world - 1);
      mon.observe(bytes, static_cast<double>(bytes) / controller_bandwidth(k), static_cast<double>(k));
    }
  }
  for (std::size_t i = 0; i < n; ++i)
    r.max_mass_error = std::max(r.max_mass_error, std::abs(grad_sum[i] - (sent_sum[i] + residual[i])));
  r.log.assign(ctl.log().begin(), ctl.log().end());
  r.aggregate = agg;
  return r;
}

/// A rank's observable outcome as text: codec per step, switches, and a checksum of the aggregate.
inline std::string controller_digest(rank_record const& r) {
  std::string s;
  for (auto const& c : r.codecs) s += fmt::format("{};", c);
  for (auto const& e : r.log) s += fmt::format("|{}->{}@{}:{}", e.from.codec, e.to.codec, e.effective_step, e.reason);
  double sum = 0;
  for (float v : r.aggregate) sum = sum * 1.0000001 + static_cast<double>(v);
  return s + fmt::format("|{:a}", sum);
}

/// Checks that hold on every rank: a switch to stronger compression after the drop, taking
/// effect exactly switch_delay steps after the decision; no flapping; no residual mass lost.
inline bool controller_checks(rank_record const& r, std::string& why) {
  bool stronger = false;
  for (auto const& e : r.log) {
    if (e.effective_step != e.decided_step + 3 || e.reason.empty()) return why = "bad switch event", false;
    if (e.decided_step >= controller_drop_at && density(e.to.codec) < density(e.from.codec)) {
      stronger = true;
      if (!(r.codecs[e.effective_step - 1] == e.from.codec) || !(r.codecs[e.effective_step] == e.to.codec))
        return why = "switch not at its effective step", false;
    }
  }
  if (!stronger) return why = "no switch to stronger compression after the drop", false;
  if (density(r.codecs.back()) > 0.01) return why = "final codec too weak", false;
  if (r.log.size() > 3) return why = "flapping", false;
  if (r.max_mass_error >= 1e-3) return why = fmt::format("residual mass lost: {}", r.max_mass_error), false;
  return true;
}

}  // namespace sluice::test
