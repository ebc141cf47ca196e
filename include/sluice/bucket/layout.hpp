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
#include <sluice/core/element.hpp>
#include <sluice/core/error.hpp>

namespace sluice {

namespace detail::bucket {
/// A shape as "d0, d1, ..." (what fmt::join(shape, ", ") prints, without <fmt/ranges.h>).
inline std::string shape_text(std::vector<std::size_t> const& shape) {
  std::string s;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i != 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s;
}
}  // namespace detail::bucket

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
  layout& add(std::string name, std::vector<std::size_t> shape, element_type element = element_type::f32) {
    require(!name.empty(), errc::invalid_argument, "layout: tensor #{} has an empty name", tensors_.size());
    require(!index_.contains(name), errc::invalid_argument, "layout: tensor name '{}' appears twice (#{} and #{})",
            name, index_.contains(name) ? index_.at(name) : 0, tensors_.size());
    std::size_t n = 1;
    for (std::size_t d : shape) {
      require(d == 0 || n <= std::numeric_limits<std::size_t>::max() / d, errc::invalid_argument,
              "layout: tensor '{}' has a shape whose element count overflows", name);
      n *= d;
    }
    std::size_t const es = size_of(element);
    require(n <= std::numeric_limits<std::size_t>::max() / es &&
                n * es <= std::numeric_limits<std::size_t>::max() - total_bytes_,
            errc::invalid_argument, "layout: tensor '{}' of {} elements overflows the layout's byte count", name, n);
    index_.emplace(name, tensors_.size());
    total_bytes_ += n * es;
    tensors_.push_back({std::move(name), std::move(shape), element});
    return *this;
  }

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
  [[nodiscard]] std::size_t find(std::string_view name) const {
    auto it = index_.find(std::string(name));
    return it == index_.end() ? tensors_.size() : it->second;
  }
  /// Element counts of all tensors, in order (what feedback_state is sized by).
  [[nodiscard]] std::vector<std::size_t> extents() const {
    std::vector<std::size_t> e;
    e.reserve(tensors_.size());
    for (auto const& t : tensors_) e.push_back(t.elements());
    return e;
  }
  /// Names of all tensors, in order.
  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> n;
    n.reserve(tensors_.size());
    for (auto const& t : tensors_) n.push_back(t.name);
    return n;
  }
  /// Total elements over all tensors.
  [[nodiscard]] std::size_t total_elements() const noexcept {
    std::size_t n = 0;
    for (auto const& t : tensors_) n += t.elements();
    return n;
  }

  /// Canonical little-endian bytes: what ranks exchange to compare layouts (layouts_must_match).
  ///   u32 magic "SLLY", u16 version 1, u16 zero, u64 count, then per tensor:
  ///   u32 name bytes, u8 element type, u8 dims, u16 zero, dims x u64, name (UTF-8, no terminator).
  [[nodiscard]] std::vector<std::byte> serialize() const {
    std::vector<std::byte> out;
    detail::bucket::put<std::uint32_t>(out, serial_magic);
    detail::bucket::put<std::uint16_t>(out, 1);
    detail::bucket::put<std::uint16_t>(out, 0);
    detail::bucket::put<std::uint64_t>(out, tensors_.size());
    for (auto const& t : tensors_) {
      detail::bucket::put<std::uint32_t>(out, static_cast<std::uint32_t>(t.name.size()));
      detail::bucket::put<std::uint8_t>(out, static_cast<std::uint8_t>(t.element));
      detail::bucket::put<std::uint8_t>(out, static_cast<std::uint8_t>(t.shape.size()));
      detail::bucket::put<std::uint16_t>(out, 0);
      for (std::size_t d : t.shape) detail::bucket::put<std::uint64_t>(out, d);
      auto const* p = reinterpret_cast<std::byte const*>(t.name.data());
      out.insert(out.end(), p, p + t.name.size());
    }
    return out;
  }

  /// Parses serialize()'s bytes from an untrusted peer. errc::malformed_message (naming `who`)
  /// for anything out of place: bad magic or version, truncation, trailing bytes, bad element
  /// type, more than 255 dimensions, duplicate or empty names.
  static layout deserialize(std::span<std::byte const> bytes, std::string_view who = "peer") {
    detail::bucket::reader r(bytes);
    std::uint32_t magic = 0;
    std::uint16_t version = 0, zero = 0;
    std::uint64_t count = 0;
    require(r.get(magic) && r.get(version) && r.get(zero) && r.get(count), errc::malformed_message,
            "layout from {}: {} bytes is shorter than the 16-byte header", who, bytes.size());
    require(magic == serial_magic, errc::malformed_message, "layout from {}: bad magic 0x{:08x}", who, magic);
    require(version == 1, errc::malformed_message, "layout from {}: version {} is not supported (this reader: 1)", who,
            version);
    require(zero == 0, errc::malformed_message, "layout from {}: reserved header bytes are not zero", who);
    // Every tensor takes at least 8 bytes, so a count beyond that is a lie about the length.
    require(count <= r.left() / 8, errc::malformed_message, "layout from {}: {} tensors cannot fit in {} bytes", who,
            count, bytes.size());
    layout l;
    for (std::uint64_t i = 0; i < count; ++i) {
      std::uint32_t name_len = 0;
      std::uint8_t et = 0, dims = 0;
      std::uint16_t pad = 0;
      require(r.get(name_len) && r.get(et) && r.get(dims) && r.get(pad), errc::malformed_message,
              "layout from {}: truncated at tensor #{}", who, i);
      require(et >= 1 && et <= 3, errc::malformed_message, "layout from {}: tensor #{} has unknown element type {}",
              who, i, et);
      require(pad == 0, errc::malformed_message, "layout from {}: tensor #{} has non-zero reserved bytes", who, i);
      std::vector<std::size_t> shape(dims);
      for (auto& d : shape) {
        std::uint64_t v = 0;
        require(r.get(v), errc::malformed_message, "layout from {}: truncated shape of tensor #{}", who, i);
        d = static_cast<std::size_t>(v);
      }
      std::span<std::byte const> name_bytes;
      require(r.take(name_len, name_bytes), errc::malformed_message, "layout from {}: truncated name of tensor #{}",
              who, i);
      std::string name(reinterpret_cast<char const*>(name_bytes.data()), name_bytes.size());
      try {
        l.add(std::move(name), std::move(shape), static_cast<element_type>(et));
      } catch (error const& e) {
        throw_error(errc::malformed_message, "layout from {}: {}", who, e.what());
      }
    }
    require(r.left() == 0, errc::malformed_message, "layout from {}: {} trailing bytes", who, r.left());
    return l;
  }

  /// Stable 64-bit fingerprint of the canonical bytes: equal layouts give equal fingerprints on
  /// every rank, build and run. A cheap first check; layouts_must_match says what differs.
  [[nodiscard]] std::uint64_t fingerprint() const {
    auto const bytes = serialize();
    return detail::bucket::stable_hash(bytes);
  }

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
inline void layouts_must_match(std::span<std::byte const> a, int rank_a, std::span<std::byte const> b, int rank_b) {
  if (a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin())) return;
  layout const la = layout::deserialize(a, fmt::format("rank {}", rank_a));
  layout const lb = layout::deserialize(b, fmt::format("rank {}", rank_b));
  std::size_t const common = std::min(la.size(), lb.size());
  auto describe = [](tensor_desc const& t) {
    return fmt::format("'{}' shape [{}] {}", t.name, detail::bucket::shape_text(t.shape), to_string(t.element));
  };
  for (std::size_t i = 0; i < common; ++i) {
    if (la[i] == lb[i]) continue;
    throw_error(errc::size_mismatch, "layout mismatch at tensor #{}: rank {} has {}, rank {} has {}", i, rank_a,
                describe(la[i]), rank_b, describe(lb[i]));
  }
  if (la.size() != lb.size()) {
    bool const a_longer = la.size() > lb.size();
    tensor_desc const& extra = a_longer ? la[common] : lb[common];
    throw_error(errc::size_mismatch,
                "layout mismatch at tensor #{}: rank {} has {} tensors, rank {} has {}; first extra is {} on rank {}",
                common, rank_a, la.size(), rank_b, lb.size(), describe(extra), a_longer ? rank_a : rank_b);
  }
}

}  // namespace sluice

/// Prints "name [d0, d1] f32".
template <>
struct fmt::formatter<sluice::tensor_desc> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(sluice::tensor_desc const& t, Ctx& ctx) const {
    return fmt::format_to(ctx.out(), "{} [{}] {}", t.name, sluice::detail::bucket::shape_text(t.shape),
                          sluice::to_string(t.element));
  }
};
