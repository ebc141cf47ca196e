// The mistake: DGC's momentum correction with Adam. Momentum correction keeps the momentum before
// selection; an optimizer with moments of its own would apply momentum twice.
// expected-error: sluice::pipeline: momentum_correction (DGC) accumulates momentum before selection, so the optimizer
// must not keep its own; use sluice::sgd{} with momentum = 0, or sluice::residual{} with this optimizer
#include <sluice/compress/top_k.hpp>
#include <sluice/feedback/momentum_correction.hpp>
#include <sluice/optim/adam.hpp>
#include <sluice/optim/sgd.hpp>
#include <sluice/pipeline/pipeline.hpp>
#include <sluice/transport/local.hpp>

int main() {
#if defined(SLUICE_MUST_FAIL)
  using optimizer = sluice::adam;
#else
  using optimizer = sluice::sgd;
#endif
  auto ts = sluice::local_transport::create(1);
  sluice::pipeline pipe{sluice::top_k{}, sluice::momentum_correction{}, optimizer{}, ts[0]};  // error-here
  return static_cast<int>(pipe.steps());
}
