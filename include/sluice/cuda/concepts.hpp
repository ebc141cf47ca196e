// Host/device boundary vocabulary for the CUDA backend: device code returns a device_status
// (it cannot throw); the host turns a failed status into a sluice::error exactly once, here.
// This header is plain C++ so the status logic is testable without a GPU.
#pragma once

#include <cstdint>
#include <string_view>

#include <sluice/core/error.hpp>

namespace sluice::cuda {

/// Status a device kernel writes for the host to check. Values are stable.
enum class device_status : std::uint32_t {
  ok = 0,
  malformed_message = 1,  ///< a frame failed validation on the device
  size_mismatch = 2,      ///< a buffer was too small
  non_finite = 3,         ///< NaN/Inf under a policy that forbids it
  launch_failed = 4,      ///< the runtime reported an error (message carries the runtime's text)
  no_device = 5,          ///< no CUDA device is visible (or the driver is missing)
};

/// The errc a device status maps to at the host boundary.
constexpr errc to_errc(device_status s) noexcept {
  switch (s) {
    case device_status::malformed_message:
      return errc::malformed_message;
    case device_status::size_mismatch:
      return errc::size_mismatch;
    case device_status::non_finite:
      return errc::non_finite;
    case device_status::ok:
    case device_status::launch_failed:
    case device_status::no_device:
      break;
  }
  return errc::unsupported;
}

/// Throws sluice::error for a failed status, naming `what` (kernel and tensor); no-op for ok.
inline void check(device_status s, std::string_view what) {
  if (s == device_status::ok) return;
  throw_error(to_errc(s), "{}: device status {}", what, static_cast<std::uint32_t>(s));
}

}  // namespace sluice::cuda
