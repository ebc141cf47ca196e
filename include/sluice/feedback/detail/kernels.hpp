// Element loops shared by the feedback policies: non-finite scans, compensation, residual stores
// with stochastic rounding for bf16 state, and the sent-position walk of sparse messages.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>

#include <sluice/compress/concepts.hpp>
#include <sluice/compress/detail/residual.hpp>
#include <sluice/core/element.hpp>
#include <sluice/core/error.hpp>
#include <sluice/core/parallel.hpp>
#include <sluice/core/random.hpp>
#include <sluice/feedback/state.hpp>
#include <sluice/feedback/warmup.hpp>
#include <sluice/feedback/workspace.hpp>

namespace sluice::detail::feedback {

inline constexpr std::size_t npos = std::numeric_limits<std::size_t>::max();
using detail::compress::grain;
using detail::compress::non_finite;
using detail::compress::state_stream;
using detail::compress::store;
using detail::compress::store_range;

/// Index of the first i with non-finite f(i), or npos. One parallel read pass.
template <class F>
std::size_t first_non_finite(std::size_t n, F&& f) {
  std::atomic<bool> bad{false};
  parallel_chunks(n, grain, [&](std::size_t b, std::size_t e, int) {
    bool any = false;
    for (std::size_t i = b; i < e; ++i) any |= non_finite(f(i));
    if (any) bad.store(true, std::memory_order_relaxed);
  });
  if (!bad.load()) return npos;
  for (std::size_t i = 0; i < n; ++i)
    if (non_finite(f(i))) return i;
  return npos;
}

/// Index of the first non-finite element of x, or npos (one parallel read pass, vectorized: the
/// hot loop ORs exponent-all-ones tests over raw pointers and locates the element only on a hit).
template <Element T>
std::size_t first_non_finite_of(std::span<T const> x) {
  T const* const p = x.data();
  std::atomic<bool> bad{false};
  parallel_chunks(x.size(), grain, [&](std::size_t b, std::size_t e, int) {
    std::uint32_t any = 0;
    if constexpr (std::is_same_v<T, float>) {
      for (std::size_t i = b; i < e; ++i) {
        std::uint32_t const u = std::bit_cast<std::uint32_t>(p[i]);
        any |= static_cast<std::uint32_t>((u & 0x7f800000u) == 0x7f800000u);
      }
    } else {
      // half: exponent 0x7c00; bfloat16: 0x7f80 (16-bit patterns).
      constexpr std::uint16_t mask = std::is_same_v<T, half> ? 0x7c00u : 0x7f80u;
      for (std::size_t i = b; i < e; ++i) {
        auto const u = std::bit_cast<std::uint16_t>(p[i]);
        any |= static_cast<std::uint32_t>((u & mask) == mask);
      }
    }
    if (any != 0) bad.store(true, std::memory_order_relaxed);
  });
  if (!bad.load()) return npos;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (non_finite(to_float(p[i]))) return i;
  return npos;
}

/// Calls f(i) for i in [0, n) in parallel chunks; f computes and stores one value and returns it.
/// Returns how many of the returned values were non-finite (counted in the same pass).
template <class F>
std::uint64_t for_each_counting(std::size_t n, F&& f) {
  std::atomic<std::uint64_t> total{0};
  parallel_chunks(n, grain, [&](std::size_t b, std::size_t e, int) {
    std::uint32_t c = 0;
    for (std::size_t i = b; i < e; ++i) c += non_finite(f(i)) ? 1u : 0u;
    if (c != 0) total.fetch_add(c, std::memory_order_relaxed);
  });
  return total.load();
}

/// Counts non-finite f(i) over [0, n).
template <class F>
std::uint64_t count_non_finite(std::size_t n, F&& f) {
  std::atomic<std::uint64_t> total{0};
  parallel_chunks(n, grain, [&](std::size_t b, std::size_t e, int) {
    std::uint64_t c = 0;
    for (std::size_t i = b; i < e; ++i) c += non_finite(f(i)) ? 1 : 0;
    if (c != 0) total.fetch_add(c, std::memory_order_relaxed);
  });
  return total.load();
}

/// Applies the non-finite policy to a found position before anything changed: throws for
/// throw_error, records the skip and returns true for skip_step, returns false for propagate.
inline bool on_non_finite(non_finite_policy p, feedback_slice const& s, std::size_t index, std::uint64_t step,
                          char const* policy_name) {
  if (p == non_finite_policy::throw_error)
    throw_error(errc::non_finite,
                "{}: tensor '{}' (id {}) has a non-finite gradient at element {} in step {}; state unchanged "
                "(choose non_finite_policy::skip_step or propagate to continue past such steps)",
                policy_name, s.name(), s.tensor(), s.offset() + index, step);
  if (p == non_finite_policy::skip_step) {
    s.state().record_skip(s.tensor(), step);
    return true;
  }
  return false;
}

/// The codec for `step` under the state's warm-up: ramped when it declares a strength, as is
/// otherwise (a model's state has one schedule; codecs without strength ignore it).
template <class C>
C codec_at(warmup const& w, C const& c, std::uint64_t step) {
  if constexpr (WarmableCodec<C>)
    return w.apply(c, step);
  else
    return c;
}

/// Checks the call before any state changes: grad matches the slice, the slice's state has the
/// buffers the policy needs, the codec's values are valid and `out` can hold a frame.
template <class C>
void check_call(C const& c, feedback_slice const& s, std::size_t grad_size, std::size_t buffers, std::size_t out_size,
                encode_context const& ctx, char const* policy_name) {
  require(grad_size == s.size(), errc::size_mismatch,
          "{}: gradient of {} elements for tensor '{}' slice of {} in step {}", policy_name, grad_size, s.name(),
          s.size(), ctx.step);
  require(s.state().buffers() >= buffers, errc::invalid_argument,
          "{}: tensor '{}' has a feedback state with {} buffers, {} needed (build the state from this policy)",
          policy_name, s.name(), s.state().buffers(), buffers);
  if constexpr (requires { c.validate(); }) c.validate();
  std::size_t const need = c.max_encoded_bytes(grad_size);
  require(out_size >= need, errc::size_mismatch,
          "{}: output of {} bytes for tensor '{}' in step {}, the codec needs up to {} (size it by max_encoded_bytes "
          "of warmup().peak(codec))",
          policy_name, out_size, s.name(), ctx.step, need);
}

/// Calls f(i, value) for every element position a sparse message sent (padding of a partial last
/// block skipped), in increasing order.
template <class T, class F>
void for_each_sent(sparse_buffer<T> const& sp, std::size_t n, F&& f) {
  std::size_t const bs = sp.block_size();
  auto const idx = sp.indices();
  auto const val = sp.values();
  for (std::size_t j = 0; j < idx.size(); ++j) {
    std::size_t const base = static_cast<std::size_t>(idx[j]) * bs;
    std::size_t const len = base < n ? std::min(bs, n - base) : 0;
    for (std::size_t k = 0; k < len; ++k) f(base + k, to_float(val[j * bs + k]));
  }
}

/// Runs f.template operator()<S>() with S the state's element type (float or bfloat16).
template <class F>
decltype(auto) with_state_type(element_type precision, F&& f) {
  if (precision == element_type::f32) return f.template operator()<float>();
  return f.template operator()<bfloat16>();
}

/// Grows v to n elements without shrinking capacity.
template <class V>
void fit(V& v, std::size_t n) {
  if (v.size() != n) v.resize(n);
}

/// Encodes compensated fp32 values with a codec for element type T: directly for T = float, else
/// through ws.input narrowed with round-to-nearest (what an unfused composition would hand the
/// codec). `ws` is a feedback_workspace<C, T>. Returns the frame size.
template <class T, class C, class W>
std::size_t encode_narrowed(C const& c, std::span<float const> cf, encode_context const& ctx, W& ws,
                            std::span<std::byte> out) {
  if constexpr (std::is_same_v<T, float>) {
    return c.encode(cf, ctx, ws.codec, out);
  } else {
    fit(ws.input, cf.size());
    for (std::size_t i = 0; i < cf.size(); ++i) ws.input[i] = from_float<T>(cf[i]);
    return c.encode(std::span<T const>(ws.input), ctx, ws.codec, out);
  }
}

}  // namespace sluice::detail::feedback
