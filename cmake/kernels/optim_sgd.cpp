// sluice::kernels: the SGD kernels, compiled once (include/sluice/optim/detail/instances.hpp).
#include <sluice/optim/detail/instances.hpp>
#include <sluice/optim/sgd.hpp>

namespace sluice::detail::optim {
SLUICE_OPTIM_KERNELS(template, ::sluice::sgd_step_constants)
}  // namespace sluice::detail::optim
