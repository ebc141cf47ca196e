// Per-element logic of the CUDA backend as __host__ __device__ functors: one definition runs in the
// device kernels (include/sluice/cuda/kernels.cuh) and on the CPU, where the tests compare it with
// the CPU codecs and optimizers byte for byte. Plain C++ without nvcc.
// Every float operation is rounded on its own, in the order the CPU code uses (the operations of
// core/detail/host_device.hpp).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <sluice/core/detail/host_device.hpp>
#include <sluice/core/random.hpp>
#include <sluice/optim/catch_up.hpp>

// The short spelling of this backend.
#define SLUICE_HD SLUICE_HOST_DEVICE

namespace sluice::cuda {

/// The counter-based stream of sluice::random_stream (Philox4x32-10, counter (block, step, tensor,
/// rank), key = seed), usable on the device: word i equals random_stream(key).word(i).
struct philox_stream {
  std::uint32_t key0 = 0, key1 = 0, rank = 0, step = 0, tensor = 0;

  philox_stream() = default;
  SLUICE_HD explicit philox_stream(stream_key const& k) noexcept
      : key0(static_cast<std::uint32_t>(k.seed)),
        key1(static_cast<std::uint32_t>(k.seed >> 32)),
        rank(k.rank),
        step(k.step),
        tensor(k.tensor) {}

  /// Word i of the stream.
  SLUICE_HD std::uint32_t word(std::uint64_t i) const noexcept {
    sluice::detail::philox4x32::ctr_type const ctr = {{static_cast<std::uint32_t>(i >> 2), step, tensor, rank}};
    sluice::detail::philox4x32::key_type const key = {{key0, key1}};
    auto const r = sluice::detail::philox4x32{}(ctr, key);
    return r.v[i & 3];
  }
  /// Uniform float in [0, 1) from word i (random_stream::uniform).
  SLUICE_HD float uniform(std::uint64_t i) const noexcept { return static_cast<float>(word(i) >> 8) * 0x1p-24f; }
};

/// Parameters of a max-min quantizer as device code takes them (sluice::maxmin_quantize's bits,
/// bucket and rounding == stochastic).
struct maxmin_params {
  unsigned bits = 4;
  unsigned bucket = 1024;
  bool stochastic = false;
};

/// A max-min bucket's grid: level q decodes to min + q * unit.
struct maxmin_grid {
  float min = 0.0f;
  float unit = 0.0f;
};

/// Running min, max and non-finite flag of a bucket; merge() combines partial results (any order
/// gives the same grid for finite values of one sign of zero).
struct maxmin_range_acc {
  float mn = __builtin_huge_valf();
  float mx = -__builtin_huge_valf();
  bool poisoned = false;

  SLUICE_HD void add(float v) noexcept {
    mn = v < mn ? v : mn;
    mx = v > mx ? v : mx;
    poisoned = poisoned || !detail::ieee::finite(v);
  }
  SLUICE_HD void merge(maxmin_range_acc const& o) noexcept {
    mn = o.mn < mn ? o.mn : mn;
    mx = o.mx > mx ? o.mx : mx;
    poisoned = poisoned || o.poisoned;
  }
  /// The grid for `bits` bits of a bucket of len elements: min and (max - min) / (2^bits - 1), or
  /// a NaN min (every element decodes to NaN) when any element was NaN or infinite.
  [[nodiscard]] SLUICE_HD maxmin_grid grid(std::size_t len, unsigned bits) const noexcept {
    if (len == 0) return {0.0f, 0.0f};
    if (poisoned) return {detail::ieee::float_of(0x7fc00000u), 0.0f};
    return {mn, detail::ieee::div(detail::ieee::sub(mx, mn), static_cast<float>((1u << bits) - 1u))};
  }
};

/// Quantizes values of one bucket to levels as sluice::maxmin_quantize does: round to nearest by
/// multiplying with the reciprocal of the unit (dividing when it is not finite), or stochastic
/// rounding with the uniform draw of the element's global index.
struct maxmin_encoder {
  maxmin_grid g{};
  float maxq = 15.0f;
  float inv = 0.0f;
  bool by_reciprocal = false;
  bool stochastic = false;

  maxmin_encoder() = default;
  SLUICE_HD maxmin_encoder(maxmin_grid grid, unsigned bits, bool stochastic_rounding) noexcept
      : g(grid),
        maxq(static_cast<float>((1u << bits) - 1u)),
        inv(detail::ieee::div(1.0f, grid.unit)),
        stochastic(stochastic_rounding) {
    by_reciprocal = !stochastic && detail::ieee::finite(inv);
  }

  /// Level of x; `u` in [0, 1) is the element's uniform draw (ignored for round-to-nearest).
  [[nodiscard]] SLUICE_HD std::uint8_t level(float x, float u) const noexcept {
    float v = by_reciprocal
                  ? detail::ieee::add(detail::ieee::mul(detail::ieee::sub(x, g.min), inv), 0.5f)
                  : detail::ieee::add(detail::ieee::div(detail::ieee::sub(x, g.min), g.unit), stochastic ? u : 0.5f);
    v = v > 0.0f ? v : 0.0f;  // NaN compares false: level 0
    v = v < maxq ? v : maxq;
    return static_cast<std::uint8_t>(static_cast<std::int32_t>(v));
  }
};

/// The value a level decodes to.
SLUICE_HD inline float maxmin_value(maxmin_grid g, std::uint32_t q) noexcept {
  return detail::ieee::add(g.min, detail::ieee::mul(static_cast<float>(q), g.unit));
}

/// What error feedback stores of a residual value x: x, or +0 when x is NaN or infinite
/// (sluice::residual never keeps a non-finite value; it counts the non-finite compensated values
/// in feedback_report::non_finite_values instead).
SLUICE_HD inline float kept_residual(float x) noexcept { return detail::ieee::finite(x) ? x : 0.0f; }

/// 1 when the compensated value c is NaN or infinite (what feedback_report::non_finite_values
/// counts), else 0.
SLUICE_HD inline std::uint32_t non_finite_count(float c) noexcept { return detail::ieee::finite(c) ? 0u : 1u; }

/// One element of error feedback around max-min quantization: c = g + e is quantized to a level
/// and e becomes c - decode(level) (what the receiver does not get), +0 where that is not finite
/// (every element of a bucket holding NaN or Inf, whose grid is NaN), as the CPU stores it.
struct feedback_maxmin_element {
  /// Compensation: the value that is quantized.
  SLUICE_HD static float compensate(float g, float e) noexcept { return detail::ieee::add(g, e); }
  /// The residual kept after sending level q of c.
  SLUICE_HD static float residual(float c, maxmin_grid g, std::uint32_t q) noexcept {
    return kept_residual(detail::ieee::sub(c, maxmin_value(g, q)));
  }
};

/// Packs 8 levels of `bits` bits into the low bits*8 bits of a word (level j at bits [j*bits,
/// (j+1)*bits)): the little-endian layout of the wire format, `bits` bytes per 8 levels.
SLUICE_HD inline std::uint64_t pack8(std::uint8_t const* q, unsigned bits) noexcept {
  std::uint64_t w = 0;
  for (unsigned j = 0; j < 8; ++j) w |= static_cast<std::uint64_t>(q[j]) << (j * bits);
  return w;
}

/// Level i of a packed level section (`bits` bits each, little-endian bit stream).
SLUICE_HD inline std::uint32_t unpack_level(std::uint8_t const* packed, std::uint64_t i, unsigned bits) noexcept {
  std::uint64_t const p = i * bits;
  std::uint32_t v = static_cast<std::uint32_t>(packed[p / 8]) >> (p % 8);
  if ((p % 8) + bits > 8) v |= static_cast<std::uint32_t>(packed[p / 8 + 1]) << (8 - p % 8);
  return v & ((1u << bits) - 1u);
}

/// Decode-and-add of one element: d + (min + q * unit).
struct dequantize_add_element {
  SLUICE_HD float operator()(float d, maxmin_grid g, std::uint32_t q) const noexcept {
    return detail::ieee::add(d, maxmin_value(g, q));
  }
};

/// Sparse scatter-add of one sent entry: dense[index] + value (decode_add of a sparse frame).
struct scatter_add_element {
  SLUICE_HD float operator()(float d, float v) const noexcept { return detail::ieee::add(d, v); }
};

/// The ranking key of top-k: the bits of |x| (NaN above +Inf, -0 ties +0), as
/// detail::compress::magnitude_key.
SLUICE_HD inline std::uint32_t magnitude_key(float x) noexcept { return detail::ieee::bits_of(x) & 0x7fffffffu; }

/// The score of one block of block_top_k: the sum of |x| (l2 false) or of x^2 over len elements,
/// in four lanes (element e into lane e % 4) added as (lane 0 + lane 1) + (lane 2 + lane 3), the
/// order of the CPU codec.
SLUICE_HD inline float block_top_k_score(float const* x, std::size_t len, bool l2) noexcept {
  float lane[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (std::size_t e = 0; e < len; ++e) {
    float const v = x[e];
    lane[e % 4] = detail::ieee::add(
        lane[e % 4], l2 ? detail::ieee::mul(v, v) : detail::ieee::float_of(detail::ieee::bits_of(v) & 0x7fffffffu));
  }
  return detail::ieee::add(detail::ieee::add(lane[0], lane[1]), detail::ieee::add(lane[2], lane[3]));
}

/// random_k's draws (Floyd's algorithm, detail::compress::draw_indices) split for parallel threads.
/// Draw j of k (j in [0, k)) belongs to Floyd's step s_j = n - k + j and picks the target
/// t_j = below(j, s_j + 1) of the shared stream; the step inserts t_j, or s_j when t_j is already
/// drawn. A value is drawn before step j exactly when it is an earlier target or the own index of
/// an earlier step that inserted its own, so step j inserts its own index iff t_j repeats an
/// earlier target (`repeat`) or t_j = s_i for an earlier step i that inserted its own: a chain that
/// only goes to smaller steps (own_inserted). The drawn set is every target and the own index of
/// every step that inserted its own: the CPU's set, in no particular order.
struct random_k_draw {
  philox_stream rs{};
  std::uint64_t n = 0, k = 0;

  /// The target of draw j (the CPU's stream.below(j, s_j + 1), with its 32-bit bound).
  [[nodiscard]] SLUICE_HD std::uint32_t target(std::uint64_t j) const noexcept {
    auto const bound = static_cast<std::uint32_t>(n - k + j + 1);
    return static_cast<std::uint32_t>((static_cast<std::uint64_t>(rs.word(j)) * bound) >> 32);
  }
  /// Floyd's step index of draw j.
  [[nodiscard]] SLUICE_HD std::uint64_t own(std::uint64_t j) const noexcept { return n - k + j; }
  /// Whether draw j inserts its own index: `targets` are the k targets, repeat[i] is nonzero when
  /// target i equals the target of an earlier draw.
  [[nodiscard]] SLUICE_HD bool own_inserted(std::uint32_t const* targets, std::uint8_t const* repeat,
                                            std::uint64_t j) const noexcept {
    std::uint64_t const base = n - k;
    for (;;) {
      if (repeat[j] != 0) return true;
      std::uint64_t const t = targets[j];
      if (t < base || t >= base + j) return false;  // not the own index of an earlier step
      j = t - base;
    }
  }
};

/// One sent entry of random_k with error feedback fused: c = g + e is sent as c (times n / k with
/// rescale, as the CPU encoder rounds it) and the residual is c - sent (c elsewhere).
struct random_k_element {
  float scale = 1.0f;  ///< n / k rounded to float with rescale, else 1

  /// The CPU encoder's scale for n elements and k kept.
  static random_k_element of(std::size_t n, std::size_t k, bool rescale) noexcept {
    return {rescale && k > 0 ? static_cast<float>(static_cast<double>(n) / static_cast<double>(k)) : 1.0f};
  }
  /// The value written to the frame for c.
  [[nodiscard]] SLUICE_HD float sent(float c) const noexcept { return scale == 1.0f ? c : detail::ieee::mul(c, scale); }
  /// The residual kept where c was sent as v.
  SLUICE_HD static float residual(float c, float v) noexcept { return detail::ieee::sub(c, v); }
};

/// float to bf16 bits with round-to-nearest-even (a NaN becomes the quiet NaN of its sign): the
/// bf16 parameter shadow the CPU optimizers write (bfloat16(x)).
SLUICE_HD inline std::uint16_t bf16_nearest(float x) noexcept {
  std::uint32_t const b = detail::ieee::bits_of(x);
  std::uint32_t const r =
      (b & 0x7fffffffu) > 0x7f800000u ? (b & 0x80000000u) | 0x7fc00000u : b + 0x7fffu + ((b >> 16) & 1u);
  return static_cast<std::uint16_t>(r >> 16);
}

/// The float a bf16 bit pattern holds (exact).
SLUICE_HD inline float bf16_value(std::uint16_t b) noexcept {
  return detail::ieee::float_of(static_cast<std::uint32_t>(b) << 16);
}

/// Stochastic rounding of bf16 optimizer moments as the CPU optimizers do it (state_type bf16):
/// step t of a tensor draws from random_stream(stream_key{seed, shared_rank, t, tensor}); word w
/// serves elements 2w (bits 0-15) and 2w + 1 (bits 16-31), moment 0 taking the low byte of the
/// element's half and moment 1 the high byte, as the top byte of the rounding's random word.
struct bf16_moment_rounding {
  philox_stream rs{};

  /// For step t (1 for the first step, the t of policy.kernel(t)) of tensor `tensor` of an
  /// optimizer whose policy has `seed`.
  static bf16_moment_rounding of(std::uint64_t seed, std::uint64_t t, std::uint32_t tensor) noexcept {
    return {philox_stream(stream_key{seed, stream_key::shared_rank, static_cast<std::uint32_t>(t), tensor})};
  }
  /// Moment j (0 or 1) of element i, rounded to bf16 bits.
  [[nodiscard]] SLUICE_HD std::uint16_t operator()(float m, std::uint64_t i, unsigned j) const noexcept {
    std::uint32_t const half = rs.word(i >> 1) >> (16 * (i & 1));
    std::uint32_t const random = (half << (24 - 8 * j)) & 0xff000000u;
    std::uint32_t const b = detail::ieee::bits_of(m);
    std::uint32_t const r = (b & 0x7fffffffu) > 0x7f800000u ? (b & 0x80000000u) | 0x7fc00000u : b + (random >> 16);
    return static_cast<std::uint16_t>(r >> 16);
  }
};

/// The elements a sparse optimizer step touches: value t of a sparse gradient (indices of
/// elements, or of blocks of `block` elements, the tensor's last block cut at n) updates element
/// at(t); a dense step (null indices) updates element t.
struct sparse_target {
  std::uint32_t const* indices = nullptr;
  std::size_t block = 1;
  std::size_t n = 0;

  /// The element value t updates; n (none) for the padding of a cut last block.
  [[nodiscard]] SLUICE_HD std::size_t at(std::size_t t) const noexcept {
    if (indices == nullptr) return t;
    std::size_t const i = static_cast<std::size_t>(indices[t / block]) * block + t % block;
    return i < n ? i : n;
  }
};

/// Adam / AdamW on one fp32 element with the per-step constants of sluice::adam or sluice::adamw
/// (their kernel(t)): the operations, and their order, of the CPU optimizers.
struct adam_element {
  float b1 = 0, c1 = 0, b2 = 0, c2 = 0, eps = 0, wd = 0, lr_wd = 0, step_size = 0, inv_sqrt_bc2 = 0;
  bool l2 = false, decoupled = false;

  /// From the per-step scalars of a CPU optimizer: `policy.kernel(t)` of sluice::adam or adamw.
  template <class K>
  static adam_element from(K const& k) noexcept {
    return {k.b1, k.c1, k.b2, k.c2, k.eps, k.wd, k.lr_wd, k.step_size, k.inv_sqrt_bc2, k.l2, k.decoupled};
  }

  SLUICE_HD void operator()(float& p, float g, float& m, float& v) const noexcept {
    using namespace detail::ieee;
    if (l2) g = add(g, mul(wd, p));
    m = add(mul(m, b1), mul(c1, g));
    v = add(mul(v, b2), mul(c2, mul(g, g)));
    float const u = mul(step_size, div(m, add(mul(sqrt(v), inv_sqrt_bc2), eps)));
    p = decoupled ? sub(p, add(mul(lr_wd, p), u)) : sub(p, u);
  }
};

/// SGD (momentum, dampening, Nesterov, L2 weight decay) on one fp32 element with the per-step
/// constants of sluice::sgd (its kernel(t)).
struct sgd_element {
  float lr = 0, mu = 0, c = 0, wd = 0;
  bool momentum = false, nesterov = false, first = false, has_wd = false;

  /// From `policy.kernel(t)` of sluice::sgd.
  template <class K>
  static sgd_element from(K const& k) noexcept {
    return {k.lr, k.mu, k.c, k.wd, k.moments != 0, k.nesterov, k.first, k.has_wd};
  }

  /// `b` is the momentum buffer entry (untouched without momentum).
  SLUICE_HD void operator()(float& p, float g, float& b) const noexcept {
    using namespace detail::ieee;
    float d = g;
    if (has_wd) d = add(d, mul(wd, p));
    if (momentum) {
      float const bi = first ? d : add(mul(b, mu), mul(c, d));
      b = bi;
      d = nesterov ? add(d, mul(mu, bi)) : bi;
    }
    p = sub(p, mul(lr, d));
  }
};

/// The catch-up replays of sparse_mode::catch_up (optim/catch_up.hpp): one definition for the CPU
/// optimizers and the device kernels.
using sluice::adam_catch_up;
using sluice::sgd_catch_up;

}  // namespace sluice::cuda
