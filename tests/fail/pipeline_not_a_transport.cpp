// The mistake: an int (a rank, say) where the pipeline takes a transport endpoint.
// expected-error: sluice::pipeline: the fourth argument is not a sluice::Transport: pass an engine endpoint
// (sluice::local_transport, sluice::zmq_transport or sluice::mpi_transport)
#include <sluice/compress/top_k.hpp>
#include <sluice/feedback/residual.hpp>
#include <sluice/optim/sgd.hpp>
#include <sluice/pipeline/pipeline.hpp>
#include <sluice/transport/local.hpp>

int main() {
  auto ts = sluice::local_transport::create(1);
#if defined(SLUICE_MUST_FAIL)
  int endpoint = 0;
#else
  auto endpoint = ts[0];
#endif
  sluice::pipeline pipe{sluice::top_k{}, sluice::residual{}, sluice::sgd{}, endpoint};  // error-here
  return static_cast<int>(pipe.steps());
}
