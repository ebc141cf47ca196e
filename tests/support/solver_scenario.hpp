// The trace-replay scenario shared by tests/solver/test_replay.cpp and bench/solver: GPT-2 small's
// gradient layout on four heterogeneous GPUs behind one shared link whose bandwidth moves between
// 50 Mbit/s and 1 Gbit/s.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include <sluice/solver/replay.hpp>

namespace sluice::test {

/// GPT-2 small (Radford et al. 2019, 124M parameters): token and position embeddings, 12 blocks,
/// final layer norm; LayerNorm scales and all biases as 1-D tensors.
inline layout gpt2_small_layout() {
  layout l;
  l.add("wte", {50257, 768}).add("wpe", {1024, 768});
  for (int b = 0; b < 12; ++b) {
    l.add(fmt::format("h{}.ln_1", b), {2 * 768});
    l.add(fmt::format("h{}.attn.c_attn.w", b), {768, 2304}).add(fmt::format("h{}.attn.c_attn.b", b), {2304});
    l.add(fmt::format("h{}.attn.c_proj.w", b), {768, 768}).add(fmt::format("h{}.attn.c_proj.b", b), {768});
    l.add(fmt::format("h{}.ln_2", b), {2 * 768});
    l.add(fmt::format("h{}.mlp.c_fc.w", b), {768, 3072}).add(fmt::format("h{}.mlp.c_fc.b", b), {3072});
    l.add(fmt::format("h{}.mlp.c_proj.w", b), {3072, 768}).add(fmt::format("h{}.mlp.c_proj.b", b), {768});
  }
  l.add("ln_f", {2 * 768});
  return l;
}

/// GPT-2 small at sequence length 1024 on two fast and two slow GPUs (seconds per step: fixed + per
/// sequence; memory caps in sequences), one 4-rank link level.
inline problem replay_problem() {
  problem p;
  p.workers = {{{0.010, 0.006}, 16}, {{0.010, 0.006}, 16}, {{0.015, 0.012}, 8}, {{0.015, 0.012}, 8}};
  p.links = {{4, 125e6, 200e-6}};
  p.model = gpt2_small_layout();
  // CPU rates of the order docs/performance.md measures on a 16-core host (top_k 1 %: ~30 GB/s
  // of gradient; dense Adam: ~100 GB/s streamed, ~7 bytes per gradient byte).
  p.codecs = {{identity{}, 0},
              {maxmin_quantize{.bits = 8}, 0.04e-9},
              {maxmin_quantize{.bits = 4}, 0.04e-9},
              {maxmin_quantize{.bits = 2}, 0.04e-9},
              {top_k{.ratio = 0.1}, 0.05e-9},
              {top_k{.ratio = 0.03}, 0.05e-9},
              {top_k{.ratio = 0.01}, 0.05e-9},
              {top_k{.ratio = 0.003}, 0.05e-9},
              {top_k{.ratio = 0.001}, 0.05e-9},
              {block_top_k{.ratio = 0.01}, 0.03e-9},
              {block_top_k{.ratio = 0.003}, 0.03e-9}};
  p.global_batches = {8, 16, 24, 32, 48};
  p.bucket_caps = {std::size_t{4} << 20, std::size_t{25} << 20, std::size_t{100} << 20};
  p.apply_seconds_per_byte = 0.07e-9;
  p.efficiency.reference_steps = 50000;
  p.efficiency.reference_batch = 32;
  p.efficiency.noise_scale = 1024;
  return p;
}

/// Minutes at each rate (Mbit/s), repeated: between 50 Mbit/s and 1 Gbit/s.
inline std::vector<trace_segment> replay_trace() {
  std::vector<trace_segment> t;
  for (auto [minutes, mbps] : std::vector<std::pair<double, double>>{
           {20, 1000}, {15, 50}, {10, 300}, {20, 50}, {15, 1000}, {10, 100}, {10, 600}, {15, 50}})
    t.push_back({minutes * 60, mbps * 1e6 / 8});
  return t;
}

inline replay_options replay_settings() {
  replay_options o;
  o.noise = 0.1;
  o.record_every = 20;
  o.control.decide_every = 5;
  o.control.switch_delay = 2;
  o.control.min_gain = 0.05;
  o.control.min_dwell = 20;
  return o;
}

/// Time-to-accuracy of a static configuration, integrated segment by segment (steps are short
/// next to segments); ranks the candidates before the exact replay.
inline double static_time(solver const& s, plan const& c, std::vector<trace_segment> const& trace) {
  double t = 0, progress = 0;
  for (std::size_t i = 0; i < 1000000; ++i) {
    auto const& seg = trace[i % trace.size()];
    auto const pr = s.predict(c, std::vector<double>{seg.bytes_per_second});
    double const rate = 1 / pr.time_to_accuracy;  // progress per second
    if (progress + rate * seg.seconds >= 1) return t + (1 - progress) / rate;
    progress += rate * seg.seconds;
    t += seg.seconds;
  }
  return std::numeric_limits<double>::infinity();
}

/// The best static configuration for the trace: every feasible candidate ranked by static_time,
/// the best three replayed step by step.
inline std::pair<plan, replay_result> best_static(solver const& s, std::vector<trace_segment> const& trace,
                                                  replay_options const& o) {
  auto all = s.ranked({}, {}, std::numeric_limits<std::size_t>::max());
  std::vector<std::pair<double, std::size_t>> order;
  for (std::size_t i = 0; i < all.size(); ++i) order.push_back({static_time(s, all[i], trace), i});
  std::sort(order.begin(), order.end());
  std::pair<plan, replay_result> best{};
  best.second.time_to_accuracy = std::numeric_limits<double>::infinity();
  for (std::size_t k = 0; k < std::min<std::size_t>(3, order.size()); ++k) {
    auto const& c = all[order[k].second];
    auto r = replay_static(s, c, trace, o);
    if (r.time_to_accuracy < best.second.time_to_accuracy) best = {c, std::move(r)};
  }
  return best;
}

}  // namespace sluice::test
