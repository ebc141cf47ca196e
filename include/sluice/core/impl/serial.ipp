// The bodies of sluice/core/serial.hpp: header-only, included at its end; with sluice::kernels, compiled there once.
#pragma once

#include <sluice/core/serial.hpp>

namespace sluice::serial {

SLUICE_DECL reader open_record(std::span<std::byte const> bytes, std::uint32_t magic, std::uint16_t version,
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
