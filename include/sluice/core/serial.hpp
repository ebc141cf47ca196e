// Byte-level serialization shared by every checkpoint and layout exchange: a hash that is the
// same on every rank, compiler and run (never std::hash), little-endian field writers, and a
// bounds-checked reader for untrusted bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <sluice/core/element.hpp>  // asserts a little-endian host

namespace sluice::serial {

/// FNV-1a over bytes, finished with the splitmix64 mixer so that nearby inputs spread.
inline std::uint64_t stable_hash(std::span<std::byte const> bytes) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::byte b : bytes) {
    h ^= static_cast<std::uint64_t>(b);
    h *= 0x100000001b3ull;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

/// Appends the little-endian bytes of a trivially copyable value.
template <class U>
void put(std::vector<std::byte>& out, U v) {
  std::size_t const at = out.size();
  out.resize(at + sizeof v);
  std::memcpy(out.data() + at, &v, sizeof v);
}

/// Appends raw bytes.
inline void append(std::vector<std::byte>& out, std::span<std::byte const> bytes) {
  out.insert(out.end(), bytes.begin(), bytes.end());
}

/// Bounds-checked reader over untrusted bytes: every call returns false instead of reading past
/// the end, so callers validate a whole record before changing any state.
class reader {
 public:
  explicit reader(std::span<std::byte const> bytes) noexcept : bytes_(bytes) {}
  template <class U>
  bool get(U& v) noexcept {
    if (bytes_.size() - pos_ < sizeof v) return false;
    std::memcpy(&v, bytes_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return true;
  }
  bool skip(std::size_t n) noexcept {
    if (bytes_.size() - pos_ < n) return false;
    pos_ += n;
    return true;
  }
  bool take(std::size_t n, std::span<std::byte const>& out) noexcept {
    if (bytes_.size() - pos_ < n) return false;
    out = bytes_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  [[nodiscard]] std::size_t left() const noexcept { return bytes_.size() - pos_; }

 private:
  std::span<std::byte const> bytes_;
  std::size_t pos_ = 0;
};

}  // namespace sluice::serial
