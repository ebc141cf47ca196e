// The pipeline over ZeroMQ processes on loopback (torchrun-style rendezvous): a checkpoint saved
// after step k and restored in fresh processes continues bit-identically to the uninterrupted run;
// a process that dies mid-step leaves every other rank with peer_lost or timeout, no hang.
#include "support/spawn.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <sluice/transport/zmq.hpp>

#include "pipeline/pipeline_testing.hpp"

using namespace sluice;
using namespace std::chrono_literals;

namespace {

constexpr int world = 3, steps = 6, k = 3;

std::filesystem::path dir() { return std::getenv("SLUICE_TEST_DIR"); }
void write_file(std::filesystem::path const& p, std::span<std::byte const> bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<char const*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}
std::vector<std::byte> read_file(std::filesystem::path const& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> b(c.size());
  std::memcpy(b.data(), c.data(), c.size());
  return b;
}
std::vector<std::byte> flat(test::model_params const& p) {
  std::vector<std::byte> out;
  for (auto const& t : p.tensors) serial::append(out, std::as_bytes(std::span<float const>(t)));
  return out;
}

// Runs steps [from, to) of one rank; restores from `restore` first when given, saves to `save` at the end.
int run(int from, int to, char const* restore, char const* save, char const* result) {
  zmq_transport t;
  int const r = t.rank();
  test::model_params p(test::model());
  pipeline pipe{maxmin_quantize{.bits = 4}, residual{}, adam{.lr = 1e-2}, t, test::small_buckets(2)};
  auto spans = p.spans();
  pipe.attach(test::model(), spans);
  auto file = [&](char const* what) { return dir() / (std::string(what) + "." + std::to_string(r)); };
  if (restore) pipe.restore(read_file(file(restore)));
  if (pipe.steps() != static_cast<std::uint64_t>(from)) return 30;
  std::vector<std::vector<float>> g;
  for (int s = from; s < to; ++s) {
    test::gradients(r, static_cast<std::uint64_t>(s), p, g);
    pipe.step(test::views(g));
  }
  if (save) write_file(file(save), pipe.save());
  if (result) {
    pipe.synchronize();
    write_file(file(result), flat(p));
  }
  return 0;
}

}  // namespace

SLUICE_CHILD_SCENARIO(straight) { return run(0, steps, nullptr, nullptr, "straight"); }
SLUICE_CHILD_SCENARIO(first) { return run(0, k, nullptr, "checkpoint", nullptr); }
SLUICE_CHILD_SCENARIO(resume) { return run(k, steps, "checkpoint", nullptr, "resumed"); }

// Rank 1 exits (without closing anything) in the middle of step 2; the others must raise.
SLUICE_CHILD_SCENARIO(dies) {
  zmq_transport t({.peer_lost_grace = 100ms, .linger = 0ms});
  int const r = t.rank();
  test::model_params p(test::model());
  pipeline_options o = test::small_buckets(1);
  o.timeout = 5s;
  pipeline pipe{block_top_k{.ratio = 0.05}, residual{}, adam{.lr = 1e-2}, t, o};
  auto spans = p.spans();
  pipe.attach(test::model(), spans);
  return test::run_until_peer_dies(pipe, r, 1, p);
}

TEST_CASE("pipeline over ZeroMQ processes: checkpoint, restore in fresh processes, continue bit-identically") {
  auto const tmp = std::filesystem::temp_directory_path() / ("sluice-pipeline-" + std::to_string(::getpid()));
  std::filesystem::create_directories(tmp);
  std::vector<std::string> const env{"SLUICE_TEST_DIR=" + tmp.string()};
  for (char const* scenario : {"straight", "first", "resume"}) {
    CAPTURE(scenario);
    auto const codes = test::spawn_ranks(scenario, world, 120s, env);
    for (int c : codes) CHECK(c == 0);
  }
  for (int r = 0; r < world; ++r) {
    auto const a = read_file(tmp / ("straight." + std::to_string(r)));
    auto const b = read_file(tmp / ("resumed." + std::to_string(r)));
    CHECK(a.size() == test::model().total_elements() * sizeof(float));
    CHECK(a == b);
    CHECK(a == read_file(tmp / "straight.0"));  // replicas bit-identical
  }
  std::filesystem::remove_all(tmp);
}

TEST_CASE("pipeline over ZeroMQ processes: a process dying mid-step -> every other rank raises, no hang") {
  auto const codes = test::spawn_ranks("dies", 4, 90s);
  for (int c : codes) CHECK(c == 0);
}
