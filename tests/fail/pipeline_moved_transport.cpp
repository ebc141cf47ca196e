// The mistake: std::move of a transport that cannot move (as zmq_transport and mpi_transport: they
// own sockets or a communicator) into a pipeline; the pipeline says to pass it as an lvalue instead
// of a screen of deleted-function errors.
// expected-error: sluice::pipeline: this transport cannot be moved (it owns sockets or an MPI communicator), so
// std::move(transport) cannot hand it over; pass it as an lvalue (`transport`, not `std::move(transport)`): the
// pipeline then refers to it, and it must outlive the pipeline
#include <sluice/compress/top_k.hpp>
#include <sluice/feedback/residual.hpp>
#include <sluice/optim/sgd.hpp>
#include <sluice/pipeline/pipeline.hpp>
#include <sluice/transport/local.hpp>

// As zmq_transport and mpi_transport: a Transport that neither copies nor moves.
struct pinned_transport {
  using transport_concept = sluice::transport_tag;
  using request = sluice::local_transport::request;
  explicit pinned_transport(sluice::local_transport& t) : inner(&t) {}
  pinned_transport(pinned_transport&&) = delete;
  [[nodiscard]] int rank() const { return inner->rank(); }
  [[nodiscard]] int size() const { return inner->size(); }
  request send(int peer, sluice::message_tag tag, std::span<std::byte const> bytes) {
    return inner->send(peer, tag, bytes);
  }
  std::span<std::byte const> recv(int peer, sluice::message_tag tag, std::vector<std::byte>& buf, sluice::deadline d) {
    return inner->recv(peer, tag, buf, d);
  }
  void barrier(sluice::deadline d) { inner->barrier(d); }
  sluice::local_transport* inner;
};

int main() {
  auto ts = sluice::local_transport::create(1);
  pinned_transport endpoint(ts[0]);
#if defined(SLUICE_MUST_FAIL)
  sluice::pipeline pipe{sluice::top_k{}, sluice::residual{}, sluice::sgd{}, std::move(endpoint)};  // error-here
#else
  sluice::pipeline pipe{sluice::top_k{}, sluice::residual{}, sluice::sgd{}, endpoint};
#endif
  return static_cast<int>(pipe.steps());
}
