// Multi-process tests without mpirun: the test binary starts N copies of itself with the torchrun
// variables (RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT) and a scenario name; a child
// runs the scenario instead of doctest. Every child is killed at a hard deadline, so nothing hangs.
#pragma once

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace sluice::test {

/// Scenarios a child process can run: name -> function returning the exit code.
inline std::map<std::string, std::function<int()>>& scenarios() {
  static std::map<std::string, std::function<int()>> s;
  return s;
}
struct scenario_registrar {
  scenario_registrar(char const* name, std::function<int()> f) { scenarios()[name] = std::move(f); }
};

/// 127.0.0.1:port, for bind() and connect().
inline sockaddr_in loopback_address(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  return a;
}

/// True when `port` on 127.0.0.1 can be bound now.
inline bool port_is_free(int port) {
  int const s = ::socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) return false;
  sockaddr_in a = loopback_address(port);
  bool const ok = ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(s);
  return ok;
}

/// A TCP port on 127.0.0.1 that nobody listens on, drawn below the kernel's ephemeral range
/// (net.ipv4.ip_local_port_range): a port the kernel hands out may be taken by any outgoing
/// connection of a test running beside this one between this probe and the rendezvous bind.
inline int free_port() {
  int low = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low;
  constexpr int first = 10000;
  if (low > first + 1000) {
    static std::mt19937 draw(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
    std::uniform_int_distribution<int> pick(first, low - 1);
    for (int attempt = 0; attempt < 256; ++attempt)
      if (int const p = pick(draw); port_is_free(p)) return p;
  }
  throw std::runtime_error("free_port: no free TCP port below the ephemeral range " + std::to_string(low));
}

/// `n` distinct ports drawn as free_port() draws one.
inline std::vector<int> free_ports(std::size_t n) {
  std::vector<int> ports;
  while (ports.size() < n)
    if (int const p = free_port(); std::find(ports.begin(), ports.end(), p) == ports.end()) ports.push_back(p);
  return ports;
}

/// Runs `scenario` in `n` child processes; returns their exit codes (128 + signal when killed,
/// -1 when killed at the deadline).
inline std::vector<int> spawn_ranks(std::string const& scenario, int n, std::chrono::seconds limit,
                                    std::vector<std::string> const& extra_env = {}) {
  int const port = free_port();
  std::vector<pid_t> pids(static_cast<std::size_t>(n), -1);
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      std::string const v = *e;
      if (v.rfind("RANK=", 0) == 0 || v.rfind("WORLD_SIZE=", 0) == 0 || v.rfind("MASTER_", 0) == 0) continue;
      env.push_back(v);
    }
    env.push_back("SLUICE_TEST_CHILD=" + scenario);
    env.push_back("RANK=" + std::to_string(r));
    env.push_back("WORLD_SIZE=" + std::to_string(n));
    env.push_back("MASTER_ADDR=127.0.0.1");
    env.push_back("MASTER_PORT=" + std::to_string(port));
    for (auto const& e : extra_env) env.push_back(e);
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string exe = "/proc/self/exe";
    char* argv[] = {exe.data(), nullptr};
    pid_t pid = -1;
    if (posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, envp.data()) == 0)
      pids[static_cast<std::size_t>(r)] = pid;
  }
  std::vector<int> codes(static_cast<std::size_t>(n), -1);
  std::vector<bool> done(static_cast<std::size_t>(n), false);
  auto const end = std::chrono::steady_clock::now() + limit;
  for (int left = n; left > 0 && std::chrono::steady_clock::now() < end;) {
    for (int r = 0; r < n; ++r) {
      auto const ur = static_cast<std::size_t>(r);
      if (done[ur]) continue;
      if (pids[ur] < 0) {
        done[ur] = true;
        --left;
        continue;
      }
      int status = 0;
      if (::waitpid(pids[ur], &status, WNOHANG) == pids[ur]) {
        codes[ur] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        done[ur] = true;
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int r = 0; r < n; ++r) {
    auto const ur = static_cast<std::size_t>(r);
    if (done[ur] || pids[ur] < 0) continue;
    ::kill(pids[ur], SIGKILL);
    int status = 0;
    ::waitpid(pids[ur], &status, 0);
    std::fprintf(stderr, "spawn_ranks: rank %d of '%s' killed at the %llds deadline\n", r, scenario.c_str(),
                 static_cast<long long>(limit.count()));
  }
  return codes;
}

}  // namespace sluice::test

#define SLUICE_SCENARIO_CAT2(a, b) a##b
#define SLUICE_SCENARIO_CAT(a, b) SLUICE_SCENARIO_CAT2(a, b)
/// Registers `int name_fn()` as the child scenario `name`.
#define SLUICE_CHILD_SCENARIO(name)                                                   \
  static int SLUICE_SCENARIO_CAT(scenario_, name)();                                  \
  static ::sluice::test::scenario_registrar SLUICE_SCENARIO_CAT(scenario_reg_, name)( \
      #name, &SLUICE_SCENARIO_CAT(scenario_, name));                                  \
  static int SLUICE_SCENARIO_CAT(scenario_, name)()

int main(int argc, char** argv) {
  if (char const* child = std::getenv("SLUICE_TEST_CHILD")) {
    auto it = sluice::test::scenarios().find(child);
    if (it == sluice::test::scenarios().end()) {
      std::fprintf(stderr, "unknown scenario %s\n", child);
      return 2;
    }
    try {
      return it->second();
    } catch (std::exception const& e) {
      std::fprintf(stderr, "scenario %s, rank %s: %s\n", child, std::getenv("RANK"), e.what());
      return 1;
    }
  }
  doctest::Context context(argc, argv);
  return context.run();
}
