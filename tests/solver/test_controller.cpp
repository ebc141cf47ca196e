// The controller over real transports (threads on the local transport): a bandwidth drop mid-run
// makes every rank switch codec strength at the same step, and training with error feedback
// continues through the switch without losing any residual mass.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include <sluice/solver/controller.hpp>
#include <sluice/solver/monitor.hpp>

#include "support/local_world.hpp"

namespace {

using namespace sluice;

constexpr int world = 3;
constexpr std::uint64_t steps = 80, drop_at = 30;

problem small_job() {
  problem p;
  for (int i = 0; i < world; ++i) p.workers.push_back({{0.01, 0.0005}, 64});
  p.links = {{world, 125e6, 50e-6}};
  p.model.add("w", {256, 256});
  p.codecs = {
      {identity{}, 0}, {top_k{.ratio = 0.1}, 1e-9}, {top_k{.ratio = 0.01}, 1e-9}, {maxmin_quantize{.bits = 4}, 1e-9}};
  p.global_batches = {48};
  p.bucket_caps = {std::size_t{1} << 20};
  return p;
}

double true_bandwidth(std::uint64_t step) { return step < drop_at ? 125e6 : 125e3; }  // 1 Gbit/s -> 1 Mbit/s

float gradient(int rank, std::uint64_t step, std::size_t i) {
  auto const x = static_cast<double>((rank + 1) * 7919 + static_cast<int>(step) * 104729 + static_cast<int>(i));
  return static_cast<float>(std::sin(x * 0.618));
}

struct rank_record {
  std::vector<codec_value> codecs;  // per step
  std::vector<switch_event> log;
  std::vector<float> aggregate;  // final sum of all ranks' decoded messages
  double max_mass_error = 0;     // |sum of gradients - (sent + residual)|, worst element
};

}  // namespace

TEST_CASE("a bandwidth drop switches every rank's codec at the same step, residuals intact") {
  solver const s(small_job());
  std::vector<rank_record> rec(world);
  auto errors = test::run_local(world, [&](local_transport& t) {
    int const me = t.rank();
    controller ctl(s, {}, controller_options{.switch_delay = 3, .min_dwell = 5});
    bandwidth_monitor mon;
    std::size_t const n = 256 * 256;
    std::vector<float> residual(n, 0), acc(n), agg(n, 0), decoded(n);
    std::vector<double> grad_sum(n, 0), sent_sum(n, 0);
    std::vector<std::byte> frame, in;
    auto& r = rec[static_cast<std::size_t>(me)];
    for (std::uint64_t k = 0; k < steps; ++k) {
      // Rank 0's estimate decides; the others pass a wrong one on purpose.
      std::vector<double> est{me == 0 ? (mon.samples() ? mon.estimate() : 125e6) : 1.0};
      plan const& cfg = ctl.step(t, k, est);
      r.codecs.push_back(cfg.codec);
      encode_context const ctx{.seed = 1, .rank = static_cast<std::uint32_t>(me), .step = k, .tensor = 0};
      for (std::size_t i = 0; i < n; ++i) {
        float const g = gradient(me, k, i);
        grad_sum[i] += g;
        acc[i] = residual[i] + g;
      }
      std::visit(
          [&](auto const& c) {
            using C = std::decay_t<decltype(c)>;
            codec_workspace<C, float> ws;
            frame.resize(c.max_encoded_bytes(n));
            frame.resize(c.encode(std::span<float const>(acc), ctx, ws, frame));
            c.decode(frame, ctx, ws, std::span<float>(decoded));
            for (std::size_t i = 0; i < n; ++i) {
              residual[i] = acc[i] - decoded[i];  // error feedback: what was not sent is kept
              sent_sum[i] += decoded[i];
            }
            // Sparse allgather by hand: everyone's frame to everyone, summed in rank order.
            std::vector<local_transport::request> reqs;
            for (int peer = 0; peer < world; ++peer)
              if (peer != me) reqs.push_back(t.send(peer, message_tag{100}, frame));
            std::fill(agg.begin(), agg.end(), 0.0f);
            for (int peer = 0; peer < world; ++peer) {
              std::span<std::byte const> msg = frame;
              if (peer != me) msg = t.recv(peer, message_tag{100}, in, deadline::after(std::chrono::seconds(30)));
              encode_context const pctx{.seed = 1, .rank = static_cast<std::uint32_t>(peer), .step = k, .tensor = 0};
              c.decode_add(msg, pctx, ws, std::span<float>(agg));
            }
            for (auto& q : reqs) q.wait(deadline::after(std::chrono::seconds(30)));
          },
          cfg.codec);
      if (me == 0) {
        std::size_t const bytes = frame.size() * (world - 1);
        mon.observe(bytes, static_cast<double>(bytes) / true_bandwidth(k), static_cast<double>(k));
      }
    }
    for (std::size_t i = 0; i < n; ++i)
      r.max_mass_error = std::max(r.max_mass_error, std::abs(grad_sum[i] - (sent_sum[i] + residual[i])));
    r.log.assign(ctl.log().begin(), ctl.log().end());
    r.aggregate = agg;
  });
  test::rethrow_first(errors);
  for (int i = 1; i < world; ++i) {
    auto const& a = rec[0];
    auto const& b = rec[static_cast<std::size_t>(i)];
    CHECK(a.codecs == b.codecs);  // the same configuration at every step on every rank
    REQUIRE(a.log.size() == b.log.size());
    for (std::size_t e = 0; e < a.log.size(); ++e) {
      CHECK(a.log[e].effective_step == b.log[e].effective_step);
      CHECK(a.log[e].reason == b.log[e].reason);
      CHECK(a.log[e].to.same_config(b.log[e].to));
    }
    CHECK(a.aggregate == b.aggregate);  // every rank summed the same frames
  }
  auto const& log = rec[0].log;
  REQUIRE(!log.empty());
  // A switch towards stronger compression after the drop, effective switch_delay steps later.
  bool stronger = false;
  for (auto const& e : log) {
    CHECK(e.effective_step == e.decided_step + 3);
    CHECK(!e.reason.empty());
    if (e.decided_step >= drop_at && density(e.to.codec) < density(e.from.codec)) {
      stronger = true;
      CHECK(rec[0].codecs[e.effective_step - 1] == e.from.codec);
      CHECK(rec[0].codecs[e.effective_step] == e.to.codec);
    }
  }
  CHECK(stronger);
  CHECK(density(rec[0].codecs.back()) <= 0.01);
  // No switch flaps back and forth while the bandwidth is constant (hysteresis).
  CHECK(log.size() <= 3);
  for (auto const& r : rec) CHECK(r.max_mass_error < 1e-3);
  MESSAGE("switches: ", log.size(), "; first: ", log.front().reason);
}
