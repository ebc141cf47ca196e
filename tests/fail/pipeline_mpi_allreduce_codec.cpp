// The mistake: by_mpi_allreduce with a compressing codec (top_k). MPI_Allreduce sums fp32, so the
// codec would be silently ignored; the pipeline refuses it.
// expected-error: sluice::pipeline: by_mpi_allreduce sums fp32 with MPI_Allreduce and would ignore this codec; use
// sluice::identity{} or by_codec to aggregate compressed frames
#include <sluice/compress/identity.hpp>
#include <sluice/compress/top_k.hpp>
#include <sluice/feedback/no_feedback.hpp>
#include <sluice/feedback/residual.hpp>
#include <sluice/optim/sgd.hpp>
#include <sluice/pipeline/pipeline.hpp>
#include <sluice/transport/local.hpp>
#include <sluice/transport/mpi.hpp>

int main() {
#if defined(SLUICE_MUST_FAIL)
  using codec = sluice::top_k;
#else
  using codec = sluice::identity;
#endif
  using feedback = sluice::no_feedback;
  using transport = sluice::mpi_transport;
  // The class's checks run when it is instantiated; nothing runs (MPI is not initialized here).
  return static_cast<int>(
      sizeof(sluice::pipeline<codec, feedback, sluice::sgd, transport&, sluice::by_mpi_allreduce>));  // error-here
}
