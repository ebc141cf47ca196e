// The solver's controller bound to a running pipeline under mpirun -np N: a bandwidth drop seen
// through rank 0's telemetry makes every rank switch codec strength at the same step (every rank's
// digest equals rank 0's), with parameters bit for bit those of a hand set_codec at that step.
#include "support/mpi_main.hpp"

#include <string>
#include <vector>

#include "pipeline/adaptive_run.hpp"

using namespace sluice;

TEST_CASE("mpi: a bandwidth drop switches every rank's pipeline codec at one step, parameters as a hand set_codec") {
  mpi_transport t;
  for (unsigned staleness : {0u, 1u, 2u}) {
    CAPTURE(staleness);
    solver const s(test::adaptive_job(t.size(), staleness));
    auto const out = test::adaptive_and_hand(t, s, staleness);
    std::string why;
    CHECK_MESSAGE(test::adaptive_checks(out, staleness, why), why);
    std::string const mine = test::adaptive_digest(out);
    test::check_same_on_every_rank(t, mine);
  }
}
