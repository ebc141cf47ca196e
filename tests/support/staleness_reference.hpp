// Serial double-precision reference of data-parallel training through sluice::pipeline, as
// docs/pipeline.md, docs/feedback.md and docs/optim.md define it: N ranks, the bucket plan's
// buckets (bypassed buckets summed exactly, compressed ones top-k per bucket with residual error
// feedback, or sent exactly with identity), the sum divided by N, the optimizer stepped per bucket
// (sparsely, lazy, on the union of the ranks' indices for a sparse codec), and staleness s: the
// trainer's parameters after step t hold updates 0 .. t - s, optionally compensated
// (pipeline/staleness.hpp). Plain loops over std::vector<double>; the optimizers are the
// per-primitive references of optim_reference.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <vector>

#include <sluice/bucket/plan.hpp>
#include <sluice/pipeline/staleness.hpp>

#include "optim_reference.hpp"

namespace sluice::test {

/// How a compressed bucket is sent: exactly, or its ceil(ratio n) largest magnitudes (ties to the
/// lower index) with the residual of what was not sent carried to the next step.
struct reference_codec {
  bool top_k = false;
  double ratio = 1.0;
};

/// The reference of one job. Opt: sgd_reference or adam_reference (its hyperparameters set).
/// grad(rank, step, params, out) computes a rank's gradient from the trainer's parameters (flat
/// in tensor order, as the layout lists them).
template <class Opt>
struct staleness_reference {
  using grad_fn = std::function<void(int, std::uint64_t, std::vector<double> const&, std::vector<double>&)>;

  layout model;  ///< the tensors, in the order the gradient and parameter vectors list them
  bucket_plan plan;
  reference_codec codec;
  Opt opt;  ///< hyperparameters; one copy per bucket holds the state
  int ranks = 1;
  unsigned staleness = 0;
  compensation_method compensation = compensation_method::none;

  // Flat tensor-order offsets of the plan's chunks, per bucket.
  struct piece {
    std::size_t tensor_flat = 0, count = 0;
  };
  std::vector<std::vector<piece>> pieces{};
  std::vector<std::size_t> tensor_first{};

  /// Runs `steps` steps from `init` (flat, tensor order) and returns every rank's trainer
  /// parameters after the last step (before any synchronize).
  std::vector<std::vector<double>> run(std::vector<double> const& init, std::uint64_t steps, grad_fn const& grad) {
    index();
    std::size_t const nb = plan.buckets().size();
    // history[u]: the per-bucket optimizers (parameters and state) after u updates.
    std::vector<std::vector<Opt>> history(1, std::vector<Opt>(nb, opt));
    for (std::size_t b = 0; b < nb; ++b) history[0][b].init(bucket_values(init, b));
    std::vector<std::vector<std::vector<double>>> residual(static_cast<std::size_t>(ranks),
                                                           std::vector<std::vector<double>>(nb));
    for (auto& r : residual)
      for (std::size_t b = 0; b < nb; ++b) r[b].assign(plan.buckets()[b].elements, 0.0);
    std::vector<std::vector<double>> trainer(static_cast<std::size_t>(ranks), init);
    std::vector<std::vector<std::vector<double>>> grads(static_cast<std::size_t>(ranks));  // [rank][step]
    for (std::uint64_t t = 0; t < steps; ++t) {
      for (int r = 0; r < ranks; ++r) {
        auto& g = grads[static_cast<std::size_t>(r)].emplace_back();
        grad(r, t, trainer[static_cast<std::size_t>(r)], g);
      }
      // Update t, applied to the state after updates 0 .. t - 1.
      std::vector<Opt> next = history.back();
      for (std::size_t b = 0; b < nb; ++b) {
        auto const& bk = plan.buckets()[b];
        std::vector<double> sum(bk.elements, 0.0);
        std::vector<char> touched(bk.elements, 0);
        bool const compress = bk.compressed && codec.top_k;
        for (int r = 0; r < ranks; ++r) {
          std::vector<double> c = bucket_values(grads[static_cast<std::size_t>(r)][t], b);
          if (compress) {
            auto& e = residual[static_cast<std::size_t>(r)][b];
            for (std::size_t i = 0; i < c.size(); ++i) c[i] += e[i];
            auto const keep = static_cast<std::size_t>(std::ceil(codec.ratio * static_cast<double>(c.size())));
            std::vector<std::size_t> order(c.size());
            std::iota(order.begin(), order.end(), std::size_t{0});
            std::stable_sort(order.begin(), order.end(),
                             [&](std::size_t x, std::size_t y) { return std::abs(c[x]) > std::abs(c[y]); });
            std::vector<char> sent(c.size(), 0);
            for (std::size_t k = 0; k < std::min(keep, c.size()); ++k) sent[order[k]] = 1;
            for (std::size_t i = 0; i < c.size(); ++i) {
              e[i] = sent[i] ? 0.0 : c[i];
              if (sent[i]) {
                sum[i] += c[i];
                touched[i] = 1;
              }
            }
          } else {
            for (std::size_t i = 0; i < c.size(); ++i) sum[i] += c[i];
          }
        }
        for (double& x : sum) x /= ranks;
        if (compress) {
          std::vector<ref_entry> entries;
          for (std::size_t i = 0; i < sum.size(); ++i)
            if (touched[i]) entries.push_back({i, sum[i]});
          next[b].step(entries);
        } else {
          next[b].step(sum);
        }
      }
      history.push_back(std::move(next));
      // step(t) returns with updates 0 .. t - s published; before the first, the attach values.
      if (t + 1 < staleness + 1) continue;
      std::uint64_t const u = t + 1 - staleness;  // updates published
      for (int r = 0; r < ranks; ++r)
        trainer[static_cast<std::size_t>(r)] = published(history, u, t + 1, grads[static_cast<std::size_t>(r)]);
    }
    return trainer;
  }

 private:
  void index() {
    pieces.assign(plan.buckets().size(), {});
    tensor_first.clear();
    std::size_t at = 0;
    for (auto const& t : model.tensors()) {
      tensor_first.push_back(at);
      at += t.elements();
    }
    for (auto const& b : plan.buckets())
      for (auto const& c : plan.chunks_of(b)) pieces[b.id].push_back({tensor_first[c.tensor] + c.offset, c.count});
  }
  std::vector<double> bucket_values(std::vector<double> const& flat, std::size_t b) const {
    std::vector<double> out;
    for (auto const& p : pieces[b])
      out.insert(out.end(), flat.begin() + static_cast<std::ptrdiff_t>(p.tensor_flat),
                 flat.begin() + static_cast<std::ptrdiff_t>(p.tensor_flat + p.count));
    return out;
  }
  void put_bucket(std::vector<double>& flat, std::size_t b, std::vector<double> const& v) const {
    std::size_t at = 0;
    for (auto const& p : pieces[b])
      for (std::size_t i = 0; i < p.count; ++i) flat[p.tensor_flat + i] = v[at++];
  }
  // The trainer's parameters with u updates applied and steps u .. handed - 1 in flight.
  std::vector<double> published(std::vector<std::vector<Opt>> const& history, std::uint64_t u, std::uint64_t handed,
                                std::vector<std::vector<double>> const& own) const {
    std::vector<double> flat(tensor_first.empty() ? 0 : own.front().size());
    for (std::size_t b = 0; b < pieces.size(); ++b) {
      std::vector<double> w = history[u][b].p;
      if (compensation == compensation_method::weight_prediction) {
        auto const& prev = history[u - 1][b].p;
        auto const k = static_cast<double>(handed - u);
        for (std::size_t i = 0; i < w.size(); ++i) w[i] += k * (w[i] - prev[i]);
      } else if (compensation == compensation_method::local_step) {
        Opt ahead = history[u][b];
        for (std::uint64_t k = u; k < handed; ++k) ahead.step(bucket_values(own[k], b));
        w = ahead.p;
      }
      put_bucket(flat, b, w);
    }
    return flat;
  }
};

}  // namespace sluice::test
