// The doctest main for tests launched with mpirun: MPI initialized (MPI_THREAD_MULTIPLE asked for)
// around the run, and the exit status is the worst over all ranks.
#pragma once

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <sluice/transport/mpi.hpp>

int main(int argc, char** argv) {
  sluice::mpi_environment env(&argc, &argv);
  doctest::Context context(argc, argv);
  int rc = context.run();
  MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return rc;
}
