// The Adam/AdamW step written once over lanes: adam_lanes<L> for each level L, stamped by
// core/detail/simd_stamp.hpp from adam_kernel.hpp (no include guard; alone it includes that): the
// fp32 step, and around it the bf16-moment loops (widening, stochastic rounding, and the Philox
// words of the rounding bits drawn in registers between the steps).
#ifndef SLUICE_SIMD_LEVEL
#include <sluice/optim/detail/adam_kernel.hpp>
#else

namespace sluice::detail::optim {

template <>
struct adam_lanes<SLUICE_SIMD_LEVEL> {
  using V = detail::simd::vf32<SLUICE_SIMD_LEVEL>;
  using I = detail::simd::vi32<SLUICE_SIMD_LEVEL>;
  static constexpr std::size_t w = V::width;

  /// The per-step constants, one in every lane.
  struct consts {
    V b1, c1, b2, c2, wd, step, inv, eps, lr_wd;
  };

  static SLUICE_SIMD_INLINE consts make(adam_scalars const& k) noexcept {
    return {V::set(k.b1),        V::set(k.c1),           V::set(k.b2),  V::set(k.c2),   V::set(k.wd),
            V::set(k.step_size), V::set(k.inv_sqrt_bc2), V::set(k.eps), V::set(k.lr_wd)};
  }

  /// One step on width elements (torch's operations in torch's order; every product rounded).
  /// AdamW's decay joins the update: p - (lr wd p + step m / denom) rounds p once per step, where
  /// torch's p * (1 - lr wd) rounds 1 - lr wd to float (up to 3e-8 relative error, every step)
  /// and rounds p twice.
  template <bool L2, bool Decoupled>
  static SLUICE_SIMD_INLINE void step(consts const& c, V& p, V g, V& m, V& v) noexcept {
    if constexpr (L2) g = g + c.wd * p;
    m = m * c.b1 + c.c1 * g;
    v = v * c.b2 + c.c2 * (g * g);
    V const u = c.step * (m / (sqrt(v) * c.inv + c.eps));
    if constexpr (Decoupled)
      p = p - (c.lr_wd * p + u);
    else
      p = p - u;
  }

  /// The update of n contiguous elements in place: one pass reads p, g, m, v once and writes
  /// them once; the tail goes through partial lanes.
  template <bool L2, bool Decoupled>
  static SLUICE_SIMD_INLINE void run(consts const& c, float* SLUICE_RESTRICT p, float const* SLUICE_RESTRICT g,
                                     float* SLUICE_RESTRICT mm, float* SLUICE_RESTRICT vv, std::size_t n) noexcept {
    std::size_t i = 0;
    for (; i + V::width <= n; i += V::width) {
      V pv = V::load(p + i), mv = V::load(mm + i), vv1 = V::load(vv + i);
      step<L2, Decoupled>(c, pv, V::load(g + i), mv, vv1);
      V::store(mm + i, mv);
      V::store(vv + i, vv1);
      V::store(p + i, pv);
    }
    if (std::size_t const k = n - i; k != 0) {
      V pv = V::load_n(p + i, k), mv = V::load_n(mm + i, k), vv1 = V::load_n(vv + i, k);
      step<L2, Decoupled>(c, pv, V::load_n(g + i, k), mv, vv1);
      V::store_n(mm + i, mv, k);
      V::store_n(vv + i, vv1, k);
      V::store_n(p + i, pv, k);
    }
  }

  template <bool L2, bool Decoupled>
  static void dense(adam_scalars const& k, float* SLUICE_RESTRICT p, float const* SLUICE_RESTRICT g,
                    float* SLUICE_RESTRICT mm, float* SLUICE_RESTRICT vv, std::size_t n) noexcept {
    run<L2, Decoupled>(make(k), p, g, mm, vv, n);
  }

  /// 2 w elements with bf16 moments: widen m and v, step, and store them with stochastic rounding
  /// (bf16_stochastic with the random byte `rnd & 0xff` for m and `rnd >> 8` for v, r holding the
  /// rounding halfwords in I::load_rounding's order). NaN moments are rare: one test per 2 w
  /// elements (NaN in any of m + v: infinities of opposite sign give false alarms, which only
  /// cost time) takes the quieting path.
  template <bool L2, bool Decoupled>
  static SLUICE_SIMD_INLINE void step_bf16(consts const& c, float* SLUICE_RESTRICT p, float const* SLUICE_RESTRICT g,
                                           std::uint16_t* SLUICE_RESTRICT mb, std::uint16_t* SLUICE_RESTRICT vb,
                                           I r) noexcept {
    V m[2], v[2];
    for (std::size_t h = 0; h < 2; ++h) {
      m[h] = V::load_bf16(mb + w * h), v[h] = V::load_bf16(vb + w * h);
      V pv = V::load(p + w * h);
      step<L2, Decoupled>(c, pv, V::load(g + w * h), m[h], v[h]);
      V::store(p + w * h, pv);
    }
    I am[2], av[2], mo[2], vo[2];
    I::bf16_addends(r, am, av);
    for (std::size_t h = 0; h < 2; ++h) mo[h] = I::bits_of(m[h]) + am[h], vo[h] = I::bits_of(v[h]) + av[h];
    if (any_nan((m[0] + v[0]) + (m[1] + v[1]))) [[unlikely]] {
      I const sign = I::set(INT32_MIN), qnan = I::set(0x7fc00000);
      for (std::size_t h = 0; h < 2; ++h) {
        mo[h] = I::nan_select(m[h], (I::bits_of(m[h]) & sign) | qnan, mo[h]);
        vo[h] = I::nan_select(v[h], (I::bits_of(v[h]) & sign) | qnan, vo[h]);
      }
    }
    I::store_hi16(mb, mo[0], mo[1]);
    I::store_hi16(vb, vo[0], vo[1]);
  }

  /// bf16 moments of n elements in one pass with the rounding halfwords rnd[0 .. n) (element i:
  /// rnd[i], as run_contiguous's portable path draws them), reading and writing each array once;
  /// the tail (n % 2 w) widened to float, stepped by the fp32 lanes and rounded one by one.
  template <bool L2, bool Decoupled>
  static void run_bf16(consts const& c, float* SLUICE_RESTRICT p, float const* SLUICE_RESTRICT g,
                       std::uint16_t* SLUICE_RESTRICT mb, std::uint16_t* SLUICE_RESTRICT vb,
                       std::uint16_t const* SLUICE_RESTRICT rnd, std::size_t n) noexcept {
    std::size_t i = 0;
    for (; i + 2 * w <= n; i += 2 * w)
      step_bf16<L2, Decoupled>(c, p + i, g + i, mb + i, vb + i, I::load_rounding(rnd + i));
    if (i == n) return;
    alignas(64) float m[2 * w], v[2 * w];
    std::size_t const k = n - i;
    for (std::size_t j = 0; j < k; ++j) m[j] = bf16_to_float(mb[i + j]), v[j] = bf16_to_float(vb[i + j]);
    run<L2, Decoupled>(c, p + i, g + i, m, v, k);
    for (std::size_t j = 0; j < k; ++j) {
      std::uint32_t const r = rnd[i + j];
      mb[i + j] = bf16_stochastic(m[j], (r << 24) & 0xff000000u);
      vb[i + j] = bf16_stochastic(v[j], (r << 16) & 0xff000000u);
    }
  }

  template <bool L2, bool Decoupled>
  static void bf16(adam_scalars const& k, float* SLUICE_RESTRICT p, float const* SLUICE_RESTRICT g,
                   std::uint16_t* SLUICE_RESTRICT mb, std::uint16_t* SLUICE_RESTRICT vb,
                   std::uint16_t const* SLUICE_RESTRICT rnd, std::size_t n) noexcept {
    run_bf16<L2, Decoupled>(make(k), p, g, mb, vb, rnd, n);
  }

#if defined(__SSE2__)
  /// The Philox state of w consecutive blocks (8 w elements' rounding halfwords), kept in
  /// registers by the fused loop: x[k][h] holds word k of blocks h w / 2 + l in the low half of
  /// 64-bit lane l (I::mul_even reads only it), and the round keys broadcast once per call.
  struct philox_state {
    I x[4][2];
  };
  struct philox_keys {
    I a[10], b[10], r0, d0, d2, e2;
  };

  static SLUICE_SIMD_INLINE philox_keys keys_of(philox_lanes const& rs) noexcept {
    philox_lanes::key_words const kw = rs.round_key_words();
    philox_keys k;
    for (int round = 0; round < 10; ++round) k.a[round] = set(kw.a[round]), k.b[round] = set(kw.b[round]);
    k.r0 = set(kw.r0), k.d0 = set(kw.d0), k.d2 = set(kw.d2), k.e2 = set(kw.e2);
    return k;
  }

  static SLUICE_SIMD_INLINE I set(std::uint32_t x) noexcept { return I::set(static_cast<std::int32_t>(x)); }
  static SLUICE_SIMD_INLINE I m0() noexcept { return set(0xD2511F53u); }
  static SLUICE_SIMD_INLINE I m1() noexcept { return set(0xCD9E8D57u); }

  /// Blocks first .. first + w - 1 after rounds 0-2 of Philox4x32-10 with counter (block, step,
  /// tensor, rank) and key (k0, k1): only word 0 of the counter varies between blocks, so half of
  /// these rounds' products are the same for every block and folded into the keys
  /// (philox_lanes::round_key_words).
  static SLUICE_SIMD_INLINE philox_state begin(std::uint32_t first, philox_keys const& k) noexcept {
    philox_state s;
    for (std::size_t h = 0; h < 2; ++h) {
      I const p0 = mul_even(I::iota64(first + static_cast<std::uint32_t>(h * w / 2)), m0());  // round 0
      I const p1 = mul_even(high_halves(p0) ^ k.r0, m1());                                    // round 1
      I const y0 = high_halves(p1) ^ k.d0, y2 = p0 ^ k.d2;
      I const q0 = mul_even(y0, m0()), q1 = mul_even(y2, m1());  // round 2
      s.x[0][h] = high_halves(q1) ^ p1 ^ k.a[2];
      s.x[1][h] = q1;
      s.x[2][h] = high_halves(q0) ^ k.e2;
      s.x[3][h] = q0;
    }
    return s;
  }

  /// Rounds R0 .. R1 - 1 (of 10) on s.
  template <int R0, int R1>
  static SLUICE_SIMD_INLINE void rounds(philox_state& s, philox_keys const& k) noexcept {
    for (int round = R0; round < R1; ++round)
      for (std::size_t h = 0; h < 2; ++h) {
        I const p0 = mul_even(s.x[0][h], m0()), p1 = mul_even(s.x[2][h], m1());
        s.x[0][h] = high_halves(p1) ^ s.x[1][h] ^ k.a[round];
        s.x[1][h] = p1;
        s.x[2][h] = high_halves(p0) ^ s.x[3][h] ^ k.b[round];
        s.x[3][h] = p0;
      }
  }
#endif

  /// bf16 moments of elements first .. first + n - 1 of the tensor, drawing the rounding bits
  /// from the stream rs (element e: halfword e, the same bits as run_contiguous's portable path).
  /// Where first is a multiple of 8, Philox runs in the same loop as the update, 8 w elements (w
  /// blocks) at a time with its words in registers, software-pipelined: the rounds of the next
  /// group are spread between the four 2 w-element steps of this one, so that their multiply chain
  /// overlaps the Adam arithmetic instead of stalling a separate pass on its latency (a block's
  /// ten rounds are ~50 cycles of dependent multiplies). The rest draws its words through memory.
  template <bool L2, bool Decoupled>
  static void bf16_stream(adam_scalars const& k, float* SLUICE_RESTRICT p, float const* SLUICE_RESTRICT g,
                          std::uint16_t* SLUICE_RESTRICT mb, std::uint16_t* SLUICE_RESTRICT vb, philox_lanes const& rs,
                          std::uint64_t first, std::size_t n) noexcept {
    consts const c = make(k);
    std::size_t i = 0;
#if defined(__SSE2__)
    constexpr std::size_t group = 8 * w;
    if ((first & 7) == 0 && n >= group) {
      philox_keys const keys = keys_of(rs);
      auto const block = [first](std::size_t e) { return static_cast<std::uint32_t>((first + e) >> 3); };
      philox_state s = begin(block(0), keys);
      rounds<3, 10>(s, keys);
      I r[4];
      I::order_words(s.x, r);
      for (; i + 2 * group <= n; i += group) {
        step_bf16<L2, Decoupled>(c, p + i, g + i, mb + i, vb + i, r[0]);
        s = begin(block(i + group), keys);
        rounds<3, 4>(s, keys);
        step_bf16<L2, Decoupled>(c, p + i + 2 * w, g + i + 2 * w, mb + i + 2 * w, vb + i + 2 * w, r[1]);
        rounds<4, 6>(s, keys);
        step_bf16<L2, Decoupled>(c, p + i + 4 * w, g + i + 4 * w, mb + i + 4 * w, vb + i + 4 * w, r[2]);
        rounds<6, 8>(s, keys);
        step_bf16<L2, Decoupled>(c, p + i + 6 * w, g + i + 6 * w, mb + i + 6 * w, vb + i + 6 * w, r[3]);
        rounds<8, 10>(s, keys);
        I::order_words(s.x, r);
      }
      for (std::size_t q = 0; q < 4; ++q) {
        std::size_t const e = i + 2 * w * q;
        step_bf16<L2, Decoupled>(c, p + e, g + e, mb + e, vb + e, r[q]);
      }
      i += group;
    }
#endif
    if (i == n) return;
    // The rest (and unaligned starts): the words of up to 128 elements through memory.
    alignas(64) std::uint32_t words[4 * (128 / 8 + 2)];
    for (; i < n; i += 128) {
      std::size_t const len = std::min<std::size_t>(128, n - i);
      std::uint64_t const b = first + i, lo = b >> 3, blocks = ((b + len - 1) >> 3) - lo + 1;
      std::size_t const j = philox_words<SLUICE_SIMD_LEVEL>::words(rs, lo, static_cast<std::size_t>(blocks), words);
      rs.words_scalar(lo + j, static_cast<std::size_t>(blocks) - j, words + 4 * j);
      run_bf16<L2, Decoupled>(c, p + i, g + i, mb + i, vb + i, reinterpret_cast<std::uint16_t const*>(words) + (b & 7),
                              len);
    }
  }

  /// A block-sparse step in place (no catch-up): block j < count is elements idx[j] * b .. +
  /// min(b, n - idx[j] * b) of p, mm, vv, with gradient vals[j * b ..]; the lines of block
  /// j + ahead are prefetched.
  template <bool L2, bool Decoupled, class Index>
  static void blocks(adam_scalars const& k, float* SLUICE_RESTRICT p, float* SLUICE_RESTRICT mm,
                     float* SLUICE_RESTRICT vv, float const* SLUICE_RESTRICT vals, Index const* SLUICE_RESTRICT idx,
                     std::size_t count, std::size_t b, std::size_t n, std::size_t ahead) noexcept {
    consts const c = make(k);
    for (std::size_t j = 0; j < count; ++j) {
      if (j + ahead < count) {
        std::size_t const next = static_cast<std::size_t>(idx[j + ahead]) * b, bytes = std::min(b, n - next) * 4;
        prefetch_lines(p + next, bytes);
        prefetch_lines(mm + next, bytes);
        prefetch_lines(vv + next, bytes);
      }
      std::size_t const base = static_cast<std::size_t>(idx[j]) * b;
      run<L2, Decoupled>(c, p + base, vals + j * b, mm + base, vv + base, std::min(b, n - base));
    }
  }
};

}  // namespace sluice::detail::optim

#endif
