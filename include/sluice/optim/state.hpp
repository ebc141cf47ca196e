// optimizer_state<O, T>: the per-tensor mutable part of an optimizer (moments, step count, optional
// per-entry step counters), kept outside the policy value so policies stay regular values and state
// checkpoints on its own, bit-exactly.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <span>
#include <type_traits>
#include <vector>

#include <fmt/core.h>

#include <sluice/core/detail/spec_formatter.hpp>
#include <sluice/core/element.hpp>
#include <sluice/core/error.hpp>
#include <sluice/core/memory.hpp>
#include <sluice/core/serial.hpp>

namespace sluice {

/// How a sparse step treats entries the gradient does not touch.
enum class sparse_mode : std::uint8_t {
  lazy = 0,      ///< untouched entries keep parameters and moments (torch SparseAdam, StellaTrain)
  catch_up = 1,  ///< entries remember their last step and replay the skipped steps when next touched
};

/// Human-readable name of a sparse_mode ("lazy", "catch_up").
constexpr std::string_view to_string(sparse_mode m) noexcept { return m == sparse_mode::lazy ? "lazy" : "catch_up"; }

/// What an optimizer_state holds, derived from the policy value when the state is created.
struct state_layout {
  std::size_t moments = 0;                       ///< moment arrays per element (SGD momentum: 1, Adam: 2), <= 2
  element_type moment_type = element_type::f32;  ///< f32 or bf16 (stochastic rounding)
  bool per_entry_steps = false;                  ///< true for sparse_mode::catch_up
  friend constexpr bool operator==(state_layout const&, state_layout const&) = default;
};

namespace detail::optim {
struct state_access;

/// Elements from the start of one moment array to the next, for n elements of `elem` bytes.
/// Moments of one element must not sit a multiple of 2^28 bytes apart (as they did at n = 2^26
/// fp32): AMD Zen's L1D way predictor tags a line by a hash of linear-address bits 12-27, so two
/// lines in the same set with equal hashes evict each other on every access, and the dense Adam
/// step ran at 3x its memory time (m[i] and v[i] fought over one way). Large arrays are therefore
/// padded to a page plus 4 KiB + 17 cache lines: m[i] and v[i] then fall in different L1 sets and
/// differ in address bit 12. Arrays under 64 KiB are packed (no such distance, little to pad).
constexpr std::size_t moment_stride(std::size_t n, std::size_t elem) noexcept {
  std::size_t const bytes = n * elem;
  if (bytes < (std::size_t{64} << 10)) return n;
  return ((bytes + 4095) / 4096 * 4096 + 4096 + 17 * 64) / elem;
}
}  // namespace detail::optim

/// The state of optimizer O for one tensor (or one fused bucket) of n elements with fp32 master
/// weights. Sized once at construction (no allocation afterwards). Not shared between threads
/// while a step runs; distinct states may be stepped concurrently.
template <class O, class T = float>
class optimizer_state {
  static_assert(std::is_same_v<T, float>,
                "sluice::optimizer_state: master weights are fp32 because bf16/fp16 updates lose small steps; "
                "pass a bf16 or fp16 shadow span to sluice::step to get low-precision parameters");

 public:
  optimizer_state() = default;

  /// A zeroed state for a tensor of `n` elements under policy `o`; `tensor` names the tensor in
  /// errors and keys the stochastic-rounding stream.
  optimizer_state(O const& o, std::size_t n, std::uint32_t tensor = 0) : optimizer_state(o.layout(), n, tensor) {}

  /// A zeroed state with an explicit layout.
  optimizer_state(state_layout layout, std::size_t n, std::uint32_t tensor = 0)
      : layout_(layout), size_(n), tensor_(tensor) {
    require(layout.moments <= 2, errc::invalid_argument, "optimizer_state (tensor {}): {} moments, at most 2", tensor,
            layout.moments);
    require(layout.moment_type == element_type::f32 || layout.moment_type == element_type::bf16, errc::unsupported,
            "optimizer_state (tensor {}): moments must be f32 or bf16, not {}", tensor, to_string(layout.moment_type));
    if (layout.moment_type == element_type::f32) {
      stride_ = detail::optim::moment_stride(n, 4);
      f32_.assign(layout.moments * stride_, 0.0f);
    } else {
      stride_ = detail::optim::moment_stride(n, 2);
      bf16_.assign(layout.moments * stride_, std::uint16_t{0});
    }
    if (layout.per_entry_steps) last_.assign(n, 0u);
  }

  /// Elements of the tensor this state belongs to.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// Steps taken so far (the next step is step() + 1, as torch counts).
  [[nodiscard]] std::uint64_t step() const noexcept { return step_; }
  /// The tensor id given at construction.
  [[nodiscard]] std::uint32_t tensor() const noexcept { return tensor_; }
  /// What this state holds.
  [[nodiscard]] state_layout layout() const noexcept { return layout_; }

  /// Moment k of element i, widened to float. k < layout().moments.
  [[nodiscard]] float moment(std::size_t k, std::size_t i) const noexcept {
    if (layout_.moment_type == element_type::f32) return f32_[k * stride_ + i];
    return std::bit_cast<float>(static_cast<std::uint32_t>(bf16_[k * stride_ + i]) << 16);
  }
  /// The last step at which element i was brought up to date (catch_up states only; else step()).
  [[nodiscard]] std::uint64_t last_step(std::size_t i) const noexcept {
    return layout_.per_entry_steps ? last_[i] : step_;
  }

  /// Bytes save() writes.
  [[nodiscard]] std::size_t saved_bytes() const noexcept {
    std::size_t const elem = layout_.moment_type == element_type::f32 ? 4 : 2;
    return header_bytes + layout_.moments * size_ * elem + last_.size() * 4 + serial::record_trailer_bytes;
  }

  /// The whole state as little-endian bytes; restore() reads them back bit-exactly. A record of the
  /// shared persistence format (core/serial.hpp): u32 "SOPT", u16 version 2, u8 moments, u8 moment
  /// type, u8 per-entry steps, u8 0, u32 tensor, u64 elements, u64 step, each moment's elements,
  /// the per-entry steps (u32), then the u64 checksum of everything before it.
  [[nodiscard]] std::vector<std::byte> save() const {
    std::vector<std::byte> out;
    out.reserve(saved_bytes());
    serial::start_record(out, magic, version);
    serial::put(out, static_cast<std::uint8_t>(layout_.moments));
    serial::put(out, static_cast<std::uint8_t>(layout_.moment_type));
    serial::put(out, static_cast<std::uint8_t>(layout_.per_entry_steps ? 1 : 0));
    serial::put(out, std::uint8_t{0});
    serial::put(out, tensor_);
    serial::put(out, static_cast<std::uint64_t>(size_));
    serial::put(out, step_);
    // Moment k's size_ elements, then moment k+1's: the padding between arrays is not saved.
    for (std::size_t k = 0; k < layout_.moments; ++k) {
      if (!f32_.empty()) serial::append(out, std::as_bytes(std::span(f32_.data() + k * stride_, size_)));
      if (!bf16_.empty()) serial::append(out, std::as_bytes(std::span(bf16_.data() + k * stride_, size_)));
    }
    serial::append(out, std::as_bytes(std::span(last_)));
    serial::seal(out);
    return out;
  }

  /// Replaces this state with one saved by save(). Validates the whole record first and changes
  /// nothing when it is invalid: errc::malformed_message for damaged bytes (checksum), another
  /// format version, an impossible layout, size or step (a catch_up state past 2^32 - 1 steps, an
  /// entry stepped after the state), or a value no step writes (a NaN or infinite moment, a
  /// negative second moment, a moment that is not 0 at step 0).
  void restore(std::span<std::byte const> in) {
    char const* const what = "optimizer_state::restore";
    auto r = serial::open_record(in, magic, version, what);
    std::uint8_t moments = 0, type = 0, per_entry = 0, pad = 0;
    std::uint32_t tensor = 0;
    std::uint64_t n = 0, step = 0;
    require(r.get(moments) && r.get(type) && r.get(per_entry) && r.get(pad) && r.get(tensor) && r.get(n) && r.get(step),
            errc::malformed_message, "{}: {} bytes, header needs {}", what, in.size(), header_bytes);
    require(moments <= 2 && per_entry <= 1 && pad == 0 &&
                (type == static_cast<std::uint8_t>(element_type::f32) ||
                 type == static_cast<std::uint8_t>(element_type::bf16)),
            errc::malformed_message, "{} (tensor {}): bad layout (moments {}, type {}, per-entry {}, reserved {})",
            what, tensor, moments, type, per_entry, pad);
    std::size_t const elem = type == static_cast<std::uint8_t>(element_type::f32) ? 4 : 2;
    std::size_t const per_element = moments * elem + (per_entry ? 4 : 0);
    // n is bounded by the bytes present before it sizes anything.
    require(
        per_element == 0 ? n <= (std::uint64_t{1} << 40) : n == r.left() / per_element && r.left() % per_element == 0,
        errc::malformed_message, "{} (tensor {}): {} elements do not match the {} bytes that follow", what, tensor, n,
        r.left());
    require(!per_entry || step <= max_catch_up_step, errc::malformed_message,
            "{} (tensor {}): step {} of a catch_up state exceeds its 32-bit per-entry counters", what, tensor, step);
    auto const nn = static_cast<std::size_t>(n);
    optimizer_state s(state_layout{moments, static_cast<element_type>(type), per_entry == 1}, nn, tensor);
    s.step_ = step;
    for (std::size_t k = 0; k < s.layout_.moments; ++k) {
      std::span<std::byte const> src;
      (void)r.take(nn * elem, src);
      if (nn == 0) continue;
      if (!s.f32_.empty()) std::memcpy(s.f32_.data() + k * s.stride_, src.data(), src.size());
      if (!s.bf16_.empty()) std::memcpy(s.bf16_.data() + k * s.stride_, src.data(), src.size());
    }
    std::span<std::byte const> last;
    (void)r.take(s.last_.size() * 4, last);
    if (!last.empty()) std::memcpy(s.last_.data(), last.data(), last.size());
    require(r.left() == 0, errc::malformed_message, "{} (tensor {}): {} trailing bytes", what, tensor, r.left());
    for (std::size_t i = 0; i < s.last_.size(); ++i)
      require(s.last_[i] <= step, errc::malformed_message,
              "{} (tensor {}): element {} was last stepped at {}, after the state's step {}", what, tensor, i,
              s.last_[i], step);
    // Values a step never writes: a NaN or infinite moment (the step would carry it into the
    // parameters), a negative second moment (Adam's v is a running mean of squares), and, before
    // the first step, any moment or per-entry step that is not 0.
    for (std::size_t k = 0; k < moments; ++k)
      for (std::size_t i = 0; i < nn; ++i) {
        float const v = s.moment(k, i);
        require(std::isfinite(v), errc::malformed_message, "{} (tensor {}): moment {} of element {} is {}", what,
                tensor, k, i, v);
        require(k != 1 || v >= 0.0f, errc::malformed_message,
                "{} (tensor {}): second moment of element {} is negative ({})", what, tensor, i, v);
        require(step != 0 || v == 0.0f, errc::malformed_message,
                "{} (tensor {}): moment {} of element {} is {} before the first step (a state at step 0 is all zero)",
                what, tensor, k, i, v);
      }
    *this = std::move(s);
  }

  /// The largest step count of a catch_up state (its per-entry counters are 32-bit).
  static constexpr std::uint64_t max_catch_up_step = std::numeric_limits<std::uint32_t>::max();

  friend bool operator==(optimizer_state const&, optimizer_state const&) = default;

 private:
  friend struct detail::optim::state_access;
  static constexpr std::uint32_t magic = 0x5450'4f53u;  // "SOPT" little-endian
  static constexpr std::uint16_t version = 2;           // 1: no checksum (not read any more)
  static constexpr std::size_t header_bytes = 4 + 2 + 4 + 4 + 8 + 8;

  state_layout layout_{};
  std::size_t size_ = 0;
  std::uint32_t tensor_ = 0;
  std::uint64_t step_ = 0;
  std::size_t stride_ = 0;  // elements between moment arrays (detail::optim::moment_stride); padding stays 0
  std::vector<float, line_allocator<float>> f32_{};                   // moment k of element i at [k * stride_ + i]
  std::vector<std::uint16_t, line_allocator<std::uint16_t>> bf16_{};  // bf16 bit patterns, same
  std::vector<std::uint32_t> last_{};                                 // per-entry last step (catch_up only)
};

}  // namespace sluice

template <>
struct fmt::formatter<sluice::sparse_mode> : sluice::detail::spec_formatter {
  template <class Ctx>
  auto format(sluice::sparse_mode m, Ctx& ctx) const {
    return format_with_spec(sluice::to_string(m), ctx);
  }
};

template <>
struct fmt::formatter<sluice::state_layout> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(sluice::state_layout const& l, Ctx& ctx) const {
    return fmt::format_to(ctx.out(), "state_layout{{.moments = {}, .moment_type = {}, .per_entry_steps = {}}}",
                          l.moments, sluice::to_string(l.moment_type), l.per_entry_steps);
  }
};
