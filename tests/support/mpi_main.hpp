// The doctest main for tests launched with mpirun: MPI initialized (MPI_THREAD_MULTIPLE asked for)
// around the run, and the exit status is the worst over all ranks. Also check_same_on_every_rank:
// rank 0 checks that every rank's digest string equals its own.
#pragma once

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <sluice/transport/mpi.hpp>

namespace sluice::test {

/// Every rank sends `mine` to rank 0 (tag 200), which CHECKs each equals its own.
inline void check_same_on_every_rank(mpi_transport& t, std::string const& mine) {
  auto const tag = message_tag{200};
  if (t.rank() == 0) {
    std::vector<std::byte> buf;
    for (int peer = 1; peer < t.size(); ++peer) {
      auto const bytes = t.recv(peer, tag, buf, deadline::after(std::chrono::seconds(60)));
      std::string const theirs(reinterpret_cast<char const*>(bytes.data()), bytes.size());
      CAPTURE(peer);
      CHECK(theirs == mine);
    }
  } else {
    auto req = t.send(0, tag, std::as_bytes(std::span(mine)));
    req.wait(deadline::after(std::chrono::seconds(60)));
  }
}

}  // namespace sluice::test

int main(int argc, char** argv) {
  sluice::mpi_environment env(&argc, &argv);
  doctest::Context context(argc, argv);
  int rc = context.run();
  MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return rc;
}
