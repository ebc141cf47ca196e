// The mistake: by_mpi_allreduce with error feedback (residual). MPI_Allreduce sends the gradient
// exactly: the feedback would have nothing to compensate.
// expected-error: sluice::pipeline: by_mpi_allreduce sends the gradient exactly, so error feedback has nothing to
// compensate; use sluice::no_feedback{} (or a compressing codec with by_codec)
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
  return static_cast<int>(
      sizeof(sluice::pipeline<codec, feedback, sluice::sgd, transport&, sluice::by_mpi_allreduce>));  // error-here
}
