// The controller over threads on the local transport: a bandwidth drop mid-run makes every rank
// switch codec strength at the same step, and training with error feedback continues through the
// switch without losing residual mass.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "solver/controller_run.hpp"
#include "support/local_world.hpp"

using namespace sluice;

TEST_CASE("a bandwidth drop switches every rank's codec at the same step, residuals intact") {
  constexpr int world = 3;
  solver const s(test::controller_job(world));
  std::vector<test::rank_record> rec(world);
  auto errors = test::run_local(
      world, [&](local_transport& t) { rec[static_cast<std::size_t>(t.rank())] = test::controller_run(t, s); });
  test::rethrow_first(errors);
  for (int i = 0; i < world; ++i) {
    CAPTURE(i);
    auto const& r = rec[static_cast<std::size_t>(i)];
    std::string why;
    CHECK_MESSAGE(test::controller_checks(r, why), why);
    CHECK(r.codecs == rec[0].codecs);        // the same configuration at every step on every rank
    CHECK(r.aggregate == rec[0].aggregate);  // every rank summed the same frames
    CHECK(test::controller_digest(r) == test::controller_digest(rec[0]));
  }
  MESSAGE("switches: ", rec[0].log.size(), "; first: ", rec[0].log.front().reason);
}
