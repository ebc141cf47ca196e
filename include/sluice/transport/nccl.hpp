// NCCL as a sluice engine: dense fp32 sums on the GPU through ncclAllReduce (NativeAllreduce), with
// point-to-point messages over a host Transport (Open MPI or ZeroMQ). NCCL's send and receive are
// rendezvous operations without tags or buffering: a send blocks its stream until the peer posts
// the matching receive, so independent tagged sends and receives (the Transport concept, which
// every sluice collective relies on) would deadlock as soon as two ranks send to each other before
// receiving. The bytes of those messages therefore leave through the host engine, and NCCL carries
// what it is built for: a dense collective in the same order on every rank.
// Needs the CUDA runtime and NCCL >= 2.14 (target sluice::nccl); device tests come with the CUDA
// backend (tests/transport/test_nccl.cpp checks the host-side behaviour on machines without a GPU).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

#include <fmt/core.h>

#include <sluice/core/error.hpp>
#include <sluice/transport/concepts.hpp>
#include <sluice/transport/detail/progress.hpp>
#include <sluice/transport/launcher.hpp>

#if !defined(NCCL_VERSION_CODE) || NCCL_VERSION_CODE < 21400
#error "sluice/transport/nccl.hpp needs NCCL 2.14 or newer (non-blocking communicator initialisation)"
#endif

namespace sluice {

/// Options of nccl_transport.
struct nccl_options {
  /// CUDA device of this rank; -1 takes the node-local rank from LOCAL_RANK (torchrun),
  /// OMPI_COMM_WORLD_LOCAL_RANK (mpirun) or SLURM_LOCALID, modulo the visible devices (0 without).
  int device = -1;
  /// Floats per round when the data lives in host memory: it is summed through a device buffer of
  /// this many elements (allocated on first use, kept for later calls).
  std::size_t staging_elements = std::size_t{1} << 22;
  friend bool operator==(nccl_options const&, nccl_options const&) = default;
};

/// Tag of nccl_transport's own control messages on the host transport (communicator id, sizes).
inline constexpr message_tag nccl_control_tag{tag_limit + 2};

namespace detail {

inline void cuda_check(cudaError_t e, char const* call, int rank) {
  if (e != cudaSuccess) [[unlikely]]
    throw_error(errc::unsupported, "nccl_transport: rank {}: {} failed: {} ({})", rank, call, cudaGetErrorName(e),
                cudaGetErrorString(e));
}

/// The errc of an NCCL result: a peer or network failure is peer_lost, a bad call invalid_argument.
constexpr errc nccl_errc(ncclResult_t r) noexcept {
  switch (r) {
    case ncclSystemError:
    case ncclRemoteError:
      return errc::peer_lost;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return errc::invalid_argument;
    default:
      return errc::unsupported;
  }
}

inline void nccl_check(ncclResult_t r, char const* call, int rank, ncclComm_t comm = nullptr) {
  if (r == ncclSuccess || r == ncclInProgress) [[likely]]
    return;
  char const* last = ncclGetLastError(comm);
  throw_error(nccl_errc(r), "nccl_transport: rank {}: {} failed: {}{}{}", rank, call, ncclGetErrorString(r),
              last && *last ? ": " : "", last ? last : "");
}

}  // namespace detail

/// The frame lengths of a fixed-size collective of compressed frames (nccl_transport::
/// allgather_frames), agreed over `host` before anything is queued on the GPU: every rank sends
/// every other one its slot size (the codec's max_encoded_bytes, the same on every rank), its
/// frame's length and whether its own buffers are usable (`ok`), and every rank checks all of
/// them, so a mismatch throws on every rank instead of hanging one in NCCL: errc::size_mismatch
/// when slots differ, errc::invalid_argument when a length exceeds the slot or a rank's buffers
/// are not usable (naming the first such rank). Returns the length of every rank, in rank order.
/// Calls must come in the same order on every rank (as every collective).
template <Transport Host>
std::vector<std::size_t> agree_on_frames(Host& host, std::size_t slot, std::size_t length, bool ok, deadline d) {
  int const r = host.rank(), world = host.size();
  std::uint64_t const mine[3] = {slot, length, ok ? 1u : 0u};
  std::vector<typename Host::request> sends;
  for (int p = 0; p < world; ++p)
    if (p != r) sends.push_back(host.send(p, nccl_control_tag, std::as_bytes(std::span(mine))));
  std::vector<std::uint64_t> all(3 * static_cast<std::size_t>(world));
  std::memcpy(all.data() + 3 * static_cast<std::size_t>(r), mine, sizeof mine);
  std::vector<std::byte> buf;
  for (int p = 0; p < world; ++p) {
    if (p == r) continue;
    auto const msg = host.recv(p, nccl_control_tag, buf, d);
    require(msg.size() == sizeof mine, errc::malformed_message,
            "nccl_transport: rank {}: frame sizes of {} bytes from rank {}", r, msg.size(), p);
    std::memcpy(all.data() + 3 * static_cast<std::size_t>(p), msg.data(), sizeof mine);
  }
  for (auto& s : sends) s.wait(d);
  std::vector<std::size_t> lengths(static_cast<std::size_t>(world));
  for (int p = 0; p < world; ++p) {
    std::uint64_t const* const e = all.data() + 3 * static_cast<std::size_t>(p);
    require(e[0] == slot, errc::size_mismatch,
            "nccl_transport: rank {}: frames in slots of {} bytes, rank {} has slots of {} (use the same codec and "
            "tensor size on every rank)",
            r, slot, p, e[0]);
    require(e[1] <= e[0], errc::invalid_argument,
            "nccl_transport: rank {}: rank {} has a frame of {} bytes for slots of {} (size the slot by the codec's "
            "max_encoded_bytes)",
            r, p, e[1], e[0]);
    require(e[2] == 1, errc::invalid_argument,
            "nccl_transport: rank {}: rank {} cannot take part: its frame buffers are not device memory of the right "
            "size",
            r, p);
    lengths[static_cast<std::size_t>(p)] = static_cast<std::size_t>(e[1]);
  }
  return lengths;
}

/// A Transport whose messages travel over `Host` (mpi_transport, zmq_transport, local_transport)
/// and whose dense fp32 sum runs on NCCL (ncclAllReduce) on this rank's GPU: pass
/// ring_allreduce_options{.use_native = true} to ring_allreduce to use it. rank() and size() are
/// the host's; the NCCL communicator spans the same ranks in the same order.
///
/// native_allreduce_sum accepts device memory (summed in place) and host memory (copied through a
/// device buffer in rounds of nccl_options::staging_elements). Every rank must call it in the same
/// order with the same element count: the counts are compared over the host transport first, so a
/// mismatch is errc::size_mismatch on every rank instead of a hang. Each wait on the GPU polls
/// against the deadline; when it passes, or NCCL reports a failed peer, the communicator is
/// aborted (ncclCommAbort) and the call throws errc::timeout / errc::peer_lost; later calls throw
/// errc::peer_lost.
///
/// Thread-safety: send, recv and barrier as the host transport's; native_allreduce_sum calls are
/// serialized by the transport (NCCL needs one order on all ranks, so one thread should issue them).
/// The host transport must outlive this object.
template <Transport Host>
class nccl_transport {
 public:
  using transport_concept = transport_tag;
  using request = typename Host::request;

  /// Creates an NCCL communicator over the ranks of `host`: rank 0 makes the unique id and sends it
  /// to every rank over `host`; initialisation is non-blocking and polled until `d`. Throws
  /// errc::unsupported when this rank has no CUDA device or driver (rank 0 then also tells the
  /// others, which throw errc::unsupported too), errc::timeout when a rank does not join in time.
  explicit nccl_transport(Host& host, nccl_options opt = {}, deadline d = deadline::after(std::chrono::seconds(120)))
      : host_(&host), opt_(opt), owned_(true) {
    int const r = host.rank(), n = host.size();
    cudaError_t const dev_err = pick_device();
    ncclUniqueId id{};
    if (r == 0) {
      std::vector<std::byte> msg;
      std::exception_ptr failed;
      if (dev_err == cudaSuccess) {
        try {
          detail::nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId", r);
          msg.resize(sizeof id);
          std::memcpy(msg.data(), &id, sizeof id);
        } catch (...) {
          failed = std::current_exception();
        }
      }
      // An empty message tells the others that rank 0 cannot take part.
      std::vector<request> sends;
      for (int p = 1; p < n; ++p) sends.push_back(host.send(p, nccl_control_tag, msg));
      for (auto& s : sends) s.wait(d);
      if (failed) std::rethrow_exception(failed);
      detail::cuda_check(dev_err, "selecting a CUDA device", r);
    } else {
      std::vector<std::byte> buf;
      auto const msg = host.recv(0, nccl_control_tag, buf, d);
      require(!msg.empty(), errc::unsupported,
              "nccl_transport: rank {}: rank 0 could not make the communicator (no usable CUDA device, or NCCL "
              "failed there)",
              r);
      require(msg.size() == sizeof id, errc::malformed_message,
              "nccl_transport: rank {}: communicator id of {} bytes from rank 0 (expected {})", r, msg.size(),
              sizeof id);
      std::memcpy(&id, msg.data(), sizeof id);
      detail::cuda_check(dev_err, "selecting a CUDA device", r);
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    try {
      detail::nccl_check(ncclCommInitRankConfig(&comm_, n, id, r, &config), "ncclCommInitRankConfig", r);
      wait_comm(d, "communicator initialisation");
      init_stream();
    } catch (...) {
      release();
      throw;
    }
  }

  /// Wraps a communicator the caller created and keeps owning (its rank and size must be the
  /// host's); `opt.device` must be the device it was created on (-1: the current device).
  nccl_transport(Host& host, ncclComm_t comm, nccl_options opt = {}) : host_(&host), opt_(opt), comm_(comm) {
    int const r = host.rank();
    require(comm != nullptr, errc::invalid_argument, "nccl_transport: rank {}: null communicator", r);
    int cr = -1, cn = -1;
    detail::nccl_check(ncclCommUserRank(comm, &cr), "ncclCommUserRank", r, comm);
    detail::nccl_check(ncclCommCount(comm, &cn), "ncclCommCount", r, comm);
    require(cr == r && cn == host.size(), errc::invalid_argument,
            "nccl_transport: communicator rank {} of {} wraps host rank {} of {}", cr, cn, r, host.size());
    if (opt_.device >= 0) detail::cuda_check(cudaSetDevice(opt_.device), "cudaSetDevice", r);
    detail::cuda_check(cudaGetDevice(&device_), "cudaGetDevice", r);
    init_stream();
  }

  nccl_transport(nccl_transport const&) = delete;
  nccl_transport& operator=(nccl_transport const&) = delete;
  ~nccl_transport() { release(); }

  [[nodiscard]] int rank() const noexcept { return host_->rank(); }
  [[nodiscard]] int size() const noexcept { return host_->size(); }
  [[nodiscard]] Host& host() const noexcept { return *host_; }
  [[nodiscard]] ncclComm_t comm() const noexcept { return comm_; }
  [[nodiscard]] int device() const noexcept { return device_; }

  request send(int peer, message_tag tag, std::span<std::byte const> bytes) { return host_->send(peer, tag, bytes); }
  std::span<std::byte const> recv(int peer, message_tag tag, std::vector<std::byte>& buffer, deadline d) {
    return host_->recv(peer, tag, buffer, d);
  }
  void barrier(deadline d) { host_->barrier(d); }

  /// Sums `data` (device or host memory) over all ranks in place with ncclAllReduce.
  void native_allreduce_sum(std::span<float> data, deadline d) {
    std::lock_guard lock(m_);
    int const r = rank();
    require(!broken_, errc::peer_lost, "nccl_transport: rank {}: the communicator was aborted after a failure", r);
    agree_on_count(data.size(), d);
    if (data.empty()) return;
    detail::cuda_check(cudaSetDevice(device_), "cudaSetDevice", r);
    cudaPointerAttributes attr{};
    detail::cuda_check(cudaPointerGetAttributes(&attr, data.data()), "cudaPointerGetAttributes", r);
    if (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged) {
      allreduce(data.data(), data.size());
      wait_comm(d, "ncclAllReduce");
      return;
    }
    std::size_t const round = std::max<std::size_t>(opt_.staging_elements, 1);
    if (staging_elements_ < std::min(round, data.size())) {
      if (staging_ != nullptr) detail::cuda_check(cudaFree(staging_), "cudaFree", r);
      staging_ = nullptr;
      staging_elements_ = std::min(round, data.size());
      detail::cuda_check(cudaMalloc(reinterpret_cast<void**>(&staging_), staging_elements_ * sizeof(float)),
                         "cudaMalloc(staging)", r);
    }
    for (std::size_t off = 0; off < data.size(); off += round) {
      std::size_t const m = std::min(round, data.size() - off);
      detail::cuda_check(
          cudaMemcpyAsync(staging_, data.data() + off, m * sizeof(float), cudaMemcpyHostToDevice, stream_),
          "cudaMemcpyAsync(host to device)", r);
      allreduce(staging_, m);
      // Waited here, under the deadline: a copy back into pageable memory would block the host
      // until the sum is done, however long a silent peer takes.
      wait_comm(d, "ncclAllReduce");
      detail::cuda_check(
          cudaMemcpyAsync(data.data() + off, staging_, m * sizeof(float), cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpyAsync(device to host)", r);
      detail::cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", r);
    }
  }

  /// The in-order device collective of fixed-size compressed frames (the CGX path): `frame` is
  /// this rank's frame in device memory, padded to a slot of frame.size() bytes (the codec's
  /// max_encoded_bytes, the same on every rank), of which the first `length` bytes are the frame;
  /// `out` (device memory, size() * frame.size() bytes) receives every rank's slot in rank order
  /// (ncclAllGather), and the call returns every rank's length, agreed over the host transport
  /// first (agree_on_frames: a mismatch throws on every rank). Waits for the gather under `d`
  /// (errc::timeout, errc::peer_lost as native_allreduce_sum). Decoding the slots in rank order
  /// gives every rank the same bits.
  std::vector<std::size_t> allgather_frames(std::span<std::byte const> frame, std::size_t length,
                                            std::span<std::byte> out, deadline d) {
    std::lock_guard lock(m_);
    int const r = rank();
    require(!broken_, errc::peer_lost, "nccl_transport: rank {}: the communicator was aborted after a failure", r);
    std::size_t const slot = frame.size();
    bool ok = out.size() == slot * static_cast<std::size_t>(size());
    if (ok && slot != 0) {
      detail::cuda_check(cudaSetDevice(device_), "cudaSetDevice", r);
      for (void const* p : {static_cast<void const*>(frame.data()), static_cast<void const*>(out.data())}) {
        cudaPointerAttributes attr{};
        detail::cuda_check(cudaPointerGetAttributes(&attr, p), "cudaPointerGetAttributes", r);
        ok = ok && (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged);
      }
    }
    auto lengths = agree_on_frames(*host_, slot, length, ok, d);
    if (slot == 0) return lengths;
    detail::nccl_check(ncclAllGather(frame.data(), out.data(), slot, ncclUint8, comm_, stream_), "ncclAllGather", r,
                       comm_);
    wait_comm(d, "ncclAllGather");
    return lengths;
  }

 private:
  // The device for this rank (nccl_options::device, or the launcher's local rank), made current.
  cudaError_t pick_device() {
    int count = 0;
    if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) return e;
    if (count <= 0) return cudaErrorNoDevice;
    int const local = detail::launcher_local_rank();
    device_ = opt_.device >= 0 ? opt_.device : (local >= 0 ? local % count : 0);
    if (device_ >= count) return cudaErrorInvalidDevice;
    return cudaSetDevice(device_);
  }

  void init_stream() {
    detail::cuda_check(cudaSetDevice(device_), "cudaSetDevice", rank());
    detail::cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate", rank());
  }

  void allreduce(float* p, std::size_t n) {
    detail::nccl_check(ncclAllReduce(p, p, n, ncclFloat32, ncclSum, comm_, stream_), "ncclAllReduce", rank(), comm_);
  }

  // Every rank sends its element count to every other one over the host transport, so that all of
  // them see a mismatch (and none enters an allreduce that could never complete).
  void agree_on_count(std::size_t n, deadline d) {
    int const r = rank(), world = size();
    if (world == 1) return;
    std::uint64_t const mine = n;
    std::vector<request> sends;
    for (int p = 0; p < world; ++p)
      if (p != r) sends.push_back(host_->send(p, nccl_control_tag, std::as_bytes(std::span(&mine, 1))));
    std::vector<std::byte> buf;
    int other = -1;
    std::uint64_t theirs = mine;
    for (int p = 0; p < world; ++p) {
      if (p == r) continue;
      auto const msg = host_->recv(p, nccl_control_tag, buf, d);
      require(msg.size() == sizeof theirs, errc::malformed_message,
              "nccl_transport: rank {}: element count of {} bytes from rank {}", r, msg.size(), p);
      std::uint64_t x = 0;
      std::memcpy(&x, msg.data(), sizeof x);
      if (x != mine && other < 0) {
        other = p;
        theirs = x;
      }
    }
    for (auto& s : sends) s.wait(d);
    require(other < 0, errc::size_mismatch, "nccl_transport: rank {}: allreduce of {} elements, rank {} has {}", r,
            mine, other, theirs);
  }

  // Polls the stream (and the communicator's state) until the work is done or `d` passes.
  void wait_comm(deadline d, char const* what) {
    int const r = rank();
    ncclResult_t async = ncclSuccess;
    bool const done = detail::poll_until(
        [&] {
          detail::nccl_check(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError", r, comm_);
          if (async != ncclSuccess && async != ncclInProgress) return true;
          if (stream_ == nullptr) return async == ncclSuccess;  // initialisation: no stream yet
          cudaError_t const e = cudaStreamQuery(stream_);
          if (e == cudaErrorNotReady) return false;
          detail::cuda_check(e, "cudaStreamQuery", r);
          return true;
        },
        d);
    if (async != ncclSuccess && async != ncclInProgress) {
      abort();
      detail::nccl_check(async, what, r);
    }
    if (!done) {
      abort();
      throw_error(errc::timeout, "nccl_transport: rank {}: {} did not complete before the deadline (a peer is silent)",
                  r, what);
    }
  }

  void abort() noexcept {
    if (comm_ != nullptr && owned_) (void)ncclCommAbort(comm_);
    if (owned_) comm_ = nullptr;
    broken_ = true;
  }

  void release() noexcept {
    if (staging_ != nullptr) (void)cudaFree(staging_);
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    if (comm_ != nullptr && owned_) (void)ncclCommDestroy(comm_);
    staging_ = nullptr;
    stream_ = nullptr;
    comm_ = nullptr;
  }

  Host* host_;
  nccl_options opt_;
  bool owned_ = false;
  bool broken_ = false;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
  float* staging_ = nullptr;
  std::size_t staging_elements_ = 0;
  std::mutex m_;
};

}  // namespace sluice

template <>
struct fmt::formatter<sluice::nccl_options> : fmt::formatter<std::string_view> {
  auto format(sluice::nccl_options const& o, format_context& ctx) const {
    return fmt::format_to(ctx.out(), "nccl_options{{.device = {}, .staging_elements = {}}}", o.device,
                          o.staging_elements);
  }
};
