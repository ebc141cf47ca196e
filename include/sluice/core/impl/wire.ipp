// The bodies of sluice/core/wire.hpp: header-only, included at its end; with sluice::kernels, compiled there once.
#pragma once

#include <sluice/core/wire.hpp>

namespace sluice::wire {

SLUICE_DECL frame parse(std::span<std::byte const> bytes, expectation const& expect) {
  using detail::wire::load;
  std::size_t const n = bytes.size();
  require(n >= header_bytes, errc::malformed_message, "frame of {} bytes is shorter than the {}-byte header", n,
          header_bytes);
  std::byte const* b = bytes.data();
  auto const m = load<std::uint32_t>(b);
  require(m == magic, errc::malformed_message, "bad magic 0x{:08x} (expected 0x{:08x}, \"SLCE\")", m, magic);
  auto const v = load<std::uint16_t>(b + 4);
  require(v <= version, errc::malformed_message,
          "frame format version {} is newer than this reader's version {}; upgrade sluice on this rank", v, version);
  require(v >= 1, errc::malformed_message, "frame format version 0 is invalid");
  auto const hb = load<std::uint16_t>(b + 6);
  require(hb == header_bytes, errc::malformed_message, "header size {} != {}", hb, header_bytes);
  auto const et = load<std::uint8_t>(b + 10);
  require(et >= 1 && et <= 3, errc::malformed_message, "unknown element type {}", et);
  require(load<std::uint8_t>(b + 13) == 0 && load<std::uint16_t>(b + 14) == 0, errc::malformed_message,
          "reserved header bytes are not zero");
  auto const count = load<std::uint8_t>(b + 12);
  require(count <= max_sections, errc::malformed_message, "section count {} exceeds {}", count, max_sections);

  frame f;
  f.head.codec = static_cast<codec_id>(load<std::uint16_t>(b + 8));
  f.head.element = static_cast<element_type>(et);
  f.head.flags = load<std::uint8_t>(b + 11);
  f.head.tensor = load<std::uint64_t>(b + 16);
  f.head.step = load<std::uint64_t>(b + 24);
  f.head.extent = load<std::uint64_t>(b + 32);
  f.section_count = count;

  std::size_t pos = header_bytes;
  for (std::size_t i = 0; i < max_sections; ++i) {
    auto const len = load<std::uint64_t>(b + 40 + 8 * i);
    if (i >= count) {
      require(len == 0, errc::malformed_message, "unused section {} has length {}", i, len);
      continue;
    }
    // Compare against what is left before any addition, so huge lengths cannot wrap.
    std::size_t const left = n - pos;
    require(len <= left && padded(static_cast<std::size_t>(len)) <= left, errc::malformed_message,
            "section {} length {} exceeds the {} bytes left in a {}-byte frame", i, len, left, n);
    f.sections[i] = bytes.subspan(pos, static_cast<std::size_t>(len));
    for (std::size_t k = pos + static_cast<std::size_t>(len); k < pos + padded(static_cast<std::size_t>(len)); ++k)
      require(b[k] == std::byte{0}, errc::malformed_message, "non-zero padding after section {}", i);
    pos += padded(static_cast<std::size_t>(len));
  }
  require(pos == n, errc::malformed_message, "frame has {} trailing bytes after its sections", n - pos);
  auto const sum = load<std::uint64_t>(b + 72);
  require(sum == detail::wire::frame_checksum(bytes), errc::malformed_message, "checksum mismatch (corrupted frame)");
  f.size = n;

  if (expect.codec)
    require(f.head.codec == *expect.codec, errc::malformed_message, "codec id {} where {} was expected",
            static_cast<unsigned>(f.head.codec), static_cast<unsigned>(*expect.codec));
  if (expect.element)
    require(f.head.element == *expect.element, errc::malformed_message, "element type {} where {} was expected",
            to_string(f.head.element), to_string(*expect.element));
  if (expect.tensor)
    require(f.head.tensor == *expect.tensor, errc::malformed_message,
            "frame for tensor {} where tensor {} was expected", f.head.tensor, *expect.tensor);
  if (expect.step)
    require(f.head.step == *expect.step, errc::malformed_message, "frame for step {} where step {} was expected",
            f.head.step, *expect.step);
  if (expect.extent)
    require(f.head.extent == *expect.extent, errc::malformed_message, "frame extent {} where {} was expected",
            f.head.extent, *expect.extent);
  if (expect.sections)
    require(f.section_count == *expect.sections, errc::malformed_message,
            "frame has {} sections where {} were expected", f.section_count, *expect.sections);
  return f;
}

}  // namespace sluice::wire
