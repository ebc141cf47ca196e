// The sluice wire frame: a fixed 80-byte little-endian header followed by up to four sections,
// each padded to 8 bytes, all covered by a 64-bit checksum. The reader validates every field
// before handing out a byte, so a decoder never sees a length it has to distrust.
//
//   off size field
//     0   4  magic "SLCE"
//     4   2  format version (wire::version)
//     6   2  header bytes (80)
//     8   2  codec id (wire::codec_id)
//    10   1  element type (sluice::element_type)
//    11   1  flags (codec-defined)
//    12   1  section count (0..4)
//    13   3  reserved, zero
//    16   8  tensor or bucket id
//    24   8  step
//    32   8  extent (dense elements)
//    40  32  section lengths, 4 x u64 (unused ones zero)
//    72   8  checksum of bytes [0, 72) and the whole payload (large payloads: of per-block
//            digests computed in parallel, see detail::wire::frame_checksum)
//    80      sections, each followed by zero padding to a multiple of 8
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>

#include <sluice/config.hpp>
#include <sluice/core/element.hpp>
#include <sluice/core/error.hpp>
#include <sluice/core/parallel.hpp>

namespace sluice::wire {

inline constexpr std::uint32_t magic = 0x45434C53u;  // "SLCE" read as little-endian u32
inline constexpr std::uint16_t version = 1;          ///< the newest format this build writes and reads
inline constexpr std::size_t header_bytes = 80;
inline constexpr std::size_t max_sections = 4;
inline constexpr std::size_t section_alignment = 8;

/// Who produced a message. Values are stable across versions.
enum class codec_id : std::uint16_t {
  none = 0,  ///< control and test messages
  identity = 1,
  cast = 2,
  top_k = 3,
  threshold_top_k = 4,
  block_top_k = 5,
  random_k = 6,
  sign = 7,
  qsgd = 8,
  maxmin_quantize = 9,
  power_sgd = 10,
  dense = 32,   ///< raw dense values (collectives)
  sparse = 33,  ///< indices + values (collectives)
};

/// The decoded header. `sections` are lengths in bytes without padding.
struct header {
  codec_id codec = codec_id::none;
  element_type element = element_type::f32;
  std::uint8_t flags = 0;
  std::uint64_t tensor = 0;
  std::uint64_t step = 0;
  std::uint64_t extent = 0;
  friend constexpr bool operator==(header const&, header const&) = default;
};

/// Bytes a section of `n` bytes occupies including padding.
constexpr std::size_t padded(std::size_t n) noexcept { return (n + section_alignment - 1) & ~(section_alignment - 1); }

/// Exact frame size for the given section lengths.
constexpr std::size_t frame_bytes(std::span<std::size_t const> section_lengths) noexcept {
  std::size_t total = header_bytes;
  for (std::size_t n : section_lengths) total += padded(n);
  return total;
}
constexpr std::size_t frame_bytes(std::initializer_list<std::size_t> section_lengths) noexcept {
  return frame_bytes(std::span<std::size_t const>(section_lengths.begin(), section_lengths.size()));
}

}  // namespace sluice::wire

namespace sluice::detail::wire {

template <class U>
inline U load(std::byte const* p) noexcept {
  U v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class U>
inline void store(std::byte* p, U v) noexcept {
  std::memcpy(p, &v, sizeof v);
}

// Four-lane multiply-rotate checksum over 64-bit words (the structure of xxHash64's main loop).
// Detects any single corrupted byte and almost every multi-byte corruption; not a MAC: use
// CurveZMQ (transport/zmq) when peers may be hostile rather than merely faulty.
inline constexpr std::uint64_t p1 = 0x9E3779B185EBCA87ull, p2 = 0xC2B2AE3D27D4EB4Full, p3 = 0x165667B19E3779F9ull;

inline std::uint64_t round(std::uint64_t acc, std::uint64_t w) noexcept {
  acc += w * p2;
  acc = std::rotl(acc, 31);
  return acc * p1;
}

struct checksum_state {
  std::array<std::uint64_t, 4> acc{p1 + p2, p2, 0, 0 - p1};
  std::uint64_t length = 0;

  void update(std::span<std::byte const> bytes) noexcept {
    // Callers feed whole 8-byte multiples except possibly the last chunk.
    std::byte const* p = bytes.data();
    std::size_t n = bytes.size();
    length += n;
    while (n >= 32) {
      for (int l = 0; l < 4; ++l)
        acc[static_cast<std::size_t>(l)] = round(acc[static_cast<std::size_t>(l)], load<std::uint64_t>(p + 8 * l));
      p += 32;
      n -= 32;
    }
    std::size_t lane = 0;
    while (n >= 8) {
      acc[lane] = round(acc[lane], load<std::uint64_t>(p));
      lane = (lane + 1) & 3;
      p += 8;
      n -= 8;
    }
    if (n > 0) {
      std::uint64_t tail = 0;
      std::memcpy(&tail, p, n);
      acc[lane] = round(acc[lane], tail ^ (static_cast<std::uint64_t>(n) << 56));
    }
  }

  [[nodiscard]] std::uint64_t finish() const noexcept {
    std::uint64_t h = std::rotl(acc[0], 1) + std::rotl(acc[1], 7) + std::rotl(acc[2], 12) + std::rotl(acc[3], 18);
    h ^= length * p3;
    h ^= h >> 33;
    h *= p2;
    h ^= h >> 29;
    h *= p3;
    h ^= h >> 32;
    return h;
  }
};

// Payloads up to 2 * checksum_block are hashed in one sequential pass. Larger ones are cut into at
// most 256 blocks of at least checksum_block bytes (a size fixed by the payload length alone),
// each block is hashed on its own (in parallel) with its index mixed into the seed, and the block
// digests are hashed after the header, so both ends compute the same value whatever the thread
// count, and a swap of two blocks changes it.
inline constexpr std::size_t checksum_block = std::size_t{256} << 10;
inline constexpr std::size_t checksum_max_blocks = 256;

/// The block digests of a payload, some of which may have been computed ahead (block_digests).
struct block_digest_table {
  std::size_t payload = 0;  ///< payload bytes
  std::size_t block = 0;    ///< bytes per block
  std::size_t blocks = 0;   ///< 0: the payload is hashed in one pass
  std::array<std::uint64_t, checksum_max_blocks> digest{};
  std::array<std::uint8_t, checksum_max_blocks> known{};  ///< digest[b] already holds block b's digest

  /// The block layout for a payload of `payload` bytes (a function of the length alone).
  explicit block_digest_table(std::size_t bytes) noexcept : payload(bytes) {
    if (payload <= 2 * checksum_block) return;
    block = (payload + checksum_max_blocks - 1) / checksum_max_blocks;
    block = std::max(checksum_block, (block + 63) / 64 * 64);
    blocks = (payload + block - 1) / block;
  }
};

/// The state that hashes block b: seeded with its index so that swapped blocks differ.
inline checksum_state block_state(std::size_t b) noexcept {
  checksum_state d;
  d.acc[0] ^= static_cast<std::uint64_t>(b) * p3;
  return d;
}

/// Checksum of a whole frame; digests that `pre` (laid out for this payload) marks known are
/// taken from it, the rest are computed (in parallel).
SLUICE_DECL std::uint64_t frame_checksum(std::span<std::byte const> frame,
                                         block_digest_table const* pre = nullptr) noexcept;

}  // namespace sluice::detail::wire

namespace sluice::wire {

/// Checksum block digests computed while a frame's payload is written, by the thread that writes
/// the bytes, while they are still in cache (frame_checksum then hashes only the other blocks).
/// Usage: block_digests d(payload_bytes); per thread, a block_digests::hasher over the payload
/// bytes [lo, hi) it writes in order, told with done(p) each time bytes [lo, p) are final;
/// writer::finish(&d). The result equals the checksum computed from scratch whatever the threads.
class block_digests {
 public:
  /// Layout for a payload of `payload_bytes` bytes (section lengths padded, as in frame_bytes).
  explicit block_digests(std::size_t payload_bytes) noexcept : table_(payload_bytes) {}

  /// Blocks hashed so far (0 for payloads hashed in one pass).
  [[nodiscard]] std::size_t hashed() const noexcept {
    return static_cast<std::size_t>(std::count(table_.known.begin(), table_.known.end(), std::uint8_t{1}));
  }

  /// Hashes the blocks lying wholly inside payload bytes [lo, hi) as their bytes become final.
  class hasher {
   public:
    hasher(block_digests& d, std::byte const* payload, std::size_t lo, std::size_t hi) noexcept
        : t_(d.table_), payload_(payload), hi_(hi) {
      if (t_.blocks == 0) {
        k_ = 0, end_ = 0, fed_ = 0;
        return;
      }
      k_ = (lo + t_.block - 1) / t_.block;
      start();
    }

    /// Payload bytes before `p` are final (p non-decreasing): hashes what it can of them.
    void done(std::size_t p) noexcept {
      if (t_.blocks == 0) return;
      while (k_ < t_.blocks && end_ <= hi_ && p > fed_) {
        std::size_t upto = std::min(p, end_);
        // Whole 32-byte groups only until the block's end, so pieces hash as the block would.
        if (upto < end_) upto = fed_ + (upto - fed_) / 32 * 32;
        if (upto > fed_) d_.update(std::span<std::byte const>(payload_ + fed_, upto - fed_));
        fed_ = upto;
        if (fed_ < end_) return;
        t_.digest[k_] = d_.finish();
        t_.known[k_] = 1;
        ++k_;
        start();
      }
    }

   private:
    void start() noexcept {
      fed_ = k_ * t_.block;
      end_ = k_ < t_.blocks ? std::min(fed_ + t_.block, t_.payload) : fed_;
      d_ = detail::wire::block_state(k_);
    }

    detail::wire::block_digest_table& t_;
    std::byte const* payload_;
    std::size_t hi_;
    std::size_t k_ = 0, fed_ = 0, end_ = 0;
    detail::wire::checksum_state d_;
  };

 private:
  friend class writer;
  detail::wire::block_digest_table table_;
};

/// Builds one frame in a caller-owned buffer: header first (written by finish()), then sections in
/// order. Usage: `writer w(out, h); auto s = w.next(); ...fill s...; w.commit(n); w.finish();`
/// Never writes outside `out`; too small a buffer is errc::size_mismatch.
class writer {
 public:
  writer(std::span<std::byte> out, header const& h) : out_(out), header_(h), pos_(header_bytes) {
    require(out.size() >= header_bytes, errc::size_mismatch,
            "wire::writer: buffer of {} bytes is smaller than the {}-byte header", out.size(), header_bytes);
  }

  /// The free space where the next section goes.
  [[nodiscard]] std::span<std::byte> next() const noexcept { return out_.subspan(pos_); }

  /// Closes the next section at `n` bytes and pads it with zeros.
  void commit(std::size_t n) {
    require(count_ < max_sections, errc::invalid_argument, "wire::writer: more than {} sections", max_sections);
    require(n <= out_.size() - pos_ && padded(n) <= out_.size() - pos_, errc::size_mismatch,
            "wire::writer: section {} of {} bytes (padded {}) overflows the buffer ({} bytes left)", count_, n,
            padded(n), out_.size() - pos_);
    std::memset(out_.data() + pos_ + n, 0, padded(n) - n);
    lengths_[count_++] = n;
    pos_ += padded(n);
  }

  /// Copies `bytes` as the next section.
  void write(std::span<std::byte const> bytes) {
    require(bytes.size() <= out_.size() - pos_, errc::size_mismatch,
            "wire::writer: section of {} bytes overflows the buffer", bytes.size());
    if (!bytes.empty()) std::memcpy(out_.data() + pos_, bytes.data(), bytes.size());
    commit(bytes.size());
  }

  /// Writes the header and checksum; returns the frame size in bytes. `digests`: block digests
  /// computed while the payload was written (ignored unless laid out for this payload's size).
  std::size_t finish(block_digests const* digests = nullptr) noexcept {
    std::byte* o = out_.data();
    detail::wire::store<std::uint32_t>(o + 0, magic);
    detail::wire::store<std::uint16_t>(o + 4, version);
    detail::wire::store<std::uint16_t>(o + 6, static_cast<std::uint16_t>(header_bytes));
    detail::wire::store<std::uint16_t>(o + 8, static_cast<std::uint16_t>(header_.codec));
    detail::wire::store<std::uint8_t>(o + 10, static_cast<std::uint8_t>(header_.element));
    detail::wire::store<std::uint8_t>(o + 11, header_.flags);
    detail::wire::store<std::uint8_t>(o + 12, static_cast<std::uint8_t>(count_));
    std::memset(o + 13, 0, 3);
    detail::wire::store<std::uint64_t>(o + 16, header_.tensor);
    detail::wire::store<std::uint64_t>(o + 24, header_.step);
    detail::wire::store<std::uint64_t>(o + 32, header_.extent);
    for (std::size_t i = 0; i < max_sections; ++i)
      detail::wire::store<std::uint64_t>(o + 40 + 8 * i, i < count_ ? lengths_[i] : 0);
    detail::wire::store<std::uint64_t>(
        o + 72, detail::wire::frame_checksum(out_.first(pos_), digests ? &digests->table_ : nullptr));
    return pos_;
  }

  /// Bytes used so far, header included.
  [[nodiscard]] std::size_t size() const noexcept { return pos_; }

 private:
  std::span<std::byte> out_;
  header header_;
  std::size_t pos_;
  std::array<std::size_t, max_sections> lengths_{};
  std::size_t count_ = 0;
};

/// What a receiver expects of a frame; unset fields are not checked.
struct expectation {
  std::optional<codec_id> codec{};
  std::optional<element_type> element{};
  std::optional<std::uint64_t> tensor{};
  std::optional<std::uint64_t> step{};
  std::optional<std::uint64_t> extent{};
  std::optional<std::size_t> sections{};  ///< exact section count
};

/// A validated frame: its header and its sections (views into the caller's bytes).
struct frame {
  header head;
  std::array<std::span<std::byte const>, max_sections> sections{};
  std::size_t section_count = 0;
  std::size_t size = 0;  ///< frame bytes

  /// Section i; errc::malformed_message if the frame has fewer sections.
  [[nodiscard]] std::span<std::byte const> section(std::size_t i) const {
    require(i < section_count, errc::malformed_message, "frame has {} sections, section {} was asked for",
            section_count, i);
    return sections[i];
  }
};

/// Validates `bytes` as exactly one frame and returns views of its sections. Checks, in order:
/// length >= header, magic, version (a newer one is refused by name), header size, element type,
/// reserved bytes, section count, each section length against the bytes present (no overflow),
/// total length, zero padding, checksum, then `expect`. Throws errc::malformed_message saying what
/// was wrong; never reads outside `bytes`.
SLUICE_DECL frame parse(std::span<std::byte const> bytes, expectation const& expect = {});

/// Reinterprets a section as `count` values of trivially copyable U, copying into `out`
/// (sections are 8-byte aligned within the frame but the frame itself may not be).
/// errc::malformed_message if the section's length is not exactly count * sizeof(U).
template <class U>
void read_array(std::span<std::byte const> section, std::span<U> out, std::string_view what) {
  require(section.size() == out.size() * sizeof(U), errc::malformed_message, "{} section has {} bytes, expected {}",
          what, section.size(), out.size() * sizeof(U));
  if (!out.empty()) std::memcpy(out.data(), section.data(), section.size());
}

/// Copies `values` into the writer's next section.
template <class U>
void write_array(writer& w, std::span<U const> values) {
  w.write(std::as_bytes(values));
}

}  // namespace sluice::wire

#if SLUICE_HEADER_ONLY
#include <sluice/core/impl/wire.ipp>
#include <sluice/core/impl/wire_checksum.ipp>
#endif
