// Messages between every pair of ranks over zmq_transport while the links change rate
// (scripts/rerate_trials.sh runs it under scripts/netns.sh and re-rates the links with tc).
// Every round each rank sends one message to every peer (sizes cycle through 40 KB, 300 KB and
// 1.5 MiB: copied, zero-copy, and two frames) and receives one from every peer; a message carries
// its round, its sender and a pattern of both, so a lost, duplicated, reordered or damaged message
// is seen at once. Rank r prints one line: "rerate_probe: rank r ok, R rounds, B bytes in S s" or
// "rerate_probe: rank r FAILED at round k: <why>" (exit 1). With end = "exit" a rank leaves as soon
// as its last round is done, as a trainer does after its last step (its last messages may still be
// on their way to its peers); with "barrier" (the default) the ranks meet in a barrier first.
//   rerate_probe [seconds=8] [timeout_s=60] [end=barrier|exit]
// Environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, SLUICE_ZMQ_HOST (netns.sh).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <sluice/transport/zmq.hpp>

namespace {

std::byte pattern(std::uint64_t round, int src, std::size_t i) {
  return static_cast<std::byte>((round * 131 + static_cast<std::uint64_t>(src) * 31 + i * 7) & 0xFF);
}

std::vector<std::byte> make_message(std::uint64_t round, int src, std::size_t bytes) {
  std::vector<std::byte> m(bytes);
  for (std::size_t i = 0; i < bytes; ++i) m[i] = pattern(round, src, i);
  std::memcpy(m.data(), &round, 8);
  std::uint32_t const s = static_cast<std::uint32_t>(src);
  std::memcpy(m.data() + 8, &s, 4);
  return m;
}

// Empty when the message is round `round` of rank `src`, else what is wrong with it.
std::string check_message(std::span<std::byte const> m, std::uint64_t round, int src, std::size_t bytes) {
  if (m.size() < 12) return fmt::format("{} bytes, expected {}", m.size(), bytes);
  std::uint64_t r = 0;
  std::uint32_t s = 0;
  std::memcpy(&r, m.data(), 8);
  std::memcpy(&s, m.data() + 8, 4);
  if (r != round || s != static_cast<std::uint32_t>(src))
    return fmt::format("round {} of rank {} arrived, expected round {} of rank {} ({} bytes)", r, s, round, src,
                       m.size());
  if (m.size() != bytes) return fmt::format("{} bytes, expected {}", m.size(), bytes);
  for (std::size_t i = 12; i < bytes; ++i)
    if (m[i] != pattern(round, src, i)) return fmt::format("byte {} differs", i);
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  double const seconds = argc > 1 ? std::stod(argv[1]) : 8.0;
  int const timeout_s = argc > 2 ? std::stoi(argv[2]) : 60;
  bool const end_barrier = argc > 3 ? std::string(argv[3]) != "exit" : true;
  constexpr std::size_t sizes[] = {40'000, 300'000, 1'572'864};
  int rank = -1;
  std::uint64_t round = 0, bytes = 0;
  auto const t0 = std::chrono::steady_clock::now();
  try {
    sluice::zmq_transport t;
    rank = t.rank();
    int const n = t.size();
    std::vector<std::byte> buf;
    // Every rank runs the same number of rounds: rank 0 decides after each round whether to go on.
    for (bool go = true; go; ++round) {
      std::size_t const size = sizes[round % 3];
      sluice::message_tag const tag{static_cast<std::uint32_t>(round % 4)};
      auto const out = make_message(round, rank, size);
      std::vector<sluice::zmq_transport::request> reqs;
      for (int p = 0; p < n; ++p)
        if (p != rank) reqs.push_back(t.send(p, tag, out));
      auto const d = sluice::deadline::after(std::chrono::seconds(timeout_s));
      for (int p = 0; p < n; ++p) {
        if (p == rank) continue;
        auto m = t.recv(p, tag, buf, d);
        if (auto why = check_message(m, round, p, size); !why.empty()) {
          std::printf("rerate_probe: rank %d FAILED at round %llu: from rank %d: %s\n", rank,
                      static_cast<unsigned long long>(round), p, why.c_str());
          return 1;
        }
        bytes += m.size();
      }
      for (auto& r : reqs) r.wait(d);
      // Rank 0 says whether to go on (a 1-byte message on tag 5 to every peer).
      std::byte flag{0};
      if (rank == 0) {
        go = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds;
        flag = std::byte{go ? std::uint8_t{1} : std::uint8_t{0}};
        for (int p = 1; p < n; ++p) t.send(p, sluice::message_tag{5}, std::span(&flag, 1));
      } else {
        auto m = t.recv(0, sluice::message_tag{5}, buf, d);
        go = m.size() == 1 && m[0] == std::byte{1};
      }
    }
    if (end_barrier) t.barrier(sluice::deadline::after(std::chrono::seconds(timeout_s)));
  } catch (sluice::error const& e) {
    std::printf("rerate_probe: rank %d FAILED at round %llu: %s\n", rank, static_cast<unsigned long long>(round),
                e.what());
    return 1;
  }
  std::printf("rerate_probe: rank %d ok, %llu rounds, %llu bytes in %.1f s\n", rank,
              static_cast<unsigned long long>(round), static_cast<unsigned long long>(bytes),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}
