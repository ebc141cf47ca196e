// Every collective over zmq_transport with 2-4 processes on loopback (torchrun-style rendezvous)
// against the reference sum with bit-identical replicas; a process that dies mid-collective leaves
// every survivor with an error within its deadline.
#include "support/spawn.hpp"

#include <chrono>

#include <sluice/collective/all.hpp>
#include <sluice/transport/fault.hpp>
#include <sluice/transport/zmq.hpp>

#include "collective/collective_checks.hpp"

using namespace sluice;
using namespace std::chrono_literals;

SLUICE_CHILD_SCENARIO(all) {
  zmq_transport t;
  test::check_all(t);
  t.barrier(deadline::after(30s));
  return 0;
}

// Tensors large enough for zero-copy sends (messages >= zmq_options::zero_copy_min_bytes).
SLUICE_CHILD_SCENARIO(big) {
  zmq_transport t;
  std::uint64_t step = 100;
  for (auto a : {test::algo::ring, test::algo::allgather_dense, test::algo::sra_dense, test::algo::reduce_scatter,
                 test::algo::ps, test::algo::hierarchical})
    test::check(t, a, 200'000, step++);
  t.barrier(deadline::after(30s));
  return 0;
}

// SLUICE_TEST_ALGO names the collective; rank 1 dies (process exit) at its first send.
SLUICE_CHILD_SCENARIO(dies) {
  zmq_transport t({.peer_lost_grace = 100ms, .linger = 0ms});
  auto const a = static_cast<test::algo>(std::atoi(std::getenv("SLUICE_TEST_ALGO")));
  collective_context const ctx{.step = 3, .tensor = 8, .timeout = 5s};
  // Rank 1 dies only after every other rank reports its construction (and set-up barrier) done:
  // the death must come in the collective, not before.
  constexpr message_tag ready_tag{1u << 20};
  std::vector<std::byte> scratch;
  if (t.rank() != 1) {
    int const ready = 1;
    t.send(1, ready_tag, std::as_bytes(std::span<int const>(&ready, 1)));
  }
  if (t.rank() == 1) {
    for (int p = 0; p < t.size(); ++p)
      if (p != 1) t.recv(p, ready_tag, scratch, deadline::after(30s));
    faulty f(t, {.kill_at_send = 0});
    try {
      (void)test::run(f, a, 4096, ctx);
    } catch (error const&) {
      ::_exit(0);  // the process dies mid-collective, without closing anything
    }
    return 40;
  }
  auto const t0 = std::chrono::steady_clock::now();
  try {
    (void)test::run(t, a, 4096, ctx);
  } catch (error const& e) {
    bool const in_time = std::chrono::steady_clock::now() - t0 < 20s;
    bool const clear = (e.kind() == errc::peer_lost || e.kind() == errc::timeout) &&
                       std::string(e.what()).find("tensor 8") != std::string::npos;
    if (!(in_time && clear)) std::fprintf(stderr, "rank %d: unexpected error: %s\n", t.rank(), e.what());
    return in_time && clear ? 0 : 41;
  }
  return 42;
}

TEST_CASE("collectives over ZeroMQ (2-4 processes) match the reference sum, replicas bit-identical") {
  for (int n : {2, 3, 4}) {
    CAPTURE(n);
    auto codes = test::spawn_ranks("all", n, 90s);
    for (int c : codes) CHECK(c == 0);
  }
}

TEST_CASE("collectives over ZeroMQ with zero-copy sized messages") {
  auto codes = test::spawn_ranks("big", 3, 90s);
  for (int c : codes) CHECK(c == 0);
}

TEST_CASE("collectives over ZeroMQ: a process killed mid-collective -> every survivor raises within its deadline") {
  for (auto a : {test::algo::ring, test::algo::allgather_sparse, test::algo::sra_quant, test::algo::reduce_scatter,
                 test::algo::ps, test::algo::hierarchical}) {
    std::string const algo_name = test::name(a);
    CAPTURE(algo_name);
    auto codes = test::spawn_ranks("dies", 4, 60s, {"SLUICE_TEST_ALGO=" + std::to_string(static_cast<int>(a))});
    for (int c : codes) CHECK(c == 0);
  }
}
