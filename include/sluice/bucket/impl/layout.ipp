// The bodies of bucket/layout.hpp: header-only, included at its end; with sluice::kernels,
// compiled there once.
#pragma once

#include <algorithm>
#include <limits>

#include <fmt/core.h>

#include <sluice/bucket/layout.hpp>
#include <sluice/core/detail/decimal_list.hpp>

namespace sluice {

SLUICE_DECL layout& layout::add(std::string name, std::vector<std::size_t> shape, element_type element) {
  require(!name.empty(), errc::invalid_argument, "layout: tensor #{} has an empty name", tensors_.size());
  require(!index_.contains(name), errc::invalid_argument, "layout: tensor name '{}' appears twice (#{} and #{})", name,
          index_.contains(name) ? index_.at(name) : 0, tensors_.size());
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

SLUICE_DECL std::size_t layout::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? tensors_.size() : it->second;
}

SLUICE_DECL std::vector<std::size_t> layout::extents() const {
  std::vector<std::size_t> e;
  e.reserve(tensors_.size());
  for (auto const& t : tensors_) e.push_back(t.elements());
  return e;
}

SLUICE_DECL std::vector<std::string> layout::names() const {
  std::vector<std::string> n;
  n.reserve(tensors_.size());
  for (auto const& t : tensors_) n.push_back(t.name);
  return n;
}

SLUICE_DECL std::vector<std::byte> layout::serialize() const {
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

SLUICE_DECL layout layout::deserialize(std::span<std::byte const> bytes, std::string_view who) {
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
    require(et >= 1 && et <= 3, errc::malformed_message, "layout from {}: tensor #{} has unknown element type {}", who,
            i, et);
    require(pad == 0, errc::malformed_message, "layout from {}: tensor #{} has non-zero reserved bytes", who, i);
    std::vector<std::size_t> shape(dims);
    for (auto& d : shape) {
      std::uint64_t v = 0;
      require(r.get(v), errc::malformed_message, "layout from {}: truncated shape of tensor #{}", who, i);
      d = static_cast<std::size_t>(v);
    }
    std::span<std::byte const> name_bytes;
    require(r.take(name_len, name_bytes), errc::malformed_message, "layout from {}: truncated name of tensor #{}", who,
            i);
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

SLUICE_DECL std::uint64_t layout::fingerprint() const {
  auto const bytes = serialize();
  return detail::bucket::stable_hash(bytes);
}

SLUICE_DECL void layouts_must_match(std::span<std::byte const> a, int rank_a, std::span<std::byte const> b,
                                    int rank_b) {
  if (a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin())) return;
  layout const la = layout::deserialize(a, fmt::format("rank {}", rank_a));
  layout const lb = layout::deserialize(b, fmt::format("rank {}", rank_b));
  std::size_t const common = std::min(la.size(), lb.size());
  auto describe = [](tensor_desc const& t) {
    return fmt::format("'{}' shape [{}] {}", t.name, detail::decimal_list(t.shape), to_string(t.element));
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
