// Byte-level serialization shared by every checkpoint and layout exchange: a hash that is the
// same on every rank, compiler and run (never std::hash), little-endian field writers, a
// bounds-checked reader for untrusted bytes, and the one persistence format every save() uses
// (a versioned record sealed by a checksum, opened with the same checks and errc everywhere).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <string_view>

#include <sluice/core/element.hpp>  // asserts a little-endian host
#include <sluice/core/error.hpp>

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
inline reader open_record(std::span<std::byte const> bytes, std::uint32_t magic, std::uint16_t version,
                          std::string_view what) {
  require(bytes.size() >= record_overhead, errc::malformed_message, "{}: {} bytes is too short for a saved state", what,
          bytes.size());
  std::uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + bytes.size() - record_trailer_bytes, sizeof stored);
  auto const body = bytes.first(bytes.size() - record_trailer_bytes);
  require(stored == stable_hash(body), errc::malformed_message, "{}: checksum mismatch (damaged or truncated bytes)",
          what);
  reader r(body);
  std::uint32_t m = 0;
  std::uint16_t v = 0;
  (void)r.get(m);
  (void)r.get(v);
  require(m == magic, errc::malformed_message, "{}: bad magic 0x{:08x} (expected 0x{:08x}); not this kind of state",
          what, m, magic);
  require(v == version, errc::malformed_message, "{}: format version {} is not supported (this reader: {})", what, v,
          version);
  return r;
}

}  // namespace sluice::serial
