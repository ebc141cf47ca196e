// feedback_state: the per-tensor error-feedback buffers (residual, momentum, accumulator, EF21
// estimate) in fp32 or bf16, the warm-up schedule, non-finite counters, and a bit-exact checkpoint.
// Kept per tensor, never per bucket, so a new bucket plan or compression ratio loses nothing.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/core.h>

#include <sluice/config.hpp>
#include <sluice/core/detail/spec_formatter.hpp>
#include <sluice/core/element.hpp>
#include <sluice/core/error.hpp>
#include <sluice/core/memory.hpp>
#include <sluice/feedback/detail/serial.hpp>
#include <sluice/feedback/warmup.hpp>

namespace sluice {

/// What a feedback does when a compensated gradient holds NaN or Inf.
enum class non_finite_policy : std::uint8_t {
  throw_error = 0,  ///< errc::non_finite naming tensor, element and step; nothing changes
  skip_step = 1,    ///< encode writes nothing and returns 0, nothing changes; the skip is counted in report()
  propagate = 2,    ///< the values reach the codec as they are; the state is reset to 0 there (never poisoned)
};

constexpr std::string_view to_string(non_finite_policy p) noexcept {
  switch (p) {
    case non_finite_policy::throw_error:
      return "throw_error";
    case non_finite_policy::skip_step:
      return "skip_step";
    case non_finite_policy::propagate:
      return "propagate";
  }
  return "unknown";
}

/// Non-finite events since construction (or restore). Read between steps.
struct feedback_report {
  static constexpr std::uint64_t no_step = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t skipped_calls = 0;            ///< encode calls skipped under skip_step
  std::uint64_t last_skipped_step = no_step;  ///< step of the last skip, or no_step
  std::uint64_t last_skipped_tensor = 0;      ///< tensor id of the last skip
  std::uint64_t non_finite_values = 0;        ///< values passed through under propagate
  friend bool operator==(feedback_report const&, feedback_report const&) = default;
};

class feedback_state;

/// Elements [offset, offset + size) of one tensor's feedback state: what one encode call works
/// on (a whole tensor, or one chunk of a bucket plan). Cheap to copy; does not own.
class feedback_slice {
 public:
  feedback_slice(feedback_state& s, std::size_t tensor, std::size_t offset, std::size_t count) noexcept
      : state_(&s), tensor_(tensor), offset_(offset), count_(count) {}

  [[nodiscard]] feedback_state& state() const noexcept { return *state_; }
  [[nodiscard]] std::size_t tensor() const noexcept { return tensor_; }  ///< tensor id
  [[nodiscard]] std::size_t offset() const noexcept { return offset_; }  ///< first element in the tensor
  [[nodiscard]] std::size_t size() const noexcept { return count_; }     ///< elements
  [[nodiscard]] std::string_view name() const noexcept;                  ///< tensor name
  [[nodiscard]] element_type precision() const noexcept;                 ///< f32 or bf16
  [[nodiscard]] sluice::warmup const& warmup() const noexcept;           ///< the state's schedule
  /// Buffer b of this slice as S (float for f32 state, bfloat16 for bf16 state).
  template <class S>
  [[nodiscard]] std::span<S> buffer(std::size_t b) const noexcept;

 private:
  feedback_state* state_;
  std::size_t tensor_, offset_, count_;
};

/// The state of one feedback policy over all tensors of a model. Built from the policy value
/// (which says how many buffers and their precision) and the tensors' element counts; buffers
/// start at zero. Encode calls on disjoint slices may run concurrently.
class feedback_state {
 public:
  feedback_state() = default;

  /// Low-level constructor: `kind` identifies the policy in checkpoints, `buffers` per tensor
  /// (0..2), `precision` f32 or bf16. errc::invalid_argument otherwise.
  feedback_state(std::uint16_t kind, std::size_t buffers, element_type precision, std::span<std::size_t const> extents,
                 std::span<std::string const> names = {});

  /// The state a feedback policy `f` needs for tensors of these element counts (and names, used
  /// in error messages and checkpoints).
  template <class F>
  requires requires {
    F::state_kind;
    F::state_buffers;
  }
  feedback_state(F const& f, std::span<std::size_t const> extents, std::span<std::string const> names = {})
      : feedback_state(F::state_kind, F::state_buffers, precision_of(f), extents, names) {}

  template <class F>
  static element_type precision_of(F const& f) noexcept {
    if constexpr (requires { f.precision; })
      return f.precision;
    else
      return element_type::f32;
  }

  [[nodiscard]] std::uint16_t kind() const noexcept { return kind_; }
  [[nodiscard]] std::size_t buffers() const noexcept { return buffers_; }
  [[nodiscard]] element_type precision() const noexcept { return precision_; }
  [[nodiscard]] std::size_t tensor_count() const noexcept { return tensors_.size(); }
  [[nodiscard]] std::size_t extent(std::size_t t) const { return entry(t).extent; }
  [[nodiscard]] std::string_view name(std::size_t t) const { return entry(t).name; }

  /// The whole of tensor t.
  [[nodiscard]] feedback_slice slice(std::size_t t) { return {*this, t, 0, entry(t).extent}; }
  /// Elements [offset, offset + count) of tensor t (a chunk). errc::size_mismatch when out of range.
  [[nodiscard]] feedback_slice slice(std::size_t t, std::size_t offset, std::size_t count) {
    auto const& te = entry(t);
    require(offset <= te.extent && count <= te.extent - offset, errc::size_mismatch,
            "feedback_state: slice [{}, {}) of tensor '{}' outside its {} elements", offset, offset + count, te.name,
            te.extent);
    return {*this, t, offset, count};
  }

  /// Buffer b of tensor t as S (float or bfloat16, matching precision()).
  template <class S>
  [[nodiscard]] std::span<S> buffer(std::size_t t, std::size_t b) {
    auto& te = entry(t);
    require(b < buffers_, errc::invalid_argument, "feedback_state: buffer {} of {}", b, buffers_);
    if constexpr (std::is_same_v<S, float>) {
      require(precision_ == element_type::f32, errc::invalid_argument, "feedback_state: state is {}, not f32",
              to_string(precision_));
      return te.f32[b];
    } else {
      static_assert(std::is_same_v<S, bfloat16>, "feedback_state: buffers are float or bfloat16");
      require(precision_ == element_type::bf16, errc::invalid_argument, "feedback_state: state is {}, not bf16",
              to_string(precision_));
      return te.bf16[b];
    }
  }
  /// Element i of buffer b of tensor t, widened to float.
  [[nodiscard]] float value(std::size_t t, std::size_t b, std::size_t i) const {
    auto const& te = entry(t);
    return precision_ == element_type::f32 ? te.f32[b].at(i) : static_cast<float>(te.bf16[b].at(i));
  }

  [[nodiscard]] sluice::warmup const& warmup() const noexcept { return warmup_; }
  /// Sets the warm-up schedule (saved with the state). errc::invalid_argument for a bad one.
  void set_warmup(sluice::warmup const& w) {
    w.validate();
    warmup_ = w;
  }

  /// Non-finite events so far.
  [[nodiscard]] feedback_report report() const noexcept {
    auto& self = const_cast<feedback_state&>(*this);
    return {std::atomic_ref(self.report_.skipped_calls).load(), std::atomic_ref(self.report_.last_skipped_step).load(),
            std::atomic_ref(self.report_.last_skipped_tensor).load(),
            std::atomic_ref(self.report_.non_finite_values).load()};
  }
  /// Records a skipped encode call (thread-safe).
  void record_skip(std::size_t tensor, std::uint64_t step) noexcept {
    std::atomic_ref(report_.skipped_calls).fetch_add(1);
    std::atomic_ref(report_.last_skipped_step).store(step);
    std::atomic_ref(report_.last_skipped_tensor).store(tensor);
  }
  /// Records values passed through under propagate (thread-safe).
  void record_non_finite(std::uint64_t count) noexcept { std::atomic_ref(report_.non_finite_values).fetch_add(count); }

  /// Sets every buffer to zero (keeps warm-up and counters).
  void clear();

  /// The checkpoint: every bit of the state, the warm-up schedule and the counters.
  /// A record of the shared persistence format (core/serial.hpp: magic, version, fields, checksum):
  ///   u32 "SLFS", u16 version 1, u16 kind, u8 precision, u8 buffers, u16 0, u64 tensors,
  ///   warm-up (u64 steps, f64 start, u64 stages, u8 shape, 7 x u8 0), report (4 x u64),
  ///   per tensor: u64 extent, u32 name bytes, u32 0, name, buffers (raw little-endian elements),
  ///   then u64 stable hash of everything before it.
  [[nodiscard]] std::vector<std::byte> save() const;

  /// Restores save()'s bytes into a state built for the same policy kind, precision and tensors.
  /// Validates everything first (errc::malformed_message for damaged bytes or a value no step
  /// writes, such as a NaN or infinite buffer element; errc::size_mismatch naming the first tensor
  /// that differs); on error nothing changes.
  void restore(std::span<std::byte const> bytes);

  /// Equal configuration, warm-up, counters and bit-identical buffers.
  friend bool operator==(feedback_state const& a, feedback_state const& b) { return a.save() == b.save(); }

 private:
  static constexpr std::uint32_t magic = 0x53464C53u;  // "SLFS"

  struct tensor_entry {
    std::string name;
    std::size_t extent = 0;
    std::array<std::vector<float, line_allocator<float>>, 2> f32{};
    std::array<std::vector<bfloat16, line_allocator<bfloat16>>, 2> bf16{};
  };

  tensor_entry& entry(std::size_t t) {
    require(t < tensors_.size(), errc::invalid_argument, "feedback_state: tensor id {} out of range [0, {})", t,
            tensors_.size());
    return tensors_[t];
  }
  tensor_entry const& entry(std::size_t t) const { return const_cast<feedback_state&>(*this).entry(t); }

  std::uint16_t kind_ = 0;
  std::size_t buffers_ = 0;
  element_type precision_ = element_type::f32;
  std::vector<tensor_entry> tensors_;
  sluice::warmup warmup_{};
  feedback_report report_{};
};

inline std::string_view feedback_slice::name() const noexcept { return state_->name(tensor_); }
inline element_type feedback_slice::precision() const noexcept { return state_->precision(); }
inline sluice::warmup const& feedback_slice::warmup() const noexcept { return state_->warmup(); }
template <class S>
std::span<S> feedback_slice::buffer(std::size_t b) const noexcept {
  return state_->template buffer<S>(tensor_, b).subspan(offset_, count_);
}

/// The state feedback policy f needs for tensors of these element counts (and names).
template <class F>
requires requires {
  F::state_kind;
  F::state_buffers;
}
feedback_state make_state(F const& f, std::span<std::size_t const> extents, std::span<std::string const> names = {}) {
  return feedback_state(f, extents, names);
}

}  // namespace sluice

template <>
struct fmt::formatter<sluice::non_finite_policy> : sluice::detail::spec_formatter {
  template <class Ctx>
  auto format(sluice::non_finite_policy p, Ctx& ctx) const {
    return format_with_spec(sluice::to_string(p), ctx);
  }
};

#if SLUICE_HEADER_ONLY
#include <sluice/feedback/impl/state.ipp>
#endif
