// local_transport and the fault-injection wrapper: ordering, tags, buffer reuse, barrier, and every
// failure (timeout, killed peer, dropped message) surfacing as an error within the deadline.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include <sluice/transport/all.hpp>

#include "support/local_world.hpp"

using namespace sluice;
using namespace std::chrono_literals;

namespace {
std::span<std::byte const> bytes_of(int const& v) { return std::as_bytes(std::span<int const>(&v, 1)); }
int int_of(std::span<std::byte const> b) {
  REQUIRE(b.size() == sizeof(int));
  int v = 0;
  std::memcpy(&v, b.data(), sizeof v);
  return v;
}
errc kind_of(std::exception_ptr const& e) {
  try {
    std::rethrow_exception(e);
  } catch (error const& x) {
    return x.kind();
  } catch (...) {
    return errc::unsupported;
  }
}
}  // namespace

TEST_CASE("local_transport: ordered per (peer, tag), tags independent, self-send") {
  auto errors = test::run_local(3, [](local_transport& t) {
    std::vector<std::byte> buf;
    int const r = t.rank(), n = t.size();
    for (int p = 0; p < n; ++p)
      for (int k = 0; k < 50; ++k) {
        int const v = r * 1000 + k;
        t.send(p, message_tag{static_cast<std::uint32_t>(k % 2)}, bytes_of(v)).wait(deadline::after(1s));
      }
    for (int p = 0; p < n; ++p) {
      // Tag 1 first: tags do not block each other.
      for (int k = 1; k < 50; k += 2)
        CHECK(int_of(t.recv(p, message_tag{1}, buf, deadline::after(10s))) == p * 1000 + k);
      for (int k = 0; k < 50; k += 2)
        CHECK(int_of(t.recv(p, message_tag{0}, buf, deadline::after(10s))) == p * 1000 + k);
    }
    t.barrier(deadline::after(10s));
  });
  test::rethrow_first(errors);
}

TEST_CASE("local_transport: a reused receive buffer keeps its capacity") {
  auto errors = test::run_local(2, [](local_transport& t) {
    std::vector<std::byte> buf, payload(4096, std::byte{7});
    int const other = 1 - t.rank();
    for (int i = 0; i < 20; ++i) {
      t.send(other, message_tag{3}, payload);
      auto m = t.recv(other, message_tag{3}, buf, deadline::after(10s));
      CHECK(m.size() == 4096);
      CHECK(buf.capacity() >= 4096);
    }
  });
  test::rethrow_first(errors);
}

TEST_CASE("local_transport: silent peer is a timeout naming the peer") {
  auto eps = local_transport::create(2);
  std::vector<std::byte> buf;
  auto const t0 = std::chrono::steady_clock::now();
  try {
    eps[0].recv(1, message_tag{0}, buf, deadline::after(50ms));
    FAIL("no timeout");
  } catch (error const& e) {
    CHECK(e.kind() == errc::timeout);
    CHECK(std::string(e.what()).find("rank 1") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  CHECK_THROWS_AS(eps[0].send(2, message_tag{0}, {}), error);
}

TEST_CASE("local_transport: killing an endpoint wakes waiting peers with peer_lost") {
  auto errors = test::run_local(4, [](local_transport& t) {
    std::vector<std::byte> buf;
    if (t.rank() == 2) {
      std::this_thread::sleep_for(20ms);
      t.kill();
      return;
    }
    t.recv(2, message_tag{0}, buf, deadline::after(20s));
  });
  for (int r : {0, 1, 3}) CHECK(kind_of(errors[static_cast<std::size_t>(r)]) == errc::peer_lost);
  CHECK(!errors[2]);
}

TEST_CASE("local_transport: barrier with a missing rank times out on the others") {
  auto errors = test::run_local(3, [](local_transport& t) {
    if (t.rank() == 0) return;
    t.barrier(deadline::after(100ms));
  });
  CHECK(kind_of(errors[1]) == errc::timeout);
  CHECK(kind_of(errors[2]) == errc::timeout);
}

TEST_CASE("faulty: drop, corrupt, delay, kill") {
  auto eps = local_transport::create(2);
  std::vector<std::byte> buf;
  int const a = 1, b = 2, c = 3;
  SUBCASE("drop") {
    faulty f(eps[0], {.drop_send = 1});
    f.send(1, message_tag{0}, bytes_of(a));
    CHECK(!f.send(1, message_tag{0}, bytes_of(b)).sent);
    f.send(1, message_tag{0}, bytes_of(c));
    CHECK(int_of(eps[1].recv(0, message_tag{0}, buf, deadline::after(1s))) == 1);
    CHECK(int_of(eps[1].recv(0, message_tag{0}, buf, deadline::after(1s))) == 3);
  }
  SUBCASE("duplicate") {
    faulty f(eps[0], {.duplicate_send = 1});
    f.send(1, message_tag{0}, bytes_of(a));
    f.send(1, message_tag{0}, bytes_of(b)).wait(deadline::after(1s));
    CHECK(int_of(eps[1].recv(0, message_tag{0}, buf, deadline::after(1s))) == 1);
    CHECK(int_of(eps[1].recv(0, message_tag{0}, buf, deadline::after(1s))) == 2);
    CHECK(int_of(eps[1].recv(0, message_tag{0}, buf, deadline::after(1s))) == 2);
  }
  SUBCASE("corrupt") {
    faulty f(eps[0], {.corrupt_send = 0, .corrupt_offset = 1});
    f.send(1, message_tag{0}, bytes_of(a)).wait(deadline::after(1s));
    CHECK(int_of(eps[1].recv(0, message_tag{0}, buf, deadline::after(1s))) != 1);
  }
  SUBCASE("delay") {
    faulty f(eps[0], {.delay = 30ms});
    auto const t0 = std::chrono::steady_clock::now();
    f.send(1, message_tag{0}, bytes_of(a));
    CHECK(std::chrono::steady_clock::now() - t0 >= 30ms);
  }
  SUBCASE("kill") {
    faulty f(eps[0], {.kill_at_send = 1, .peer = 1});
    f.send(1, message_tag{0}, bytes_of(a));
    f.send(0, message_tag{0}, bytes_of(a));  // other peers are not counted
    CHECK_THROWS_AS(f.send(1, message_tag{0}, bytes_of(b)), error);
    CHECK(f.killed());
    CHECK(!eps[0].alive(0));
    (void)eps[1].recv(0, message_tag{0}, buf, deadline::after(1s));
    try {
      eps[1].recv(0, message_tag{0}, buf, deadline::after(5s));
      FAIL("no error");
    } catch (error const& e) {
      CHECK(e.kind() == errc::peer_lost);
    }
  }
  CHECK(fmt::format("{}", fault_plan{}).find("fault_plan") == 0);
}

TEST_CASE("group: a sub-world renumbers ranks and runs a barrier") {
  auto errors = test::run_local(5, [](local_transport& t) {
    if (t.rank() % 2 != 0) return;
    group g(t, {0, 2, 4});
    CHECK(g.rank() == t.rank() / 2);
    CHECK(g.size() == 3);
    g.barrier(deadline::after(10s));
    std::vector<std::byte> buf;
    int const v = g.rank();
    g.send((g.rank() + 1) % 3, message_tag{9}, bytes_of(v));
    CHECK(int_of(g.recv((g.rank() + 2) % 3, message_tag{9}, buf, deadline::after(10s))) == (g.rank() + 2) % 3);
  });
  test::rethrow_first(errors);
}

TEST_CASE(
    "faulty: barrier tokens go through the fault plan; a lost one is a timeout, a duplicate passes no barrier early") {
  for (int world : {2, 3, 5}) {
    CAPTURE(world);
    SUBCASE("drop") {
      // Rank 1's first token never arrives: the barrier cannot complete everywhere.
      auto errors = test::run_local(world, [](local_transport& t) {
        if (t.rank() == 1) {
          faulty f(t, {.drop_send = 0});
          f.barrier(deadline::after(300ms));
        } else {
          t.barrier(deadline::after(300ms));
        }
      });
      int timeouts = 0;
      for (auto const& e : errors) timeouts += e && kind_of(e) == errc::timeout ? 1 : 0;
      CHECK(timeouts >= 1);
      for (auto const& e : errors)
        if (e) CHECK(kind_of(e) == errc::timeout);
    }
    SUBCASE("duplicate") {
      // Three barriers; rank 1 (the faulty one) enters each late and duplicates one of its tokens.
      // A stale token taken for a later barrier's would let a rank leave it before rank 1 entered.
      for (std::int64_t k : {0, 1, 2, 3}) {
        CAPTURE(k);
        std::atomic<int> entered[3] = {0, 0, 0};
        std::atomic<int> early{0};
        auto errors = test::run_local(world, [&](local_transport& t) {
          auto round = [&](auto& tr) {
            for (int b = 0; b < 3; ++b) {
              if (t.rank() == 1) std::this_thread::sleep_for(20ms);
              entered[b].fetch_add(1);
              tr.barrier(deadline::after(10s));
              if (entered[b].load() != world) early.fetch_add(1);
            }
          };
          if (t.rank() == 1) {
            faulty f(t, {.duplicate_send = k});
            round(f);
          } else {
            round(t);
          }
        });
        test::rethrow_first(errors);
        CHECK(early.load() == 0);
      }
    }
  }
}
