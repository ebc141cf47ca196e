// The device kernels of the CUDA backend and their host launchers, all of them: one header per
// algorithm (launchers in sluice/cuda/<algorithm>.cuh, kernels in sluice/cuda/detail/
// <algorithm>_kernels.cuh, as CUB splits its dispatch from its kernels). Launchers take device
// spans and a stream, queue work asynchronously and return a device_status; cuda::check(status,
// what) turns it into sluice::error at the host boundary.
//
//   maxmin.cuh        feedback_maxmin (fused c = g + e, max-min quantize, e = c - decode: the ranges
//                     and levels sections of the frame), dequantize_add (dense += decode)
//   top_k.cuh         top_k_select: exact top-k by radix select on the magnitude bits, ties to the
//                     lower index, with feedback fused
//   block_top_k.cuh   block_top_k_select: L1/L2 block scores, the best blocks, their elements
//   random_k.cuh      random_k_select: random_k's shared-randomness draw, the values gathered
//   scatter.cuh       scatter_add: dense[idx] += vals
//   non_finite.cuh    non_finite_counter: the device side of the non-finite policy
//   optim.cuh         adam_step, sgd_step, the lazy sparse, catch-up and flush steps
#pragma once

#include <sluice/cuda/block_top_k.cuh>
#include <sluice/cuda/maxmin.cuh>
#include <sluice/cuda/non_finite.cuh>
#include <sluice/cuda/optim.cuh>
#include <sluice/cuda/random_k.cuh>
#include <sluice/cuda/scatter.cuh>
#include <sluice/cuda/top_k.cuh>
