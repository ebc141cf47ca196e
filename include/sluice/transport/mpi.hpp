// mpi: the Transport over Open MPI (target sluice::mpi). Point-to-point through MPI_Isend and
// MPI_Improbe/MPI_Imrecv polled against deadlines, barrier through MPI_Ibarrier, and the engine's own
// MPI_Iallreduce for dense sums, so no wait can outlive its deadline.
#pragma once

#include <climits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <mpi.h>

#include <fmt/core.h>

#include <sluice/transport/concepts.hpp>
#include <sluice/transport/detail/progress.hpp>

namespace sluice {

namespace detail {

inline std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, static_cast<std::size_t>(len));
}

/// Turns an MPI error code into errc::peer_lost (the only way MPI reports a failed peer).
inline void mpi_check(int code, char const* call, int rank, int peer) {
  if (code != MPI_SUCCESS) [[unlikely]]
    throw_error(errc::peer_lost, "mpi_transport: rank {}: {} with rank {} failed: {}", rank, call, peer,
                mpi_error_string(code));
}

/// Serializes MPI calls when the library refused MPI_THREAD_MULTIPLE; a no-op lock otherwise. Also
/// keeps the receives that passed their deadline after their message was matched (the sender died
/// or stalled mid-message): MPI may still write into their storage, so it is kept alive here.
struct mpi_serializer {
  bool serialize = false;
  std::mutex m;
  [[nodiscard]] std::unique_lock<std::mutex> lock() {
    return serialize ? std::unique_lock<std::mutex>(m) : std::unique_lock<std::mutex>();
  }

  struct abandoned_recv {
    MPI_Request req;
    std::vector<std::byte> storage;
  };
  std::mutex abandoned_m;
  std::vector<abandoned_recv> abandoned;

  /// Takes over a pending receive and its storage, and drops the ones that have completed since.
  void abandon(MPI_Request r, std::vector<std::byte>&& storage) {
    std::lock_guard g(abandoned_m);
    std::erase_if(abandoned, [&](abandoned_recv& a) {
      int flag = 0;
      auto l = lock();
      return MPI_Test(&a.req, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag != 0;
    });
    abandoned.push_back({r, std::move(storage)});
  }

  ~mpi_serializer() {
    // A receive still pending when the transport goes may yet be written by MPI: its storage is
    // left allocated on purpose (a job that lost a peer is expected to end).
    for (auto& a : abandoned) {
      int finalized = 0, flag = 0;
      MPI_Finalized(&finalized);
      if (finalized || MPI_Test(&a.req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag == 0)
        (void)new std::vector<std::byte>(std::move(a.storage));
    }
  }
};

}  // namespace detail

/// Initializes MPI asking for MPI_THREAD_MULTIPLE (unless MPI is already initialized) and finalizes
/// it on destruction if it initialized it. `provided()` is the level granted; transports adapt to it.
/// Thread-safety: create and destroy on the main thread.
class mpi_environment {
 public:
  mpi_environment(int* argc = nullptr, char*** argv = nullptr) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int const rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided_);
      require(rc == MPI_SUCCESS, errc::unsupported, "mpi_environment: MPI_Init_thread failed: {}",
              detail::mpi_error_string(rc));
      owns_ = true;
    } else {
      MPI_Query_thread(&provided_);
    }
  }
  mpi_environment(mpi_environment const&) = delete;
  mpi_environment& operator=(mpi_environment const&) = delete;
  ~mpi_environment() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_ && !finalized) MPI_Finalize();
  }
  /// MPI_THREAD_SINGLE .. MPI_THREAD_MULTIPLE.
  [[nodiscard]] int provided() const noexcept { return provided_; }

 private:
  int provided_ = MPI_THREAD_SINGLE;
  bool owns_ = false;
};

/// A Transport over a duplicate of an MPI communicator (so sluice's tags never meet the user's).
/// MPI must be initialized (mpi_environment). With MPI_THREAD_MULTIPLE any thread may call any
/// member; with a lower level the transport serializes its MPI calls with a mutex (correct for
/// MPI_THREAD_SERIALIZED; under FUNNELED/SINGLE only the thread that initialized MPI may call it).
/// A request that timed out leaves its MPI_Isend pending (MPI cannot cancel sends); the job is
/// expected to stop or rebuild the communicator after a peer failure.
class mpi_transport {
 public:
  using transport_concept = transport_tag;

  /// An MPI_Isend in flight. Must not outlive its transport.
  class request {
   public:
    request() = default;
    request(request&& o) noexcept
        : req_(std::exchange(o.req_, MPI_REQUEST_NULL)), ser_(o.ser_), rank_(o.rank_), peer_(o.peer_) {}
    request& operator=(request&& o) noexcept {
      std::swap(req_, o.req_);
      ser_ = o.ser_;
      rank_ = o.rank_;
      peer_ = o.peer_;
      return *this;
    }
    request(request const&) = delete;
    request& operator=(request const&) = delete;
    ~request() = default;  // an incomplete send stays with MPI (see the class comment)

    [[nodiscard]] bool test() {
      if (req_ == MPI_REQUEST_NULL) return true;
      int flag = 0;
      auto lock = ser_->lock();
      detail::mpi_check(MPI_Test(&req_, &flag, MPI_STATUS_IGNORE), "MPI_Test(send)", rank_, peer_);
      return flag != 0;
    }
    void wait(deadline d) {
      if (!detail::poll_until([&] { return test(); }, d))
        throw_error(errc::timeout, "mpi_transport: rank {}: send to rank {} did not complete before the deadline",
                    rank_, peer_);
    }

   private:
    friend class mpi_transport;
    request(MPI_Request r, detail::mpi_serializer* s, int rank, int peer)
        : req_(r), ser_(s), rank_(rank), peer_(peer) {}

    MPI_Request req_ = MPI_REQUEST_NULL;
    detail::mpi_serializer* ser_ = nullptr;
    int rank_ = 0, peer_ = 0;
  };

  /// Duplicates `comm` (default MPI_COMM_WORLD); the duplicate is freed on destruction, `comm` stays the caller's.
  explicit mpi_transport(MPI_Comm comm = MPI_COMM_WORLD) : ser_(std::make_unique<detail::mpi_serializer>()) {
    int inited = 0;
    MPI_Initialized(&inited);
    require(inited != 0, errc::unsupported, "mpi_transport: MPI is not initialized (create a sluice::mpi_environment)");
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    thread_level_ = level;
    ser_->serialize = level < MPI_THREAD_MULTIPLE;
    detail::mpi_check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup", -1, -1);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    void* ub = nullptr;
    int found = 0;
    MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &found);
    require(!found || *static_cast<int*>(ub) >= static_cast<int>(tag_limit + 64), errc::unsupported,
            "mpi_transport: MPI_TAG_UB {} is below the {} sluice needs", found ? *static_cast<int*>(ub) : 0,
            tag_limit + 64);
  }
  mpi_transport(mpi_transport const&) = delete;
  mpi_transport& operator=(mpi_transport const&) = delete;
  ~mpi_transport() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
  }

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  /// The communicator sluice uses: a duplicate of the one given to the constructor, owned (freed)
  /// by the transport. Public for the user's own collectives among sluice's ranks (timing,
  /// metrics); every call on it counts against the thread level below like the transport's own.
  [[nodiscard]] MPI_Comm comm() const noexcept { return comm_; }
  /// The MPI thread level granted (MPI_THREAD_MULTIPLE unless the library refused it).
  [[nodiscard]] int thread_level() const noexcept { return thread_level_; }

  request send(int peer, message_tag tag, std::span<std::byte const> bytes) {
    detail::check_peer(peer, size_, "mpi_transport::send");
    require(bytes.size() <= static_cast<std::size_t>(INT_MAX), errc::invalid_argument,
            "mpi_transport: message of {} bytes exceeds MPI's int count", bytes.size());
    MPI_Request r = MPI_REQUEST_NULL;
    auto lock = ser_->lock();
    detail::mpi_check(MPI_Isend(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, peer,
                                static_cast<int>(to_underlying(tag)), comm_, &r),
                      "MPI_Isend", rank_, peer);
    return {r, ser_.get(), rank_, peer};
  }

  std::span<std::byte const> recv(int peer, message_tag tag, std::vector<std::byte>& buffer, deadline d) {
    detail::check_peer(peer, size_, "mpi_transport::recv");
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Status status;
    int const t = static_cast<int>(to_underlying(tag));
    bool const got = detail::poll_until(
        [&] {
          int flag = 0;
          auto lock = ser_->lock();
          detail::mpi_check(MPI_Improbe(peer, t, comm_, &flag, &msg, &status), "MPI_Improbe", rank_, peer);
          return flag != 0;
        },
        d);
    if (!got)
      throw_error(errc::timeout, "mpi_transport: rank {} waiting for rank {} (tag {}): deadline passed", rank_, peer,
                  to_underlying(tag));
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    buffer.resize(static_cast<std::size_t>(count));
    // The matched message's bytes may still be on their way (a large message's rendezvous): its
    // receive is polled against the deadline too, never left to block on a peer that died mid-message.
    MPI_Request r = MPI_REQUEST_NULL;
    {
      auto lock = ser_->lock();
      detail::mpi_check(MPI_Imrecv(buffer.data(), count, MPI_BYTE, &msg, &r), "MPI_Imrecv", rank_, peer);
    }
    bool const done = detail::poll_until(
        [&] {
          int flag = 0;
          auto lock = ser_->lock();
          detail::mpi_check(MPI_Test(&r, &flag, MPI_STATUS_IGNORE), "MPI_Test(recv)", rank_, peer);
          return flag != 0;
        },
        d);
    if (!done) {
      ser_->abandon(r, std::move(buffer));  // the storage MPI may still write moves with the request
      buffer.clear();
      throw_error(errc::timeout,
                  "mpi_transport: rank {} receiving {} bytes from rank {} (tag {}): deadline passed mid-message", rank_,
                  count, peer, to_underlying(tag));
    }
    return buffer;
  }

  void barrier(deadline d) {
    MPI_Request r = MPI_REQUEST_NULL;
    {
      auto lock = ser_->lock();
      detail::mpi_check(MPI_Ibarrier(comm_, &r), "MPI_Ibarrier", rank_, -1);
    }
    wait_collective(r, d, "barrier");
  }

  /// Dense fp32 sum over all ranks through the blocking MPI_Allreduce (in place, MPI_SUM, MPI_FLOAT),
  /// progressed inside the call by Open MPI's tuned algorithm selection: what a DDP-style trainer
  /// calls, and the pipeline's by_mpi_allreduce. It has no deadline: a rank that dies is handled by
  /// the launcher (Open MPI's mpirun aborts the whole job when a process exits without
  /// MPI_Finalize), a rank that stays alive but never calls waits forever. native_allreduce_sum is
  /// the same sum with a deadline. Callable from any thread when the level is MPI_THREAD_SERIALIZED
  /// or higher (serialized with the transport's other calls below MPI_THREAD_MULTIPLE); under
  /// FUNNELED or SINGLE only from the thread that initialized MPI (errc::unsupported otherwise).
  void mpi_allreduce_sum(std::span<float> data) {
    require(data.size() <= static_cast<std::size_t>(INT_MAX), errc::invalid_argument,
            "mpi_transport: allreduce of {} elements exceeds MPI's int count", data.size());
    if (thread_level_ < MPI_THREAD_SERIALIZED) {
      int main_thread = 0;
      MPI_Is_thread_main(&main_thread);
      require(main_thread != 0, errc::unsupported,
              "mpi_transport: rank {}: MPI_Allreduce from a thread other than MPI's main thread needs "
              "MPI_THREAD_SERIALIZED or higher, but MPI granted level {}; initialize MPI with sluice::mpi_environment "
              "(asks for MPI_THREAD_MULTIPLE) or MPI_Init_thread",
              rank_, thread_level_);
    }
    auto lock = ser_->lock();
    detail::mpi_check(
        MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()), MPI_FLOAT, MPI_SUM, comm_),
        "MPI_Allreduce", rank_, -1);
  }

  /// Dense fp32 sum over all ranks through MPI_Iallreduce (Open MPI's own algorithm selection),
  /// polled against the deadline.
  void native_allreduce_sum(std::span<float> data, deadline d) {
    require(data.size() <= static_cast<std::size_t>(INT_MAX), errc::invalid_argument,
            "mpi_transport: allreduce of {} elements exceeds MPI's int count", data.size());
    MPI_Request r = MPI_REQUEST_NULL;
    {
      auto lock = ser_->lock();
      detail::mpi_check(
          MPI_Iallreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()), MPI_FLOAT, MPI_SUM, comm_, &r),
          "MPI_Iallreduce", rank_, -1);
    }
    wait_collective(r, d, "allreduce");
  }

 private:
  void wait_collective(MPI_Request& r, deadline d, char const* what) {
    bool const done = detail::poll_until(
        [&] {
          int flag = 0;
          auto lock = ser_->lock();
          detail::mpi_check(MPI_Test(&r, &flag, MPI_STATUS_IGNORE), what, rank_, -1);
          return flag != 0;
        },
        d);
    if (!done)
      throw_error(errc::timeout, "mpi_transport: rank {}: {} did not complete before the deadline (a peer is silent)",
                  rank_, what);
  }

  std::unique_ptr<detail::mpi_serializer> ser_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  int thread_level_ = MPI_THREAD_SINGLE;
};
static_assert(Transport<mpi_transport>);
static_assert(NativeAllreduce<mpi_transport>);
static_assert(MpiAllreduce<mpi_transport>);

}  // namespace sluice
