// Byte-level serialization shared by every checkpoint and layout exchange: a hash that is the
// same on every rank, compiler and run (never std::hash), little-endian field writers, a
// bounds-checked reader for untrusted bytes, and the one persistence format every save() uses
// (a versioned record sealed by a checksum, opened with the same checks and errc everywhere).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include <sluice/config.hpp>
#include <sluice/core/element.hpp>  // asserts a little-endian host
#include <sluice/core/error.hpp>

namespace sluice::serial {

/// FNV-1a finished with the splitmix64 mixer, streaming (stable_hash below is one call of it), that hashes values by
/// their fields: a policy's identity in attach checks and checkpoints. Integers hash as 64 bits whatever their width,
/// floating point as the bits of a double, enums as their underlying value, strings as length and characters, durations
/// as nanoseconds; any other type through an ADL-found `hash_append(hasher&, T const&)`, which a policy declares beside
/// its fields, so that the printed form of a policy can change without changing its identity.
class hasher {
 public:
  template <class... Ts>
  hasher& operator()(Ts const&... xs) {
    (add(xs), ...);
    return *this;
  }
  /// The hash of everything added so far.
  [[nodiscard]] std::uint64_t value() const noexcept {
    std::uint64_t h = h_;
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 31;
    return h;
  }
  void bytes(std::span<std::byte const> b) noexcept {
    for (std::byte x : b) {
      h_ ^= static_cast<std::uint64_t>(x);
      h_ *= 0x100000001b3ull;
    }
  }

 private:
  void word(std::uint64_t v) noexcept { bytes(std::as_bytes(std::span<std::uint64_t const>(&v, 1))); }
  template <class T>
  void add(T const& x) {
    if constexpr (std::is_same_v<T, bool>) {
      word(x ? 1u : 0u);
    } else if constexpr (std::is_enum_v<T>) {
      add(static_cast<std::underlying_type_t<T>>(x));
    } else if constexpr (std::is_integral_v<T>) {
      word(static_cast<std::uint64_t>(x));
    } else if constexpr (std::is_floating_point_v<T>) {
      double const d = static_cast<double>(x);
      std::uint64_t bits = 0;
      std::memcpy(&bits, &d, sizeof d);
      word(bits);
    } else if constexpr (std::is_convertible_v<T const&, std::string_view>) {
      std::string_view const s(x);
      word(s.size());
      bytes(std::as_bytes(std::span<char const>(s.data(), s.size())));
    } else if constexpr (requires { std::chrono::duration_cast<std::chrono::nanoseconds>(x); }) {
      word(static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(x).count()));
    } else {
      hash_append(*this, x);
    }
  }
  std::uint64_t h_ = 0xcbf29ce484222325ull;
};

/// FNV-1a over bytes, finished with the splitmix64 mixer so that nearby inputs spread.
inline std::uint64_t stable_hash(std::span<std::byte const> bytes) noexcept {
  hasher h;
  h.bytes(bytes);
  return h.value();
}

/// A type whose identity serial::hasher can take: arithmetic, enum, string, duration, or a type
/// with an ADL-found hash_append(hasher&, T const&).
template <class T>
concept Hashable = std::is_arithmetic_v<T> || std::is_enum_v<T> || std::is_convertible_v<T const&, std::string_view> ||
    requires(hasher& h, T const& x) {
  hash_append(h, x);
};

/// The hasher's value of `xs...` in order.
template <class... Ts>
[[nodiscard]] std::uint64_t hash_of(Ts const&... xs) {
  hasher h;
  h(xs...);
  return h.value();
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

/// The persistence format of every saved state (feedback_state, optimizer_state, the PowerSGD
/// warm start): u32 magic, u16 version, then the record's own fields, then the u64 stable_hash of
/// every byte before it. start_record() writes the head, seal() the checksum.
inline constexpr std::size_t record_head_bytes = 6;     ///< magic + version
inline constexpr std::size_t record_trailer_bytes = 8;  ///< the checksum
inline constexpr std::size_t record_overhead = record_head_bytes + record_trailer_bytes;

/// Appends a record head (magic, version) to `out`.
inline void start_record(std::vector<std::byte>& out, std::uint32_t magic, std::uint16_t version) {
  put<std::uint32_t>(out, magic);
  put<std::uint16_t>(out, version);
}

/// Appends the checksum of everything in `out` (call once, last).
inline void seal(std::vector<std::byte>& out) { put<std::uint64_t>(out, stable_hash(out)); }

/// Checks a record saved by start_record() ... seal() and returns a reader over its fields (after
/// the head, before the checksum). errc::malformed_message, prefixed with `what`, for a record too
/// short, a checksum mismatch (damaged or truncated), another magic or another version; the
/// checksum is checked first, so damaged bytes give the same error whatever field they hit.
SLUICE_DECL reader open_record(std::span<std::byte const> bytes, std::uint32_t magic, std::uint16_t version,
                               std::string_view what);

}  // namespace sluice::serial

#if SLUICE_HEADER_ONLY
#include <sluice/core/impl/serial.ipp>
#endif
