// The two-tier pipeline (by_hierarchical) over ZeroMQ processes on loopback, 4 ranks in 2 groups
// of 2: with per-rank batch sizes the parameters equal the reference p - sum_r b_r g_r / sum b
// (computed in double on every rank) and the replicas are bit-identical across processes; a member
// or a leader that dies mid-step leaves every other rank with peer_lost or timeout, no hang; with
// gathered frames a sparse codec leaves flat's bits.
#include "support/spawn.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <sluice/transport/zmq.hpp>

#include "pipeline/pipeline_testing.hpp"

using namespace sluice;
using namespace std::chrono_literals;

namespace {

constexpr int world = 4, ranks_per_group = 2, steps = 4;
std::vector<std::size_t> const batches{3, 1, 2, 6};  // sum 12

std::filesystem::path dir() { return std::getenv("SLUICE_TEST_DIR"); }
std::vector<char> read_file(std::filesystem::path const& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

// Dense fp32 through the two tiers, SGD with lr 1, staleness 0: each step's update is exactly the
// weighted average, so the parameters follow the reference step by step.
SLUICE_CHILD_SCENARIO(tiers_sum) {
  zmq_transport t;
  int const r = t.rank();
  test::model_params p(test::model());
  pipeline pipe{identity{}, no_feedback{},          sgd{.lr = 1.0},
                t,          test::small_buckets(0), by_hierarchical{.group_size = ranks_per_group}};
  auto spans = p.spans();
  pipe.attach(test::model(), spans);
  pipe.set_batch_sizes(batches);
  test::model_params ref(test::model());
  std::vector<std::vector<float>> g;
  std::vector<std::vector<std::vector<float>>> all(world);
  for (int s = 0; s < steps; ++s) {
    for (int q = 0; q < world; ++q)
      test::gradients(q, static_cast<std::uint64_t>(s), ref, all[static_cast<std::size_t>(q)]);
    test::gradients(r, static_cast<std::uint64_t>(s), p, g);
    pipe.step(test::views(g));
    for (std::size_t k = 0; k < ref.tensors.size(); ++k)
      for (std::size_t i = 0; i < ref.tensors[k].size(); ++i) {
        double sum = 0;
        for (int q = 0; q < world; ++q)
          sum += static_cast<double>(batches[static_cast<std::size_t>(q)]) * all[static_cast<std::size_t>(q)][k][i];
        ref.tensors[k][i] = static_cast<float>(ref.tensors[k][i] - sum / 12.0);
      }
  }
  pipe.synchronize();
  int bad = 0;
  for (std::size_t k = 0; k < ref.tensors.size(); ++k)
    for (std::size_t i = 0; i < ref.tensors[k].size(); ++i) {
      double const want = ref.tensors[k][i], got = p.tensors[k][i];
      if (!(std::fabs(got - want) <= 1e-5 * (1 + std::fabs(want)))) ++bad;
    }
  if (bad > 0) {
    std::fprintf(stderr, "rank %d: %d parameters differ from the reference sum\n", r, bad);
    return 50;
  }
  std::ofstream out(dir() / ("tiers." + std::to_string(r)), std::ios::binary);
  for (auto const& x : p.tensors)
    out.write(reinterpret_cast<char const*>(x.data()), static_cast<std::streamsize>(x.size() * sizeof(float)));
  return 0;
}

// top_k through the two tiers with gathered frames (SLUICE_TEST_GATHER=1), or flat through the
// sparse allgather: nothing bypasses compression, so both must leave the same bits.
SLUICE_CHILD_SCENARIO(tiers_frames) {
  bool const gather = std::getenv("SLUICE_TEST_GATHER")[0] == '1';
  zmq_transport t;
  int const r = t.rank();
  test::model_params p(test::model());
  pipeline_options o = test::small_buckets(1);
  o.bucketing.bypass_below_elements = 0;
  o.bucketing.bypass_max_dims = 0;
  auto const train = [&](auto choice) {
    pipeline pipe{top_k{.ratio = 0.05}, residual{}, adam{.lr = 1e-2}, t, o, choice};
    auto spans = p.spans();
    pipe.attach(test::model(), spans);
    std::vector<std::vector<float>> g;
    for (int s = 0; s < steps; ++s) {
      test::gradients(r, static_cast<std::uint64_t>(s), p, g);
      pipe.step(test::views(g));
    }
    pipe.synchronize();
  };
  if (gather)
    train(by_hierarchical{.group_size = ranks_per_group, .sparse = hierarchical_sparse::gather_frames});
  else
    train(by_sparse_allgather{});
  std::ofstream out(dir() / (std::string(gather ? "gathered." : "flat.") + std::to_string(r)), std::ios::binary);
  for (auto const& x : p.tensors)
    out.write(reinterpret_cast<char const*>(x.data()), static_cast<std::streamsize>(x.size() * sizeof(float)));
  return 0;
}

// Rank SLUICE_TEST_DYING (1: a member of group 0; 2: the leader of group 1) exits in the middle of
// step 2 without closing anything; every other rank must raise peer_lost or timeout in time.
SLUICE_CHILD_SCENARIO(tiers_dies) {
  int const dying = std::atoi(std::getenv("SLUICE_TEST_DYING"));
  zmq_transport t({.peer_lost_grace = 100ms, .linger = 0ms});
  int const r = t.rank();
  test::model_params p(test::model());
  pipeline_options o = test::small_buckets(1);
  o.timeout = 5s;
  bool const gather = std::getenv("SLUICE_TEST_GATHER")[0] == '1';
  pipeline pipe{
      top_k{.ratio = 0.05},
      residual{},
      adam{.lr = 1e-2},
      t,
      o,
      by_hierarchical{.group_size = ranks_per_group,
                      .sparse = gather ? hierarchical_sparse::gather_frames : hierarchical_sparse::sum_on_leader}};
  auto spans = p.spans();
  pipe.attach(test::model(), spans);
  return test::run_until_peer_dies(pipe, r, dying, p);
}

TEST_CASE("hierarchical over ZeroMQ processes: the weighted reference sum, replicas bit-identical") {
  auto const tmp = std::filesystem::temp_directory_path() / ("sluice-tiers-" + std::to_string(::getpid()));
  std::filesystem::create_directories(tmp);
  auto const codes = test::spawn_ranks("tiers_sum", world, 120s, {"SLUICE_TEST_DIR=" + tmp.string()});
  for (int c : codes) CHECK(c == 0);
  auto const first = read_file(tmp / "tiers.0");
  CHECK(first.size() == test::model().total_elements() * sizeof(float));
  for (int r = 1; r < world; ++r) CHECK(read_file(tmp / ("tiers." + std::to_string(r))) == first);
  std::filesystem::remove_all(tmp);
}

TEST_CASE("hierarchical over ZeroMQ processes: gathered frames leave flat's bits on every rank") {
  auto const tmp = std::filesystem::temp_directory_path() / ("sluice-frames-" + std::to_string(::getpid()));
  std::filesystem::create_directories(tmp);
  for (char const* gather : {"0", "1"})
    for (int c : test::spawn_ranks("tiers_frames", world, 120s,
                                   {"SLUICE_TEST_DIR=" + tmp.string(), std::string("SLUICE_TEST_GATHER=") + gather}))
      CHECK(c == 0);
  auto const flat = read_file(tmp / "flat.0");
  CHECK(flat.size() == test::model().total_elements() * sizeof(float));
  for (int r = 0; r < world; ++r) CHECK(read_file(tmp / ("gathered." + std::to_string(r))) == flat);
  std::filesystem::remove_all(tmp);
}

TEST_CASE("hierarchical over ZeroMQ processes: a member or a leader dying mid-step -> every other rank raises") {
  for (char const* gather : {"0", "1"})
    for (char const* dying : {"1", "2"}) {
      CAPTURE(gather);
      CAPTURE(dying);
      auto const codes =
          test::spawn_ranks("tiers_dies", world, 90s,
                            {std::string("SLUICE_TEST_DYING=") + dying, std::string("SLUICE_TEST_GATHER=") + gather});
      for (int c : codes) CHECK(c == 0);
    }
}
