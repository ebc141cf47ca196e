// The pipeline against its definition: a serial double-precision reference of data-parallel
// training (tests/support/staleness_reference.hpp) and the real pipeline on a local world of
// threads run the same small model from the same parameters with gradients that depend on the
// parameters, rank and step; after every step each rank's trainer parameters must agree to fp32
// accuracy, for staleness 0, 1, 2 and every staleness compensation.
//
// Instantiated pipelines (each costs ~20 s of compile): identity + no_feedback (dense ring) and
// top_k + residual (sparse allgather, sparse optimizer step), each with sgd, adam and adamw. SGD
// runs twice per pipeline: heavy ball, and Nesterov with weight decay. The other codecs and
// feedbacks compose the same units and are checked bit for bit against the hand composition in
// test_pipeline_local.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <sluice/pipeline/all.hpp>
#include <sluice/sluice.hpp>

#include "pipeline/pipeline_testing.hpp"
#include "support/local_world.hpp"
#include "support/optim_reference.hpp"
#include "support/staleness_reference.hpp"

namespace {

using namespace sluice;
using namespace sluice::test;

constexpr int world = 3;
constexpr int steps = 8;

sgd_reference reference_of(sgd const& o) {
  return {.lr = o.lr,
          .momentum = o.momentum,
          .dampening = o.dampening,
          .weight_decay = o.weight_decay,
          .nesterov = o.nesterov};
}
adam_reference reference_of(adam const& o) {
  return {.lr = o.lr, .beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps, .weight_decay = o.weight_decay};
}
adam_reference reference_of(adamw const& o) {
  return {
      .lr = o.lr, .beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps, .weight_decay = o.weight_decay, .decoupled = true};
}
reference_codec reference_of(identity const&) { return {}; }
reference_codec reference_of(top_k const& c) { return {.top_k = true, .ratio = c.ratio}; }

// gradients() of pipeline_testing.hpp in double: 0.5 p + the same noise.
void reference_gradients(int rank, std::uint64_t step, std::vector<double> const& p, std::vector<double>& g) {
  random_stream const rs(
      {.seed = 5, .rank = static_cast<std::uint32_t>(rank), .step = static_cast<std::uint32_t>(step)});
  g.resize(p.size());
  for (std::size_t k = 0; k < p.size(); ++k) g[k] = 0.5 * p[k] + double(rs.uniform(k) - 0.5f);
}

std::vector<double> flat(model_params const& p) {
  std::vector<double> out;
  for (auto const& t : p.tensors) out.insert(out.end(), t.begin(), t.end());
  return out;
}

// Largest |pipeline - reference| / max(|reference|, 1e-2) over all ranks and steps.
template <class C, class F, class O>
double worst_disagreement(C codec, F feedback, O opt, unsigned staleness, compensation_method m) {
  pipeline_options const o = small_buckets(staleness, m);
  std::vector<std::vector<std::vector<double>>> trajectory(world);  // [rank][step]
  auto errors = test::run_local(world, [&](local_transport& ep) {
    int const r = ep.rank();
    model_params p(model());
    pipeline pipe{codec, feedback, opt, ep, o};
    auto spans = p.spans();
    pipe.attach(model(), spans);
    std::vector<std::vector<float>> g;
    for (int s = 0; s < steps; ++s) {
      gradients(r, static_cast<std::uint64_t>(s), p, g);
      pipe.step(views(g));
      trajectory[static_cast<std::size_t>(r)].push_back(flat(p));
    }
    pipe.synchronize();  // no exchange left in flight when the ranks' pipelines are destroyed
  });
  test::rethrow_first(errors);
  double worst = 0;
  layout const l = model();
  bucket_plan const plan(l, o.bucketing);
  for (int upto = 1; upto <= steps; ++upto) {
    using ref_opt = decltype(reference_of(opt));
    staleness_reference<ref_opt> ref{.model = l,
                                     .plan = plan,
                                     .codec = reference_of(codec),
                                     .opt = reference_of(opt),
                                     .ranks = world,
                                     .staleness = staleness,
                                     .compensation = m};
    auto const want = ref.run(flat(model_params(l)), static_cast<std::uint64_t>(upto), reference_gradients);
    for (int r = 0; r < world; ++r) {
      auto const& got = trajectory[static_cast<std::size_t>(r)][static_cast<std::size_t>(upto - 1)];
      auto const& w = want[static_cast<std::size_t>(r)];
      for (std::size_t i = 0; i < w.size(); ++i)
        worst = std::max(worst, std::abs(got[i] - w[i]) / std::max(std::abs(w[i]), 1e-2));
    }
  }
  return worst;
}

template <class C, class F, class O>
void check_definition(C codec, F feedback, O opt) {
  for (unsigned s : {0u, 1u, 2u})
    for (auto m :
         {compensation_method::none, compensation_method::weight_prediction, compensation_method::local_step}) {
      if (s == 0 && m != compensation_method::none) continue;  // nothing is in flight
      CAPTURE(fmt::format("{} + {} + {}, staleness {}, compensation {}", codec, feedback, opt, s, m));
      double const worst = worst_disagreement(codec, feedback, opt, s, m);
      CAPTURE(worst);
      CHECK(worst < 1e-4);  // fp32 against double; Adam divides small moments, so 1e-4 rather than 1e-6
    }
}

}  // namespace

TEST_CASE("reference model: dense ring, every optimizer, staleness 0 to 2, every compensation") {
  check_definition(identity{}, no_feedback{}, sgd{.lr = 0.05, .momentum = 0.9});
  check_definition(identity{}, no_feedback{}, sgd{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
  check_definition(identity{}, no_feedback{}, adam{.lr = 1e-2});
  check_definition(identity{}, no_feedback{}, adamw{.lr = 1e-2, .weight_decay = 0.1});
}

TEST_CASE("reference model: top_k + residual (sparse step), every optimizer, staleness 0 to 2, every compensation") {
  check_definition(top_k{.ratio = 0.1}, residual{}, sgd{.lr = 0.05, .momentum = 0.9});
  check_definition(top_k{.ratio = 0.1}, residual{},
                   sgd{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
  check_definition(top_k{.ratio = 0.1}, residual{}, adam{.lr = 1e-2});
  check_definition(top_k{.ratio = 0.1}, residual{}, adamw{.lr = 1e-2, .weight_decay = 0.1});
}

TEST_CASE("reference model: the test bites (a compensation the pipeline does not run disagrees)") {
  // The reference with local_step against the pipeline without compensation, at staleness 1.
  pipeline_options const o = small_buckets(1, compensation_method::none);
  std::vector<std::vector<double>> last(world);
  auto errors = test::run_local(world, [&](local_transport& ep) {
    model_params p(model());
    pipeline pipe{identity{}, no_feedback{}, sgd{.lr = 0.05, .momentum = 0.9}, ep, o};
    auto spans = p.spans();
    pipe.attach(model(), spans);
    std::vector<std::vector<float>> g;
    for (int s = 0; s < steps; ++s) {
      gradients(ep.rank(), static_cast<std::uint64_t>(s), p, g);
      pipe.step(views(g));
    }
    last[static_cast<std::size_t>(ep.rank())] = flat(p);
    pipe.synchronize();
  });
  test::rethrow_first(errors);
  layout const l = model();
  staleness_reference<sgd_reference> ref{.model = l,
                                         .plan = bucket_plan(l, o.bucketing),
                                         .codec = {},
                                         .opt = {.lr = 0.05, .momentum = 0.9},
                                         .ranks = world,
                                         .staleness = 1,
                                         .compensation = compensation_method::local_step};
  auto const want = ref.run(flat(model_params(l)), steps, reference_gradients);
  double worst = 0;
  for (std::size_t i = 0; i < want[0].size(); ++i)
    worst = std::max(worst, std::abs(last[0][i] - want[0][i]) / std::max(std::abs(want[0][i]), 1e-2));
  CHECK(worst > 1e-3);
}

TEST_CASE("staleness compensation: a checkpoint carries local_step's in-flight gradients (bit-identical resume)") {
  for (unsigned staleness : {1u, 2u}) {
    CAPTURE(staleness);
    constexpr int total = 7, k = 4;
    pipeline_options const o = small_buckets(staleness, compensation_method::local_step);
    std::vector<std::vector<std::vector<double>>> straight(world), resumed(world);  // [rank][step]: trainer params
    std::vector<std::vector<std::byte>> saved(world);
    auto run = [&](int from, int to, std::vector<std::vector<std::vector<double>>>& out, bool save, bool restore) {
      auto errors = test::run_local(world, [&](local_transport& ep) {
        auto const r = static_cast<std::size_t>(ep.rank());
        model_params p(model());
        pipeline pipe{top_k{.ratio = 0.1}, residual{}, adam{.lr = 1e-2}, ep, o};
        auto spans = p.spans();
        pipe.attach(model(), spans);
        if (restore) pipe.restore(saved[r]);
        std::vector<std::vector<float>> g;
        for (int s = from; s < to; ++s) {
          gradients(ep.rank(), static_cast<std::uint64_t>(s), p, g);
          pipe.step(views(g));
          out[r].push_back(flat(p));
        }
        if (save) saved[r] = pipe.save();
        pipe.synchronize();
      });
      test::rethrow_first(errors);
    };
    run(0, total, straight, false, false);
    std::vector<std::vector<std::vector<double>>> first(world);
    run(0, k, first, true, false);
    run(k, total, resumed, false, true);
    for (std::size_t r = 0; r < world; ++r) {
      REQUIRE(resumed[r].size() == total - k);
      for (int s = k; s < total; ++s) {
        CAPTURE(s);
        CHECK(resumed[r][static_cast<std::size_t>(s - k)] == straight[r][static_cast<std::size_t>(s)]);
      }
    }
    // The ranks' trainer parameters differ while steps are in flight (their own gradients).
    CHECK(straight[0].back() != straight[1].back());
  }
}
