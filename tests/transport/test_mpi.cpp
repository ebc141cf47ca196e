// mpi_transport under mpirun -np N: ordered tagged messages, buffer reuse, barrier, native allreduce,
// concurrent threads (MPI_THREAD_MULTIPLE or serialized), and a silent peer as a timeout naming it.
#include "support/mpi_main.hpp"

#include <chrono>
#include <cstring>
#include <thread>

using namespace sluice;
using namespace std::chrono_literals;

TEST_CASE("mpi_transport: ring of tagged messages, in order, buffer reused") {
  mpi_transport t;
  int const r = t.rank(), n = t.size();
  CHECK(n >= 2);
  std::vector<std::byte> buf;
  for (int k = 0; k < 100; ++k) {
    std::vector<int> v(static_cast<std::size_t>(k + 1), r * 1000 + k);
    auto req = t.send((r + 1) % n, message_tag{static_cast<std::uint32_t>(k % 3)}, std::as_bytes(std::span(v)));
    auto m = t.recv((r - 1 + n) % n, message_tag{static_cast<std::uint32_t>(k % 3)}, buf, deadline::after(20s));
    REQUIRE(m.size() == v.size() * sizeof(int));
    int first = 0;
    std::memcpy(&first, m.data(), sizeof first);
    CHECK(first == ((r - 1 + n) % n) * 1000 + k);
    req.wait(deadline::after(20s));
  }
  t.barrier(deadline::after(20s));
}

TEST_CASE("mpi_transport: native allreduce sums") {
  mpi_transport t;
  std::vector<float> v(1000, static_cast<float>(t.rank() + 1));
  t.native_allreduce_sum(std::span<float>(v), deadline::after(20s));
  float const expect = static_cast<float>(t.size() * (t.size() + 1) / 2);
  for (float x : v) CHECK(x == expect);
}

TEST_CASE("mpi_transport: two threads on one transport with different tags") {
  mpi_transport t;
  MESSAGE("MPI thread level ", t.thread_level());
  int const r = t.rank(), n = t.size();
  auto worker = [&](std::uint32_t tag) {
    std::vector<std::byte> buf;
    for (int k = 0; k < 50; ++k) {
      int const v = k;
      auto req = t.send((r + 1) % n, message_tag{tag}, std::as_bytes(std::span<int const>(&v, 1)));
      auto m = t.recv((r - 1 + n) % n, message_tag{tag}, buf, deadline::after(20s));
      int got = -1;
      std::memcpy(&got, m.data(), sizeof got);
      CHECK(got == k);
      req.wait(deadline::after(20s));
    }
  };
  std::thread a(worker, 100u), b(worker, 200u);
  a.join();
  b.join();
  t.barrier(deadline::after(20s));
}

TEST_CASE("mpi_transport: a silent peer is a timeout naming it, within the deadline") {
  mpi_transport t;
  std::vector<std::byte> buf;
  if (t.rank() == 0) {
    auto const t0 = std::chrono::steady_clock::now();
    try {
      t.recv(1, message_tag{77}, buf, deadline::after(300ms));
      FAIL("no timeout");
    } catch (error const& e) {
      CHECK(e.kind() == errc::timeout);
      CHECK(std::string(e.what()).find("rank 1") != std::string::npos);
    }
    CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  }
  t.barrier(deadline::after(20s));
}
