// replica_monitor over ZeroMQ processes (run by ctest under scripts/sluice-run -n 3): replicas in
// lockstep until rank 1 changes one value at step 8; checked every 3 steps, every rank must find
// the first difference at step 9, the last agreement at step 6, rank 1 and tensor 1.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <span>
#include <vector>

#include <sluice/collective/replica_check.hpp>
#include <sluice/transport/zmq.hpp>

int main() {
  try {
    sluice::zmq_transport t;  // RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from sluice-run
    sluice::replica_monitor monitor(3);
    for (std::uint64_t step = 1; step <= 12; ++step) {
      std::vector<std::vector<float>> m{std::vector<float>(500), std::vector<float>(33)};
      for (std::size_t k = 0; k < m.size(); ++k)
        for (std::size_t i = 0; i < m[k].size(); ++i) m[k][i] = std::cos(static_cast<float>(step * 31 + k * 7 + i));
      if (t.rank() == 1 && step >= 8) m[1][5] += 0.25f;
      std::vector<std::span<float const>> const params(m.begin(), m.end());
      (void)monitor.step(t, step, params);
    }
    auto const& first = monitor.first_report();
    bool const ok = monitor.first_difference() == std::optional<std::uint64_t>(9) &&
                    monitor.last_agreement() == std::optional<std::uint64_t>(6) && first &&
                    first->differing_ranks == std::vector<int>{1} && first->first_tensor == 1;
    std::printf("rank %d: %s; last agreement at step %llu: %s\n", t.rank(),
                first ? first->describe().c_str() : "no difference found",
                static_cast<unsigned long long>(monitor.last_agreement().value_or(0)), ok ? "as injected" : "WRONG");
    return ok ? 0 : 1;
  } catch (std::exception const& e) {
    std::fprintf(stderr, "replica_check_zmq: %s\n", e.what());
    return 1;
  }
}
