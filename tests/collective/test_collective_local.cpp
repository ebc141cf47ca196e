// Every collective on local worlds of N = 1..8 against the reference sum, bit-identical replicas,
// and the fault tests: killed peer, corrupted byte, wrong step or tensor, mismatched layouts.
#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <string>

#include <sluice/collective/all.hpp>
#include <sluice/transport/all.hpp>

#include "collective/collective_checks.hpp"
#include "support/local_world.hpp"

using namespace sluice;
using namespace std::chrono_literals;

namespace {
struct outcome {
  errc kind = errc::unsupported;
  std::string what;
  bool threw = false;
};
outcome outcome_of(std::exception_ptr const& e) {
  if (!e) return {};
  try {
    std::rethrow_exception(e);
  } catch (error const& x) {
    return {x.kind(), x.what(), true};
  } catch (std::exception const& x) {
    return {errc::unsupported, x.what(), true};
  }
}
}  // namespace

TEST_CASE("collectives on local worlds of 1..8 ranks match the reference sum, replicas bit-identical") {
  for (int n = 1; n <= 8; ++n) {
    CAPTURE(n);
    auto errors = test::run_local(n, [](local_transport& t) { test::check_all(t); });
    for (auto const& e : errors) {
      auto o = outcome_of(e);
      CHECK_MESSAGE(!o.threw, o.what);
    }
  }
}

TEST_CASE("collectives: a workspace reused across steps and sizes") {
  auto errors = test::run_local(3, [](local_transport& t) {
    sparse_allgather_workspace<test::sparse_codec> ws;
    scatter_reduce_allgather_workspace<test::quant_codec> sws;
    for (std::uint64_t step = 0; step < 4; ++step) {
      std::size_t const n = step % 2 ? 513 : 2048;
      auto g = test::make_grad(t.rank(), n, step);
      std::vector<float> out(n);
      collective_context const ctx{.step = step, .tensor = 1};
      sparse_allgather(t, test::sparse_codec{}, std::span<float const>(g), std::span<float>(out), ctx, ws);
      CHECK(out == test::reference_sum(3, n, step));
      scatter_reduce_allgather(t, test::quant_codec{}, std::span<float const>(g), std::span<float>(out), ctx, sws);
    }
  });
  test::rethrow_first(errors);
}

TEST_CASE("ring_allreduce byte model matches the bytes a rank sends") {
  for (int w = 2; w <= 5; ++w) {
    std::size_t const n = 1001;
    std::size_t const model = ring_allreduce_bytes(n, w);
    double const ideal = 2.0 * (w - 1) / w * 4.0 * n;
    CHECK(static_cast<double>(model) >= ideal);
    CHECK(static_cast<double>(model) <= ideal + 2.0 * (w - 1) * (wire::header_bytes + 8 + detail::message_id_bytes));
  }
  CHECK(ring_allreduce_bytes(100, 1) == 0);
}

namespace {
// Runs `body` on every rank of a world of n, rank `faulty_rank` wrapped with `plan`.
template <class F>
std::vector<outcome> run_with_fault(int n, int faulty_rank, fault_plan plan, F body) {
  auto errors = test::run_local(n, [&](local_transport& t) {
    if (t.rank() == faulty_rank) {
      faulty f(t, plan);
      body(f);
    } else {
      body(t);
    }
  });
  std::vector<outcome> out;
  for (auto const& e : errors) out.push_back(outcome_of(e));
  return out;
}

template <class T>
void run_each(T& t, test::algo a, collective_context ctx, std::size_t n = 4096) {
  (void)test::run(t, a, n, ctx);
}
}  // namespace

TEST_CASE("fault: a peer killed mid-collective -> every survivor raises within its deadline") {
  for (auto a : test::all_algos()) {
    std::string const algo_name = test::name(a);
    CAPTURE(algo_name);
    // kill_at 0: rank 1's data never leaves, so every rank must raise. kill_at 1: a survivor that
    // already holds everything it needs may finish, but then with the exact sum.
    for (std::int64_t kill_at : {0, 1}) {
      CAPTURE(kill_at);
      collective_context const ctx{.step = 1, .tensor = 5, .timeout = 1s};
      std::size_t const n = 4096;
      auto const ref = test::reference_sum(4, n, ctx.step);
      std::vector<int> correct(4, 0);
      auto const t0 = std::chrono::steady_clock::now();
      auto res = run_with_fault(4, 1, {.kill_at_send = kill_at}, [&](auto& t) {
        correct[static_cast<std::size_t>(t.rank())] = test::matches(a, test::run(t, a, n, ctx), ref, 4) ? 1 : 0;
      });
      CHECK(std::chrono::steady_clock::now() - t0 < 20s);
      for (std::size_t r = 0; r < res.size(); ++r) {
        CAPTURE(r);
        if (res[r].threw) CHECK_MESSAGE((res[r].kind == errc::peer_lost || res[r].kind == errc::timeout), res[r].what);
        if (kill_at == 0)
          CHECK(res[r].threw);
        else
          CHECK((res[r].threw || correct[r] == 1));
      }
    }
  }
}

TEST_CASE("fault: a corrupted byte is errc::malformed_message") {
  for (auto a : {test::algo::ring, test::algo::allgather_sparse, test::algo::sra_quant, test::algo::reduce_scatter,
                 test::algo::ps, test::algo::hierarchical}) {
    std::string const algo_name = test::name(a);
    CAPTURE(algo_name);
    collective_context const ctx{.step = 1, .tensor = 5, .timeout = 1s};
    auto res = run_with_fault(3, 1, {.corrupt_send = 0, .corrupt_offset = 90}, [&](auto& t) { run_each(t, a, ctx); });
    bool malformed = false;
    for (auto const& o : res) {
      if (o.threw && o.kind == errc::malformed_message) {
        malformed = true;
        CHECK(o.what.find("tensor 5") != std::string::npos);
      }
    }
    CHECK(malformed);
  }
}

TEST_CASE("fault: a message for the wrong step or tensor is rejected") {
  for (auto a : {test::algo::ring, test::algo::allgather_dense, test::algo::sra_dense, test::algo::reduce_scatter}) {
    std::string const algo_name = test::name(a);
    CAPTURE(algo_name);
    for (bool wrong_step : {true, false}) {
      auto errors = test::run_local(3, [&](local_transport& t) {
        collective_context ctx{.step = 7, .tensor = 2, .timeout = 1s};
        if (t.rank() == 2) (wrong_step ? ctx.step : ctx.tensor) = 8;
        run_each(t, a, ctx, 999);
      });
      bool rejected = false;
      for (auto const& e : errors) {
        auto o = outcome_of(e);
        if (o.threw && o.kind == errc::malformed_message) {
          rejected = true;
          CHECK(o.what.find(wrong_step ? "step" : "tensor") != std::string::npos);
        }
      }
      CHECK(rejected);
    }
  }
}

TEST_CASE("fault: mismatched layouts across ranks -> an error naming the tensor") {
  for (auto a : {test::algo::ring, test::algo::allgather_sparse, test::algo::sra_quant, test::algo::ps}) {
    std::string const algo_name = test::name(a);
    CAPTURE(algo_name);
    auto errors = test::run_local(3, [&](local_transport& t) {
      collective_context const ctx{.step = 1, .tensor = 42, .timeout = 1s};
      run_each(t, a, ctx, t.rank() == 1 ? 1000 : 1024);
    });
    bool named = false;
    for (auto const& e : errors) {
      auto o = outcome_of(e);
      if (o.threw && o.kind == errc::malformed_message) named = named || o.what.find("tensor 42") != std::string::npos;
    }
    CHECK(named);
  }
}

TEST_CASE("pairwise exchange: every rank gets each peer's own message, from r-1, r-2, ... in that order") {
  for (int n = 1; n <= 6; ++n) {
    CAPTURE(n);
    std::vector<std::vector<int>> order(static_cast<std::size_t>(n));
    auto errors = test::run_local(n, [&](local_transport& t) {
      auto const w = static_cast<std::size_t>(n), r = static_cast<std::size_t>(t.rank());
      collective_context const ctx{.step = 3, .tensor = 4, .timeout = 20s};
      wire::header const h{
          .codec = wire::codec_id::identity, .element = element_type::f32, .tensor = 4, .step = 3, .extent = 2};
      std::vector<std::vector<std::byte>> send(w), recv(w);
      for (std::size_t j = 0; j < w; ++j) {
        float const v[2] = {static_cast<float>(r), static_cast<float>(j)};  // from r, for j
        detail::write_dense_frame(send[j], v, h);
        detail::stamp(send[j], {static_cast<std::uint32_t>(r), 0});
      }
      std::vector<int> steps;
      auto& got = order[r];
      std::size_t const sent = detail::pairwise_exchange(
          t, message_tag{5}, ctx, deadline::after(20s), "test",
          [&](std::size_t j) { return std::span<std::byte const>(send[j]); },
          [&](std::size_t j) -> std::vector<std::byte>& { return recv[j]; },
          [&](std::size_t) { return wire::expectation{.tensor = 4, .step = 3, .extent = 2}; },
          [&](int k) { steps.push_back(k); },
          [&](std::size_t j) {
            float v[2] = {};
            wire::read_array(wire::parse(detail::frame_of(recv[j]), {.tensor = 4, .step = 3, .extent = 2}).section(0),
                             std::span<float>(v), "test");
            REQUIRE(v[0] == static_cast<float>(j));  // from j
            REQUIRE(v[1] == static_cast<float>(r));  // meant for me
            got.push_back(static_cast<int>(j));
          });
      CHECK(sent == (w - 1) * send[0].size());
      CHECK(steps.size() == w - 1);
      for (std::size_t k = 0; k < steps.size(); ++k) CHECK(steps[k] == static_cast<int>(k + 1));
    });
    for (auto const& e : errors) CHECK(!outcome_of(e).threw);
    for (int r = 0; r < n; ++r) {
      auto const& got = order[static_cast<std::size_t>(r)];
      REQUIRE(got.size() == static_cast<std::size_t>(n - 1));
      for (int k = 1; k < n; ++k) CHECK(got[static_cast<std::size_t>(k - 1)] == (r - k + n) % n);
    }
  }
}

TEST_CASE(
    "fault: a dropped or duplicated message -> every rank ends with the correct bits or raises, never a "
    "silent disagreement") {
  int const world = 4;
  std::size_t const n = 1000;  // two chunks in the chunked variants
  for (auto a : test::all_algos()) {
    std::string const algo_name = test::name(a);
    CAPTURE(algo_name);
    for (bool duplicate : {false, true})
      for (int faulty_rank : {0, 1})
        for (std::int64_t k : {0, 1, 3}) {
          CAPTURE(duplicate);
          CAPTURE(faulty_rank);
          CAPTURE(k);
          // A duplicate is absorbed, so every rank must finish: a generous deadline. A drop ends in
          // a timeout somewhere: a short one.
          collective_context const ctx{.step = 2, .tensor = 6, .timeout = duplicate ? 20s : 300ms};
          fault_plan plan{};
          (duplicate ? plan.duplicate_send : plan.drop_send) = k;
          auto const ref = test::reference_sum(world, n, ctx.step);
          std::vector<std::vector<float>> out(static_cast<std::size_t>(world));
          auto res = run_with_fault(world, faulty_rank, plan, [&](auto& t) {
            out[static_cast<std::size_t>(t.rank())] = test::run(t, a, n, ctx);
          });
          std::optional<std::uint64_t> bits;
          for (std::size_t r = 0; r < res.size(); ++r) {
            CAPTURE(r);
            if (res[r].threw) {
              CHECK_MESSAGE(!duplicate, res[r].what);
              CHECK_MESSAGE(res[r].kind == errc::timeout, res[r].what);
              continue;
            }
            CHECK(test::matches(a, out[r], ref, world));
            auto const h = test::hash_of(out[r]);
            if (bits) CHECK(*bits == h);  // every rank that finished holds the same bits
            bits = h;
          }
        }
  }
}
