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

// Run under mpirun --mca btl tcp,self (registered on its own, skipped otherwise): there a large
// message needs its sender's progress after the first fragment, so a sender that stalls between
// MPI calls leaves the receiver with a matched message whose bytes do not come. Over shared memory
// the receiver copies the bytes itself and the case does not arise.
TEST_CASE("mpi_transport: a peer that stalls mid-message is a timeout; its bytes land later, safely" *
          doctest::skip()) {
  mpi_transport t;
  std::size_t const bytes = std::size_t{8} << 20;
  std::vector<std::byte> buf;
  if (t.rank() == 1) {
    std::vector<std::byte> big(bytes, std::byte{0x5a});
    auto req = t.send(0, message_tag{91}, big);
    std::this_thread::sleep_for(3s);  // no MPI call: the rest of the message waits
    req.wait(deadline::after(30s));
  } else if (t.rank() == 0) {
    int flag = 0;
    for (auto const until = std::chrono::steady_clock::now() + 20s; !flag && std::chrono::steady_clock::now() < until;)
      MPI_Iprobe(1, 91, t.comm(), &flag, MPI_STATUS_IGNORE);
    REQUIRE(flag != 0);  // the first fragment is here
    try {
      (void)t.recv(1, message_tag{91}, buf, deadline::after(300ms));
      FAIL("the stalled message completed");
    } catch (error const& e) {
      CHECK(e.kind() == errc::timeout);
      CHECK(std::string(e.what()).find("rank 1") != std::string::npos);
      CHECK(std::string(e.what()).find("mid-message") != std::string::npos);
    }
    CHECK(buf.empty());  // the storage MPI may still write went with the abandoned receive
  }
  t.barrier(deadline::after(30s));  // rank 1 finishes its send; rank 0's abandoned receive completes
  // The transport still carries messages.
  if (t.rank() < 2) {
    int const other = 1 - t.rank();
    int const v = 40 + t.rank();
    auto req = t.send(other, message_tag{92}, std::as_bytes(std::span(&v, 1)));
    auto m = t.recv(other, message_tag{92}, buf, deadline::after(20s));
    int got = 0;
    REQUIRE(m.size() == sizeof got);
    std::memcpy(&got, m.data(), sizeof got);
    CHECK(got == 40 + other);
    req.wait(deadline::after(20s));
  }
  t.barrier(deadline::after(20s));
}
