// The optimizer kernels sluice::kernels compiles once: run_dense and run_sparse for each step rule
// (SGD, Adam/AdamW), moment precision (fp32, bf16), shadow (none, half, bfloat16) and index width
// (32, 64 bits). Each stamps its lane bodies per instruction-set level, so a translation unit
// that steps an optimizer generates them all; with SLUICE_SEPARATE_KERNELS (defined by linking
// sluice::kernels) they are declared `extern template` here and taken from that library
// (cmake/kernels/, docs/architecture.md "Compiling the kernels once"). The header-only default
// does not see these declarations.
#pragma once

#include <cstdint>

#include <sluice/core/float16.hpp>
#include <sluice/core/sparse.hpp>
#include <sluice/optim/concepts.hpp>
#include <sluice/optim/detail/kernel.hpp>

// PREFIX is `extern template` (the declarations below) or `template` (the library's definitions).
#define SLUICE_OPTIM_KERNELS_BF(PREFIX, K, SH, BF)                                                                     \
  PREFIX void run_dense<K, BF, SH>(K const&, tensor_refs const&, float const*, SH*, std::uint64_t, bool);              \
  PREFIX void run_sparse<K, BF, SH, std::uint32_t>(K const&, tensor_refs const&,                                       \
                                                   sparse_view<float const, std::uint32_t>, SH*, std::uint64_t, bool); \
  PREFIX void run_sparse<K, BF, SH, std::uint64_t>(K const&, tensor_refs const&,                                       \
                                                   sparse_view<float const, std::uint64_t>, SH*, std::uint64_t, bool);
#define SLUICE_OPTIM_KERNELS_SH(PREFIX, K, SH) \
  SLUICE_OPTIM_KERNELS_BF(PREFIX, K, SH, false) SLUICE_OPTIM_KERNELS_BF(PREFIX, K, SH, true)
/// Every instance for step rule K, inside namespace sluice::detail::optim.
#define SLUICE_OPTIM_KERNELS(PREFIX, K)              \
  SLUICE_OPTIM_KERNELS_SH(PREFIX, K, no_shadow)      \
  SLUICE_OPTIM_KERNELS_SH(PREFIX, K, ::sluice::half) \
  SLUICE_OPTIM_KERNELS_SH(PREFIX, K, ::sluice::bfloat16)

#if defined(SLUICE_SEPARATE_KERNELS)
namespace sluice::detail::optim {
SLUICE_OPTIM_KERNELS(extern template, ::sluice::sgd_step_constants)
SLUICE_OPTIM_KERNELS(extern template, ::sluice::adam_step_constants)
}  // namespace sluice::detail::optim
#endif
