// MPI_Allreduce sends the gradient exactly: error feedback with by_mpi_allreduce is refused.
// expected-error: by_mpi_allreduce sends the gradient exactly, so error feedback has nothing to compensate
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
#if defined(SLUICE_MUST_FAIL)
  using feedback = sluice::residual;
#else
  using feedback = sluice::no_feedback;
#endif
  using transport = sluice::mpi_transport;
  // The class's checks run when it is instantiated; nothing runs (MPI is not initialized here).
  return static_cast<int>(sizeof(sluice::pipeline<codec, feedback, sluice::sgd, transport&, sluice::by_mpi_allreduce>));
}
