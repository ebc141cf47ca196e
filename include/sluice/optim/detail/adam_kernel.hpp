// The Adam/AdamW per-tile kernel (torch.optim.Adam / AdamW formulas) and its catch-up of skipped
// steps; shared by sluice::adam and sluice::adamw. The fp32 step is one body over lanes
// (adam_body.hpp) stamped per instruction-set level; the bf16-moment bodies keep their own
// widening, rounding and Philox scheduling around that step.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include <sluice/core/detail/bf16_bits.hpp>
#include <sluice/core/detail/philox_lanes.hpp>
#include <sluice/core/detail/prefetch.hpp>
#include <sluice/optim/detail/kernel.hpp>

namespace sluice::detail::optim {

/// The float constants of one Adam step, as the lanes use them.
struct adam_scalars {
  float b1 = 0, c1 = 0, b2 = 0, c2 = 0, eps = 0, wd = 0, lr_wd = 0, step_size = 0, inv_sqrt_bc2 = 0;
};

/// The fp32 step at level L (optim/detail/adam_body.hpp, stamped below).
template <simd L>
struct adam_lanes;

}  // namespace sluice::detail::optim

#define SLUICE_SIMD_BODY <sluice/optim/detail/adam_body.hpp>
#include <sluice/core/detail/simd_stamp.hpp>

namespace sluice::detail::optim {

/// Per-step scalars of one Adam step t, computed once in double, used in float.
struct adam_kernel : adam_scalars {
  std::size_t moments = 2;
  std::uint64_t t = 0;
  bool l2 = false, decoupled = false;
  double step_size_d = 0, inv_sqrt_bc2_d = 0, eps_d = 0, b1_d = 0, b2_d = 0, decay_d = 1, ratio = 0;

  adam_kernel(double lr, double beta1, double beta2, double epsilon, double weight_decay, bool decoupled_decay,
              std::uint64_t step)
      : t(step), l2(!decoupled_decay && weight_decay != 0), decoupled(decoupled_decay && weight_decay != 0) {
    auto const td = static_cast<double>(step);
    double const bc1 = 1 - std::pow(beta1, td), bc2 = 1 - std::pow(beta2, td);
    b1_d = beta1;
    b2_d = beta2;
    eps_d = epsilon;
    step_size_d = lr / bc1;
    inv_sqrt_bc2_d = 1 / std::sqrt(bc2);
    decay_d = decoupled ? 1 - lr * weight_decay : 1.0;
    ratio = beta2 > 0 ? beta1 / std::sqrt(beta2) : 0.0;
    b1 = static_cast<float>(beta1);
    c1 = static_cast<float>(1 - beta1);
    b2 = static_cast<float>(beta2);
    c2 = static_cast<float>(1 - beta2);
    eps = static_cast<float>(epsilon);
    wd = static_cast<float>(weight_decay);
    lr_wd = static_cast<float>(lr * weight_decay);
    step_size = static_cast<float>(step_size_d);
    inv_sqrt_bc2 = static_cast<float>(inv_sqrt_bc2_d);
  }

  /// f.template operator()<L2, Decoupled>() for this step's weight decay.
  template <class F>
  void with_decay(F&& f) const noexcept {
    if (l2)
      f.template operator()<true, false>();
    else if (decoupled)
      f.template operator()<false, true>();
    else
      f.template operator()<false, false>();
  }

  /// One step on n contiguous float elements (params, gradient, m, v) in place, at level L.
  template <simd L>
  void core_at(float* p, float const* g, float* mm, float* vv, std::size_t n) const noexcept {
    with_decay([&]<bool L2, bool D>() { adam_lanes<L>::template dense<L2, D>(*this, p, g, mm, vv, n); });
  }

  /// One step on n contiguous float elements (one tile), at this process's level.
  void core(float* p, float const* g, float* const* m, float*, std::size_t n) const noexcept {
    simd_detail::dispatch([&](auto l) { core_at<decltype(l)::value>(p, g, m[0], m[1], n); });
  }

  /// core() over a whole range (run_contiguous's fp32 path without catch-up or shadow): the level
  /// chosen once, the lanes streaming the range.
  void core_range(float* p, float const* g, float* const* m, std::size_t n) const noexcept {
    core(p, g, m, nullptr, n);
  }

  /// A block-sparse step in place on fp32 moments (adam_lanes::blocks), at this process's level.
  template <class Index>
  void core_blocks(float* p, float* mm, float* vv, float const* vals, Index const* idx, std::size_t count,
                   std::size_t b, std::size_t n, std::size_t ahead) const noexcept {
    simd_detail::dispatch([&](auto l) {
      with_decay([&]<bool L2, bool D>() {
        adam_lanes<decltype(l)::value>::template blocks<L2, D>(*this, p, mm, vv, vals, idx, count, b, n, ahead);
      });
    });
  }

#if SLUICE_HAVE_AVX2_TARGET
  // The bf16-moment bodies: their widening, stochastic rounding and Philox scheduling are specific
  // to each instruction set; the step itself is adam_lanes<L>::step.
  using lanes = adam_lanes<simd::avx2>::consts;
  using v8 = simd_detail::vf32<simd::avx2>;

  SLUICE_TARGET_AVX2 lanes make_lanes() const noexcept { return adam_lanes<simd::avx2>::make(*this); }

  template <bool L2, bool Decoupled>
  SLUICE_TARGET_AVX2 __attribute__((always_inline)) static inline void lanes8(lanes const& c, __m256& p, __m256 g,
                                                                              __m256& m, __m256& v) noexcept {
    v8 pv{p}, mv{m}, vv{v};
    adam_lanes<simd::avx2>::step<L2, Decoupled>(c, pv, v8{g}, mv, vv);
    p = pv.v, m = mv.v, v = vv.v;
  }

  /// Constants of the bf16 loads and stochastic-rounding stores (vpshufb masks; z = zero byte).
  struct bf16_lanes {
    __m256i sign, qnan;
    __m256i m_lo, m_hi, v_lo, v_hi;  // rounding byte of halfword j -> bits 8-15 of lane j
    __m256i widen;                   // halfword j of 128-bit lane l (l = 0: j < 4) -> top of lane j
    __m256i top_lo, top_hi;          // top halfword of each lane -> bytes 0-7 / 8-15 of its 128-bit lane
  };

  SLUICE_TARGET_AVX2 static bf16_lanes make_bf16_lanes() noexcept {
    char const z = static_cast<char>(0x80);
    // Rounding bytes: elements 0-7 read bytes 0-7 of each 128-bit lane of the halfwords, elements
    // 8-15 bytes 8-15 (see step16_bf16 for their order); the low byte is moment 0's, the high
    // byte moment 1's.
#define SLUICE_BF16_RND(b)                                                                                             \
  _mm256_setr_epi8(z, (b), z, z, z, (b) + 2, z, z, z, (b) + 4, z, z, z, (b) + 6, z, z, z, (b), z, z, z, (b) + 2, z, z, \
                   z, (b) + 4, z, z, z, (b) + 6, z, z)
    bf16_lanes const k = {_mm256_set1_epi32(static_cast<int>(0x80000000u)), _mm256_set1_epi32(0x7fc00000),
                          SLUICE_BF16_RND(0), SLUICE_BF16_RND(8), SLUICE_BF16_RND(1), SLUICE_BF16_RND(9),
                          // 8 halfwords broadcast to both 128-bit lanes: lane 0 widens halfwords 0-3, lane 1 4-7.
                          _mm256_setr_epi8(z, z, 0, 1, z, z, 2, 3, z, z, 4, 5, z, z, 6, 7, z, z, 8, 9, z, z, 10, 11, z,
                                           z, 12, 13, z, z, 14, 15),
                          _mm256_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, z, z, z, z, z, z, z, z, 2, 3, 6, 7, 10, 11, 14,
                                           15, z, z, z, z, z, z, z, z),
                          _mm256_setr_epi8(z, z, z, z, z, z, z, z, 2, 3, 6, 7, 10, 11, 14, 15, z, z, z, z, z, z, z, z,
                                           2, 3, 6, 7, 10, 11, 14, 15)};
#undef SLUICE_BF16_RND
    return k;
  }

  /// bf16_stochastic on eight lanes without the NaN case: the rounded bits, top half significant.
  SLUICE_TARGET_AVX2 __attribute__((always_inline)) static inline __m256i round8(__m256 x, __m256i add) noexcept {
    return _mm256_add_epi32(_mm256_castps_si256(x), add);
  }

  /// bf16_stochastic on eight lanes: add the rounding bits below bit 16, quiet NaNs (top half
  /// significant, as round8).
  SLUICE_TARGET_AVX2 __attribute__((always_inline)) static inline __m256i round8_nan(bf16_lanes const& k, __m256 x,
                                                                                     __m256i add) noexcept {
    __m256i const bits = _mm256_castps_si256(x);
    __m256i const is_nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    __m256i const nan = _mm256_or_si256(_mm256_and_si256(bits, k.sign), k.qnan);
    return _mm256_blendv_epi8(_mm256_add_epi32(bits, add), nan, is_nan);
  }

  /// The top halfwords of a (elements 0-7) and b (8-15) as sixteen bf16 in order.
  SLUICE_TARGET_AVX2 __attribute__((always_inline)) static inline __m256i top16(bf16_lanes const& k, __m256i a,
                                                                                __m256i b) noexcept {
    // [a0-3 b0-3 | a4-7 b4-7] in 64-bit quarters -> natural order.
    __m256i const ab = _mm256_blend_epi32(_mm256_shuffle_epi8(a, k.top_lo), _mm256_shuffle_epi8(b, k.top_hi), 0xcc);
    return _mm256_permute4x64_epi64(ab, 0xd8);
  }

  /// Eight halfwords in both 128-bit lanes (a load, no shuffle).
  SLUICE_TARGET_AVX2 __attribute__((always_inline)) static inline __m256i load8(std::uint16_t const* x) noexcept {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<__m128i const*>(x)));
  }

  /// Sixteen elements with bf16 moments: widen m and v, step, and store them with stochastic
  /// rounding (bf16_stochastic with the random byte `rnd[i] & 0xff` for m and `rnd[i] >> 8` for v).
  /// r holds the sixteen rounding halfwords in the order [0-3, 8-11 | 4-7, 12-15] (64-bit quarters
  /// of the natural order permuted by 0xd8), which in-lane shuffles need. NaN moments are rare:
  /// one test per sixteen elements (NaN in any of m + v: infinities of opposite sign give false
  /// alarms, which only cost time) takes the quieting path.
  template <bool L2, bool Decoupled>
  SLUICE_TARGET_AVX2 __attribute__((always_inline)) static inline void step16_bf16(
      lanes const& c, bf16_lanes const& k, float* SLUICE_RESTRICT p, float const* SLUICE_RESTRICT g,
      std::uint16_t* SLUICE_RESTRICT mb, std::uint16_t* SLUICE_RESTRICT vb, __m256i r) noexcept {
    __m256 m[2], v[2];
    for (int h = 0; h < 2; ++h) {
      m[h] = _mm256_castsi256_ps(_mm256_shuffle_epi8(load8(mb + 8 * h), k.widen));
      v[h] = _mm256_castsi256_ps(_mm256_shuffle_epi8(load8(vb + 8 * h), k.widen));
      __m256 pv = _mm256_loadu_ps(p + 8 * h);
      lanes8<L2, Decoupled>(c, pv, _mm256_loadu_ps(g + 8 * h), m[h], v[h]);
      _mm256_storeu_ps(p + 8 * h, pv);
    }
    __m256i const am0 = _mm256_shuffle_epi8(r, k.m_lo), am1 = _mm256_shuffle_epi8(r, k.m_hi);
    __m256i const av0 = _mm256_shuffle_epi8(r, k.v_lo), av1 = _mm256_shuffle_epi8(r, k.v_hi);
    __m256i mo, vo;
    __m256 const any = _mm256_add_ps(_mm256_add_ps(m[0], v[0]), _mm256_add_ps(m[1], v[1]));
    if (__builtin_expect(_mm256_movemask_ps(_mm256_cmp_ps(any, any, _CMP_UNORD_Q)) == 0, 1)) {
      mo = top16(k, round8(m[0], am0), round8(m[1], am1));
      vo = top16(k, round8(v[0], av0), round8(v[1], av1));
    } else {
      mo = top16(k, round8_nan(k, m[0], am0), round8_nan(k, m[1], am1));
      vo = top16(k, round8_nan(k, v[0], av0), round8_nan(k, v[1], av1));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(mb), mo);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(vb), vo);
  }

  /// The tail of the bf16 loops (n < 16): widened to float, stepped by the fp32 lanes, rounded.
  template <bool L2, bool Decoupled>
  SLUICE_TARGET_AVX2 static void tail_bf16(lanes const& c, float* SLUICE_RESTRICT p, float const* SLUICE_RESTRICT g,
                                           std::uint16_t* SLUICE_RESTRICT mb, std::uint16_t* SLUICE_RESTRICT vb,
                                           std::uint16_t const* SLUICE_RESTRICT rnd, std::size_t n) noexcept {
    alignas(64) float m[16], v[16];
    for (std::size_t i = 0; i < n; ++i) m[i] = bf16_to_float(mb[i]), v[i] = bf16_to_float(vb[i]);
    adam_lanes<simd::avx2>::run<L2, Decoupled>(c, p, g, m, v, n);
    for (std::size_t i = 0; i < n; ++i) {
      std::uint32_t const r = rnd[i];
      mb[i] = bf16_stochastic(m[i], (r << 24) & 0xff000000u);
      vb[i] = bf16_stochastic(v[i], (r << 16) & 0xff000000u);
    }
  }

  /// bf16 moments in one pass with the rounding halfwords rnd[0 .. n) (element i: rnd[i], as
  /// run_contiguous's portable path draws them), reading and writing each array once.
  template <bool L2, bool Decoupled>
  SLUICE_TARGET_AVX2 void core_bf16_avx2_impl(float* SLUICE_RESTRICT p, float const* SLUICE_RESTRICT g,
                                              std::uint16_t* SLUICE_RESTRICT mb, std::uint16_t* SLUICE_RESTRICT vb,
                                              std::uint16_t const* SLUICE_RESTRICT rnd, std::size_t n) const noexcept {
    lanes const c = make_lanes();
    bf16_lanes const k = make_bf16_lanes();
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) {
      __m256i const r = _mm256_permute4x64_epi64(_mm256_loadu_si256(reinterpret_cast<__m256i const*>(rnd + i)), 0xd8);
      step16_bf16<L2, Decoupled>(c, k, p + i, g + i, mb + i, vb + i, r);
    }
    if (i < n) tail_bf16<L2, Decoupled>(c, p + i, g + i, mb + i, vb + i, rnd + i, n - i);
  }

  /// bf16 moments of elements first .. first+n-1 of the tensor, drawing the rounding bits from
  /// the stream rs (element e: halfword e, the same bits as run_contiguous's portable path). Where
  /// first is a multiple of 8, Philox runs in the same loop as the update, 64 elements (8 blocks)
  /// at a time with its words in registers, software-pipelined: the rounds of the next group are
  /// spread between the four 16-element steps of this one, so that their multiply chain overlaps
  /// the Adam arithmetic instead of stalling a separate pass on its latency.
  template <bool L2, bool Decoupled>
  SLUICE_TARGET_AVX2 void core_bf16_stream_impl(float* SLUICE_RESTRICT p, float const* SLUICE_RESTRICT g,
                                                std::uint16_t* SLUICE_RESTRICT mb, std::uint16_t* SLUICE_RESTRICT vb,
                                                philox_lanes const& rs, std::uint64_t first,
                                                std::size_t n) const noexcept {
    std::size_t i = 0;
    if ((first & 7) == 0 && n >= 64) {
      lanes const c = make_lanes();
      bf16_lanes const k = make_bf16_lanes();
      auto const block = [first](std::size_t e) { return static_cast<std::uint32_t>((first + e) >> 3); };
#define SLUICE_STEP16(e, q) step16_bf16<L2, Decoupled>(c, k, p + (e), g + (e), mb + (e), vb + (e), r[q])
      philox_lanes::keys8 const keys = rs.round_keys();
      philox_lanes::block8 s = philox_lanes::begin8(block(0), keys);
      philox_lanes::rounds8<3, 10>(s, keys);
      __m256i r[4];
      philox_lanes::halves8(s, r);
      for (; i + 128 <= n; i += 64) {
        SLUICE_STEP16(i, 0);
        s = philox_lanes::begin8(block(i + 64), keys);
        philox_lanes::rounds8<3, 4>(s, keys);
        SLUICE_STEP16(i + 16, 1);
        philox_lanes::rounds8<4, 6>(s, keys);
        SLUICE_STEP16(i + 32, 2);
        philox_lanes::rounds8<6, 8>(s, keys);
        SLUICE_STEP16(i + 48, 3);
        philox_lanes::rounds8<8, 10>(s, keys);
        philox_lanes::halves8(s, r);
      }
      for (int q = 0; q < 4; ++q) SLUICE_STEP16(i + 16 * static_cast<unsigned>(q), q);
#undef SLUICE_STEP16
      i += 64;
    }
    if (i == n) return;
    // The rest (and unaligned starts): the words through memory.
    alignas(64) std::uint32_t words[40];
    for (; i < n; i += 64) {
      std::size_t const len = std::min<std::size_t>(64, n - i);
      std::uint64_t const b = first + i, lo = b >> 3, hi = (b + len - 1) >> 3;
      rs.words(lo, static_cast<std::size_t>(hi - lo + 1), words);
      core_bf16_avx2_impl<L2, Decoupled>(p + i, g + i, mb + i, vb + i,
                                         reinterpret_cast<std::uint16_t const*>(words) + (b & 7), len);
    }
  }

  /// The fused bf16 step (core_bf16_stream_impl; its AVX-512 body where the CPU has AVX-512).
  void core_bf16_stream(float* p, float const* g, std::uint16_t* mb, std::uint16_t* vb, philox_lanes const& rs,
                        std::uint64_t first, std::size_t n) const noexcept {
#if SLUICE_HAVE_AVX512_TARGET
    if (use_avx512()) {
      with_decay([&]<bool L2, bool D>() { core_bf16_stream_512<L2, D>(p, g, mb, vb, rs, first, n); });
      return;
    }
#endif
    with_decay([&]<bool L2, bool D>() { core_bf16_stream_impl<L2, D>(p, g, mb, vb, rs, first, n); });
  }

  void core_bf16_avx2(float* p, float const* g, std::uint16_t* mb, std::uint16_t* vb, std::uint16_t const* rnd,
                      std::size_t n) const noexcept {
    with_decay([&]<bool L2, bool D>() { core_bf16_avx2_impl<L2, D>(p, g, mb, vb, rnd, n); });
  }
#endif

#if SLUICE_HAVE_AVX512_TARGET
  SLUICE_AVX512_DIAGNOSTICS_BEGIN
  // The AVX-512 bf16 body: sixteen lanes of adam_lanes<simd::avx512>::step.
  using lanes16 = adam_lanes<simd::avx512>::consts;
  using v16 = simd_detail::vf32<simd::avx512>;

  /// Constants of the bf16 widening and stochastic-rounding stores in sixteen lanes.
  struct bf16_lanes16 {
    __m512i sign, qnan, low_byte_up, high_byte, pack;
    __m512i pick[4];  // 32-bit lane j of element group q <- rounding halfword of element 16q + j
  };

  SLUICE_TARGET_AVX512 static bf16_lanes16 make_bf16_lanes16() noexcept {
    bf16_lanes16 k;
    k.sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
    k.qnan = _mm512_set1_epi32(0x7fc00000);
    // Per 32-bit lane: byte 0 (moment 0's rounding byte) -> byte 1, the rest zero (vpshufb).
    alignas(64) std::int8_t up[64];
    for (int b = 0; b < 64; ++b) up[b] = static_cast<std::int8_t>(b % 4 == 1 ? (b % 16) - 1 : -128);
    k.low_byte_up = _mm512_load_si512(up);
    k.high_byte = _mm512_set1_epi32(0xff00);
    // The odd halfwords (the bf16 halves) of two vectors of sixteen rounded lanes, in order.
    alignas(64) std::int16_t pack[32], pick[4][32];
    for (int j = 0; j < 32; ++j) pack[j] = static_cast<std::int16_t>(2 * j + 1);
    k.pack = _mm512_load_si512(pack);
    // Element 16q + j is halfword h = j % 8 of block 2q + j / 8: w01 holds halfwords 0-3 of block l
    // at positions 4l .. 4l+3, w23 halfwords 4-7 (permutex2var: second source at 32 + position).
    for (int q = 0; q < 4; ++q)
      for (int j = 0; j < 16; ++j) {
        int const blk = 2 * q + j / 8, h = j % 8;
        pick[q][2 * j] = static_cast<std::int16_t>(h < 4 ? 4 * blk + h : 32 + 4 * blk + h - 4);
        pick[q][2 * j + 1] = 0;  // zeroed by the mask
      }
    for (int q = 0; q < 4; ++q) k.pick[q] = _mm512_load_si512(pick[q]);
    return k;
  }

  /// bf16_stochastic on sixteen lanes with the rounding addend `add` (below bit 16), NaN quieted:
  /// the rounded bits, top half significant.
  SLUICE_TARGET_AVX512 __attribute__((always_inline)) static inline __m512i round16(bf16_lanes16 const& k, __m512 x,
                                                                                    __m512i add) noexcept {
    __m512i const bits = _mm512_castps_si512(x);
    __m512i const nan = _mm512_ternarylogic_epi32(bits, k.sign, k.qnan, 0xea);  // (bits & sign) | qnan
    return _mm512_mask_add_epi32(nan, _mm512_cmp_ps_mask(x, x, _CMP_ORD_Q), bits, add);
  }

  /// Sixteen bf16 (a 256-bit load) widened to float.
  SLUICE_TARGET_AVX512 __attribute__((always_inline)) static inline __m512 widen16(std::uint16_t const* x) noexcept {
    __m256i const h = _mm256_loadu_si256(reinterpret_cast<__m256i const*>(x));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }

  /// Thirty-two elements with bf16 moments: widen, step, and store m and v with stochastic rounding;
  /// their rounding halfwords are picks q0 and q0 + 1 of (w01, w23) (see make_bf16_lanes16).
  template <bool L2, bool Decoupled>
  SLUICE_TARGET_AVX512 __attribute__((always_inline)) static inline void step32_bf16(
      lanes16 const& c, bf16_lanes16 const& k, float* SLUICE_RESTRICT p, float const* SLUICE_RESTRICT g,
      std::uint16_t* SLUICE_RESTRICT mb, std::uint16_t* SLUICE_RESTRICT vb, __m512i w01, __m512i w23, int q0) noexcept {
    __m512 m[2], v[2];
    __m512i am[2], av[2], mo[2], vo[2];
    for (int h = 0; h < 2; ++h) {
      m[h] = widen16(mb + 16 * h), v[h] = widen16(vb + 16 * h);
      v16 pv = v16::load(p + 16 * h), mv{m[h]}, vv{v[h]};
      adam_lanes<simd::avx512>::step<L2, Decoupled>(c, pv, v16::load(g + 16 * h), mv, vv);
      v16::store(p + 16 * h, pv);
      m[h] = mv.v, v[h] = vv.v;
      __m512i const r = _mm512_maskz_permutex2var_epi16(0x55555555u, w01, k.pick[q0 + h], w23);
      am[h] = _mm512_shuffle_epi8(r, k.low_byte_up);
      av[h] = _mm512_and_si512(r, k.high_byte);
    }
    // NaN moments are rare: one test per 32 elements (NaN in any of m + v; infinities of opposite
    // sign give false alarms, which only cost time) takes the quieting path.
    __m512 const any = _mm512_add_ps(_mm512_add_ps(m[0], v[0]), _mm512_add_ps(m[1], v[1]));
    if (__builtin_expect(_mm512_cmp_ps_mask(any, any, _CMP_UNORD_Q) == 0, 1)) {
      for (int h = 0; h < 2; ++h) {
        mo[h] = _mm512_add_epi32(_mm512_castps_si512(m[h]), am[h]);
        vo[h] = _mm512_add_epi32(_mm512_castps_si512(v[h]), av[h]);
      }
    } else {
      for (int h = 0; h < 2; ++h) {
        mo[h] = round16(k, m[h], am[h]);
        vo[h] = round16(k, v[h], av[h]);
      }
    }
    _mm512_storeu_si512(mb, _mm512_permutex2var_epi16(mo[0], k.pack, mo[1]));
    _mm512_storeu_si512(vb, _mm512_permutex2var_epi16(vo[0], k.pack, vo[1]));
  }

  /// core_bf16_stream_impl in sixteen lanes: where first is a multiple of 8, 128 elements (16
  /// Philox blocks in two independent chains of 8, one register per word and chain) per iteration,
  /// the next iteration's rounds spread between this one's four 32-element steps; the rest
  /// through the AVX2 body (the same bits). In L1 on one thread (Zen 5) one chain per 64 elements
  /// left Philox's multiply latency exposed (0.31 ns per element; two chains 0.27, four 0.25,
  /// against 0.17 for the fp32 step and 0.60 for the AVX2 body), but the 2^26-element step on two
  /// threads, memory-bound, was fastest with two (13.2-14.6 ms; one 13.5-14.0, four 15.0-16.6:
  /// four chains spill registers).
  template <bool L2, bool Decoupled>
  SLUICE_TARGET_AVX512 void core_bf16_stream_512(float* SLUICE_RESTRICT p, float const* SLUICE_RESTRICT g,
                                                 std::uint16_t* SLUICE_RESTRICT mb, std::uint16_t* SLUICE_RESTRICT vb,
                                                 philox_lanes const& rs, std::uint64_t first,
                                                 std::size_t n) const noexcept {
    std::size_t i = 0;
    if ((first & 7) == 0 && n >= 128) {
      lanes16 const c = adam_lanes<simd::avx512>::make(*this);
      bf16_lanes16 const k = make_bf16_lanes16();
      auto const block = [first](std::size_t e) { return static_cast<std::uint32_t>((first + e) >> 3); };
      philox_lanes::keys8z const keys = rs.round_keys_512();
      philox_lanes::block8z s0 = philox_lanes::begin8_512(block(0), keys),
                            s1 = philox_lanes::begin8_512(block(64), keys);
      philox_lanes::rounds8_512<3, 10>(s0, keys);
      philox_lanes::rounds8_512<3, 10>(s1, keys);
      __m512i w[2][2];
      philox_lanes::halves8_512(s0, w[0][0], w[0][1]);
      philox_lanes::halves8_512(s1, w[1][0], w[1][1]);
#define SLUICE_STEP32(e, t, q) \
  step32_bf16<L2, Decoupled>(c, k, p + (e), g + (e), mb + (e), vb + (e), w[t][0], w[t][1], q)
      for (; i + 256 <= n; i += 128) {
        SLUICE_STEP32(i, 0, 0);
        s0 = philox_lanes::begin8_512(block(i + 128), keys);
        s1 = philox_lanes::begin8_512(block(i + 192), keys);
        philox_lanes::rounds8_512<3, 5>(s0, keys);
        philox_lanes::rounds8_512<3, 5>(s1, keys);
        SLUICE_STEP32(i + 32, 0, 2);
        philox_lanes::rounds8_512<5, 7>(s0, keys);
        philox_lanes::rounds8_512<5, 7>(s1, keys);
        SLUICE_STEP32(i + 64, 1, 0);
        philox_lanes::rounds8_512<7, 10>(s0, keys);
        philox_lanes::rounds8_512<7, 10>(s1, keys);
        SLUICE_STEP32(i + 96, 1, 2);
        philox_lanes::halves8_512(s0, w[0][0], w[0][1]);
        philox_lanes::halves8_512(s1, w[1][0], w[1][1]);
      }
      SLUICE_STEP32(i, 0, 0);
      SLUICE_STEP32(i + 32, 0, 2);
      SLUICE_STEP32(i + 64, 1, 0);
      SLUICE_STEP32(i + 96, 1, 2);
#undef SLUICE_STEP32
      i += 128;
    }
    if (i < n) core_bf16_stream_impl<L2, Decoupled>(p + i, g + i, mb + i, vb + i, rs, first + i, n - i);
  }
  SLUICE_AVX512_DIAGNOSTICS_END
#endif

  /// Replays steps last[i]+1 .. target with zero gradient (the geometric approximation, see
  /// docs/optim.md): m and v decay exactly (b1^k, b2^k), AdamW's decoupled decay is exact, and the
  /// parameter moves by this step's update of (m, v) times sum_{j=1..k} (b1 / sqrt(b2))^j, which is
  /// exact when eps = 0 and the bias corrections have converged to 1.
  void catch_up(float* p, float* const* m, std::uint32_t const* last, std::size_t n,
                std::uint64_t target) const noexcept {
    for (std::size_t i = 0; i < n; ++i) {
      if (last[i] >= target) continue;
      auto const k = static_cast<double>(target - last[i]);
      double pi = p[i];
      if (decoupled) pi *= std::pow(decay_d, k);
      double const mi = m[0][i], vi = m[1][i];
      if (mi != 0) {
        double const base = step_size_d * mi / (std::sqrt(vi) * inv_sqrt_bc2_d + eps_d);
        double const geo = ratio == 1 ? k : ratio * (1 - std::pow(ratio, k)) / (1 - ratio);
        pi -= base * geo;
      }
      m[0][i] = static_cast<float>(mi * std::pow(b1_d, k));
      m[1][i] = static_cast<float>(vi * std::pow(b2_d, k));
      p[i] = static_cast<float>(pi);
    }
  }
};

}  // namespace sluice::detail::optim
