// replica_check: the digests, the one-call check on local worlds of threads, and the monitor that
// finds the step at which an injected difference appears.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include <sluice/collective/replica_check.hpp>
#include <sluice/transport/local.hpp>

#include "support/local_world.hpp"

namespace {

/// Three tensors that every rank computes alike from the step: a stand-in for replicas trained in
/// lockstep.
std::vector<std::vector<float>> model_at(std::uint64_t step) {
  std::vector<std::vector<float>> m{std::vector<float>(1000), std::vector<float>(77), std::vector<float>(3)};
  for (std::size_t t = 0; t < m.size(); ++t)
    for (std::size_t i = 0; i < m[t].size(); ++i)
      m[t][i] = std::sin(static_cast<float>(step * 131 + t * 17 + i) * 0.01f);
  return m;
}

std::vector<std::span<float const>> spans(std::vector<std::vector<float>> const& m) { return {m.begin(), m.end()}; }

}  // namespace

TEST_CASE("tensor_digest: bits and length decide it") {
  std::vector<float> a{1.0f, 2.0f, 3.0f};
  auto const d = sluice::tensor_digest(a);
  CHECK(sluice::tensor_digest(std::vector<float>{1.0f, 2.0f, 3.0f}) == d);
  CHECK(sluice::tensor_digest(std::vector<float>{1.0f, 2.0f, std::nextafter(3.0f, 4.0f)}) != d);
  CHECK(sluice::tensor_digest(std::vector<float>{1.0f, 2.0f}) !=
        sluice::tensor_digest(std::vector<float>{1.0f, 2.0f, 0.0f}));
  CHECK(sluice::tensor_digest(std::vector<float>{0.0f}) != sluice::tensor_digest(std::vector<float>{-0.0f}));
  CHECK(sluice::tensor_digest(std::vector<float>{}) != sluice::tensor_digest(std::vector<float>{0.0f}));
  // Every single-bit change of a 5-element tensor changes the digest.
  std::vector<float> b{0.5f, -1.25f, 3.0e-8f, 7.0f, 1.0e30f};
  auto const db = sluice::tensor_digest(b);
  for (std::size_t i = 0; i < b.size(); ++i)
    for (int bit = 0; bit < 32; ++bit) {
      auto c = b;
      auto u = std::bit_cast<std::uint32_t>(c[i]) ^ (1u << bit);
      c[i] = std::bit_cast<float>(u);
      CHECK(sluice::tensor_digest(c) != db);
    }
}

TEST_CASE("check_replicas: equal replicas agree on every rank, with one digest") {
  for (int n : {1, 2, 3, 5}) {
    CAPTURE(n);
    std::vector<sluice::replica_report> reports(static_cast<std::size_t>(n));
    auto const errors = sluice::test::run_local(n, [&](sluice::local_transport& t) {
      auto const m = model_at(3);
      reports[static_cast<std::size_t>(t.rank())] = sluice::check_replicas(t, spans(m), {.step = 3});
    });
    sluice::test::rethrow_first(errors);
    for (auto const& r : reports) {
      CHECK(r.agree);
      CHECK(r.step == 3);
      CHECK(r.differing_ranks.empty());
      CHECK(r.first_tensor == sluice::replica_report::none);
      CHECK(r == reports[0]);
    }
  }
}

TEST_CASE("check_replicas: a changed value names its ranks and tensor, the same on every rank") {
  int const n = 4;
  std::vector<sluice::replica_report> reports(n);
  auto const errors = sluice::test::run_local(n, [&](sluice::local_transport& t) {
    auto m = model_at(9);
    if (t.rank() == 2) m[1][40] = std::nextafter(m[1][40], 2.0f);  // one ulp in tensor 1
    if (t.rank() == 3) m[2][0] = -m[2][0];                         // a sign in tensor 2
    reports[static_cast<std::size_t>(t.rank())] = sluice::check_replicas(t, spans(m), {.step = 9});
  });
  sluice::test::rethrow_first(errors);
  for (auto const& r : reports) {
    CHECK_FALSE(r.agree);
    CHECK(r.differing_ranks == std::vector<int>{2, 3});
    CHECK(r.tensors == std::vector<std::size_t>{1, 2});
    CHECK(r.first_tensor == 1);
    CHECK(r == reports[0]);
  }
  CHECK(reports[0].describe() ==
        "step 9: rank(s) 2, 3 hold parameters that differ from rank 0's in tensor(s) 1, 2 (first: 1)");
}

TEST_CASE("check_replicas: rank 0 differing makes every other rank differ") {
  int const n = 3;
  std::vector<sluice::replica_report> reports(n);
  auto const errors = sluice::test::run_local(n, [&](sluice::local_transport& t) {
    auto m = model_at(1);
    if (t.rank() == 0) m[0][999] += 1.0f;
    reports[static_cast<std::size_t>(t.rank())] = sluice::check_replicas(t, spans(m), {.step = 1});
  });
  sluice::test::rethrow_first(errors);
  for (auto const& r : reports) {
    CHECK(r.differing_ranks == std::vector<int>{1, 2});
    CHECK(r.first_tensor == 0);
  }
}

TEST_CASE("check_replicas: different tensor counts or steps are errors on the ranks that see them") {
  auto const errors = sluice::test::run_local(2, [&](sluice::local_transport& t) {
    auto m = model_at(0);
    if (t.rank() == 1) m.pop_back();
    (void)sluice::check_replicas(t, spans(m), {.step = 0, .timeout = std::chrono::milliseconds(5000)});
  });
  for (auto const& e : errors) {
    REQUIRE(e);
    try {
      std::rethrow_exception(e);
    } catch (sluice::error const& x) {
      CHECK(x.code() == sluice::errc::size_mismatch);
      CHECK(std::string(x.what()).find("tensors") != std::string::npos);
    }
  }
  auto const steps = sluice::test::run_local(2, [&](sluice::local_transport& t) {
    auto const m = model_at(0);
    (void)sluice::check_replicas(
        t, spans(m), {.step = static_cast<std::uint64_t>(t.rank()), .timeout = std::chrono::milliseconds(5000)});
  });
  for (auto const& e : steps) {
    REQUIRE(e);
    try {
      std::rethrow_exception(e);
    } catch (sluice::error const& x) {
      CHECK(x.code() == sluice::errc::malformed_message);
    }
  }
}

TEST_CASE("replica_monitor: finds the first checked step after an injected difference") {
  // Replicas in lockstep; from step 37 on, rank 1 carries a changed value in tensor 2.
  std::uint64_t const inject = 37, steps = 60;
  for (std::uint64_t every : {1u, 5u, 10u, 37u}) {
    CAPTURE(every);
    int const n = 3;
    std::vector<sluice::replica_monitor> monitors(n, sluice::replica_monitor(every, {.tag = sluice::message_tag{4}}));
    std::vector<int> checks(n, 0);
    auto const errors = sluice::test::run_local(n, [&](sluice::local_transport& t) {
      auto& mon = monitors[static_cast<std::size_t>(t.rank())];
      for (std::uint64_t s = 1; s <= steps; ++s) {
        auto m = model_at(s);
        if (t.rank() == 1 && s >= inject) m[2][1] *= 1.5f;
        if (mon.step(t, s, spans(m))) ++checks[static_cast<std::size_t>(t.rank())];
      }
    });
    sluice::test::rethrow_first(errors);
    std::uint64_t const first = (inject + every - 1) / every * every;  // the first check at or after 37
    for (auto const& mon : monitors) {
      REQUIRE(mon.first_difference().has_value());
      CHECK(*mon.first_difference() == first);
      if (first > every) {
        REQUIRE(mon.last_agreement().has_value());
        CHECK(*mon.last_agreement() == first - every);
      } else {
        CHECK_FALSE(mon.last_agreement().has_value());
      }
      REQUIRE(mon.first_report().has_value());
      CHECK(mon.first_report()->differing_ranks == std::vector<int>{1});
      CHECK(mon.first_report()->first_tensor == 2);
    }
    for (int c : checks) CHECK(c == static_cast<int>(steps / every));
  }
}

TEST_CASE("replica_monitor: replicas that never differ report nothing; every = 0 is refused") {
  sluice::replica_monitor keep(4);
  auto const errors = sluice::test::run_local(2, [&](sluice::local_transport& t) {
    sluice::replica_monitor mon(4);
    for (std::uint64_t s = 0; s < 20; ++s) {
      auto const m = model_at(s);
      (void)mon.step(t, s, spans(m));
    }
    CHECK_FALSE(mon.first_difference().has_value());
    CHECK(mon.last_agreement() == std::optional<std::uint64_t>(16));
  });
  sluice::test::rethrow_first(errors);
  CHECK_THROWS_AS(sluice::replica_monitor(0), sluice::error);
}
