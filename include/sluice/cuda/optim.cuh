// The optimizer steps on the device (sluice::adam, adamw, sgd): dense, lazy sparse, catch-up and
// flush, fp32 or bf16 moments, an optional bf16 parameter shadow; kernels in detail/optim_kernels.cuh.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include <cuda_runtime.h>

#include <sluice/core/error.hpp>
#include <sluice/cuda/detail/optim_kernels.cuh>
#include <sluice/cuda/runtime.cuh>

namespace sluice::cuda {

namespace kernel = sluice::detail::cuda;

/// Queues one dense Adam / AdamW step on `s` with fp32 parameters and moments; `f` from
/// adam_element::from(policy.kernel(t)). A non-empty `shadow` receives the parameters as bf16 bits.
inline device_status adam_step(std::span<float> p, std::span<float const> g, std::span<float> m, std::span<float> v,
                               adam_element const& f, std::span<std::uint16_t> shadow, cudaStream_t s) noexcept {
  std::size_t const n = p.size();
  if (g.size() != n || m.size() != n || v.size() != n || !kernel::empty_or(shadow, n))
    return device_status::size_mismatch;
  if (n == 0) return device_status::ok;
  kernel::adam_step<<<kernel::grid_for(n, 4), kernel::threads, 0, s>>>(p.data(), g.data(), m.data(), v.data(), n, f,
                                                                       kernel::data_or_null(shadow));
  return status_of(cudaGetLastError());
}

/// Queues one dense SGD step on `s`; `b` (the momentum buffer) may be empty without momentum.
inline device_status sgd_step(std::span<float> p, std::span<float const> g, std::span<float> b, sgd_element const& f,
                              std::span<std::uint16_t> shadow, cudaStream_t s) noexcept {
  std::size_t const n = p.size();
  if (g.size() != n || (f.momentum && b.size() != n) || !kernel::empty_or(shadow, n))
    return device_status::size_mismatch;
  if (n == 0) return device_status::ok;
  kernel::sgd_step<<<kernel::grid_for(n), kernel::threads, 0, s>>>(p.data(), g.data(), kernel::data_or_null(b), n, f,
                                                                   kernel::data_or_null(shadow));
  return status_of(cudaGetLastError());
}

/// Moments of an optimizer step on the device: fp32, or bf16 bits with the CPU's stochastic
/// rounding (bf16_moment_rounding::of(policy.seed, t, tensor)). Empty spans for moments the
/// optimizer does not keep (v for SGD, both for SGD without momentum).
struct device_moments {
  std::span<float> m{}, v{};              ///< fp32 moments
  std::span<std::uint16_t> m16{}, v16{};  ///< bf16 moments (used when m is empty)
  bf16_moment_rounding rounding{};        ///< for bf16 moments

  [[nodiscard]] bool bf16() const noexcept { return m.empty() && !m16.empty(); }
};

}  // namespace sluice::cuda

namespace sluice::detail::cuda {

/// Checks the moments against n elements (`count` of them used) and packs their pointers.
inline bool pack(sluice::cuda::device_moments const& d, std::size_t count, std::size_t n, moment_ptrs& out) noexcept {
  if (d.bf16()) {
    if (d.m16.size() != n || (count == 2 && d.v16.size() != n)) return false;
    out.b[0] = d.m16.data(), out.b[1] = count == 2 ? d.v16.data() : nullptr, out.r = d.rounding;
  } else {
    if ((count >= 1 && d.m.size() != n) || (count == 2 && d.v.size() != n)) return false;
    out.f[0] = count >= 1 ? d.m.data() : nullptr, out.f[1] = count == 2 ? d.v.data() : nullptr;
  }
  return true;
}

/// The sparse gradient's shape: `values` holds indices.size() * block entries, no more indices than
/// blocks (the indices lie in device memory; an element past the tensor's end is skipped).
inline bool sparse_shape(std::size_t n, std::span<std::uint32_t const> indices, std::span<float const> values,
                         std::size_t block) noexcept {
  return block >= 1 && values.size() == indices.size() * block && indices.size() <= (n + block - 1) / block;
}

/// The gradient of a catch_up step: sparse (sparse_shape), or dense when `indices` is empty,
/// `block` 1 and `values` holds n entries (`dense` says which).
inline bool catch_up_shape(std::size_t n, std::span<std::uint32_t const> indices, std::span<float const> values,
                           std::size_t block, bool& dense) noexcept {
  dense = indices.empty() && block == 1 && values.size() == n;
  return dense || sparse_shape(n, indices, values, block);
}

/// The buffers of an optimizer step on n elements: the moments (`count` of them used, their
/// pointers packed into `out`) and the shadow.
inline bool step_buffers(std::size_t n, sluice::cuda::device_moments const& mom, std::size_t count,
                         std::span<std::uint16_t> shadow, moment_ptrs& out) noexcept {
  return pack(mom, count, n, out) && empty_or(shadow, n);
}

/// step_buffers of a sparse_mode::catch_up state, with its n per-entry counters `last` at step
/// t >= 1.
inline bool catch_up_buffers(std::size_t n, sluice::cuda::device_moments const& mom, std::size_t count,
                             std::span<std::uint16_t> shadow, std::span<std::uint32_t> last, std::uint64_t t,
                             moment_ptrs& out) noexcept {
  return step_buffers(n, mom, count, shadow, out) && last.size() == n && t != 0;
}

}  // namespace sluice::detail::cuda

namespace sluice::cuda {

/// Queues one lazy sparse Adam / AdamW step on `s` (sluice::adam with sparse_mode::lazy): the
/// update of f = adam_element::from(policy.kernel(t)) at the elements of the sparse gradient
/// (`indices` strictly increasing element indices, or block indices with `block` > 1 and
/// `values` block after block, the padding past the tensor's end ignored); untouched entries keep
/// their moments. fp32 or bf16 moments (`mom`); a non-empty `shadow` receives the updated
/// parameters as bf16 bits. catch_up is not on the device.
inline device_status adam_sparse_step(std::span<float> p, std::span<std::uint32_t const> indices,
                                      std::span<float const> values, std::size_t block, device_moments const& mom,
                                      adam_element const& f, std::span<std::uint16_t> shadow, cudaStream_t s) noexcept {
  std::size_t const n = p.size();
  kernel::moment_ptrs mp;
  if (!kernel::sparse_shape(n, indices, values, block) || !kernel::step_buffers(n, mom, 2, shadow, mp))
    return device_status::size_mismatch;
  if (values.empty()) return device_status::ok;
  kernel::adam_step_at<<<kernel::grid_for(values.size()), kernel::threads, 0, s>>>(
      p.data(), values.data(), values.size(), sparse_target{indices.data(), block, n}, mp, f,
      kernel::data_or_null(shadow), nullptr, adam_catch_up{});
  return status_of(cudaGetLastError());
}

/// Queues one dense Adam / AdamW step with bf16 moments (`mom.m16`, `mom.v16`, rounded as the CPU
/// optimizer with state_type bf16 rounds them) on `s`.
inline device_status adam_step(std::span<float> p, std::span<float const> g, device_moments const& mom,
                               adam_element const& f, std::span<std::uint16_t> shadow, cudaStream_t s) noexcept {
  std::size_t const n = p.size();
  if (!mom.bf16()) return adam_step(p, g, mom.m, mom.v, f, shadow, s);
  kernel::moment_ptrs mp;
  if (g.size() != n || !kernel::step_buffers(n, mom, 2, shadow, mp)) return device_status::size_mismatch;
  if (n == 0) return device_status::ok;
  kernel::adam_step_at<<<kernel::grid_for(n), kernel::threads, 0, s>>>(
      p.data(), g.data(), n, sparse_target{nullptr, 1, n}, mp, f, kernel::data_or_null(shadow), nullptr,
      adam_catch_up{});
  return status_of(cudaGetLastError());
}

/// Queues one lazy sparse SGD step on `s` (see adam_sparse_step); `mom.m` or `mom.m16` is the
/// momentum buffer (empty without momentum).
inline device_status sgd_sparse_step(std::span<float> p, std::span<std::uint32_t const> indices,
                                     std::span<float const> values, std::size_t block, device_moments const& mom,
                                     sgd_element const& f, std::span<std::uint16_t> shadow, cudaStream_t s) noexcept {
  std::size_t const n = p.size();
  kernel::moment_ptrs mp;
  if (!kernel::sparse_shape(n, indices, values, block) || !kernel::step_buffers(n, mom, f.momentum ? 1 : 0, shadow, mp))
    return device_status::size_mismatch;
  if (values.empty()) return device_status::ok;
  kernel::sgd_step_at<<<kernel::grid_for(values.size()), kernel::threads, 0, s>>>(
      p.data(), values.data(), values.size(), sparse_target{indices.data(), block, n}, mp, f,
      kernel::data_or_null(shadow), nullptr, sgd_catch_up{});
  return status_of(cudaGetLastError());
}

/// Queues one dense SGD step with a bf16 momentum buffer (`mom.m16`) on `s`.
inline device_status sgd_step(std::span<float> p, std::span<float const> g, device_moments const& mom,
                              sgd_element const& f, std::span<std::uint16_t> shadow, cudaStream_t s) noexcept {
  std::size_t const n = p.size();
  if (!mom.bf16()) return sgd_step(p, g, mom.m, f, shadow, s);
  kernel::moment_ptrs mp;
  if (g.size() != n || !kernel::step_buffers(n, mom, f.momentum ? 1 : 0, shadow, mp))
    return device_status::size_mismatch;
  if (n == 0) return device_status::ok;
  kernel::sgd_step_at<<<kernel::grid_for(n), kernel::threads, 0, s>>>(
      p.data(), g.data(), n, sparse_target{nullptr, 1, n}, mp, f, kernel::data_or_null(shadow), nullptr,
      sgd_catch_up{});
  return status_of(cudaGetLastError());
}

/// Queues one sparse Adam / AdamW step with sparse_mode::catch_up on `s` (see adam_sparse_step):
/// at every element of the sparse gradient the steps skipped since its per-entry counter
/// (`last`: n device entries, the CPU state's last_step) are replayed first (`cu`, from
/// adam_catch_up::from(policy.kernel(t))), then the step runs and the counter becomes t. Empty
/// `indices` and `block` 1 with `values` of n entries: a dense step on a catch_up state.
inline device_status adam_sparse_step(std::span<float> p, std::span<std::uint32_t const> indices,
                                      std::span<float const> values, std::size_t block, device_moments const& mom,
                                      adam_element const& f, std::span<std::uint32_t> last, adam_catch_up const& cu,
                                      std::span<std::uint16_t> shadow, cudaStream_t s) noexcept {
  std::size_t const n = p.size();
  kernel::moment_ptrs mp;
  bool dense = false;
  if (!kernel::catch_up_shape(n, indices, values, block, dense) ||
      !kernel::catch_up_buffers(n, mom, 2, shadow, last, cu.t, mp))
    return device_status::size_mismatch;
  if (values.empty()) return device_status::ok;
  kernel::adam_step_at<<<kernel::grid_for(values.size()), kernel::threads, 0, s>>>(
      p.data(), values.data(), values.size(), sparse_target{dense ? nullptr : indices.data(), block, n}, mp, f,
      kernel::data_or_null(shadow), last.data(), cu);
  return status_of(cudaGetLastError());
}

/// Queues Adam's flush of a catch_up state on `s` (sluice::adam::flush): every element is brought
/// up to step cu.t (the state's current step; cu = adam_catch_up::from(policy.kernel(t))), its
/// counter set to t, its moments stored again (bf16 moments with the rounding of step t) and the
/// shadow rewritten; no new step.
inline device_status adam_flush(std::span<float> p, device_moments const& mom, std::span<std::uint32_t> last,
                                adam_catch_up const& cu, std::span<std::uint16_t> shadow, cudaStream_t s) noexcept {
  std::size_t const n = p.size();
  kernel::moment_ptrs mp;
  if (!kernel::catch_up_buffers(n, mom, 2, shadow, last, cu.t, mp)) return device_status::size_mismatch;
  if (n == 0) return device_status::ok;
  kernel::adam_step_at<<<kernel::grid_for(n), kernel::threads, 0, s>>>(p.data(), nullptr, n,
                                                                       sparse_target{nullptr, 1, n}, mp, adam_element{},
                                                                       kernel::data_or_null(shadow), last.data(), cu);
  return status_of(cudaGetLastError());
}

/// Queues one sparse SGD step with sparse_mode::catch_up on `s` (see adam_sparse_step with
/// catch-up; the replay is exact, cu = sgd_catch_up::from(policy.kernel(t))).
inline device_status sgd_sparse_step(std::span<float> p, std::span<std::uint32_t const> indices,
                                     std::span<float const> values, std::size_t block, device_moments const& mom,
                                     sgd_element const& f, std::span<std::uint32_t> last, sgd_catch_up const& cu,
                                     std::span<std::uint16_t> shadow, cudaStream_t s) noexcept {
  std::size_t const n = p.size();
  kernel::moment_ptrs mp;
  bool dense = false;
  if (!kernel::catch_up_shape(n, indices, values, block, dense) ||
      !kernel::catch_up_buffers(n, mom, f.momentum ? 1 : 0, shadow, last, cu.t, mp))
    return device_status::size_mismatch;
  if (values.empty()) return device_status::ok;
  kernel::sgd_step_at<<<kernel::grid_for(values.size()), kernel::threads, 0, s>>>(
      p.data(), values.data(), values.size(), sparse_target{dense ? nullptr : indices.data(), block, n}, mp, f,
      kernel::data_or_null(shadow), last.data(), cu);
  return status_of(cudaGetLastError());
}

/// Queues SGD's flush of a catch_up state on `s` (see adam_flush).
inline device_status sgd_flush(std::span<float> p, device_moments const& mom, std::span<std::uint32_t> last,
                               sgd_catch_up const& cu, std::span<std::uint16_t> shadow, cudaStream_t s) noexcept {
  std::size_t const n = p.size();
  kernel::moment_ptrs mp;
  if (!kernel::catch_up_buffers(n, mom, cu.momentum ? 1 : 0, shadow, last, cu.t, mp))
    return device_status::size_mismatch;
  if (n == 0) return device_status::ok;
  sgd_element f{};
  f.momentum = cu.momentum;
  kernel::sgd_step_at<<<kernel::grid_for(n), kernel::threads, 0, s>>>(
      p.data(), nullptr, n, sparse_target{nullptr, 1, n}, mp, f, kernel::data_or_null(shadow), last.data(), cu);
  return status_of(cudaGetLastError());
}

}  // namespace sluice::cuda
