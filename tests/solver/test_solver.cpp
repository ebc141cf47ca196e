// The cost model, efficiency model, batch allocation, solver and bandwidth monitor: hand-computed
// predictions, brute-force optima on randomized small problems, monotonicity in bandwidth, fixed
// fields, and clear errors for invalid descriptions.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <sluice/pipeline/concepts.hpp>
#include <sluice/solver/all.hpp>

namespace {

using namespace sluice;

constexpr std::size_t MiB = std::size_t{1} << 20;

// A random small problem: 2-4 workers, one or two link levels, a few tensors, every codec kind.
problem random_problem(std::mt19937_64& rng, double encode_rate = -1) {
  std::uniform_real_distribution<double> u(0, 1);
  std::size_t const n = 2 + rng() % 3;
  problem p;
  for (std::size_t i = 0; i < n; ++i) p.workers.push_back({{0.05 * u(rng), 1e-4 + 2e-3 * u(rng)}, 4 + rng() % 12});
  auto const bw = [&] { return std::pow(10.0, 5.5 + 4 * u(rng)); };
  if (n == 4 && rng() % 2)
    p.links = {{2, bw(), 1e-3 * u(rng)}, {2, bw(), 1e-3 * u(rng)}};
  else
    p.links = {{n, bw(), 1e-3 * u(rng)}};
  std::size_t const tensors = 1 + rng() % 3;
  for (std::size_t t = 0; t < tensors; ++t) p.model.add(fmt::format("w{}", t), {16 + rng() % 500, 16 + rng() % 300});
  p.model.add("bias", {64});
  auto const rate = [&] { return encode_rate >= 0 ? encode_rate : 2e-9 * u(rng); };
  p.codecs = {{identity{}, encode_rate >= 0 ? encode_rate : 0},
              {top_k{.ratio = 0.1}, rate()},
              {top_k{.ratio = 0.01}, rate()},
              {block_top_k{.ratio = 0.03}, rate()},
              {maxmin_quantize{.bits = 4}, rate()}};
  p.global_batches = {n + rng() % 8, n + 4 + rng() % 12};
  p.bucket_caps = {64 << 10, 1 * MiB};
  p.apply_seconds_per_byte = 1e-9 * u(rng);
  p.efficiency.reference_steps = 1000;
  p.efficiency.reference_batch = 8;
  p.efficiency.noise_scale = 16 * u(rng);
  return p;
}

// Calls f(batches) for every split of `global` into per-worker batches in [1, cap_i].
void for_each_split(std::vector<worker_desc> const& w, std::size_t global, std::vector<std::size_t>& b, std::size_t i,
                    std::function<void(std::vector<std::size_t> const&)> const& f) {
  if (i + 1 == w.size()) {
    if (global >= 1 && global <= w[i].max_batch) {
      b[i] = global;
      f(b);
    }
    return;
  }
  for (std::size_t x = 1; x <= w[i].max_batch && x < global; ++x) {
    b[i] = x;
    for_each_split(w, global - x, b, i + 1, f);
  }
}

// The optimum by enumeration of every complete configuration through solver::predict.
double brute_force(solver const& s, std::span<double const> bw) {
  auto const& p = s.description();
  double best = std::numeric_limits<double>::infinity();
  std::vector<std::size_t> b(p.workers.size());
  for (std::size_t cap : p.bucket_caps)
    for (auto const& c : p.codecs)
      for (std::size_t g : p.global_batches)
        for (int st : p.staleness)
          for_each_split(p.workers, g, b, 0, [&](std::vector<std::size_t> const& split) {
            plan q{c.codec, g, split, cap, st, {}};
            best = std::min(best, s.predict(q, bw).time_to_accuracy);
          });
  return best;
}

}  // namespace

TEST_CASE("compute_samples fits f(b) = a + c b by least squares") {
  compute_samples cs;
  for (std::size_t b : {8u, 16u, 32u, 64u, 128u}) cs.observe(b, 0.02 + 0.001 * static_cast<double>(b));
  auto const f = cs.fit();
  CHECK(f.fixed_seconds == doctest::Approx(0.02).epsilon(1e-9));
  CHECK(f.per_sample_seconds == doctest::Approx(0.001).epsilon(1e-9));
  compute_samples one;
  one.observe(32, 0.064);
  one.observe(32, 0.064);
  CHECK(one.fit().fixed_seconds == 0);
  CHECK(one.fit().per_sample_seconds == doctest::Approx(0.002));
  compute_samples neg;  // a negative intercept is refitted through the origin
  neg.observe(10, 0.001);
  neg.observe(20, 0.010);
  CHECK(neg.fit().fixed_seconds == 0);
  CHECK(neg.fit().per_sample_seconds > 0);
  CHECK_THROWS_AS((void)compute_samples{}.fit(), error);
  CHECK_THROWS_AS(cs.observe(0, 1.0), error);
  // Large batch sizes close together: sums of b^2 near 1e13 would cancel in uncentred normal
  // equations; the fit still recovers the line.
  compute_samples big;
  for (std::size_t i = 0; i < 10; ++i) {
    double const b = 1e6 + static_cast<double>(i);
    big.observe(static_cast<std::size_t>(b), 0.5 + 1e-6 * b);
  }
  CHECK(big.fit().fixed_seconds == doctest::Approx(0.5).epsilon(1e-6));
  CHECK(big.fit().per_sample_seconds == doctest::Approx(1e-6).epsilon(1e-6));
  CHECK_THROWS_AS(cs.observe(8, -1.0), error);
}

TEST_CASE("efficiency_model: batch law, compression curve and staleness") {
  efficiency_model m;
  CHECK(m.batch_factor(256) == doctest::Approx(1.0));
  CHECK(m.batch_factor(512) < 1.0);
  CHECK(m.batch_factor(512) > 0.5);  // doubling B never halves the steps while B_noise is finite
  CHECK(m.compression_factor(1.0) == doctest::Approx(1.0));
  CHECK(m.compression_factor(0.01) == doctest::Approx(1.25));
  CHECK(m.compression_factor(std::sqrt(0.1 * 0.01)) == doctest::Approx((1.05 + 1.25) / 2));
  CHECK(std::isinf(m.compression_factor(0.0005)));
  CHECK(m.steps(256, 1.0, 1) == doctest::Approx(10000 * 1.05));
  CHECK(std::isinf(m.steps(256, 1.0, 3)));
  efficiency_model bad = m;
  bad.compression_curve = {{0.1, 1.0}, {0.5, 1.2}};
  CHECK_THROWS_AS(bad.validate(), error);
}

// Steps to 0.88 test accuracy of the Fashion-MNIST MLP (examples/fashion_mnist, 4 workers x 64,
// Adam 1e-3, default compensation), docs/performance/e2e.md: dense 936 / 936 / 1287 steps at
// staleness 0 / 1 / 2, block_top_k 1 % + residual 1989 / 1404 / 1287.
std::vector<efficiency_run> const fashion_mnist_runs{{1.0, 0, 256, 936},   {1.0, 1, 256, 936},   {1.0, 2, 256, 1287},
                                                     {0.01, 0, 256, 1989}, {0.01, 1, 256, 1404}, {0.01, 2, 256, 1287}};

TEST_CASE("fit_efficiency: multipliers from measured steps to the target") {
  efficiency_model const m = fit_efficiency(fashion_mnist_runs);
  CHECK(m.reference_steps == doctest::Approx(936));
  CHECK(m.reference_batch == doctest::Approx(256));
  CHECK(m.staleness[0] == doctest::Approx(1.0));
  CHECK(m.staleness[1] == doctest::Approx(1.0));
  CHECK(m.staleness[2] == doctest::Approx(1287.0 / 936));
  // block_top_k's runs over reference x staleness: 2.125, 1.5, 1.0; the median.
  REQUIRE(m.compression_curve.size() == 2);
  CHECK(m.compression_curve[1].first == doctest::Approx(0.01));
  CHECK(m.compression_curve[1].second == doctest::Approx(1.5));
  CHECK(std::isinf(m.compression_factor(0.001)));  // sparser than any run: refused
  // Runs at another batch are normalised by the batch law first.
  efficiency_model base;
  base.noise_scale = 256;
  std::vector<efficiency_run> const scaled{{1.0, 0, 512, 936 * base.batch_factor(512)}};
  CHECK(fit_efficiency(scaled, base).reference_steps == doctest::Approx(936));
  // What a fit cannot do is an error that says what to measure.
  std::vector<efficiency_run> const no_dense{{0.01, 0, 256, 1989}};
  CHECK_THROWS_WITH_AS((void)fit_efficiency(no_dense), doctest::Contains("no dense staleness-0 run"), error);
  std::vector<efficiency_run> const bad{{1.0, 0, 256, 936}, {1.0, 3, 256, 900}};
  CHECK_THROWS_WITH_AS((void)fit_efficiency(bad), doctest::Contains("run 1 has density 1, staleness 3"), error);
}

TEST_CASE("a measured curve: no staleness or ratio that costs more steps than it saves time") {
  problem p;
  for (int w = 0; w < 4; ++w) p.workers.push_back({{0.0, 1e-4}, 256});  // 6.4 ms for 64 samples
  p.model.add("fc1.w", {256, 784});
  p.model.add("fc1.b", {256});
  p.model.add("fc2.w", {128, 256});
  p.model.add("fc2.b", {128});
  p.model.add("fc3.w", {10, 128});
  p.model.add("fc3.b", {10});
  p.codecs = {{identity{}, 0}, {block_top_k{.ratio = 0.01}, 1e-10}, {top_k{.ratio = 0.001}, 1e-10}};
  p.global_batches = {256};
  p.links = {{4, 1.25e9, 1e-4}};
  p.efficiency = fit_efficiency(fashion_mnist_runs);
  solver const s(p);
  // 10 Gbit/s: the exchange is cheap, so neither compression (1.5x the steps) nor staleness 2
  // (1.375x) can pay for itself.
  plan const fast = s.solve({}, std::vector<double>{1.25e9});
  CHECK(density(fast.codec) == doctest::Approx(1.0));
  CHECK(fast.staleness != 2);
  // 100 Mbit/s: the dense exchange (about 1.4 MB a step per worker) costs far more than 1.5x the
  // steps of block_top_k 1 %; top_k 0.1 % is sparser than any measured run and never chosen.
  plan const slow = s.solve({}, std::vector<double>{1.25e7});
  CHECK(density(slow.codec) == doctest::Approx(0.01));
  for (double bw = 1.25e10; bw > 1e6; bw /= 2) CHECK(density(s.solve({}, std::vector<double>{bw}).codec) >= 0.01);
  // Whatever it chooses, its predicted time to accuracy is the best among the candidates.
  for (auto const& c : p.codecs)
    for (int st : p.staleness) {
      plan const q{c.codec, 256, {64, 64, 64, 64}, p.bucket_caps[0], st, {}};
      CHECK(slow.predicted.time_to_accuracy <=
            s.predict(q, std::vector<double>{1.25e7}).time_to_accuracy * (1 + 1e-12));
    }
}

TEST_CASE("the cost model of one bucket is the sum of its stages, by hand") {
  problem p;
  p.workers = {{{0.01, 0.001}, 64}, {{0.02, 0.0021}, 64}};
  p.links = {{2, 1e8, 1e-4}};
  p.model.add("w", {1024, 1024});
  p.codecs = {{top_k{.ratio = 0.01}, 1e-9}};
  p.global_batches = {30};
  p.bucket_caps = {8 * MiB};
  p.bucketing.first_cap_bytes = 8 * MiB;
  p.apply_seconds_per_byte = 0.5e-9;
  solver const s(p);
  plan const best = s.solve({});
  CHECK(best.batches == std::vector<std::size_t>{24, 6});  // f = 0.034, 0.0326; 23/7 gives 0.033, 0.0347
  double const n = 1024.0 * 1024.0, dense = 4 * n;
  double const bytes = static_cast<double>(top_k{.ratio = 0.01}.max_encoded_bytes(1024 * 1024));
  double const compute = 0.034, enc = dense * 1e-9, x = bytes / 1e8 + 1e-4;
  double const o = dense * 0.5e-9 * 2 * 0.01;  // sparse apply: N * density of the dense cost
  plan q{top_k{.ratio = 0.01}, 30, {24, 6}, 8 * MiB, 0, {}};
  CHECK(s.predict(q).step_seconds == doctest::Approx(compute + enc + x + o).epsilon(1e-12));
  CHECK(s.predict(q).bytes_per_step == bytes);
  q.staleness = 1;
  CHECK(s.predict(q).step_seconds == doctest::Approx(std::max(compute, enc + x + o)).epsilon(1e-12));
  q.staleness = 2;
  CHECK(s.predict(q).step_seconds == doctest::Approx(std::max({compute, enc, x, o})).epsilon(1e-12));
  CHECK(s.predict(q).time_to_accuracy ==
        doctest::Approx(s.predict(q).step_seconds * p.efficiency.steps(30, 0.01, 2)).epsilon(1e-12));
}

TEST_CASE("the solver returns the brute-force optimum on randomized small problems") {
  std::mt19937_64 rng(20261202);
  for (int trial = 0; trial < 25; ++trial) {
    CAPTURE(trial);
    solver const s(random_problem(rng));
    std::vector<double> const bw = s.configured_bandwidths();
    plan const got = s.solve({}, bw);
    double const want = brute_force(s, bw);
    CHECK(got.predicted.time_to_accuracy == doctest::Approx(want).epsilon(1e-12));
    CHECK(s.predict(got, bw).time_to_accuracy == doctest::Approx(got.predicted.time_to_accuracy).epsilon(1e-12));
    auto const top = s.ranked({}, bw, 3);
    REQUIRE(!top.empty());
    for (std::size_t i = 1; i < top.size(); ++i)
      CHECK(top[i - 1].predicted.time_to_accuracy <= top[i].predicted.time_to_accuracy);
  }
}

TEST_CASE("less bandwidth never yields less compression") {
  // Candidates whose CPU cost does not depend on their strength (docs/solver.md states the
  // condition): the chosen density never rises as the bandwidth of every level falls.
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    CAPTURE(trial);
    problem p = random_problem(rng, 1e-9);
    p.codecs.push_back({top_k{.ratio = 0.003}, 1e-9});
    p.codecs.push_back({maxmin_quantize{.bits = 8}, 1e-9});
    p.codecs.push_back({maxmin_quantize{.bits = 2}, 1e-9});
    solver const s(p);
    double last = 2;
    for (double g = 1e10; g > 1e5; g /= 1.3) {
      std::vector<double> bw(p.links.size(), g);
      double const d = density(s.solve({}, bw).codec);
      CAPTURE(g);
      CHECK(d <= last);
      last = d;
    }
  }
}

TEST_CASE("heterogeneous workers get batches that equalize step times") {
  std::vector<worker_desc> w{
      {{0.010, 0.0010}, 1000}, {{0.030, 0.0005}, 1000}, {{0.0, 0.0031}, 1000}, {{0.005, 0.0017}, 90}};
  for (std::size_t g : {4u, 7u, 100u, 257u, 1000u, 1190u}) {
    CAPTURE(g);
    auto const b = allocate_batches(w, g);
    REQUIRE(b.size() == w.size());
    std::size_t sum = 0;
    double hi = 0, lo = std::numeric_limits<double>::infinity(), cmax = 0;
    for (std::size_t i = 0; i < w.size(); ++i) {
      sum += b[i];
      CHECK(b[i] >= 1);
      CHECK(b[i] <= w[i].max_batch);
      cmax = std::max(cmax, w[i].compute.per_sample_seconds);
      if (b[i] > 1 && b[i] < w[i].max_batch) {
        hi = std::max(hi, w[i].compute.seconds(b[i]));
        lo = std::min(lo, w[i].compute.seconds(b[i]));
      }
    }
    CHECK(sum == g);
    if (hi > 0) CHECK(hi - lo <= cmax + 1e-12);  // the stated tolerance: one sample of the slowest
    // No split is faster: moving one sample from the slowest worker to any other does not help.
    double const t = compute_seconds(w, b);
    for (std::size_t i = 0; i < w.size(); ++i)
      for (std::size_t j = 0; j < w.size(); ++j) {
        if (i == j || b[i] <= 1 || b[j] >= w[j].max_batch) continue;
        auto c = b;
        --c[i];
        ++c[j];
        CHECK(compute_seconds(w, c) >= t - 1e-15);
      }
  }
  CHECK(allocate_batches(w, 3).empty());     // fewer samples than workers
  CHECK(allocate_batches(w, 3091).empty());  // above the memory caps
}

TEST_CASE("fixed fields are respected") {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 10; ++trial) {
    solver const s(random_problem(rng));
    auto const& p = s.description();
    plan const free = s.solve({});
    config_request r;
    r.codec = codec_value{top_k{.ratio = 0.05}};  // not a candidate
    r.bucket_cap_bytes = std::size_t{300000};     // not a candidate
    r.staleness = 1;
    plan const a = s.solve(r);
    CHECK(a.codec == codec_value{top_k{.ratio = 0.05}});
    CHECK(a.bucket_cap_bytes == 300000);
    CHECK(a.staleness == 1);
    CHECK(a.predicted.time_to_accuracy >= free.predicted.time_to_accuracy * (1 - 1e-12));
    config_request rb;
    rb.batches = std::vector<std::size_t>(p.workers.size(), 1);
    rb.codec = p.codecs[1].codec;
    plan const b = s.solve(rb);
    CHECK(b.batches == std::vector<std::size_t>(p.workers.size(), 1));
    CHECK(b.global_batch == p.workers.size());
    CHECK(b.codec == p.codecs[1].codec);
    config_request rg;
    rg.global_batch = p.global_batches.back();
    CHECK(s.solve(rg).global_batch == p.global_batches.back());
  }
}

TEST_CASE("invalid descriptions give clear errors") {
  auto const base = [] {
    problem p;
    p.workers = {{{0.01, 0.001}, 64}, {{0.01, 0.001}, 64}};
    p.links = {{2, 1e8, 1e-4}};
    p.model.add("w", {256, 256});
    p.codecs = {{identity{}, 0}, {top_k{.ratio = 0.01}, 1e-9}};
    p.global_batches = {32};
    return p;
  };
  auto const fails = [](problem p, errc e) {
    try {
      solver const s(std::move(p));
      (void)s.solve({});
    } catch (error const& x) {
      CHECK(x.kind() == e);
      CHECK(std::string(x.what()).size() > 30);  // says what and why
      return;
    }
    FAIL("no error");
  };
  CHECK_NOTHROW(solver{base()});
  auto p = base();
  p.links[0].bytes_per_second = 0;
  fails(p, errc::invalid_argument);  // zero bandwidth
  p = base();
  p.links[0].latency_seconds = -1;
  fails(p, errc::invalid_argument);  // negative latency
  p = base();
  p.workers[1].compute.fixed_seconds = -0.5;
  fails(p, errc::invalid_argument);  // negative compute time
  p = base();
  p.links[0].group = 3;
  fails(p, errc::invalid_argument);  // groups disagree with the workers
  p = base();
  p.model = layout{};
  fails(p, errc::invalid_argument);  // nothing to send
  p = base();
  p.codecs.clear();
  fails(p, errc::invalid_argument);
  p = base();
  p.global_batches = {1000};
  fails(p, errc::unsupported);  // no feasible batch under the memory caps
  p = base();
  p.codecs = {{top_k{.ratio = 0.0001}, 1e-9}};
  fails(p, errc::unsupported);  // refused by the efficiency curve
  p = base();
  p.codecs = {{top_k{.ratio = 2.0}, 1e-9}};
  fails(p, errc::invalid_argument);  // the codec's own check
  solver const s(base());
  std::vector<double> zero{0.0};
  CHECK_THROWS_AS((void)s.solve({}, zero), error);
  config_request r;
  r.staleness = 3;
  CHECK_THROWS_AS((void)s.solve(r), error);
  r = {};
  r.batches = std::vector<std::size_t>{1};
  CHECK_THROWS_AS((void)s.solve(r), error);
  r = {};
  r.batches = std::vector<std::size_t>{10, 10};
  r.global_batch = std::size_t{21};
  CHECK_THROWS_AS((void)s.solve(r), error);
}

// Two tiers: 4 workers in 2 groups of 2 (rank 3 twice as slow), a fast intra-group path and an
// inter-group link of `inter` bytes/s, by_hierarchical's exchange, one 2-D tensor.
problem tiers_problem(double inter, exchange_kind x = exchange_kind::hierarchical) {
  problem p;
  p.workers = {{{0.002, 0.001}, 512}, {{0.002, 0.001}, 512}, {{0.002, 0.001}, 512}, {{0.004, 0.002}, 512}};
  p.links = {{2, 1.25e9, 20e-6}, {2, inter, 200e-6}};
  p.exchange = x;
  p.model.add("w", {2048, 1024});
  p.model.add("bias", {1024});
  p.codecs = {{identity{}, 0},
              {maxmin_quantize{.bits = 8}, 0.04e-9},
              {maxmin_quantize{.bits = 4}, 0.04e-9},
              {top_k{.ratio = 0.1}, 0.05e-9},
              {top_k{.ratio = 0.02}, 0.05e-9},
              {top_k{.ratio = 0.005}, 0.05e-9}};
  p.global_batches = {256};
  p.bucket_caps = {4 * MiB};
  p.staleness = {1};
  p.apply_seconds_per_byte = 0.07e-9;
  return p;
}

TEST_CASE("tiers: by_hierarchical's exchange of one bucket, by hand") {
  problem p = tiers_problem(12.5e6);
  p.model = layout{};
  p.model.add("w", {512, 512});
  p.codecs = {{top_k{.ratio = 0.01}, 1e-9}};
  p.bucket_caps = {8 * MiB};
  p.bucketing.first_cap_bytes = 8 * MiB;
  solver const s(p);
  std::size_t const n = 512 * 512;
  double const dense = static_cast<double>(identity{}.max_encoded_bytes(n));
  double const frame = static_cast<double>(top_k{.ratio = 0.01}.max_encoded_bytes(n));
  // Leader: the member's fp32 frame in, the fp32 result out (2 messages) on the fast path; then one
  // sparse frame to the other leader over the thin link (frames restart at 1: the leader re-encodes).
  double const x = 2 * dense / 1.25e9 + 2 * 20e-6 + frame / 12.5e6 + 200e-6;
  plan const q{top_k{.ratio = 0.01}, 256, {73, 73, 73, 37}, 8 * MiB, 1, {}};
  prediction const pr = s.predict(q);
  CHECK(pr.stages.exchange == doctest::Approx(x).epsilon(1e-12));
  CHECK(pr.bytes_per_step == doctest::Approx(dense + frame).epsilon(1e-12));
  // Two leaders' sparse frames are summed: apply costs 2 x density of dense.
  CHECK(pr.stages.apply == doctest::Approx(4.0 * n * 0.07e-9 * 2 * 0.01).epsilon(1e-12));
  // The leader keeps 1 % of its group's sum: the efficiency curve is read at 1 % / 2.
  CHECK(pr.steps_to_target == doctest::Approx(p.efficiency.steps(256, 0.005, 1)).epsilon(1e-12));
  p.exchange = exchange_kind::flat;
  CHECK(solver(p).predict(q).steps_to_target == doctest::Approx(p.efficiency.steps(256, 0.01, 1)).epsilon(1e-12));
}

TEST_CASE("tiers: a thin inter-group link gets the leaders a stronger codec than a fat one") {
  double const thin = 12.5e6, fat = 1.25e9;  // 100 Mbit/s and 10 Gbit/s
  plan const a = solver(tiers_problem(thin)).solve({});
  plan const b = solver(tiers_problem(fat)).solve({});
  CAPTURE(a.codec);
  CAPTURE(b.codec);
  CHECK(density(a.codec) < density(b.codec));
  CHECK(a.predicted.bytes_per_step < b.predicted.bytes_per_step);
  // Only the inter-group rate moved: sweeping it down never weakens the leaders' codec (equal CPU
  // costs within a kind do not make this hold in general; here the sweep is checked as listed).
  solver const s(tiers_problem(fat));
  double last = 2;
  for (double bw = 1.25e9; bw >= 1.25e5; bw /= 2) {
    std::vector<double> const rates{1.25e9, bw};
    double const d = effective_density(s.solve({}, rates).codec, exchange_kind::hierarchical, 2);
    CAPTURE(bw);
    CHECK(d <= last);
    last = d;
  }
}

TEST_CASE("tiers: the slower worker gets the smaller batch, and the split equalises compute") {
  solver const s(tiers_problem(12.5e6));
  plan const q = s.solve({});
  REQUIRE(q.batches.size() == 4);
  CHECK(q.global_batch == 256);
  CHECK(q.batches[3] < q.batches[0]);
  CHECK((q.batches[3] == 35 || q.batches[3] == 36));  // 0.002 + 0.001 b = 0.004 + 0.002 b': 0.076 s at most
  CHECK(q.predicted.stages.compute == doctest::Approx(0.076).epsilon(1e-12));
  double const equal = compute_seconds(s.description().workers, std::vector<std::size_t>{64, 64, 64, 64});
  CHECK(q.predicted.stages.compute < 0.6 * equal);  // 0.076 s against 0.132 s
}

TEST_CASE("tiers: the solver is the brute-force optimum with hierarchical exchanges too") {
  std::mt19937_64 rng(20261205);
  int tried = 0;
  for (int trial = 0; trial < 60 && tried < 12; ++trial) {
    problem p = random_problem(rng);
    if (p.links.size() < 2) continue;
    ++tried;
    CAPTURE(trial);
    p.exchange = exchange_kind::hierarchical;
    solver const s(p);
    std::vector<double> const bw = s.configured_bandwidths();
    CHECK(s.solve({}, bw).predicted.time_to_accuracy == doctest::Approx(brute_force(s, bw)).epsilon(1e-12));
  }
  CHECK(tried > 0);
}

TEST_CASE("tiers: a flat exchange over two levels loads each uplink as the collective over every rank does") {
  // 2 groups of 2, ranks numbered group by group: a ring crosses each uplink once a step; the
  // quantizers' pairwise reduce-scatter sends each rank's 3 chunks, 2 of them per rank across.
  std::vector<link_level> const links{{2, 1.25e9, 20e-6}, {2, 12.5e6, 200e-6}};
  std::size_t const n = 1000;
  double const f1 = static_cast<double>(identity{}.max_encoded_bytes(250));
  auto x = flat_exchange(identity{}, n, links);
  REQUIRE(x.size() == 1);
  CHECK(x[0][0].bytes == 6 * f1);
  CHECK(x[0][1].bytes == 6 * f1);
  CHECK(x[0][1].messages == 6);
  maxmin_quantize const q{.bits = 4};
  double const fq = static_cast<double>(q.max_encoded_bytes(250));
  x = flat_exchange(q, n, links);
  REQUIRE(x.size() == 2);
  CHECK(x[0][0].bytes == 3 * fq);  // a rank's own sends
  CHECK(x[0][1].bytes == 4 * fq);  // 2 ranks x 2 chunks through the group's uplink
  CHECK(x[1][0].bytes == 3 * fq);
  CHECK(x[1][1].bytes == 3 * fq);
  top_k const k{.ratio = 0.01};
  x = flat_exchange(k, n, links);
  REQUIRE(x.size() == 1);
  CHECK(x[0][1].bytes == 3 * static_cast<double>(k.max_encoded_bytes(n)));
  // One level of 4 ranks: the traffic table's bucket_traffic, split into phases.
  std::vector<link_level> const one{{4, 12.5e6, 200e-6}};
  for (codec_value const c : {codec_value{identity{}}, codec_value{q}, codec_value{k}}) {
    double bytes = 0, messages = 0;
    for (auto const& ph : flat_exchange(c, n, one)) {
      bytes += ph[0].bytes;
      messages += ph[0].messages;
    }
    CHECK(bytes == bucket_traffic(c, n, 4, 1).bytes);
    CHECK(messages == bucket_traffic(c, n, 4, 1).messages);
  }
  // A level whose groups hold every rank is not crossed.
  std::vector<link_level> const inner_only{{4, 1.25e9, 20e-6}, {1, 12.5e6, 200e-6}};
  CHECK(flat_exchange(identity{}, n, inner_only)[0][1].bytes == 0);
}

TEST_CASE("tiers: choose_exchange takes hierarchical where the thin link sets the pace, flat where it does not") {
  problem p = tiers_problem(12.5e6);
  config_request dense;
  dense.codec = codec_value{identity{}};
  auto const thin = choose_exchange(p, dense);
  CHECK(thin.exchange == exchange_kind::hierarchical);
  CHECK(thin.hierarchical.predicted.stages.exchange < thin.flat.predicted.stages.exchange);
  CHECK(&thin.chosen() == &thin.hierarchical);
  // Fast links everywhere: a sparsifier's leader hop buys nothing and its ratio / 2 costs steps.
  p.links[1].bytes_per_second = 1.25e9;
  config_request sparse;
  sparse.codec = codec_value{top_k{.ratio = 0.02}};
  auto const fat = choose_exchange(p, sparse);
  CHECK(fat.exchange == exchange_kind::flat);
  CHECK(fat.flat.predicted.time_to_accuracy < fat.hierarchical.predicted.time_to_accuracy);
  p.links = {{4, 1.25e9, 20e-6}};
  CHECK_THROWS_WITH_AS((void)choose_exchange(p, {}), doctest::Contains("a hierarchical exchange needs two"), error);
}

TEST_CASE("tiers: a hierarchical exchange without two link levels is an error naming it") {
  problem p = tiers_problem(12.5e6);
  p.links = {{4, 1.25e9, 20e-6}};
  try {
    solver const s(p);
    FAIL("no error");
  } catch (error const& e) {
    CHECK(e.kind() == errc::invalid_argument);
    CHECK(std::string(e.what()).find("exchange hierarchical needs two link levels") != std::string::npos);
  }
}

TEST_CASE("bandwidth_monitor tracks goodput and detects a level change") {
  bandwidth_monitor m;
  CHECK(m.estimate() == 0);
  CHECK(m.idle(0, 1));
  double now = 0;
  for (int i = 0; i < 40; ++i) {
    double const f = 1 + 0.05 * ((i % 3) - 1);  // +-5 %
    m.observe(1 << 20, (1 << 20) / (125e6 * f), now += 0.1);
  }
  CHECK(m.estimate() == doctest::Approx(125e6).epsilon(0.05));
  CHECK(m.windowed_min() <= m.estimate());
  CHECK(m.windowed_min() >= 125e6 * 0.94);
  CHECK(m.changes() == 0);
  int took = 0;
  for (int i = 0; i < 20 && m.changes() == 0; ++i, ++took) m.observe(1 << 20, (1 << 20) / 6.25e6, now += 0.1);
  CHECK(took == 3);  // change_samples
  CHECK(m.estimate() == doctest::Approx(6.25e6).epsilon(0.01));
  CHECK(m.windowed_min() == doctest::Approx(6.25e6).epsilon(0.01));
  CHECK(m.last_change_time() == doctest::Approx(now));
  // Ignored: too few bytes, zero or negative time.
  auto const n = m.samples();
  m.observe(0, 1.0, now);
  m.observe(100, 0.0, now);
  m.observe(100, -1.0, now);
  CHECK(m.samples() == n);
  CHECK(m.idle(now + 5, 2));
  CHECK(!m.idle(now + 1, 2));
  CHECK_THROWS_AS(bandwidth_monitor(monitor_options{.alpha = 0}), error);
}

TEST_CASE("bandwidth_monitor: link_estimate reads the link through samples that waited") {
  // A 100 Mbit/s link (12.5e6 B/s) whose transfers often wait for a late peer: 0 to 1.5 transfer
  // times of wait on two samples out of three (a fixed pseudo-random pattern). The EWMA reads what
  // the transfers got; the upper quantile reads the link.
  bandwidth_monitor m;
  double now = 0;
  std::size_t const bytes = 1 << 20;
  double const link = 12.5e6, transfer = static_cast<double>(bytes) / link;
  std::uint32_t x = 12345;
  for (int i = 0; i < 40; ++i) {
    x = x * 1664525u + 1013904223u;
    double const wait = i % 3 == 0 ? 0.0 : transfer * 1.5 * static_cast<double>(x >> 8) / double(1u << 24);
    m.observe(bytes, transfer + wait, now += 0.2);
  }
  CHECK(m.estimate() < 0.85 * link);  // the goodput the transfers got
  CHECK(m.link_estimate() == doctest::Approx(link).epsilon(0.05));
  CHECK(m.link_estimate() >= m.estimate());
  CHECK(m.link_estimate() >= m.windowed_min());
  // The link drops to 10 Mbit/s: the window restarts at the change, and the link estimate follows.
  int took = 0;
  for (int i = 0; i < 20 && m.changes() == 0; ++i, ++took)
    m.observe(bytes, static_cast<double>(bytes) / 1.25e6, now += 1);
  CHECK(took == 3);
  CHECK(m.link_estimate() == doctest::Approx(1.25e6).epsilon(0.01));
  CHECK(bandwidth_monitor(monitor_options{.link_quantile = 0}).link_estimate() == 0);
  CHECK_THROWS_AS(bandwidth_monitor(monitor_options{.link_quantile = 1.5}), error);
}

TEST_CASE("monitor_sink is a TelemetrySink that keeps only exchange samples") {
  static_assert(TelemetrySink<monitor_sink>);
  monitor_sink sink;
  sink.record(stage_sample{.which = stage::encode, .seconds = 1, .bytes = 1000});
  CHECK(sink.snapshot().samples() == 0);
  sink.record(stage_sample{.which = stage::exchange, .seconds = 1e-3, .bytes = 1000});
  sink.record(step_report{.step = 1, .sent_bytes = 5000});  // reports are not samples
  CHECK(sink.snapshot().samples() == 1);
  CHECK(sink.snapshot().samples() == 1);
  CHECK(sink.snapshot().estimate() == doctest::Approx(1e6));
}

TEST_CASE("choice holds a fixed value or auto_select") {
  choice<int> a;
  CHECK(a.is_auto());
  CHECK(a.fixed() == nullptr);
  CHECK_THROWS_AS((void)a.value(), error);
  choice<int> b = 3;
  CHECK(!b.is_auto());
  CHECK(b.value() == 3);
  choice<int> c = auto_select{};
  CHECK(c == a);
  config_request r;
  r.codec = top_k{.ratio = 0.02};  // converts to codec_value
  REQUIRE(r.codec.fixed() != nullptr);
  CHECK(*r.codec.fixed() == codec_value{top_k{.ratio = 0.02}});
}

TEST_CASE("layer_bits: the DP matches brute force over the rounded errors and keeps the budget") {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<unsigned> const choices{2, 3, 4, 8};
  for (int trial = 0; trial < 30; ++trial) {
    CAPTURE(trial);
    std::vector<layer_stat> layers;
    std::size_t const L = 1 + rng() % 5;
    for (std::size_t l = 0; l < L; ++l) layers.push_back({1000 + rng() % 100000, 0.01 + u(rng)});
    double lo = 0, hi = 0;
    for (auto const& l : layers) {
      lo += quantization_error(l, 8);
      hi += quantization_error(l, 2);
    }
    double const budget = lo + (hi - lo) * u(rng);
    std::size_t const res = 1000;
    auto const got = layer_bits(layers, choices, budget, 1024, res);
    CHECK(got.error <= budget * (1 + 1e-12));
    // Brute force with the DP's rounding of errors to budget / res units.
    double const unit = budget / static_cast<double>(res);
    std::size_t best = std::numeric_limits<std::size_t>::max();
    std::vector<std::size_t> idx(L, 0);
    for (;;) {
      std::size_t units = 0, bytes = 0;
      for (std::size_t l = 0; l < L; ++l) {
        unsigned const b = choices[idx[l]];
        units += static_cast<std::size_t>(std::ceil(quantization_error(layers[l], b) / unit - 1e-12));
        bytes += maxmin_quantize{.bits = b}.max_encoded_bytes(layers[l].elements);
      }
      if (units <= res) best = std::min(best, bytes);
      std::size_t l = 0;
      while (l < L && ++idx[l] == choices.size()) idx[l++] = 0;
      if (l == L) break;
    }
    CHECK(got.bytes == best);
    std::size_t bytes = 0;
    for (std::size_t l = 0; l < L; ++l)
      bytes += maxmin_quantize{.bits = got.bits[l]}.max_encoded_bytes(layers[l].elements);
    CHECK(bytes == got.bytes);
  }
  std::vector<layer_stat> one{{1000, 1.0}};
  CHECK_THROWS_AS((void)layer_bits(one, choices, 1e-12), error);  // even 8 bits is too coarse
  std::vector<unsigned> bad{9};
  CHECK_THROWS_AS((void)layer_bits(one, bad, 1.0), error);
}
