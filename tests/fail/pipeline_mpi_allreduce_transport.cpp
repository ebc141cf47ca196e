// The mistake: by_mpi_allreduce over a transport that is not MPI (local_transport); MPI_Allreduce
// needs the transport's communicator.
// expected-error: sluice::pipeline: by_mpi_allreduce calls MPI_Allreduce on the transport's communicator, but this
// transport is not MPI; use sluice::mpi_transport (target sluice::mpi), or by_ring_allreduce for the same dense sum
// over any transport
#include <sluice/compress/identity.hpp>
#include <sluice/compress/top_k.hpp>
#include <sluice/feedback/no_feedback.hpp>
#include <sluice/feedback/residual.hpp>
#include <sluice/optim/sgd.hpp>
#include <sluice/pipeline/pipeline.hpp>
#include <sluice/transport/local.hpp>
#include <sluice/transport/mpi.hpp>

int main() {
  using codec = sluice::identity;
  using feedback = sluice::no_feedback;
#if defined(SLUICE_MUST_FAIL)
  using transport = sluice::local_transport;
#else
  using transport = sluice::mpi_transport;
#endif
  // The class's checks run when it is instantiated; nothing runs (MPI is not initialized here).
  return static_cast<int>(
      sizeof(sluice::pipeline<codec, feedback, sluice::sgd, transport&, sluice::by_mpi_allreduce>));  // error-here
}
