// The float loops of top-k selection written once over lanes (the filter and the emission of the
// selected entries): band_lanes<L> for each level L, stamped by core/detail/simd_stamp.hpp from
// select.hpp (no include guard; alone it includes that).
#ifndef SLUICE_SIMD_LEVEL
#include <sluice/compress/detail/select.hpp>
#else

namespace sluice::detail::compress {

template <>
struct band_lanes<SLUICE_SIMD_LEVEL> {
  using I = detail::simd::vi32<SLUICE_SIMD_LEVEL>;
  static constexpr std::size_t w = I::width;

  /// Bit j set when element j of the 64 floats at p has key >= lo (`below` = lo - 1 in every lane).
  static SLUICE_SIMD_INLINE std::uint64_t mask64(float const* SLUICE_RESTRICT p, I below) noexcept {
    I const magnitude = I::set(0x7fffffff);
    std::uint64_t m = 0;
    for (std::size_t q = 0; q < 64 / w; ++q)
      m |= std::uint64_t{gt_mask(I::load_bits(p + w * q) & magnitude, below)} << (w * q);
    return m;
  }

  /// The filter of filter_band over whole groups of 64 floats of [b, e); returns where it stopped.
  /// Empty groups are skipped first; the first hit of a group is taken by branch-free steps
  /// (lowest set bit, append at the list cursor, count in the band histogram h, advance the cursor
  /// by whether there was one), further hits loop. Measured with AVX2 and AVX-512 (Zen 5, 2^24 and
  /// 2^26, 1% and 0.1%): two fixed steps within noise or up to 6% slower, three without the gate
  /// up to 30% slower, no gate 10-60% slower; writing the hits with vpcompressd is slower (the
  /// histogram then reads the list back through a failed store forward); prefetch distances of
  /// 0.5-4 KiB alike (prefetch off: 1.6x slower).
  static std::size_t filter(float const* SLUICE_RESTRICT x, std::size_t b, std::size_t e, std::int32_t lo,
                            std::int32_t hi, select_workspace<float>::entry* SLUICE_RESTRICT d, std::size_t cc,
                            std::size_t& nd_out, std::size_t& na_out, std::uint32_t* SLUICE_RESTRICT h) noexcept {
    band_ranges const br(lo, hi);
    I const below = I::set(lo - 1);  // key > lo - 1 <=> key >= lo
    std::size_t nd = nd_out, na = na_out;
    auto take = [&](std::size_t i, std::uint64_t m) {
      auto const j = static_cast<std::size_t>(std::countr_zero(m | (std::uint64_t{1} << 63)));
      float const v = x[i + j];
      auto const key = static_cast<std::int32_t>(std::bit_cast<std::uint32_t>(v) & 0x7fffffffu);
      bool const hit = m != 0;
      d[std::min(nd, cc)] = {static_cast<std::uint32_t>(i + j), v};
      h[br.slot(key, nd)] += hit;
      nd += hit;
      na += hit & (key > hi);
    };
    std::size_t i = b;
    constexpr std::size_t prefetch_ahead = 1024;  // bytes
    for (; i + 64 <= e; i += 64) {
      for (std::size_t l = 0; l < 256; l += 64)
        __builtin_prefetch(reinterpret_cast<char const*>(x + i) + prefetch_ahead + l, 0, 3);
      std::uint64_t m = mask64(x + i, below);
      if (m == 0) continue;
      take(i, m);
      for (m &= m - 1; m != 0; m &= m - 1) take(i, m);  // rare: more than one hit
    }
    nd_out = nd;
    na_out = na;
    return i;
  }
  /// emit_entries for one chunk of float entries with 32-bit indices, w entries a step while a
  /// step's w output slots lie before `end` (the chunk's last output slot, so nothing past it is
  /// touched): the kept ones (key > t, or among the first q with key == t) are packed in order
  /// (I::compress_store) at the output cursor o, which advances past them. t < 2^31. Returns the
  /// entries handled; o and q are left where the scalar loop goes on.
  static std::size_t emit(select_workspace<float>::entry const* SLUICE_RESTRICT d, std::size_t nd, std::int32_t t,
                          std::size_t& o_io, std::size_t end, std::size_t& q_io, std::uint32_t* SLUICE_RESTRICT io,
                          float* SLUICE_RESTRICT vo) noexcept {
    I const magnitude = I::set(0x7fffffff), tv = I::set(t);
    std::size_t o = o_io, q = q_io, j = 0;
    for (; j + w <= nd && o + w <= end; j += w) {
      I index, value;
      I::load_pairs(d + j, index, value);
      I const key = value & magnitude;
      unsigned keep = gt_mask(key, tv), eq = eq_mask(key, tv);
      for (; eq != 0 && q > 0; eq &= eq - 1, --q) keep |= eq & (0u - eq);  // ties, lowest index first
      I::compress_store(io + o, index, keep);
      I::compress_store(vo + o, value, keep);
      o += static_cast<std::size_t>(std::popcount(keep));
    }
    o_io = o, q_io = q;
    return j;
  }
};

}  // namespace sluice::detail::compress

#endif
