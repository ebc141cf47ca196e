// The max-min quantizer's float loops written once over lanes: maxmin_lanes<L> for the baseline
// and AVX2 levels, stamped by core/detail/simd_stamp.hpp from quantize.hpp (no include guard;
// alone it includes that). Each returns how many elements it handled (whole groups) and leaves the
// tail to the scalar code. Products round on their own, so a level's multiply and add stay two
// roundings and every level gives the same bits.
#ifndef SLUICE_SIMD_LEVEL
#include <sluice/compress/detail/quantize.hpp>
#else

namespace sluice::detail::compress {

template <>
struct maxmin_lanes<SLUICE_SIMD_LEVEL> {
  using V = detail::simd::vf32<SLUICE_SIMD_LEVEL>;
  using I = detail::simd::vi32<SLUICE_SIMD_LEVEL>;
  static constexpr std::size_t w = V::width;

  /// Running min, max and poison (x - x: +-0, or NaN for NaN and Inf, OR-ed bitwise: +-0 until a
  /// NaN sets the exponent bits, and a one-cycle chain where an add would take three) of 2 w
  /// floats per step, in two independent halves; finish() reduces them (min and max of finite
  /// values do not depend on the order of the reduction).
  struct range_acc {
    V mn0, mn1, mx0, mx1, p0, p1;
    SLUICE_SIMD_INLINE void add(V a, V b) noexcept {
      mn0 = min(mn0, a), mn1 = min(mn1, b);
      mx0 = max(mx0, a), mx1 = max(mx1, b);
      p0 = p0 | (a - a), p1 = p1 | (b - b);
    }
    SLUICE_SIMD_INLINE void finish(float& mn, float& mx, bool& poisoned) const noexcept {
      alignas(64) float l[2 * w];
      V::store(l, min(mn0, mn1));
      V::store(l + w, max(mx0, mx1));
      // In locals: through the references (which may alias) every step was a store and a reload,
      // a 16-step store-forwarding chain that cost as much as the loop over a 1024 bucket.
      float lo = mn, hi = mx;
      for (std::size_t t = 0; t < w; ++t) lo = l[t] < lo ? l[t] : lo, hi = l[w + t] > hi ? l[w + t] : hi;
      mn = lo, mx = hi;
      poisoned = !all_zero(p0 | p1);
    }
  };

  static SLUICE_SIMD_INLINE range_acc start(float mn, float mx) noexcept {
    V const lo = V::set(mn), hi = V::set(mx), zero = V::set(0.0f);
    return {lo, lo, hi, hi, zero, zero};
  }

  /// Running min and max over whole groups of 2 w, and whether any value was NaN or Inf.
  static std::size_t range(float const* SLUICE_RESTRICT x, std::size_t len, float& mn, float& mx,
                           bool& poisoned) noexcept {
    range_acc r = start(mn, mx);
    std::size_t i = 0;
    for (; i + 2 * w <= len; i += 2 * w) r.add(V::load(x + i), V::load(x + i + w));
    r.finish(mn, mx, poisoned);
    return i;
  }

  /// Levels clamp((x - min) * inv + 0.5, 0, maxq), truncated, w at a time.
  static SLUICE_SIMD_INLINE I levels(float const* x, V vmin, V vinv, V top) noexcept {
    V const v = (V::load(x) - vmin) * vinv + V::set(0.5f);
    return I::truncate(min(max(v, V::set(0.0f)), top));  // max(NaN, 0) gives 0
  }

  /// levels without the clamp at 0, for callers that only narrow the result with the saturating
  /// stores (I::store_u8, I::store_u4): a NaN (truncated: INT_MIN) or a negative level saturates
  /// to 0 there, as the clamp would make it; `top` first, so that min returns a NaN rather than
  /// `top`.
  static SLUICE_SIMD_INLINE I levels_to_bytes(float const* x, V vmin, V vinv, V top) noexcept {
    V const v = (V::load(x) - vmin) * vinv + V::set(0.5f);
    return I::truncate(min(top, v));
  }

  /// Codes (one byte each) of whole groups of 4 w; returns the count handled.
  static std::size_t levels_u8(float const* SLUICE_RESTRICT x, std::size_t len, float mn, float inv, float maxq,
                               std::uint8_t* SLUICE_RESTRICT codes) noexcept {
    V const vmin = V::set(mn), vinv = V::set(inv), top = V::set(maxq);
    std::size_t j = 0;
    for (; j + 4 * w <= len; j += 4 * w)
      I::store_u8(codes + j, levels(x + j, vmin, vinv, top), levels(x + j + w, vmin, vinv, top),
                  levels(x + j + 2 * w, vmin, vinv, top), levels(x + j + 3 * w, vmin, vinv, top));
    return j;
  }

  /// 4-bit levels packed two per byte over whole groups of 4 w, straight from the values: no code
  /// buffer round trip. Returns the count handled. The lines of `ahead` (`ahead_bytes`, the next
  /// bucket) are requested 16 w bytes per group, spread over the loop: a burst of requests at the
  /// start of a bucket fills the miss buffers and stalls, a steady trickle keeps memory streaming
  /// while this bucket is computed (the rest, when the loop is shorter, after it).
  static std::size_t levels_u4(float const* SLUICE_RESTRICT x, std::size_t len, float mn, float inv,
                               std::byte* SLUICE_RESTRICT out, void const* ahead, std::size_t ahead_bytes) noexcept {
    V const vmin = V::set(mn), vinv = V::set(inv), top = V::set(15.0f);
    auto const* const a = static_cast<char const*>(ahead);
    std::size_t j = 0;
    for (; j + 4 * w <= len; j += 4 * w) {
      if (4 * j < ahead_bytes) prefetch_lines(a, ahead_bytes, 4 * j, 4 * j + 16 * w);
      I::store_u4(out + j / 2, levels_to_bytes(x + j, vmin, vinv, top), levels_to_bytes(x + j + w, vmin, vinv, top),
                  levels_to_bytes(x + j + 2 * w, vmin, vinv, top), levels_to_bytes(x + j + 3 * w, vmin, vinv, top));
    }
    prefetch_lines(a, ahead_bytes, 4 * j, ahead_bytes);
    return j;
  }

  /// Error feedback's 4-bit round-to-nearest step on a bucket of compensated values c, whole
  /// groups of 4 w: the levels packed two per byte into `out` (as levels_u4) and the residual
  /// e = c - (min + level * unit) (the receiver's value, as decode computes it), with no code
  /// buffer in between. Returns the count handled.
  static std::size_t levels_u4_residual(float const* SLUICE_RESTRICT c, std::size_t len, float mn, float inv,
                                        float unit, std::byte* SLUICE_RESTRICT out, float* SLUICE_RESTRICT e,
                                        void const* ahead0, void const* ahead1, std::size_t ahead_bytes) noexcept {
    V const vmin = V::set(mn), vinv = V::set(inv), top = V::set(15.0f), vunit = V::set(unit);
    auto const* const a0 = static_cast<char const*>(ahead0);
    auto const* const a1 = static_cast<char const*>(ahead1);
    std::size_t j = 0;
    for (; j + 4 * w <= len; j += 4 * w) {
      if (4 * j < ahead_bytes) {  // as levels_u4: the next bucket's lines, both streams
        prefetch_lines(a0, ahead_bytes, 4 * j, 4 * j + 16 * w);
        prefetch_lines(a1, ahead_bytes, 4 * j, 4 * j + 16 * w);
      }
      I l[4];
      for (std::size_t q = 0; q < 4; ++q) {
        float const* const cq = c + j + w * q;
        l[q] = levels(cq, vmin, vinv, top);
        V::store(e + j + w * q, V::load(cq) - (vmin + I::to_float(l[q]) * vunit));
      }
      I::store_u4(out + j / 2, l[0], l[1], l[2], l[3]);
    }
    prefetch_lines(a0, ahead_bytes, 4 * j, ahead_bytes);
    prefetch_lines(a1, ahead_bytes, 4 * j, ahead_bytes);
    return j;
  }

  /// c = g + e over whole groups of 2 w, with the running min and max of c and whether any c was
  /// NaN or Inf (the compensation pass of error feedback, fused with the range); returns the count.
  static std::size_t add_range(float const* SLUICE_RESTRICT g, float const* SLUICE_RESTRICT e, float* SLUICE_RESTRICT c,
                               std::size_t len, float& mn, float& mx, bool& poisoned) noexcept {
    range_acc r = start(mn, mx);
    std::size_t i = 0;
    for (; i + 2 * w <= len; i += 2 * w) {
      V const a = V::load(g + i) + V::load(e + i), b = V::load(g + i + w) + V::load(e + i + w);
      V::store(c + i, a);
      V::store(c + i + w, b);
      r.add(a, b);
    }
    r.finish(mn, mx, poisoned);
    return i;
  }

  /// e = c - (min + q * unit) over whole groups of w (the residual after sending levels q);
  /// returns the count.
  static std::size_t residual(float const* SLUICE_RESTRICT c, std::uint8_t const* SLUICE_RESTRICT q, float mn,
                              float unit, float* SLUICE_RESTRICT e, std::size_t len) noexcept {
    V const vmin = V::set(mn), vunit = V::set(unit);
    std::size_t j = 0;
    for (; j + w <= len; j += w) V::store(e + j, V::load(c + j) - (vmin + I::to_float(I::load_u8(q + j)) * vunit));
    return j;
  }
};

}  // namespace sluice::detail::compress

#endif
