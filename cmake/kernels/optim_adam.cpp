// sluice::kernels: the Adam/AdamW kernels, compiled once (include/sluice/optim/detail/instances.hpp).
#include <sluice/optim/adam.hpp>
#include <sluice/optim/detail/instances.hpp>

namespace sluice::detail::optim {
SLUICE_OPTIM_KERNELS(template, ::sluice::adam_step_constants)
}  // namespace sluice::detail::optim
