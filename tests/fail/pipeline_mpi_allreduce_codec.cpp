// MPI_Allreduce sums fp32: by_mpi_allreduce with a compressing codec is refused, not silently dense.
// expected-error: by_mpi_allreduce sums fp32 with MPI_Allreduce and would ignore this codec
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
  return static_cast<int>(sizeof(sluice::pipeline<codec, feedback, sluice::sgd, transport&, sluice::by_mpi_allreduce>));
}
