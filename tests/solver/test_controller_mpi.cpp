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
  test::check_same_on_every_rank(t, mine);
}
