// The assembled pipeline on local worlds of threads: bit for bit the parameters of the hand
// composition of the same primitives (bucket plan, feedback, codec, collective, mean, optimizer),
// for every aggregation path and feedback; the staleness bound (the trainer's parameters after
// step t hold exactly updates 0 .. t - s) with bit-identical replicas; checkpoint and restore;
// layout and configuration checks across ranks; failures reach the trainer.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sluice/pipeline/all.hpp>
#include <sluice/sluice.hpp>

#include "pipeline/pipeline_testing.hpp"
#include "support/local_world.hpp"

#if defined(__linux__)
#include <sched.h>
#include <sys/resource.h>
#endif

namespace {

using namespace sluice;
using namespace sluice::test;

constexpr int world = 4;

// Runs `steps` steps of the pipeline and of the hand composition on every rank of a local world
// and checks, after every step t, that the trainer's parameters are exactly the hand
// composition's after max(0, t + 1 - s) updates, with the gradient of step t computed from the
// parameters the trainer held then.
template <class C, class F, class O>
void check_against_hand(C codec, F feedback, O opt, unsigned staleness, int steps = 6) {
  CAPTURE(fmt::format("{} + {} + {}, staleness {}", codec, feedback, opt, staleness));
  std::vector<model_params> final_params(world, model_params(model()));
  // The pipeline world.
  std::vector<std::vector<model_params>> trajectory(world);  // trainer's params after each step
  auto errors = test::run_local(world, [&](local_transport& ep) {
    int const r = ep.rank();
    model_params p(model());
    pipeline pipe{codec, feedback, opt, ep, small_buckets(staleness)};
    auto spans = p.spans();
    pipe.attach(model(), spans);
    std::vector<std::vector<float>> g;
    for (int s = 0; s < steps; ++s) {
      gradients(r, static_cast<std::uint64_t>(s), p, g);
      pipe.step(views(g));
      trajectory[static_cast<std::size_t>(r)].push_back(p);
    }
    pipe.synchronize();
    final_params[static_cast<std::size_t>(r)] = p;
  });
  test::rethrow_first(errors);
  // The hand composition world, keeping every update's parameters.
  std::vector<std::vector<model_params>> history(world);
  errors = test::run_local(world, [&](local_transport& ep) {
    int const r = ep.rank();
    model_params p(model());
    hand_composition<C, F, O> hand(codec, feedback, opt, ep, small_buckets(staleness), model(), p);
    auto& h = history[static_cast<std::size_t>(r)];
    h.push_back(p);
    std::vector<std::vector<float>> g;
    for (int s = 0; s < steps; ++s) {
      std::size_t const seen = static_cast<std::size_t>(std::max(0, s - static_cast<int>(staleness)));
      gradients(r, static_cast<std::uint64_t>(s), h[seen], g);
      hand.step(static_cast<std::uint64_t>(s), g);
      hand.write(p);
      h.push_back(p);
    }
  });
  test::rethrow_first(errors);
  for (int r = 0; r < world; ++r) {
    auto const& tr = trajectory[static_cast<std::size_t>(r)];
    auto const& h = history[static_cast<std::size_t>(r)];
    for (int s = 0; s < steps; ++s) {
      std::size_t const expect = static_cast<std::size_t>(std::max(0, s + 1 - static_cast<int>(staleness)));
      CAPTURE(r);
      CAPTURE(s);
      CHECK(tr[static_cast<std::size_t>(s)] == h[expect]);
    }
    CHECK(final_params[static_cast<std::size_t>(r)] == h.back());
    CHECK(final_params[static_cast<std::size_t>(r)] == final_params[0]);
  }
  // The parameters moved.
  CHECK_FALSE(final_params[0] == model_params(model()));
}

}  // namespace

TEST_CASE("pipeline: bit for bit the hand composition, every aggregation path and feedback (staleness 0)") {
  check_against_hand(top_k{.ratio = 0.05}, no_feedback{}, sgd{.lr = 0.05, .momentum = 0.9}, 0);
  check_against_hand(top_k{.ratio = 0.05}, residual{}, sgd{.lr = 0.05, .momentum = 0.9}, 0);
  check_against_hand(block_top_k{.ratio = 0.05}, residual{}, adam{.lr = 1e-2}, 0);
  check_against_hand(random_k{.ratio = 0.1}, residual{}, sgd{.lr = 0.05}, 0);
  check_against_hand(maxmin_quantize{.bits = 4}, no_feedback{}, adam{.lr = 1e-2}, 0);
  check_against_hand(maxmin_quantize{.bits = 4}, residual{}, adam{.lr = 1e-2}, 0);
  check_against_hand(qsgd{.bucket = qsgd::feedback_bucket(7)}, ef21{}, sgd{.lr = 0.05}, 0);
  check_against_hand(identity{}, no_feedback{}, adamw{.lr = 1e-2}, 0);
}

TEST_CASE("pipeline: staleness 1 and 2 keep the bound exactly and replicas bit-identical") {
  for (unsigned s : {1u, 2u}) {
    check_against_hand(block_top_k{.ratio = 0.05}, residual{}, adam{.lr = 1e-2}, s, 7);
    check_against_hand(maxmin_quantize{.bits = 4}, residual{}, sgd{.lr = 0.05, .momentum = 0.9}, s, 7);
    check_against_hand(identity{}, no_feedback{}, sgd{.lr = 0.05}, s, 7);
  }
}

TEST_CASE("pipeline: set_codec switches every rank's codec strength at one step, as the hand composition does") {
  constexpr int steps = 6, at = 3;
  for (unsigned staleness : {0u, 1u}) {
    CAPTURE(staleness);
    std::vector<model_params> piped(world, model_params(model())), hand(world, model_params(model()));
    auto errors = test::run_local(world, [&](local_transport& ep) {
      int const r = ep.rank();
      model_params p(model());
      pipeline pipe{top_k{.ratio = 0.2}, residual{}, sgd{.lr = 0.05}, ep, small_buckets(staleness)};
      auto spans = p.spans();
      pipe.attach(model(), spans);
      std::vector<std::vector<float>> g;
      std::vector<model_params> seen;
      for (int s = 0; s < steps; ++s) {
        if (s == at) pipe.set_codec(top_k{.ratio = 0.01});
        gradients(r, static_cast<std::uint64_t>(s), p, g);
        pipe.step(views(g));
      }
      pipe.synchronize();
      CHECK(pipe.codec() == top_k{.ratio = 0.01});
      CHECK_THROWS_AS(pipe.set_codec(top_k{.ratio = 2.0}), error);
      piped[static_cast<std::size_t>(r)] = p;
    });
    test::rethrow_first(errors);
    errors = test::run_local(world, [&](local_transport& ep) {
      int const r = ep.rank();
      model_params p(model());
      hand_composition<top_k, residual, sgd> h(top_k{.ratio = 0.2}, residual{}, sgd{.lr = 0.05}, ep,
                                               small_buckets(staleness), model(), p);
      std::vector<model_params> history{p};
      std::vector<std::vector<float>> g;
      for (int s = 0; s < steps; ++s) {
        if (s == at) h.codec = top_k{.ratio = 0.01};
        gradients(r, static_cast<std::uint64_t>(s),
                  history[static_cast<std::size_t>(std::max(0, s - static_cast<int>(staleness)))], g);
        h.step(static_cast<std::uint64_t>(s), g);
        h.write(p);
        history.push_back(p);
      }
      hand[static_cast<std::size_t>(r)] = p;
    });
    test::rethrow_first(errors);
    for (int r = 0; r < world; ++r) CHECK(piped[static_cast<std::size_t>(r)] == hand[static_cast<std::size_t>(r)]);
  }
}

TEST_CASE("pipeline: gradient_ready in any order equals step(grads)") {
  auto errors = test::run_local(world, [&](local_transport& ep) {
    int const r = ep.rank();
    model_params p(model());
    pipeline pipe{top_k{.ratio = 0.05}, residual{}, adam{.lr = 1e-2}, ep, small_buckets(1)};
    auto spans = p.spans();
    pipe.attach(model(), spans);
    std::vector<std::vector<float>> g;
    for (std::uint64_t s = 0; s < 4; ++s) {
      gradients(r, s, p, g);
      // Forward order on even ranks, reverse on odd ones: buckets still exchange in plan order.
      for (std::size_t k = 0; k < g.size(); ++k) {
        std::size_t const i = r % 2 == 0 ? k : g.size() - 1 - k;
        pipe.gradient_ready(i, g[i]);
      }
      pipe.step();
    }
    pipe.synchronize();
  });
  test::rethrow_first(errors);
}

TEST_CASE("pipeline: checkpoint after step k, restore into a fresh pipeline, continue: bit-identical") {
  for (unsigned staleness : {0u, 2u}) {
    CAPTURE(staleness);
    constexpr int steps = 6, k = 3;
    std::vector<model_params> straight(world, model_params(model())), resumed(world, model_params(model()));
    std::vector<std::vector<std::byte>> saved(world);
    auto run = [&](int from, int to, std::vector<model_params>& out, bool save_at_to, bool restore) {
      auto errors = test::run_local(world, [&](local_transport& ep) {
        int const r = ep.rank();
        model_params p(model());
        pipeline pipe{maxmin_quantize{.bits = 4}, residual{}, adam{.lr = 1e-2}, ep, small_buckets(staleness)};
        auto spans = p.spans();
        pipe.attach(model(), spans);
        if (restore) pipe.restore(saved[static_cast<std::size_t>(r)]);
        CHECK(pipe.steps() == static_cast<std::uint64_t>(from));
        std::vector<std::vector<float>> g;
        for (int s = from; s < to; ++s) {
          gradients(r, static_cast<std::uint64_t>(s), p, g);
          pipe.step(views(g));
        }
        if (save_at_to) saved[static_cast<std::size_t>(r)] = pipe.save();
        if (!save_at_to) pipe.synchronize();
        out[static_cast<std::size_t>(r)] = p;
      });
      test::rethrow_first(errors);
    };
    run(0, steps, straight, false, false);
    std::vector<model_params> scratch(world, model_params(model()));
    run(0, k, scratch, true, false);
    run(k, steps, resumed, false, true);
    for (int r = 0; r < world; ++r)
      CHECK(resumed[static_cast<std::size_t>(r)] == straight[static_cast<std::size_t>(r)]);
    // A damaged checkpoint is refused before anything changes.
    auto bad = saved[0];
    bad[bad.size() / 2] ^= std::byte{1};
    auto errors = test::run_local(1, [&](local_transport& ep) {
      model_params p(model());
      pipeline_options o = small_buckets(staleness);
      pipeline pipe{maxmin_quantize{.bits = 4}, residual{}, adam{.lr = 1e-2}, ep, o};
      auto spans = p.spans();
      pipe.attach(model(), spans);
      try {
        pipe.restore(bad);
        FAIL("a damaged checkpoint was accepted");
      } catch (error const& e) {
        CHECK(e.code() == errc::malformed_message);
      }
      CHECK(p == model_params(model()));
    });
    test::rethrow_first(errors);
  }
}

TEST_CASE("pipeline: a checkpoint from another configuration or layout is a clear error") {
  std::vector<std::byte> saved;
  auto errors = test::run_local(1, [&](local_transport& ep) {
    model_params p(model());
    pipeline pipe{top_k{.ratio = 0.05}, residual{}, sgd{.lr = 0.1}, ep, small_buckets()};
    auto spans = p.spans();
    pipe.attach(model(), spans);
    saved = pipe.save();
  });
  test::rethrow_first(errors);
  errors = test::run_local(1, [&](local_transport& ep) {
    model_params p(model());
    pipeline pipe{top_k{.ratio = 0.02}, residual{}, sgd{.lr = 0.1}, ep, small_buckets()};
    auto spans = p.spans();
    pipe.attach(model(), spans);
    CHECK_THROWS_WITH_AS(pipe.restore(saved), doctest::Contains("other policies"), error);
  });
  test::rethrow_first(errors);
}

TEST_CASE("pipeline: ranks with different layouts fail at attach, naming the first differing tensor") {
  auto errors = test::run_local(world, [&](local_transport& ep) {
    layout l = model();
    if (ep.rank() == 2) {
      l = layout{};
      l.add("fc1.weight", {48, 100});
      l.add("fc1.bias", {48});
      l.add("fc2.weight", {40, 49});
      l.add("fc3.weight", {10, 40});
      l.add("fc3.bias", {10});
    }
    std::vector<std::vector<float>> store;
    std::vector<std::span<float>> spans;
    for (auto const& t : l.tensors()) store.emplace_back(t.elements());
    for (auto& v : store) spans.emplace_back(v);
    pipeline pipe{top_k{.ratio = 0.05}, residual{}, sgd{.lr = 0.1}, ep, small_buckets()};
    pipe.attach(l, spans);
  });
  for (int r = 0; r < world; ++r) {
    REQUIRE(errors[static_cast<std::size_t>(r)]);
    try {
      std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
    } catch (error const& e) {
      CHECK(e.code() == errc::size_mismatch);
      CHECK(std::string(e.what()).find("fc2.weight") != std::string::npos);
    }
  }
}

TEST_CASE("pipeline: ranks with different policies fail at attach") {
  auto errors = test::run_local(2, [&](local_transport& ep) {
    model_params p(model());
    auto spans = p.spans();
    pipeline pipe{top_k{.ratio = ep.rank() == 0 ? 0.05 : 0.1}, residual{}, sgd{.lr = 0.1}, ep, small_buckets()};
    pipe.attach(model(), spans);
  });
  for (auto const& e : errors) CHECK(e);
}

TEST_CASE("pipeline: a killed rank makes every other rank fail with peer_lost or timeout, no hang") {
  auto errors = test::run_local(world, [&](local_transport& ep) {
    model_params p(model());
    pipeline_options o = small_buckets(1);
    o.timeout = std::chrono::milliseconds(2'000);
    pipeline pipe{block_top_k{.ratio = 0.05}, residual{}, adam{.lr = 1e-2}, ep, o};
    auto spans = p.spans();
    pipe.attach(model(), spans);
    std::vector<std::vector<float>> g;
    for (std::uint64_t s = 0; s < 20; ++s) {
      if (ep.rank() == 3 && s == 2) {
        pipe.transport().kill();
        throw error(errc::peer_lost, "rank 3 killed itself");
      }
      gradients(ep.rank(), s, p, g);
      pipe.step(views(g));
    }
    pipe.synchronize();
  });
  for (int r = 0; r < world; ++r) {
    REQUIRE(errors[static_cast<std::size_t>(r)]);
    try {
      std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
    } catch (error const& e) {
      CHECK((e.code() == errc::peer_lost || e.code() == errc::timeout));
    }
  }
}

TEST_CASE("pipeline: telemetry samples carry rank, thread and start; reports count bytes") {
  recording_sink sink;
  auto errors = test::run_local(2, [&](local_transport& ep) {
    model_params p(model());
    pipeline_options o = small_buckets();
    o.measure_residual = true;
    pipeline pipe{top_k{.ratio = 0.05}, residual{}, sgd{.lr = 0.1}, ep, o};
    auto spans = p.spans();
    pipe.attach(model(), spans);
    if (ep.rank() == 0) pipe.set_telemetry(sink);
    std::vector<std::vector<float>> g;
    for (std::uint64_t s = 0; s < 3; ++s) {
      gradients(ep.rank(), s, p, g);
      pipe.step(views(g));
    }
    if (ep.rank() == 0) {
      auto const rep = pipe.last_report();
      CHECK(rep.step == 2);
      CHECK(rep.dense_bytes == model().total_elements() * 4);
      CHECK(rep.compression_ratio > 1.0);
      CHECK(rep.sent_bytes > 0);
      CHECK(rep.residual_norm > 0);  // top_k leaves most of each gradient in the residual
      CHECK(rep.residual_norm == doctest::Approx(std::sqrt([&] {
              double sq = 0;
              auto const saved = pipe.residuals();
              for (std::size_t b = 0; b < pipe.plan().buckets().size(); ++b)
                if (pipe.plan().buckets()[b].compressed) {
                  feedback_state copy = saved;
                  for (float x : copy.slice(b).buffer<float>(0)) sq += double(x) * double(x);
                }
              return sq;
            }())));
    }
  });
  test::rethrow_first(errors);
  auto const samples = sink.samples();
  REQUIRE_FALSE(samples.empty());
  bool threads[4] = {};
  for (auto const& s : samples) {
    CHECK(s.rank == 0);
    CHECK(s.seconds >= 0);
    CHECK(s.start >= 0);
    threads[s.thread] = true;
  }
  CHECK(threads[1]);
  CHECK(threads[2]);
  CHECK(threads[3]);
  auto const seen = [&](stage which, stage_thread thread) {
    return std::any_of(samples.begin(), samples.end(), [&](auto const& s) {
      return s.which == which && s.thread == static_cast<std::uint32_t>(thread) && s.bytes > 0;
    });
  };
  CHECK(seen(stage::read, stage_thread::encode));      // the gradient, read in place
  CHECK(seen(stage::publish, stage_thread::trainer));  // the one pass on the trainer's thread
  CHECK(sink.reports().size() == 3);
  CHECK(fmt::format("{}", samples.front()).find("\"stage\"") != std::string::npos);
}

TEST_CASE("pipeline: the trainer's gradient memory is its own again when step() returns") {
  // The encode thread reads each gradient in place; step() waits for those reads only. Poisoning
  // the memory as soon as step() returns must change nothing (a late read would see NaN).
  for (unsigned staleness : {0u, 1u, 2u}) {
    CAPTURE(staleness);
    std::vector<model_params> plain(world, model_params(model())), poisoned(world, model_params(model()));
    for (bool poison : {false, true}) {
      auto errors = test::run_local(world, [&](local_transport& ep) {
        auto const r = static_cast<std::size_t>(ep.rank());
        model_params p(model());
        pipeline pipe{top_k{.ratio = 0.1}, residual{}, adam{.lr = 1e-2}, ep,
                      small_buckets(staleness, compensation_method::local_step)};
        auto spans = p.spans();
        pipe.attach(model(), spans);
        std::vector<std::vector<float>> g;
        for (std::uint64_t s = 0; s < 5; ++s) {
          gradients(ep.rank(), s, p, g);
          for (std::size_t k = g.size(); k-- > 0;) pipe.gradient_ready(k, g[k]);
          pipe.step();
          if (poison)
            for (auto& x : g) std::fill(x.begin(), x.end(), std::numeric_limits<float>::quiet_NaN());
        }
        pipe.synchronize();
        (poison ? poisoned : plain)[r] = p;
      });
      test::rethrow_first(errors);
    }
    for (int r = 0; r < world; ++r) CHECK(poisoned[static_cast<std::size_t>(r)] == plain[static_cast<std::size_t>(r)]);
  }
}

// Where parameters and gradients live: the trainer's memory (copied in and out) or the
// pipeline's buffers (handed over by pointer).
struct homes {
  parameter_home parameters = parameter_home::trainer;
  gradient_home gradients = gradient_home::trainer;
};

// Hands a step's gradients in, last tensor first: from the trainer's memory, or written into the
// buffers gradients() hands out (gradient_home::pipeline). step() is the caller's.
template <class P>
void hand_in_gradients(P& pipe, std::vector<std::vector<float>> const& g) {
  if (pipe.options().gradients == gradient_home::pipeline) {
    auto const into = pipe.gradients();
    for (std::size_t k = g.size(); k-- > 0;) {
      std::copy(g[k].begin(), g[k].end(), into[k].begin());  // backward writes there
      pipe.gradient_ready(k);
    }
  } else {
    for (std::size_t k = g.size(); k-- > 0;) pipe.gradient_ready(k, g[k]);
  }
}

// Runs 6 steps on every rank with the trainer's parameters and gradients in `h`, and returns
// what the trainer read after each step (and after synchronize). Checks on the way that the
// parameter buffer the trainer holds never changes under it, and that owned buffers are handed
// over by pointer.
template <class C, class F>
std::vector<std::vector<model_params>> trajectory_with(C codec, F feedback, homes h, unsigned staleness,
                                                       compensation_method comp, bool weighted) {
  std::vector<std::vector<model_params>> tr(world);
  auto errors = test::run_local(world, [&](local_transport& ep) {
    auto const r = static_cast<std::size_t>(ep.rank());
    model_params p(model()), seen(model());
    pipeline_options o = small_buckets(staleness, comp);
    o.parameters = h.parameters;
    o.gradients = h.gradients;
    pipeline pipe{codec, feedback, adam{.lr = 1e-2}, ep, o};
    auto spans = p.spans();
    pipe.attach(model(), spans);
    if (weighted) {
      std::vector<std::size_t> const batches{8, 16, 24, 64};
      pipe.set_batch_sizes(batches);
    }
    // What the trainer reads: its spans, or the pipeline's buffer.
    auto read = [&] {
      auto const cur = pipe.parameters();
      REQUIRE(cur.size() == seen.tensors.size());
      for (std::size_t i = 0; i < cur.size(); ++i) std::copy(cur[i].begin(), cur[i].end(), seen.tensors[i].begin());
    };
    std::vector<std::vector<float>> g;
    for (std::uint64_t s = 0; s < 6; ++s) {
      read();
      auto const held = pipe.parameters();
      std::vector<float const*> where;
      for (auto const& t : held) where.push_back(t.data());
      gradients(ep.rank(), s, seen, g);
      hand_in_gradients(pipe, g);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the apply thread runs meanwhile
      model_params still(model());
      for (std::size_t i = 0; i < held.size(); ++i) std::copy(held[i].begin(), held[i].end(), still.tensors[i].begin());
      CHECK(still == seen);  // the held buffer is the trainer's until step()
      pipe.step();
      if (h.parameters == parameter_home::pipeline && s + 1 > staleness)
        CHECK(pipe.parameters()[0].data() != where[0]);  // swapped by pointer
      read();
      tr[r].push_back(seen);
    }
    pipe.synchronize();
    read();
    tr[r].push_back(seen);
    if (h.parameters == parameter_home::pipeline)
      CHECK(p.tensors == model_params(model()).tensors);  // attach's spans: untouched
  });
  test::rethrow_first(errors);
  return tr;
}

TEST_CASE(
    "pipeline: parameters and gradients in the pipeline's buffers give the trainer-mode parameters, bit for bit") {
  // parameter_home::pipeline: the apply thread fills one of two buffers ahead of time (after a
  // sparse step, only the blocks it and the step before changed). gradient_home::pipeline: the
  // trainer writes into buffers gradients() hands out, encoded where they lie. Same trajectory as
  // the trainer's own memory for every staleness and compensation, sparse and dense updates, equal
  // and weighted batches.
  auto same = [](auto codec, auto feedback, unsigned staleness, compensation_method comp, bool weighted) {
    CAPTURE(fmt::format("{}", codec));
    CAPTURE(staleness);
    CAPTURE(comp);
    CAPTURE(weighted);
    auto const reference = trajectory_with(codec, feedback, {}, staleness, comp, weighted);
    for (homes h : {homes{parameter_home::pipeline, gradient_home::trainer},
                    homes{parameter_home::trainer, gradient_home::pipeline},
                    homes{parameter_home::pipeline, gradient_home::pipeline}}) {
      CAPTURE(h.parameters == parameter_home::pipeline);
      CAPTURE(h.gradients == gradient_home::pipeline);
      auto const got = trajectory_with(codec, feedback, h, staleness, comp, weighted);
      for (std::size_t r = 0; r < world; ++r) CHECK(got[r] == reference[r]);
    }
  };
  for (unsigned staleness : {0u, 1u, 2u})
    for (auto comp :
         {compensation_method::none, compensation_method::local_step, compensation_method::weight_prediction}) {
      if (staleness == 0 && comp != compensation_method::none) continue;
      same(block_top_k{.ratio = 0.1}, residual{}, staleness, comp, false);
    }
  same(block_top_k{.ratio = 0.1}, residual{}, 1, compensation_method::none, true);
  same(top_k{.ratio = 0.05}, residual{}, 2, compensation_method::none, false);
  same(block_top_k{.ratio = 0.05}, residual{}, 1, compensation_method::none, false);
  same(maxmin_quantize{.bits = 4}, residual{}, 1, compensation_method::none, true);
  same(identity{}, no_feedback{}, 1, compensation_method::none, false);
}

TEST_CASE("pipeline: gradient_home::pipeline refuses gradients written elsewhere or before the step's buffers") {
  auto errors = test::run_local(2, [&](local_transport& ep) {
    model_params p(model());
    pipeline_options o = small_buckets(1);
    o.gradients = gradient_home::pipeline;
    pipeline pipe{block_top_k{.ratio = 0.1}, residual{}, adam{.lr = 1e-2}, ep, o};
    auto spans = p.spans();
    pipe.attach(model(), spans);
    std::vector<std::vector<float>> g;
    gradients(ep.rank(), 0, p, g);
    // Before gradients() named this step's buffers.
    CHECK_THROWS_WITH_AS(pipe.gradient_ready(0), doctest::Contains("before gradients() was called in step 0"),
                         sluice::error);
    auto const into = pipe.gradients();
    // Memory that is not the step's buffer.
    CHECK_THROWS_WITH_AS(pipe.gradient_ready(0, g[0]), doctest::Contains("is not in gradients()[0]"), sluice::error);
    CHECK_THROWS_WITH_AS(pipe.set_codec(block_top_k{.ratio = 0.2}), doctest::Contains("in the middle of step 0"),
                         sluice::error);
    for (std::size_t k = g.size(); k-- > 0;) {
      std::copy(g[k].begin(), g[k].end(), into[k].begin());
      pipe.gradient_ready(k, into[k]);  // the buffer's own span is accepted too
    }
    pipe.step();
    pipe.synchronize();
  });
  test::rethrow_first(errors);
  // A tensor the plan places apart (a bucket of 1-D tensors closed between two of its chunks)
  // cannot be one span.
  {
    layout l;
    l.add("b0", {200}).add("b1", {200}).add("b2", {200}).add("w", {24, 32});
    pipeline_options o = small_buckets(0);
    o.bucketing = {.cap_bytes = 2048,
                   .first_cap_bytes = 2048,
                   .chunk_bytes = 1024,
                   .chunk_alignment = 64,
                   .bypass_below_elements = 100};
    o.gradients = gradient_home::pipeline;
    auto eps = local_transport::create(1);
    pipeline pipe{block_top_k{.ratio = 0.1}, residual{}, adam{.lr = 1e-2}, std::move(eps[0]), o};
    std::vector<std::vector<float>> values{std::vector<float>(200), std::vector<float>(200), std::vector<float>(200),
                                           std::vector<float>(768)};
    std::vector<std::span<float>> spans(values.begin(), values.end());
    CHECK_THROWS_WITH_AS(pipe.attach(l, spans), doctest::Contains("tensor 'w' is split over buckets out of order"),
                         sluice::error);
  }
  // Without the option.
  auto eps = local_transport::create(1);
  model_params p(model());
  pipeline pipe{block_top_k{.ratio = 0.1}, residual{}, adam{.lr = 1e-2}, std::move(eps[0]), small_buckets(0)};
  auto spans = p.spans();
  pipe.attach(model(), spans);
  CHECK_THROWS_WITH_AS((void)pipe.gradients(), doctest::Contains("needs pipeline_options::gradients"), sluice::error);
  CHECK_THROWS_WITH_AS(pipe.gradient_ready(0), doctest::Contains("needs gradient_home::pipeline"), sluice::error);
}

TEST_CASE("pipeline: a checkpoint of pipeline-owned parameters and gradients restores into them") {
  // 10 %: most updates touch over a quarter of the elements (the owned buffer is written whole);
  // 5 %: written as the blocks the update and the one before changed.
  for (double ratio : {0.1, 0.05})
    for (auto comp : {compensation_method::local_step, compensation_method::none})
      for (auto grads : {gradient_home::trainer, gradient_home::pipeline}) {
        CAPTURE(ratio);
        CAPTURE(comp);
        CAPTURE(grads == gradient_home::pipeline);
        std::vector<model_params> expected(world, model_params(model())), restored(world, model_params(model()));
        auto options = [&] {
          pipeline_options o = small_buckets(1, comp);
          o.parameters = parameter_home::pipeline;
          o.gradients = grads;
          return o;
        };
        auto copy_out = [](auto const& pipe, model_params& to) {
          auto const cur = pipe.parameters();
          for (std::size_t i = 0; i < cur.size(); ++i) std::copy(cur[i].begin(), cur[i].end(), to.tensors[i].begin());
        };
        std::vector<std::vector<std::byte>> blobs(world);
        // Six steps saving after the third, or the last three from that checkpoint.
        auto train = [&](bool restoring, std::vector<model_params>& out) {
          auto errors = test::run_local(world, [&](local_transport& ep) {
            auto const r = static_cast<std::size_t>(ep.rank());
            model_params p(model()), seen(model());
            pipeline pipe{top_k{.ratio = ratio}, residual{}, adam{.lr = 1e-2}, ep, options()};
            auto spans = p.spans();
            pipe.attach(model(), spans);
            if (restoring) pipe.restore(blobs[r]);
            std::vector<std::vector<float>> g;
            for (std::uint64_t s = restoring ? 3 : 0; s < 6; ++s) {
              if (!restoring && s == 3) blobs[r] = pipe.save();
              copy_out(pipe, seen);
              gradients(ep.rank(), s, seen, g);
              hand_in_gradients(pipe, g);
              pipe.step();
            }
            pipe.synchronize();
            copy_out(pipe, out[r]);
          });
          test::rethrow_first(errors);
        };
        train(false, expected);
        train(true, restored);
        for (std::size_t r = 0; r < world; ++r) CHECK(restored[r] == expected[r]);
      }
}

#if defined(__linux__)
namespace {
// (nice, allowed cores) of every thread of this process, read from /proc.
std::vector<std::pair<int, std::string>> thread_scheduling() {
  std::vector<std::pair<int, std::string>> out;
  for (auto const& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream stat(e.path() / "stat");
    std::string line;
    std::getline(stat, line);
    std::istringstream rest(line.substr(line.rfind(')') + 2));  // fields 3.. after "(comm)"
    std::string field;
    for (int k = 3; k <= 19; ++k) rest >> field;  // field 19: nice
    std::ifstream status(e.path() / "status");
    std::string cpus;
    for (std::string l; std::getline(status, l);)
      if (l.rfind("Cpus_allowed_list:", 0) == 0) cpus = l.substr(l.find_first_not_of(" \t", 18));
    out.emplace_back(std::stoi(field), cpus);
  }
  return out;
}
}  // namespace

TEST_CASE("pipeline: stage threads run below the trainer and on the cores the options name") {
  int const base = ::getpriority(PRIO_PROCESS, 0);
  auto eps = local_transport::create(1);
  model_params p(model());
  pipeline_options o = small_buckets(1);
  o.scheduling = {.nice = 7, .exchange_nice = 3, .cpus = {0}};
  o.kernel_threads = 1;
  {
    pipeline pipe{top_k{.ratio = 0.1}, residual{}, sgd{.lr = 0.1}, std::move(eps[0]), o};
    auto spans = p.spans();
    pipe.attach(model(), spans);
    std::vector<std::vector<float>> g;
    gradients(0, 0, p, g);
    pipe.step(views(g));  // the stage threads have started and set themselves up
    pipe.synchronize();
    int lowered = 0, exchange = 0, pinned = 0;
    for (auto const& [nice, cpus] : thread_scheduling()) {
      lowered += nice == std::min(base + 7, 19) ? 1 : 0;
      exchange += nice == std::min(base + 3, 19) ? 1 : 0;
      pinned += cpus == "0" ? 1 : 0;
    }
    CHECK(lowered == 2);  // encode and apply
    CHECK(exchange == 1);
    CHECK(pinned >= 3);  // the three stage threads (and any OpenMP threads they start)
  }
  auto more = local_transport::create(1);
  pipeline_options bad = small_buckets();
  bad.scheduling.nice = 20;
  CHECK_THROWS_WITH_AS((pipeline{top_k{}, residual{}, sgd{.lr = 0.1}, std::move(more[0]), bad}),
                       doctest::Contains("0 (the trainer's priority) to 19"), error);
  auto other = local_transport::create(1);
  bad = small_buckets();
  bad.scheduling.cpus = {CPU_SETSIZE + 1};
  CHECK_THROWS_WITH_AS((pipeline{top_k{}, residual{}, sgd{.lr = 0.1}, std::move(other[0]), bad}),
                       doctest::Contains("not one this process may run on"), error);
}
#endif

TEST_CASE("pipeline: bad input is refused with a clear error") {
  auto errors = test::run_local(1, [&](local_transport& ep) {
    model_params p(model());
    CHECK_THROWS_AS((pipeline{top_k{}, residual{}, sgd{.lr = 0.1}, ep, pipeline_options{.staleness = 3}}), error);
    CHECK_THROWS_WITH_AS(
        (pipeline{top_k{}, residual{}, sgd{.lr = 0.1}, ep, pipeline_options{.bucketing = {.cap_bytes = 0}}}),
        doctest::Contains("bucketing.cap_bytes is 0"), error);
    CHECK_THROWS_WITH_AS(
        (pipeline{top_k{}, residual{}, sgd{.lr = 0.1}, ep, pipeline_options{.bucketing = {.first_cap_bytes = 0}}}),
        doctest::Contains("bucketing.first_cap_bytes is 0"), error);
    // An unbiased quantizer whose variance bound is not below 1 makes the residual grow.
    CHECK_THROWS_WITH_AS((pipeline{qsgd{}, residual{}, sgd{.lr = 0.1}, ep}), doctest::Contains("variance bound 3.23"),
                         error);
    CHECK_THROWS_WITH_AS((pipeline{qsgd{}, residual{}, sgd{.lr = 0.1}, ep}), doctest::Contains("use .bucket = 24"),
                         error);
    CHECK_THROWS_WITH_AS((pipeline{qsgd{.levels = 3, .bucket = 16}, ef21{}, sgd{.lr = 0.1}, ep}),
                         doctest::Contains("not below 1"), error);
    CHECK_NOTHROW((pipeline{qsgd{}, no_feedback{}, sgd{.lr = 0.1}, ep}));
    CHECK_NOTHROW((pipeline{qsgd{.bucket = 24}, residual{}, sgd{.lr = 0.1}, ep}));
    CHECK_NOTHROW((pipeline{qsgd{.levels = 127}, residual{}, sgd{.lr = 0.1}, ep}));
    {  // set_codec() checks the same, and keeps the codec it had
      model_params q(model());
      auto qs = q.spans();
      pipeline qp{qsgd{.bucket = 24}, residual{}, sgd{.lr = 0.1}, ep, small_buckets()};
      qp.attach(model(), qs);
      CHECK_THROWS_WITH_AS(qp.set_codec(qsgd{.levels = 3, .bucket = 24}), doctest::Contains("not below 1"), error);
      CHECK(qp.codec().levels == 7);
      qp.set_codec(qsgd{.levels = 31, .bucket = 24});
      CHECK(qp.codec().levels == 31);
    }
    pipeline pipe{top_k{.ratio = 0.05}, residual{}, sgd{.lr = 0.1}, ep, small_buckets()};
    std::vector<std::vector<float>> g;
    gradients(0, 0, p, g);
    CHECK_THROWS_WITH_AS(pipe.step(views(g)), doctest::Contains("before attach"), error);
    auto spans = p.spans();
    spans.pop_back();
    CHECK_THROWS_AS(pipe.attach(model(), spans), error);
    spans = p.spans();
    pipe.attach(model(), spans);
    g[1].pop_back();
    CHECK_THROWS_WITH_AS(pipe.gradient_ready(1, g[1]), doctest::Contains("fc1.bias"), error);
    gradients(0, 0, p, g);
    pipe.gradient_ready(0, g[0]);
    CHECK_THROWS_WITH_AS(pipe.gradient_ready(0, g[0]), doctest::Contains("twice"), error);
    CHECK_THROWS_WITH_AS(pipe.step(), doctest::Contains("first missing: 'fc1.bias'"), error);
  });
  test::rethrow_first(errors);
}

TEST_CASE("pipeline: attach copies rank 0's parameters to every rank, in bounded messages") {
  layout big;
  big.add("embedding", {2500, 2000});  // 5 M floats: more than one 16 MiB message
  big.add("bias", {7});
  std::vector<std::vector<std::vector<float>>> store(3);
  auto errors = test::run_local(3, [&](local_transport& ep) {
    auto& mine = store[static_cast<std::size_t>(ep.rank())];
    for (auto const& t : big.tensors()) mine.emplace_back(t.elements(), static_cast<float>(ep.rank() + 1));
    std::vector<std::span<float>> spans(mine.begin(), mine.end());
    pipeline pipe{top_k{.ratio = 0.01}, residual{}, sgd{.lr = 0.1}, ep, small_buckets()};
    pipe.attach(big, spans);
  });
  test::rethrow_first(errors);
  for (auto const& rank : store)
    for (auto const& t : rank) CHECK(std::all_of(t.begin(), t.end(), [](float x) { return x == 1.0f; }));
}
