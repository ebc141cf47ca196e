// launcher: the variables a process launcher publishes (torchrun's RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, LOCAL_RANK; mpirun's and Slurm's node-local rank), read one way for every engine.
// Plain C++ (no engine headers), so the ZeroMQ and NCCL transports share it without pulling in
// each other's dependencies.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

#include <sluice/core/error.hpp>

namespace sluice::detail {

/// The value of environment variable `name`, or `fallback` when it is unset.
inline std::string env_or(char const* name, std::string fallback = {}) {
  char const* v = std::getenv(name);
  return v ? std::string(v) : fallback;
}

/// `v` as a decimal integer in [0, limit), or nothing when it is not one.
inline std::optional<int> parse_launcher_int(char const* v, long limit) {
  char* end = nullptr;
  long const x = std::strtol(v, &end, 10);
  if (end == nullptr || *end != '\0' || x < 0 || x >= limit) return std::nullopt;
  return static_cast<int>(x);
}

/// Environment variable `name` as a non-negative integer (RANK, WORLD_SIZE, MASTER_PORT), or
/// `fallback` when it is unset; any other value is errc::invalid_argument, reported for `who`.
inline int env_int(char const* name, int fallback, char const* who) {
  char const* v = std::getenv(name);
  if (!v) return fallback;
  std::optional<int> const x = parse_launcher_int(v, 1L << 30);
  require(x.has_value(), errc::invalid_argument, "{}: environment variable {}={} is not a non-negative integer", who,
          name, v);
  return *x;
}

/// The node-local rank the launcher published (LOCAL_RANK from torchrun, OMPI_COMM_WORLD_LOCAL_RANK
/// from mpirun, SLURM_LOCALID), or -1; unset, empty and malformed values are skipped.
inline int launcher_local_rank() {
  for (char const* name : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    char const* v = std::getenv(name);
    if (v == nullptr || *v == '\0') continue;
    if (std::optional<int> const x = parse_launcher_int(v, 1L << 20)) return *x;
  }
  return -1;
}

}  // namespace sluice::detail
