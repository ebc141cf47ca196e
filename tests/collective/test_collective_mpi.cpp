// Every collective over mpi_transport under mpirun -np 2/3/4 against the reference sum with
// bit-identical replicas; a silent (killed) rank and a corrupted byte as errors on every survivor.
#include "support/mpi_main.hpp"

#include <chrono>

#include <sluice/collective/all.hpp>
#include <sluice/transport/fault.hpp>

#include "collective/collective_checks.hpp"

using namespace sluice;
using namespace std::chrono_literals;

namespace {
// The largest value over all ranks.
int worst(int mine) {
  MPI_Allreduce(MPI_IN_PLACE, &mine, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return mine;
}
}  // namespace

TEST_CASE("collectives over MPI match the reference sum, replicas bit-identical") {
  mpi_transport t;
  auto algos = test::all_algos();
  algos.push_back(test::algo::ring_native);
  test::check_all(t, algos);
  t.barrier(deadline::after(30s));
}

TEST_CASE("fault over MPI: a rank that dies mid-collective -> every survivor raises within its deadline") {
  mpi_transport t;
  std::uint32_t tag = 1000;
  for (auto a : {test::algo::ring, test::algo::allgather_sparse, test::algo::sra_quant, test::algo::reduce_scatter,
                 test::algo::ps, test::algo::hierarchical}) {
    // kill_at 0: rank 1's data never leaves, so every rank must raise. kill_at 1: a survivor that
    // already holds everything it needs may finish, but then with the exact sum.
    for (std::int64_t kill_at : {0, 1}) {
      int raised = 0, correct = 0;
      auto const t0 = std::chrono::steady_clock::now();
      collective_context const ctx{.step = 1, .tensor = 9, .timeout = 1s, .tag = message_tag{tag}};
      tag += 16;
      std::size_t const n = 256;
      try {
        std::vector<float> out;
        if (t.rank() == 1) {
          faulty f(t, {.kill_at_send = kill_at});
          out = test::run(f, a, n, ctx);
        } else {
          out = test::run(t, a, n, ctx);
        }
        correct = test::matches(a, out, test::reference_sum(t.size(), n, ctx.step), t.size()) ? 1 : 0;
      } catch (error const& e) {
        raised = 1;
        CHECK((e.kind() == errc::timeout || e.kind() == errc::peer_lost));
      }
      CHECK(std::chrono::steady_clock::now() - t0 < 15s);
      if (kill_at == 0)
        CHECK(raised == 1);
      else
        CHECK(raised + correct == 1);
      t.barrier(deadline::after(30s));
    }
  }
}

TEST_CASE("fault over MPI: a corrupted byte is errc::malformed_message") {
  mpi_transport t;
  int my = 0;
  collective_context const ctx{.step = 2, .tensor = 4, .timeout = 1s, .tag = message_tag{3000}};
  try {
    if (t.rank() == 0) {
      faulty f(t, {.corrupt_send = 0, .corrupt_offset = 85});
      (void)test::run(f, test::algo::ring, 512, ctx);
    } else {
      (void)test::run(t, test::algo::ring, 512, ctx);
    }
  } catch (error const& e) {
    if (e.kind() == errc::malformed_message) my = 1;
  }
  CHECK(worst(my) == 1);
}
