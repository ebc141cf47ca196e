// nccl_transport: the concept it models, messages through its host transport, and what a rank
// without a usable GPU gets (errc::unsupported on every rank, not a wait for the deadline).
// On a machine with a CUDA device the same binary checks a one-rank communicator instead: the
// native sum of host and device memory, the element-count agreement and the gather of compressed
// frames. The frame-length agreement runs on the host transport alone, GPU or not. Multi-GPU runs
// come with the CUDA backend.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <sluice/collective/ring_allreduce.hpp>
#include <sluice/collective/sparse_allgather.hpp>
#include <sluice/compress/top_k.hpp>
#include <sluice/transport/local.hpp>
#include <sluice/transport/nccl.hpp>

using namespace sluice;
using namespace std::chrono_literals;

static_assert(Transport<nccl_transport<local_transport>>);
static_assert(NativeAllreduce<nccl_transport<local_transport>>);

namespace {

bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

}  // namespace

// docs/transport.md's block, compiled (not called: the test cases here run the same calls). `host`
// is the job's mpi_transport or zmq_transport; a local_transport here.
void docs_nccl(local_transport& host, std::span<float> grad, std::span<float const> in, std::span<float> out,
               collective_context const& ctx) {
  ring_allreduce_workspace ws;
  sluice::top_k const codec{.ratio = 0.01};
  sparse_allgather_workspace<sluice::top_k> ag;
  // example-begin nccl
  sluice::nccl_transport gpu(host, {.device = -1});                  // device: LOCAL_RANK / OMPI_COMM_WORLD_LOCAL_RANK
  sluice::ring_allreduce(gpu, grad, ctx, ws, {.use_native = true});  // ncclAllReduce
  sluice::sparse_allgather(gpu, codec, in, out, ctx, ag);            // messages over `host`
  // example-end nccl
}

TEST_CASE("nccl_transport: without a CUDA device every rank gets errc::unsupported") {
  if (have_device()) return;  // the device test case below runs instead
  auto eps = local_transport::create(3);
  std::vector<errc> got(eps.size(), errc{});
  std::vector<std::string> what(eps.size());
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < eps.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        nccl_transport<local_transport> t(eps[r], {}, deadline::after(20s));
      } catch (error const& e) {
        got[r] = e.kind();
        what[r] = e.what();
      }
    });
  for (auto& th : threads) th.join();
  for (std::size_t r = 0; r < eps.size(); ++r) {
    INFO("rank ", r, ": ", what[r]);
    CHECK(got[r] == errc::unsupported);
  }
  CHECK(what[0].find("CUDA device") != std::string::npos);
  CHECK(what[1].find("rank 0 could not make the communicator") != std::string::npos);
}

TEST_CASE("nccl_transport: a one-rank communicator sums host and device memory") {
  if (!have_device()) return;
  auto eps = local_transport::create(1);
  nccl_transport<local_transport> t(eps[0], {.device = 0, .staging_elements = 1000}, deadline::after(60s));
  CHECK(t.rank() == 0);
  CHECK(t.size() == 1);
  std::vector<float> host(2500);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) * 0.5f;
  auto const before = host;
  t.native_allreduce_sum(std::span<float>(host), deadline::after(30s));  // three staging rounds
  CHECK(host == before);
  float* dev = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&dev), host.size() * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemcpy(dev, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  t.native_allreduce_sum(std::span<float>(dev, host.size()), deadline::after(30s));
  std::vector<float> back(host.size());
  REQUIRE(cudaMemcpy(back.data(), dev, host.size() * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(back == before);
  (void)cudaFree(dev);
  // Messages pass through the host transport; ring_allreduce takes the native path on request.
  std::vector<std::byte> buf;
  std::byte const b{7};
  t.send(0, message_tag{3}, std::span<std::byte const>(&b, 1)).wait(deadline::after(1s));
  CHECK(t.recv(0, message_tag{3}, buf, deadline::after(1s)).size() == 1);
  ring_allreduce_workspace ws;
  ring_allreduce(t, std::span<float>(host), {.step = 1, .tensor = 2}, ws, {.use_native = true});
  CHECK(host == before);
}

TEST_CASE("agree_on_frames: every rank learns every frame length, or every rank throws") {
  auto run = [](std::vector<std::size_t> const& slots, std::vector<std::size_t> const& lengths,
                std::vector<bool> const& ok) {
    auto eps = local_transport::create(static_cast<int>(slots.size()));
    std::vector<std::vector<std::size_t>> got(eps.size());
    std::vector<errc> err(eps.size(), errc{});
    std::vector<std::string> what(eps.size());
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < eps.size(); ++r)
      threads.emplace_back([&, r] {
        try {
          got[r] = agree_on_frames(eps[r], slots[r], lengths[r], ok[r], deadline::after(20s));
        } catch (error const& e) {
          err[r] = e.kind();
          what[r] = e.what();
        }
      });
    for (auto& th : threads) th.join();
    return std::tuple{got, err, what};
  };
  {
    auto const [got, err, what] = run({4096, 4096, 4096}, {4096, 100, 0}, {true, true, true});
    for (std::size_t r = 0; r < 3; ++r) {
      INFO("rank ", r, ": ", what[r]);
      CHECK(err[r] == errc{});
      CHECK(got[r] == std::vector<std::size_t>{4096, 100, 0});
    }
  }
  {  // a rank with another slot size: size_mismatch everywhere, naming it
    auto const [got, err, what] = run({4096, 4000, 4096}, {10, 10, 10}, {true, true, true});
    for (std::size_t r = 0; r < 3; ++r) {
      INFO("rank ", r, ": ", what[r]);
      CHECK(err[r] == errc::size_mismatch);
    }
    CHECK(what[0].find("rank 1 has slots of 4000") != std::string::npos);
  }
  {  // a frame longer than its slot
    auto const [got, err, what] = run({64, 64}, {64, 65}, {true, true});
    for (std::size_t r = 0; r < 2; ++r) CHECK(err[r] == errc::invalid_argument);
    CHECK(what[0].find("rank 1 has a frame of 65 bytes") != std::string::npos);
  }
  {  // a rank whose buffers are unusable
    auto const [got, err, what] = run({64, 64, 64}, {1, 2, 3}, {true, true, false});
    for (std::size_t r = 0; r < 3; ++r) CHECK(err[r] == errc::invalid_argument);
    CHECK(what[1].find("rank 2 cannot take part") != std::string::npos);
  }
}

TEST_CASE("nccl_transport: a one-rank communicator gathers a padded frame") {
  if (!have_device()) return;
  auto eps = local_transport::create(1);
  nccl_transport<local_transport> t(eps[0], {.device = 0}, deadline::after(60s));
  std::vector<std::byte> frame(256);
  for (std::size_t i = 0; i < frame.size(); ++i) frame[i] = static_cast<std::byte>(i * 7);
  std::byte *in = nullptr, *out = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&in), frame.size()) == cudaSuccess);
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&out), frame.size()) == cudaSuccess);
  REQUIRE(cudaMemcpy(in, frame.data(), frame.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  auto const lengths = t.allgather_frames(std::span<std::byte const>(in, frame.size()), 200,
                                          std::span(out, frame.size()), deadline::after(30s));
  CHECK(lengths == std::vector<std::size_t>{200});
  std::vector<std::byte> back(frame.size());
  REQUIRE(cudaMemcpy(back.data(), out, back.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(back == frame);
  // Host memory is refused before anything is queued.
  CHECK_THROWS_AS(t.allgather_frames(std::span<std::byte const>(frame), 10, std::span(back), deadline::after(5s)),
                  error);
  (void)cudaFree(in);
  (void)cudaFree(out);
}
