// A collective over ZeroMQ that fails while its large (zero-copy) sends are still in ZeroMQ's hands
// must not leave ZeroMQ reading freed memory: a peer stalls (stopped, connected, reading nothing),
// the caller times out, its workspace is destroyed, then the peer resumes. Built and run under
// ASan+UBSan too (labels zmq and unit), where a read of the freed workspace is a report.
#include "support/spawn.hpp"

#include <chrono>
#include <csignal>
#include <fstream>
#include <memory>
#include <string>

#include <sluice/collective/all.hpp>
#include <sluice/compress/identity.hpp>
#include <sluice/transport/zmq.hpp>

using namespace sluice;
using namespace std::chrono_literals;

namespace {

constexpr message_tag control_tag{1u << 20};

// Whether process `pid` is stopped (state T in /proc/<pid>/stat).
bool stopped(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  auto const close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'T';
}

// Rank 1 stops itself; rank 0 runs `collective` (which must fail with errc::timeout) with a
// workspace that is destroyed at once, then resumes rank 1 and lets ZeroMQ run on.
template <class Collective>
int stalled_peer(Collective&& collective) {
  zmq_transport t({.peer_lost_grace = 2s, .linger = 2'000ms});
  std::vector<std::byte> buf;
  if (t.rank() == 1) {
    int const pid = ::getpid();
    t.send(0, control_tag, std::as_bytes(std::span<int const>(&pid, 1))).wait(deadline::after(20s));
    (void)t.recv(0, control_tag, buf, deadline::after(20s));  // rank 0 has all it gets from here
    ::raise(SIGSTOP);  // stalled: alive and connected, but nothing on this rank reads
    int const resumed = 1;
    t.send(0, control_tag + 1, std::as_bytes(std::span<int const>(&resumed, 1))).wait(deadline::after(20s));
    std::this_thread::sleep_for(500ms);
    return 0;
  }
  auto m = t.recv(1, control_tag, buf, deadline::after(20s));
  int pid = 0;
  std::memcpy(&pid, m.data(), sizeof pid);
  t.send(1, control_tag, m).wait(deadline::after(20s));
  for (auto const end = std::chrono::steady_clock::now() + 20s; !stopped(pid);) {
    if (std::chrono::steady_clock::now() > end) return 51;
    std::this_thread::sleep_for(5ms);
  }
  bool timed_out = false;
  try {
    collective(t);
  } catch (error const& e) {
    timed_out = e.kind() == errc::timeout;
    if (!timed_out) std::fprintf(stderr, "rank 0: unexpected error: %s\n", e.what());
  }
  // The workspace is gone. Resume the peer: ZeroMQ's I/O thread would now write the rest of the
  // 32 MiB message from freed memory had the collective not cancelled its send.
  ::kill(pid, SIGCONT);
  (void)t.recv(1, control_tag + 1, buf, deadline::after(20s));
  std::this_thread::sleep_for(500ms);
  return timed_out ? 0 : 52;
}

// 2 ranks: each ring step sends half the tensor, 32 MiB, far beyond the loopback socket buffers.
constexpr std::size_t big = std::size_t{16} << 20;
collective_context const ctx{.step = 1, .tensor = 9, .timeout = 1s};

}  // namespace

SLUICE_CHILD_SCENARIO(ring_stalled) {
  return stalled_peer([](zmq_transport& t) {
    std::vector<float> data(big, 1.0f);
    auto ws = std::make_unique<ring_allreduce_workspace>();
    ring_allreduce(t, std::span<float>(data), ctx, *ws);
  });
}

SLUICE_CHILD_SCENARIO(sra_stalled) {
  return stalled_peer([](zmq_transport& t) {
    std::vector<float> data(big, 1.0f), out(big);
    auto ws = std::make_unique<scatter_reduce_allgather_workspace<identity>>();
    scatter_reduce_allgather(t, identity{}, std::span<float const>(data), std::span<float>(out), ctx, *ws);
  });
}

SLUICE_CHILD_SCENARIO(allgather_stalled) {
  return stalled_peer([](zmq_transport& t) {
    std::vector<float> data(big / 2, 1.0f), out(big / 2);
    auto ws = std::make_unique<sparse_allgather_workspace<identity>>();
    sparse_allgather(t, identity{}, std::span<float const>(data), std::span<float>(out), ctx, *ws);
  });
}

TEST_CASE("a collective that times out on a stalled peer leaves ZeroMQ no freed bytes to send") {
  for (char const* s : {"ring_stalled", "sra_stalled", "allgather_stalled"}) {
    CAPTURE(s);
    auto codes = test::spawn_ranks(s, 2, 120s);
    for (int c : codes) CHECK(c == 0);
  }
}
