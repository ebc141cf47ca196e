// The controller under mpirun -np N: a bandwidth drop mid-run makes every rank switch codec
// strength at the same step (all ranks' digests equal rank 0's), residuals intact.
#include "support/mpi_main.hpp"

#include <string>
#include <vector>

#include "solver/controller_run.hpp"

using namespace sluice;

TEST_CASE("mpi: a bandwidth drop switches every rank's codec at the same step") {
  mpi_transport t;
  solver const s(test::controller_job(t.size()));
  auto const r = test::controller_run(t, s);
  std::string why;
  CHECK_MESSAGE(test::controller_checks(r, why), why);
  std::string const mine = test::controller_digest(r);
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
