// The status of the CUDA backend at the host/device boundary: a launcher returns a device_status
// (device code cannot throw); the host turns a failed status into a sluice::error exactly once,
// here, with the CUDA runtime's text of the failure when the runtime reported one. Plain C++, so
// the status logic is testable without a GPU.
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

/// The status's name, as written in the enum.
constexpr std::string_view to_string(device_status s) noexcept {
  switch (s) {
    case device_status::ok:
      return "ok";
    case device_status::malformed_message:
      return "malformed_message";
    case device_status::size_mismatch:
      return "size_mismatch";
    case device_status::non_finite:
      return "non_finite";
    case device_status::launch_failed:
      return "launch_failed";
    case device_status::no_device:
      return "no_device";
  }
  return "unknown";
}

}  // namespace sluice::cuda

namespace sluice::detail::cuda {
/// The CUDA runtime's name and text of the last failure status_of (runtime.cuh) turned into
/// launch_failed or no_device on this thread; empty before any.
inline thread_local std::string_view runtime_error_name{}, runtime_error_text{};
}  // namespace sluice::detail::cuda

namespace sluice::cuda {

/// Throws sluice::error for a failed status, naming `what` (kernel and tensor) and the status,
/// and for launch_failed and no_device the runtime's error name and text; no-op for ok.
inline void check(device_status s, std::string_view what) {
  if (s == device_status::ok) return;
  bool const runtime =
      (s == device_status::launch_failed || s == device_status::no_device) && !detail::cuda::runtime_error_name.empty();
  throw_error(to_errc(s), "{}: device status {}{}{}{}{}{}", what, to_string(s), runtime ? " (CUDA error " : "",
              runtime ? detail::cuda::runtime_error_name : "", runtime ? ": " : "",
              runtime ? detail::cuda::runtime_error_text : "", runtime ? ")" : "");
}

}  // namespace sluice::cuda
