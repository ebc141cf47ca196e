// Host transfer path (StellaTrain mode: dense gradients go to the CPU, which compresses them):
// a ring of pinned staging slots, each copy queued on a copy stream after an event of the compute
// stream, so device-to-host copies of finished buckets overlap the rest of backward.
//
//   cuda::stream copy;                        // separate from the compute stream
//   cuda::staging_ring ring(4, bucket_bytes); // 4 slots in flight
//   cuda::event done(false);
//   done.record(compute);                     // after backward wrote this bucket's gradient
//   auto slot = ring.copy_to_host(grad_bytes, copy.get(), done.get());
//   ... later: slot.wait(); compress slot.bytes() on the CPU ...
#pragma once

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include <sluice/core/error.hpp>
#include <sluice/cuda/runtime.cuh>

namespace sluice::cuda {

/// A ring of pinned host buffers for asynchronous device-to-host copies. A slot is reused after
/// slots() further copies; reusing it first waits for its previous copy, so at most slots()
/// copies are in flight. Not thread-safe: one producer thread.
class staging_ring {
 public:
  /// A queued copy: its bytes are valid after wait() (or once ready() is true) and until the slot
  /// is reused.
  class staged {
   public:
    staged(std::span<std::byte const> bytes, cudaEvent_t done) noexcept : bytes_(bytes), done_(done) {}
    /// Blocks until the copy has landed; throws on a failed copy.
    void wait() const { check(cudaEventSynchronize(done_), "cuda::staging_ring::staged::wait"); }
    /// True once the copy has landed (never blocks).
    [[nodiscard]] bool ready() const noexcept { return cudaEventQuery(done_) == cudaSuccess; }
    [[nodiscard]] std::span<std::byte const> bytes() const noexcept { return bytes_; }

   private:
    std::span<std::byte const> bytes_;
    cudaEvent_t done_;
  };

  /// `slots` pinned buffers of `slot_bytes` each.
  staging_ring(std::size_t slots, std::size_t slot_bytes) : slot_bytes_(slot_bytes) {
    require(slots > 0 && slot_bytes > 0, errc::invalid_argument,
            "cuda::staging_ring: {} slots of {} bytes; both must be positive", slots, slot_bytes);
    buffers_.reserve(slots);
    events_.reserve(slots);
    for (std::size_t i = 0; i < slots; ++i) {
      buffers_.emplace_back(slot_bytes);
      events_.emplace_back(false);
    }
  }

  [[nodiscard]] std::size_t slots() const noexcept { return buffers_.size(); }
  [[nodiscard]] std::size_t slot_bytes() const noexcept { return slot_bytes_; }

  /// Queues a copy of `device_bytes` into the next slot on `copy_stream`, after `after` (an event
  /// recorded on the producing stream, or null) has completed. errc::size_mismatch when the bytes
  /// exceed a slot.
  staged copy_to_host(std::span<std::byte const> device_bytes, cudaStream_t copy_stream, cudaEvent_t after = nullptr) {
    require(device_bytes.size() <= slot_bytes_, errc::size_mismatch,
            "cuda::staging_ring: copy of {} bytes exceeds the {}-byte slots; make the ring's slots larger",
            device_bytes.size(), slot_bytes_);
    std::size_t const i = next_;
    next_ = (next_ + 1) % buffers_.size();
    event const& done = events_[i];
    done.synchronize();  // the slot's previous copy (a fresh event counts as complete)
    if (after != nullptr) check(cudaStreamWaitEvent(copy_stream, after, 0), "cuda::staging_ring::copy_to_host");
    check(cudaMemcpyAsync(buffers_[i].data(), device_bytes.data(), device_bytes.size(), cudaMemcpyDeviceToHost,
                          copy_stream),
          "cuda::staging_ring::copy_to_host");
    done.record(copy_stream);
    return {std::span<std::byte const>(buffers_[i].data(), device_bytes.size()), done.get()};
  }

 private:
  std::size_t slot_bytes_;
  std::size_t next_ = 0;
  std::vector<pinned_buffer<std::byte>> buffers_;
  std::vector<event> events_;
};

}  // namespace sluice::cuda
