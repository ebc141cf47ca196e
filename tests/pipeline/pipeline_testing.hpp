// Shared by the pipeline tests: a small model with compressed and bypassed tensors, options with
// small buckets, deterministic parameters and gradients that depend on rank, step and parameters.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <unistd.h>

#include <sluice/pipeline/all.hpp>
#include <sluice/sluice.hpp>

namespace sluice::test {

inline constexpr std::uint64_t seed = 11;

// Two compressed matrices, a bias and a small matrix that bypass compression; small caps so the
// plan has several buckets of both kinds.
inline layout model() {
  layout l;
  l.add("fc1.weight", {48, 100});
  l.add("fc1.bias", {48});
  l.add("fc2.weight", {40, 48});
  l.add("fc3.weight", {10, 40});
  l.add("fc3.bias", {10});
  return l;
}
// Without staleness compensation unless asked: the tests that compare with the hand composition
// check the delayed-update definition itself.
inline pipeline_options small_buckets(unsigned staleness = 0,
                                      compensation_method compensation = compensation_method::none) {
  return {.staleness = staleness,
          .bucketing = {.cap_bytes = 12 << 10, .first_cap_bytes = 4 << 10},
          .seed = seed,
          .timeout = std::chrono::milliseconds(20'000),
          .compensation = {.method = compensation}};
}

struct model_params {
  std::vector<std::vector<float>> tensors;
  explicit model_params(layout const& l) {
    random_stream const rs({.seed = 3});
    std::uint64_t k = 0;
    for (auto const& t : l.tensors()) {
      auto& v = tensors.emplace_back(t.elements());
      for (float& x : v) x = rs.uniform(k++) - 0.5f;
    }
  }
  std::vector<std::span<float>> spans() {
    std::vector<std::span<float>> s;
    for (auto& v : tensors) s.emplace_back(v);
    return s;
  }
  friend bool operator==(model_params const&, model_params const&) = default;
};

// The gradient a rank computes at `step` from parameters `p`: depends on the parameters (so
// staleness changes the trajectory) and on the rank (so ranks disagree before aggregation).
inline void gradients(int rank, std::uint64_t step, model_params const& p, std::vector<std::vector<float>>& g) {
  random_stream const rs(
      {.seed = 5, .rank = static_cast<std::uint32_t>(rank), .step = static_cast<std::uint32_t>(step)});
  g.resize(p.tensors.size());
  std::uint64_t k = 0;
  for (std::size_t i = 0; i < p.tensors.size(); ++i) {
    g[i].resize(p.tensors[i].size());
    for (std::size_t j = 0; j < g[i].size(); ++j) g[i][j] = 0.5f * p.tensors[i][j] + (rs.uniform(k++) - 0.5f);
  }
}
inline std::vector<std::span<float const>> views(std::vector<std::vector<float>> const& g) {
  std::vector<std::span<float const>> s;
  for (auto const& v : g) s.emplace_back(v);
  return s;
}

// The hand composition: the same primitives the pipeline assembles, called in order by one thread.
/// Steps `pipe` (attached to model() with p's spans) until rank `dying` exits mid-step 2 with one
/// bucket handed over and nothing closed; every other rank must raise peer_lost or timeout within
/// 30 s. Returns the child's exit code: 0 for the expected error, 41 for another or a late one,
/// 42 when no error came.
template <class Pipeline>
int run_until_peer_dies(Pipeline& pipe, int rank, int dying, model_params const& p) {
  std::vector<std::vector<float>> g;
  auto const t0 = std::chrono::steady_clock::now();
  try {
    for (std::uint64_t s = 0; s < 50; ++s) {
      gradients(rank, s, p, g);
      if (rank == dying && s == 2) {
        pipe.gradient_ready(0, g[0]);  // one bucket may be on its way
        ::_exit(0);
      }
      pipe.step(views(g));
    }
    pipe.synchronize();
  } catch (error const& e) {
    bool const in_time = std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30);
    bool const clear = e.kind() == errc::peer_lost || e.kind() == errc::timeout;
    if (!(in_time && clear)) std::fprintf(stderr, "rank %d: unexpected error: %s\n", rank, e.what());
    return in_time && clear ? 0 : 41;
  }
  std::fprintf(stderr, "rank %d: no error after rank %d died\n", rank, dying);
  return 42;
}

template <class C, class F, class O>
struct hand_composition {
  C codec;
  F feedback;
  O opt;
  local_transport& t;
  pipeline_options options;
  layout l;
  bucket_plan plan;
  std::vector<std::size_t> first;
  std::unique_ptr<feedback_state> fstate;
  std::vector<optimizer_state<O>> ostates;
  std::vector<float> master;
  feedback_workspace<C, float> fws;
  sparse_allgather_workspace<C> aws;
  scatter_reduce_allgather_workspace<C> sws;
  ring_allreduce_workspace rws;

  hand_composition(C c, F f, O o, local_transport& tr, pipeline_options po, layout const& lay, model_params const& p)
      : codec(c), feedback(f), opt(o), t(tr), options(po), l(lay), plan(l, po.bucketing) {
    std::vector<std::size_t> extents;
    std::vector<std::string> names;
    std::size_t at = 0;
    for (auto const& b : plan.buckets()) {
      first.push_back(at);
      extents.push_back(b.elements);
      names.push_back(fmt::format("bucket {}", b.id));
      ostates.emplace_back(opt, b.elements, static_cast<std::uint32_t>(b.id));
      at += b.elements;
    }
    fstate = std::make_unique<feedback_state>(feedback, extents, names);
    master.resize(at);
    load(p);
  }
  // Copies between the model's tensors and the flat buffer in plan order.
  void load(model_params const& p) {
    for (auto const& b : plan.buckets()) {
      std::size_t at = first[b.id];
      for (auto const& c : plan.chunks_of(b)) {
        std::memcpy(master.data() + at, p.tensors[c.tensor].data() + c.offset, c.count * 4);
        at += c.count;
      }
    }
  }
  void write(model_params& p) const {
    for (auto const& b : plan.buckets()) {
      std::size_t at = first[b.id];
      for (auto const& c : plan.chunks_of(b)) {
        std::memcpy(p.tensors[c.tensor].data() + c.offset, master.data() + at, c.count * 4);
        at += c.count;
      }
    }
  }
  // Per-bucket buffers, sized once (as a careful hand composition would): no allocation per step.
  struct bucket_buffers {
    std::vector<float> grad, sum;
    sparse_buffer<float> sparse;
    std::vector<std::byte> frame;
    std::vector<std::vector<std::byte>> parts;
    std::vector<std::span<std::byte const>> views;
  };
  std::vector<bucket_buffers> buffers;

  void step(std::uint64_t s, std::vector<std::vector<float>> const& g) {
    using collective = typename pipeline<C, F, O, local_transport>::collective;
    float const n = static_cast<float>(t.size());
    if (buffers.empty()) {
      for (auto const& b : plan.buckets()) {
        auto& bb = buffers.emplace_back();
        bb.grad.resize(b.elements);
        bb.sum.resize(b.elements);
        bb.frame.resize(codec.max_encoded_bytes(b.elements));
        bb.parts.resize(static_cast<std::size_t>(t.size()));
        bb.views.resize(bb.parts.size());
      }
    }
    for (auto const& b : plan.buckets()) {
      auto& bb = buffers[b.id];
      std::size_t at = 0;
      for (auto const& c : plan.chunks_of(b)) {
        std::memcpy(bb.grad.data() + at, g[c.tensor].data() + c.offset, c.count * 4);
        at += c.count;
      }
      collective_context const ctx{.step = s,
                                   .tensor = b.id,
                                   .seed = options.seed,
                                   .timeout = options.timeout,
                                   .tag = message_tag{static_cast<std::uint32_t>(tags_per_collective * (1 + b.id))}};
      std::span<float> params(master.data() + first[b.id], b.elements);
      std::span<float const> const grad(bb.grad);
      bool const compressed = b.compressed && !std::is_same_v<collective, by_ring_allreduce>;
      if (!compressed) {
        std::copy(bb.grad.begin(), bb.grad.end(), bb.sum.begin());
        ring_allreduce(t, std::span<float>(bb.sum), ctx, rws);
      } else if constexpr (std::is_same_v<collective, by_sparse_allgather>) {
        if constexpr (std::is_same_v<F, no_feedback>) {
          sparse_allgather(t, codec, grad, bb.sparse, ctx, aws);  // the one-call form
        } else {
          bb.frame.resize(codec.max_encoded_bytes(b.elements));
          bb.frame.resize(feedback.encode(codec, fstate->slice(b.id), grad, ctx.for_rank(t.rank()), fws, bb.frame));
          sparse_allgather_encoded(t, codec, std::span<std::byte const>(bb.frame), b.elements, bb.sparse, ctx, aws);
        }
        for (float& x : bb.sparse.values()) x /= n;
        sluice::step(opt, ostates[b.id], params, bb.sparse.view());
        continue;
      } else if constexpr (std::is_same_v<collective, by_scatter_reduce_allgather>) {
        if constexpr (std::is_same_v<F, no_feedback>) {
          scatter_reduce_allgather(t, codec, grad, std::span<float>(bb.sum), ctx, sws);  // the one-call form
        } else {
          for (int j = 0; j < t.size(); ++j) {
            auto const part = scatter_reduce_allgather_part(b.elements, t.size(), j);
            auto& f = bb.parts[static_cast<std::size_t>(j)];
            f.resize(codec.max_encoded_bytes(part.count));
            f.resize(feedback.encode(codec, fstate->slice(b.id, part.first, part.count),
                                     grad.subspan(part.first, part.count),
                                     ctx.for_rank(t.rank(), 1 + static_cast<std::uint64_t>(j)), fws, f));
            bb.views[static_cast<std::size_t>(j)] = f;
          }
          scatter_reduce_allgather_encoded(t, codec, std::span<std::span<std::byte const> const>(bb.views),
                                           std::span<float>(bb.sum), ctx, sws);
        }
      }
      for (float& x : bb.sum) x /= n;
      sluice::step(opt, ostates[b.id], params, std::span<float const>(bb.sum));
    }
  }
};

}  // namespace sluice::test
