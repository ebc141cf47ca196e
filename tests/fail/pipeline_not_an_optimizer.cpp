// The mistake: an optimizer of one's own without the opt-in tag (`using optimizer_concept =
// sluice::optimizer_tag;`) handed to a pipeline; the pipeline names the optimizers it takes.
// expected-error: sluice::pipeline: the third argument is not a sluice::Optimizer: pass sluice::sgd{...},
// sluice::adam{...} or sluice::adamw{...}
#include <sluice/compress/top_k.hpp>
#include <sluice/feedback/residual.hpp>
#include <sluice/optim/sgd.hpp>
#include <sluice/pipeline/pipeline.hpp>
#include <sluice/transport/local.hpp>

struct my_optimizer {
#if !defined(SLUICE_MUST_FAIL)
  using optimizer_concept = sluice::optimizer_tag;
#endif
  double lr = 0.1;
};

int main() {
  auto ts = sluice::local_transport::create(1);
#if defined(SLUICE_MUST_FAIL)
  sluice::pipeline pipe{sluice::top_k{}, sluice::residual{}, my_optimizer{}, ts[0]};  // error-here
#else
  sluice::pipeline pipe{sluice::top_k{}, sluice::residual{}, sluice::sgd{}, ts[0]};
#endif
  return static_cast<int>(pipe.steps());
}
