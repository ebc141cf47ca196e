// Fault trials: every collective, over local threads and over ZeroMQ processes, SLUICE_FAULT_TRIALS
// trials (default 1, as ctest runs it; scripts/faults.sh runs 50) of each fault: kill, stall past the deadline, drop,
// duplicate and corrupt, at a send that moves with the trial, on a rank that moves with the trial.
// Every rank of every trial must end with the correct bits (the same on every rank) or raise a
// sluice::error; a rank that finishes with other bits, a foreign exception, or a trial that does
// not end is counted. Prints a table (transport, collective, fault, trials, all correct, raised,
// silent disagreement, hang) and fails on any disagreement or hang.
#include "support/spawn.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <sluice/collective/all.hpp>
#include <sluice/transport/fault.hpp>
#include <sluice/transport/zmq.hpp>

#include "collective/collective_checks.hpp"
#include "support/local_world.hpp"

using namespace sluice;
using namespace std::chrono_literals;

namespace {

enum class fault { kill, stall, drop, duplicate, corrupt };
constexpr fault all_faults[] = {fault::kill, fault::stall, fault::drop, fault::duplicate, fault::corrupt};
char const* name(fault f) {
  switch (f) {
    case fault::kill:
      return "kill";
    case fault::stall:
      return "stall";
    case fault::drop:
      return "drop";
    case fault::duplicate:
      return "duplicate";
    case fault::corrupt:
      return "corrupt";
  }
  return "?";
}

constexpr int world = 4;
constexpr std::size_t n = 1000;  // two chunks in the chunked variants
constexpr auto timeout = 300ms;

int trials() {
  char const* v = std::getenv("SLUICE_FAULT_TRIALS");
  return v ? std::max(1, std::atoi(v)) : 1;
}

// The fault of trial `i`: at send i % 4 of rank i % world (a send of the collective, or none).
fault_plan plan_for(fault f, int i) {
  std::int64_t const k = i % 4;
  switch (f) {
    case fault::kill:
      return {.kill_at_send = k};
    case fault::stall:
      return {.stall_send = k, .stall = 2 * timeout};
    case fault::drop:
      return {.drop_send = k};
    case fault::duplicate:
      return {.duplicate_send = k};
    case fault::corrupt:
      return {.corrupt_send = k, .corrupt_offset = static_cast<std::size_t>(37 * i % 400)};
  }
  return {};
}

collective_context ctx_for(int i) {
  return {.step = static_cast<std::uint64_t>(i) + 1,
          .tensor = 7,
          .seed = 5,
          .timeout = timeout,
          .tag = message_tag{16 * static_cast<std::uint32_t>(i % 64)}};
}

// One rank's outcome: 'r' raised a sluice::error, 'x' raised something else, else 'c' with the
// hash of its bits (checked against the reference by the caller).
struct rank_outcome {
  char kind = 'x';
  std::uint64_t hash = 0;
  bool correct = false;
};

template <class T>
rank_outcome run_one(T& t, test::algo a, int i) {
  auto const ctx = ctx_for(i);
  try {
    auto out = test::run(t, a, n, ctx);
    return {'c', test::hash_of(out), test::matches(a, out, test::reference_sum(world, n, ctx.step), world)};
  } catch (error const&) {
    return {'r', 0, false};
  } catch (...) {
    return {'x', 0, false};
  }
}

struct tally {
  int trials = 0, all_correct = 0, raised = 0, disagreement = 0, hang = 0;
};

void classify(tally& row, std::vector<rank_outcome> const& ranks) {
  ++row.trials;
  bool bad = false, any_raised = false;
  std::optional<std::uint64_t> bits;
  for (auto const& o : ranks) {
    if (o.kind == 'r') {
      any_raised = true;
      continue;
    }
    if (o.kind != 'c' || !o.correct || (bits && *bits != o.hash)) bad = true;
    bits = o.hash;
  }
  if (bad)
    ++row.disagreement;
  else if (any_raised)
    ++row.raised;
  else
    ++row.all_correct;
}

std::string table_line(char const* transport, test::algo a, fault f, tally const& t) {
  return fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} |", transport, test::name(a), name(f), t.trials,
                     t.all_correct, t.raised, t.disagreement, t.hang);
}

}  // namespace

// A ZeroMQ child: every trial of one (collective, fault), one line per trial into SLUICE_FAULT_OUT.
SLUICE_CHILD_SCENARIO(trials) {
  zmq_transport t({.peer_lost_grace = 100ms});
  auto const a = static_cast<test::algo>(std::atoi(std::getenv("SLUICE_TEST_ALGO")));
  auto const f = static_cast<fault>(std::atoi(std::getenv("SLUICE_FAULT")));
  std::ofstream out(fmt::format("{}.{}", std::getenv("SLUICE_FAULT_OUT"), t.rank()));
  for (int i = 0; i < trials(); ++i) {
    rank_outcome o;
    if (t.rank() == i % world) {
      faulty ft(t, plan_for(f, i));
      o = run_one(ft, a, i);
    } else {
      o = run_one(t, a, i);
    }
    out << i << ' ' << o.kind << ' ' << o.hash << ' ' << (o.correct ? 1 : 0) << '\n' << std::flush;
    t.barrier(deadline::after(20s));  // every rank is out of trial i before trial i + 1 starts
  }
  return 0;
}

TEST_CASE("fault trials: every collective over local threads and ZeroMQ processes") {
  std::vector<std::string> lines{
      "| transport | collective | fault | trials | all correct | raised | silent disagreement | hang |",
      "|---|---|---|---|---|---|---|---|"};
  int bad = 0;
  for (auto a : test::all_algos()) {
    for (fault f : all_faults) {
      tally row;
      for (int i = 0; i < trials(); ++i) {
        std::vector<rank_outcome> ranks(world);
        auto errors = test::run_local(world, [&](local_transport& t) {
          auto& o = ranks[static_cast<std::size_t>(t.rank())];
          if (t.rank() == i % world) {
            faulty ft(t, plan_for(f, i));
            o = run_one(ft, a, i);
          } else {
            o = run_one(t, a, i);
          }
        });
        classify(row, ranks);
      }
      bad += row.disagreement + row.hang;
      lines.push_back(table_line("local", a, f, row));
      std::puts(lines.back().c_str());
    }
  }
  auto const dir = std::filesystem::temp_directory_path() / fmt::format("sluice-fault-trials-{}", ::getpid());
  std::filesystem::create_directories(dir);
  for (auto a : test::all_algos()) {
    for (fault f : all_faults) {
      auto const base = (dir / fmt::format("{}-{}", static_cast<int>(a), static_cast<int>(f))).string();
      auto const limit = std::chrono::seconds(30 + 3 * trials());
      auto codes =
          test::spawn_ranks("trials", world, limit,
                            {"SLUICE_TEST_ALGO=" + std::to_string(static_cast<int>(a)),
                             "SLUICE_FAULT=" + std::to_string(static_cast<int>(f)), "SLUICE_FAULT_OUT=" + base});
      std::map<int, std::vector<rank_outcome>> by_trial;
      for (int r = 0; r < world; ++r) {
        std::ifstream in(fmt::format("{}.{}", base, r));
        int i = 0, correct = 0;
        rank_outcome o;
        while (in >> i >> o.kind >> o.hash >> correct) {
          o.correct = correct != 0;
          by_trial[i].push_back(o);
        }
      }
      tally row;
      for (int i = 0; i < trials(); ++i) {
        auto it = by_trial.find(i);
        if (it == by_trial.end() || it->second.size() != static_cast<std::size_t>(world)) {
          ++row.trials;
          ++row.hang;  // a rank never finished the trial (killed at the deadline) or crashed
          continue;
        }
        classify(row, it->second);
      }
      for (int c : codes)
        if (c != 0) ++row.hang;
      bad += row.disagreement + row.hang;
      lines.push_back(table_line("zmq", a, f, row));
      std::puts(lines.back().c_str());
    }
  }
  std::filesystem::remove_all(dir);
  if (char const* report = std::getenv("SLUICE_FAULT_REPORT")) {
    std::ofstream out(report);
    for (auto const& l : lines) out << l << '\n';
  }
  CHECK(bad == 0);
}
