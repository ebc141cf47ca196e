// layout: the named tensors a model hands to sluice (names, shapes, element types), their stable
// fingerprint, and the canonical serialization ranks exchange to prove they agree before step 0.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include <sluice/bucket/concepts.hpp>
#include <sluice/bucket/detail/hash.hpp>
#include <sluice/config.hpp>
#include <sluice/core/detail/decimal_list.hpp>
#include <sluice/core/element.hpp>
#include <sluice/core/error.hpp>

namespace sluice {

/// One tensor of a layout. An empty shape is a scalar (one element).
struct tensor_desc {
  std::string name{};                        ///< unique within its layout, non-empty
  std::vector<std::size_t> shape{};          ///< dimensions, outermost first
  element_type element = element_type::f32;  ///< how the gradient is stored
  friend bool operator==(tensor_desc const&, tensor_desc const&) = default;

  /// Number of dimensions.
  [[nodiscard]] std::size_t dims() const noexcept { return shape.size(); }
  /// Number of elements (product of the shape; 1 for a scalar).
  [[nodiscard]] std::size_t elements() const noexcept {
    std::size_t n = 1;
    for (std::size_t d : shape) n *= d;
    return n;
  }
  /// Bytes of the gradient.
  [[nodiscard]] std::size_t bytes() const noexcept { return elements() * size_of(element); }
};

/// An ordered list of named tensors. Order matters: it is the order of tensor ids everywhere
/// (feedback state, bucket plans, wire tensor ids), so every rank must build the same layout.
class layout {
 public:
  layout() = default;

  /// Appends a tensor. errc::invalid_argument for an empty or duplicate name, or a shape whose
  /// bytes (or the layout's total bytes) overflow size_t; nothing is added then. So bytes(),
  /// elements() and total_elements() never wrap, for a layout received from a peer too.
  layout& add(std::string name, std::vector<std::size_t> shape, element_type element = element_type::f32);

  /// Builds a 1-D layout from (name, span) pairs; the element type comes from the span.
  /// Shapes are 1-D, so under the default bypass rule every such tensor is left uncompressed:
  /// use add() with the real shape for weight matrices.
  template <NamedSpans Range>
  static layout from(Range const& named_spans) {
    layout l;
    for (auto const& [name, span] : named_spans) {
      using value_type = typename std::remove_cvref_t<decltype(span)>::value_type;
      l.add(std::string(name), {span.size()}, element_type_of<value_type>);
    }
    return l;
  }

  /// Number of tensors.
  [[nodiscard]] std::size_t size() const noexcept { return tensors_.size(); }
  [[nodiscard]] bool empty() const noexcept { return tensors_.empty(); }
  /// Tensor i (errc::invalid_argument when out of range).
  [[nodiscard]] tensor_desc const& operator[](std::size_t i) const {
    require(i < tensors_.size(), errc::invalid_argument, "layout: tensor id {} out of range [0, {})", i,
            tensors_.size());
    return tensors_[i];
  }
  [[nodiscard]] std::span<tensor_desc const> tensors() const noexcept { return tensors_; }
  /// Id of the tensor called `name`, or size() when absent.
  [[nodiscard]] std::size_t find(std::string_view name) const;
  /// Element counts of all tensors, in order (what feedback_state is sized by).
  [[nodiscard]] std::vector<std::size_t> extents() const;
  /// Names of all tensors, in order.
  [[nodiscard]] std::vector<std::string> names() const;
  /// Total elements over all tensors.
  [[nodiscard]] std::size_t total_elements() const noexcept {
    std::size_t n = 0;
    for (auto const& t : tensors_) n += t.elements();
    return n;
  }

  /// Canonical little-endian bytes: what ranks exchange to compare layouts (layouts_must_match).
  ///   u32 magic "SLLY", u16 version 1, u16 zero, u64 count, then per tensor:
  ///   u32 name bytes, u8 element type, u8 dims, u16 zero, dims x u64, name (UTF-8, no terminator).
  [[nodiscard]] std::vector<std::byte> serialize() const;

  /// Parses serialize()'s bytes from an untrusted peer. errc::malformed_message (naming `who`)
  /// for anything out of place: bad magic or version, truncation, trailing bytes, bad element
  /// type, more than 255 dimensions, duplicate or empty names.
  static layout deserialize(std::span<std::byte const> bytes, std::string_view who = "peer");

  /// Stable 64-bit fingerprint of the canonical bytes: equal layouts give equal fingerprints on
  /// every rank, build and run. A cheap first check; layouts_must_match says what differs.
  [[nodiscard]] std::uint64_t fingerprint() const;

  friend bool operator==(layout const& a, layout const& b) { return a.tensors_ == b.tensors_; }

 private:
  static constexpr std::uint32_t serial_magic = 0x594C4C53u;  // "SLLY"
  std::vector<tensor_desc> tensors_;
  std::unordered_map<std::string, std::size_t> index_;
  std::size_t total_bytes_ = 0;  // sum of bytes(), checked in add()
};

/// Compares two ranks' serialized layouts and throws errc::size_mismatch naming the first tensor
/// that differs and both ranks (or errc::malformed_message naming the rank whose bytes are bad).
/// Transports call it before the first step, e.g. on rank 0 against every other rank's bytes.
SLUICE_DECL void layouts_must_match(std::span<std::byte const> a, int rank_a, std::span<std::byte const> b, int rank_b);

}  // namespace sluice

/// Prints "name [d0, d1] f32".
template <>
struct fmt::formatter<sluice::tensor_desc> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(sluice::tensor_desc const& t, Ctx& ctx) const {
    return fmt::format_to(ctx.out(), "{} [{}] {}", t.name, sluice::detail::decimal_list(t.shape),
                          sluice::to_string(t.element));
  }
};

#if SLUICE_HEADER_ONLY
#include <sluice/bucket/impl/layout.ipp>
#endif
