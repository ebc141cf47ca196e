// CUDA runtime vocabulary of the backend: runtime errors as device_status and sluice::error, the
// device check, and owning device / pinned host buffers, streams and events (RAII).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>

#include <cuda_runtime.h>

#include <sluice/core/error.hpp>
#include <sluice/cuda/status.hpp>

namespace sluice::cuda {

/// The device_status of a runtime result: ok, no_device (no device or no usable driver), or
/// launch_failed; a failure's name and text are kept for check(device_status, what).
inline device_status status_of(cudaError_t e) noexcept {
  if (e == cudaSuccess) return device_status::ok;
  // The runtime's strings are static: check(device_status, what) prints them later.
  detail::cuda::runtime_error_name = cudaGetErrorName(e);
  detail::cuda::runtime_error_text = cudaGetErrorString(e);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorInitializationError)
    return device_status::no_device;
  return device_status::launch_failed;
}

/// Number of visible CUDA devices (0 without a driver or device).
inline int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error of a failed query
    return 0;
  }
  return n;
}

/// Throws errc::unsupported when no CUDA device is visible, naming `what` needed it.
inline void require_device(std::string_view what) {
  require(device_count() > 0, errc::unsupported,
          "{}: no CUDA device is visible (driver missing, CUDA_VISIBLE_DEVICES empty, or no GPU); run the CPU "
          "codecs instead",
          what);
}

/// Throws sluice::error for a failed runtime call: errc::unsupported, with the runtime's text.
inline void check(cudaError_t e, std::string_view what) {
  if (e == cudaSuccess) return;
  throw_error(errc::unsupported, "{}: CUDA error {} ({})", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

}  // namespace sluice::cuda

namespace sluice::detail::cuda {

/// An owning array of T in memory that `Memory` allocates (`allocate(void**, bytes)`) and frees
/// (`release(void*)`), uninitialized: device_buffer and pinned_buffer are its two instances.
template <class T, class Memory>
class owning_buffer {
 public:
  owning_buffer() = default;
  explicit owning_buffer(std::size_t n) : n_(n) {
    if (n > 0) sluice::cuda::check(Memory::allocate(reinterpret_cast<void**>(&p_), n * sizeof(T)), Memory::name);
  }
  owning_buffer(owning_buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  owning_buffer& operator=(owning_buffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  ~owning_buffer() {
    if (p_ != nullptr) (void)Memory::release(p_);
  }
  [[nodiscard]] T* data() const noexcept { return p_; }
  [[nodiscard]] std::size_t size() const noexcept { return n_; }
  [[nodiscard]] std::span<T> span() const noexcept { return {p_, n_}; }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

struct device_memory {
  static constexpr char const* name = "cuda::device_buffer";
  static cudaError_t allocate(void** p, std::size_t bytes) { return cudaMalloc(p, bytes); }
  static cudaError_t release(void* p) { return cudaFree(p); }
};
struct pinned_memory {
  static constexpr char const* name = "cuda::pinned_buffer";
  static cudaError_t allocate(void** p, std::size_t bytes) { return cudaMallocHost(p, bytes); }
  static cudaError_t release(void* p) { return cudaFreeHost(p); }
};

}  // namespace sluice::detail::cuda

namespace sluice::cuda {

/// An owning array of T in device memory (cudaMalloc), uninitialized.
template <class T>
using device_buffer = detail::cuda::owning_buffer<T, detail::cuda::device_memory>;

/// An owning array of T in pinned (page-locked) host memory (cudaMallocHost): the staging buffer
/// of asynchronous device-to-host copies.
template <class T>
using pinned_buffer = detail::cuda::owning_buffer<T, detail::cuda::pinned_memory>;

/// An owning non-blocking CUDA stream.
class stream {
 public:
  stream() { check(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cuda::stream"); }
  stream(stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  stream& operator=(stream&&) = delete;
  ~stream() {
    if (s_ != nullptr) (void)cudaStreamDestroy(s_);
  }
  [[nodiscard]] cudaStream_t get() const noexcept { return s_; }
  /// Waits for all work queued so far; throws on a failed kernel or copy.
  void synchronize() const { check(cudaStreamSynchronize(s_), "cuda::stream::synchronize"); }

 private:
  cudaStream_t s_ = nullptr;
};

/// An owning CUDA event (timing enabled unless asked otherwise).
class event {
 public:
  explicit event(bool timing = true) {
    check(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming), "cuda::event");
  }
  event(event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  event& operator=(event&&) = delete;
  ~event() {
    if (e_ != nullptr) (void)cudaEventDestroy(e_);
  }
  [[nodiscard]] cudaEvent_t get() const noexcept { return e_; }
  void record(cudaStream_t s) const { check(cudaEventRecord(e_, s), "cuda::event::record"); }
  void synchronize() const { check(cudaEventSynchronize(e_), "cuda::event::synchronize"); }
  /// Milliseconds from `start` to this event (both recorded and complete).
  [[nodiscard]] float since(event const& start) const {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start.e_, e_), "cuda::event::since");
    return ms;
  }

 private:
  cudaEvent_t e_ = nullptr;
};

}  // namespace sluice::cuda
