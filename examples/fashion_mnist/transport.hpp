// any_transport: one transport type for every engine, so that the trainer's pipeline is compiled
// once per (codec, feedback, optimizer) rather than once more per engine, and so that engines
// which cannot be moved (zmq_transport, mpi_transport own sockets and communicators) can still be
// handed to sluice::pipeline, which holds its transport by value. One virtual call per message.
#pragma once

#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <sluice/transport/concepts.hpp>

namespace fashion_mnist {

class any_transport {
 public:
  using transport_concept = sluice::transport_tag;

  /// A send in flight; an empty request is complete.
  class request {
   public:
    request() = default;
    template <sluice::TransportRequest R>
    explicit request(R r) : p_(std::make_unique<model<R>>(std::move(r))) {}
    [[nodiscard]] bool test() { return !p_ || p_->test(); }
    void wait(sluice::deadline d) {
      if (p_) p_->wait(d);
    }

   private:
    struct base {
      virtual ~base() = default;
      virtual bool test() = 0;
      virtual void wait(sluice::deadline d) = 0;
    };
    template <class R>
    struct model final : base {
      R r;
      explicit model(R x) : r(std::move(x)) {}
      bool test() override { return r.test(); }
      void wait(sluice::deadline d) override { r.wait(d); }
    };
    std::unique_ptr<base> p_;
  };

  /// Constructs an engine of type T in place from `args` (T need not be movable).
  template <sluice::Transport T, class... Args>
  [[nodiscard]] static any_transport make(Args&&... args) {
    any_transport t;
    t.p_ = std::make_unique<model<T>>(std::forward<Args>(args)...);
    return t;
  }

  [[nodiscard]] int rank() const noexcept { return p_->rank(); }
  [[nodiscard]] int size() const noexcept { return p_->size(); }
  request send(int peer, sluice::message_tag tag, std::span<std::byte const> bytes) {
    return p_->send(peer, tag, bytes);
  }
  std::span<std::byte const> recv(int peer, sluice::message_tag tag, std::vector<std::byte>& buffer,
                                  sluice::deadline d) {
    return p_->recv(peer, tag, buffer, d);
  }
  void barrier(sluice::deadline d) { p_->barrier(d); }
  /// MPI_Allreduce (sluice::MpiAllreduce) where the engine is mpi_transport; errc::unsupported on
  /// other engines (so the pipeline's by_mpi_allreduce compiles once for every engine).
  void mpi_allreduce_sum(std::span<float> data) { p_->mpi_allreduce_sum(data); }

 private:
  any_transport() = default;
  struct base {
    virtual ~base() = default;
    virtual int rank() const noexcept = 0;
    virtual int size() const noexcept = 0;
    virtual request send(int, sluice::message_tag, std::span<std::byte const>) = 0;
    virtual std::span<std::byte const> recv(int, sluice::message_tag, std::vector<std::byte>&, sluice::deadline) = 0;
    virtual void barrier(sluice::deadline) = 0;
    virtual void mpi_allreduce_sum(std::span<float>) = 0;
  };
  template <class T>
  struct model final : base {
    T t;
    template <class... Args>
    explicit model(Args&&... args) : t(std::forward<Args>(args)...) {}
    int rank() const noexcept override { return t.rank(); }
    int size() const noexcept override { return t.size(); }
    request send(int peer, sluice::message_tag tag, std::span<std::byte const> bytes) override {
      auto r = t.send(peer, tag, bytes);
      if (r.test()) return {};  // done already (always, on the local engine): nothing to keep
      return request(std::move(r));
    }
    std::span<std::byte const> recv(int peer, sluice::message_tag tag, std::vector<std::byte>& buffer,
                                    sluice::deadline d) override {
      return t.recv(peer, tag, buffer, d);
    }
    void barrier(sluice::deadline d) override { t.barrier(d); }
    void mpi_allreduce_sum(std::span<float> data) override {
      if constexpr (sluice::MpiAllreduce<T>)
        t.mpi_allreduce_sum(data);
      else
        sluice::throw_error(sluice::errc::unsupported,
                            "--exchange mpi_allreduce needs MPI: run under mpirun with --transport mpi");
    }
  };
  std::unique_ptr<base> p_;
};
static_assert(sluice::Transport<any_transport>);
static_assert(sluice::MpiAllreduce<any_transport>);

}  // namespace fashion_mnist
