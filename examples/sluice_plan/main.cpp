// sluice-plan: describe workers, links, the model's tensors and the codec candidates in JSON; get
// the configuration the solver picks (codec, per-worker batches, bucket cap, staleness), its
// predicted step time and time-to-accuracy, and the runner-up configurations.
//
//   sluice-plan job.json                 # text report
//   sluice-plan job.json --json          # the same as JSON
//   sluice-plan job.json --mbps 50       # what if every link level ran at 50 Mbit/s
//   sluice-plan --example                # prints an input to start from
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <sluice/solver/all.hpp>

namespace {

using json = nlohmann::json;
using sluice::errc;
using sluice::require;

// Numbers read from untrusted JSON: checked for kind and range with a message naming the field.
double number(json const& j, char const* key, std::string const& where, double fallback, double min = 0) {
  if (!j.contains(key)) return fallback;
  require(j[key].is_number(), errc::invalid_argument, "{}: '{}' must be a number", where, key);
  double const v = j[key].get<double>();
  require(std::isfinite(v) && v >= min, errc::invalid_argument, "{}: '{}' is {}; it must be >= {}", where, key, v, min);
  return v;
}
// An integer field in [min, max], checked before any conversion (a value past the field's type or
// its sane range is refused, never truncated), with a message naming the field.
std::uint64_t integer(json const& v, std::string const& what, std::uint64_t min, std::uint64_t max) {
  bool const fits = v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0);
  require(fits && v.get<std::uint64_t>() >= min && v.get<std::uint64_t>() <= max, errc::invalid_argument,
          "{}: {} must be an integer in [{}, {}]", what, v.dump(), min, max);
  return v.get<std::uint64_t>();
}
std::size_t count(json const& v, std::string const& what, std::size_t min, std::uint64_t max) {
  return static_cast<std::size_t>(integer(v, what, min, max));
}
// Ranges of the fields whose type or meaning is narrower than 2^40.
constexpr std::uint64_t max_bits = 8;                   // maxmin_quantize's widest code
constexpr std::uint64_t max_codec_bucket = 1u << 20;    // elements; the codecs check their own narrower ranges
constexpr std::uint64_t max_bucket_cap_mib = 1u << 20;  // 1 TiB: the cap is held in memory
constexpr std::uint64_t max_staleness = 2;              // what the solver models
constexpr std::uint64_t max_repeat = 4096;              // copies of one model entry
constexpr std::size_t max_tensors = 65536;              // tensors in the whole model
constexpr std::uint64_t batch_limit = 1u << 24;         // samples per worker or per step
json const& list(json const& j, char const* key) {
  require(j.contains(key) && j[key].is_array() && !j[key].empty(), errc::invalid_argument,
          "input: '{}' must be a non-empty array", key);
  return j[key];
}

sluice::codec_value parse_codec(json const& c, std::string const& where) {
  require(c.is_object() && c.contains("codec") && c["codec"].is_string(), errc::invalid_argument,
          "{}: needs \"codec\": one of identity, top_k, block_top_k, maxmin_quantize", where);
  auto const name = c["codec"].get<std::string>();
  if (name == "identity") return sluice::identity{};
  if (name == "top_k") return sluice::top_k{.ratio = number(c, "ratio", where, 0.01)};
  if (name == "block_top_k")
    return sluice::block_top_k{
        .ratio = number(c, "ratio", where, 0.01),
        .block = c.contains("block") ? count(c["block"], where + " block", 1, max_codec_bucket) : 16};
  if (name == "maxmin_quantize")
    return sluice::maxmin_quantize{
        .bits = static_cast<unsigned>(c.contains("bits") ? integer(c["bits"], where + " bits", 1, max_bits) : 4),
        .bucket = c.contains("bucket") ? count(c["bucket"], where + " bucket", 1, max_codec_bucket) : 1024};
  sluice::throw_error(errc::invalid_argument, "{}: unknown codec '{}' (identity, top_k, block_top_k, maxmin_quantize)",
                      where, name);
}

// A number in (0, max] (a rate or a speed), with a message naming the field.
double positive(json const& j, char const* key, std::string const& where, double fallback, double max) {
  if (!j.contains(key)) return fallback;
  require(j[key].is_number(), errc::invalid_argument, "{}.{} must be a number", where, key);
  double const v = j[key].get<double>();
  require(std::isfinite(v) && v > 0 && v <= max, errc::invalid_argument, "{}.{} is {}; it must be in (0, {:g}]", where,
          key, v, max);
  return v;
}
constexpr double max_mbps = 1e7;        // 10 Tbit/s
constexpr double max_latency_us = 1e7;  // 10 s
constexpr double max_gpu_speed = 1000;  // relative to the workers' fit

// "topology": two tiers, `groups` groups of `group_size` consecutive ranks; the groups' own path
// (intra_mbps, intra_latency_us) and the link between groups (inter_mbps, inter_latency_us) become
// the two link levels; `exchange` is hierarchical (by_hierarchical: the codec runs between the
// group leaders), flat, or auto (the default: the one predicted to reach the target sooner,
// sluice::choose_exchange); `gpu_speeds` (one per rank) divide the workers' compute fit, and a single
// "workers" entry stands for every rank.
// Returns whether the exchange is left to the solver ("auto").
bool parse_topology(json const& t, sluice::problem& p) {
  std::string const where = "topology";
  require(t.is_object(), errc::invalid_argument,
          "topology must be an object: {{\"groups\": G, \"group_size\": S, "
          "\"intra_mbps\": ..., \"inter_mbps\": ...}}");
  for (char const* key : {"groups", "group_size", "inter_mbps"})
    require(t.contains(key), errc::invalid_argument, "topology: '{}' is missing", key);
  std::size_t const groups = count(t["groups"], "topology.groups", 1, 1u << 20);
  std::size_t const size = count(t["group_size"], "topology.group_size", 1, 1u << 20);
  std::size_t const ranks = groups * size;
  std::string x = "auto";
  if (t.contains("exchange")) {
    require(t["exchange"].is_string(), errc::invalid_argument,
            "topology.exchange must be \"auto\", \"hierarchical\" or \"flat\"");
    x = t["exchange"].get<std::string>();
    require(x == "auto" || x == "hierarchical" || x == "flat", errc::invalid_argument,
            "topology.exchange is '{}'; it must be \"auto\", \"hierarchical\" or \"flat\"", x);
  }
  p.exchange = x == "hierarchical" ? sluice::exchange_kind::hierarchical : sluice::exchange_kind::flat;
  bool const auto_exchange = x == "auto";
  if (p.workers.size() == 1 && ranks > 1) p.workers.resize(ranks, p.workers.front());
  require(p.workers.size() == ranks, errc::invalid_argument,
          "topology.groups x topology.group_size is {} ranks but \"workers\" lists {}; list one worker per rank, or "
          "one for all",
          ranks, p.workers.size());
  if (t.contains("gpu_speeds")) {
    require(t["gpu_speeds"].is_array() && t["gpu_speeds"].size() == ranks, errc::invalid_argument,
            "topology.gpu_speeds must be an array of {} speeds, one per rank", ranks);
    for (std::size_t r = 0; r < ranks; ++r) {
      json const one{{"speed", t["gpu_speeds"][r]}};
      double const v = positive(one, "speed", fmt::format("topology.gpu_speeds[{}]", r), 1, max_gpu_speed);
      p.workers[r].compute.fixed_seconds /= v;
      p.workers[r].compute.per_sample_seconds /= v;
    }
  }
  auto const latency = [&](char const* key, double fallback) {
    double const v = number(t, key, where, fallback);
    require(v <= max_latency_us, errc::invalid_argument, "topology.{} is {}; it must be in [0, {:g}]", key, v,
            max_latency_us);
    return v * 1e-6;
  };
  p.links = {{size, positive(t, "intra_mbps", where, 10000, max_mbps) * 1e6 / 8, latency("intra_latency_us", 20)},
             {groups, positive(t, "inter_mbps", where, 100, max_mbps) * 1e6 / 8, latency("inter_latency_us", 200)}};
  return auto_exchange;
}

struct input {
  sluice::problem problem;
  bool auto_exchange = false;  // topology.exchange "auto": choose_exchange decides
};

input parse_problem(json const& j) {
  require(j.is_object(), errc::invalid_argument, "input: the top level must be an object");
  input in;
  sluice::problem& p = in.problem;
  std::size_t i = 0;
  for (auto const& w : list(j, "workers")) {
    std::string const where = fmt::format("workers[{}]", i++);
    sluice::worker_desc d;
    if (w.contains("samples")) {  // measured (batch, seconds) pairs, fitted by least squares
      sluice::compute_samples cs;
      require(w["samples"].is_array(), errc::invalid_argument, "{}: samples must be [[batch, seconds], ...]", where);
      for (auto const& s : w["samples"]) {
        require(s.is_array() && s.size() == 2 && s[1].is_number(), errc::invalid_argument,
                "{}: each sample is [batch, seconds]", where);
        cs.observe(count(s[0], where + " sample batch", 1, batch_limit), s[1].get<double>());
      }
      d.compute = cs.fit();
    } else {
      d.compute = {number(w, "fixed_seconds", where, 0), number(w, "per_sample_seconds", where, -1, -1)};
    }
    if (w.contains("max_batch")) d.max_batch = count(w["max_batch"], where + " max_batch", 1, batch_limit);
    p.workers.push_back(d);
  }
  if (j.contains("topology")) {
    require(!j.contains("links"), errc::invalid_argument,
            "input: give either \"links\" or \"topology\" (which makes the two link levels), not both");
    in.auto_exchange = parse_topology(j["topology"], p);
  } else {
    i = 0;
    for (auto const& l : list(j, "links")) {
      std::string const where = fmt::format("links[{}]", i++);
      p.links.push_back({l.contains("group") ? count(l["group"], where + " group", 1, 1u << 20) : p.workers.size(),
                         number(l, "mbps", where, 1000, -1) * 1e6 / 8, number(l, "latency_us", where, 50) * 1e-6});
    }
  }
  i = 0;
  for (auto const& t : list(j, "model")) {
    std::string const where = fmt::format("model[{}]", i++);
    require(t.contains("name") && t["name"].is_string() && t.contains("shape") && t["shape"].is_array(),
            errc::invalid_argument, "{}: needs \"name\" and \"shape\"", where);
    std::vector<std::size_t> shape;
    for (auto const& d : t["shape"]) shape.push_back(count(d, where + " shape", 0, std::uint64_t{1} << 40));
    std::size_t const repeat = t.contains("repeat") ? count(t["repeat"], where + " repeat", 1, max_repeat) : 1;
    require(p.model.tensors().size() + repeat <= max_tensors, errc::invalid_argument,
            "{}: repeat {} makes the model more than {} tensors", where, repeat, max_tensors);
    for (std::size_t r = 0; r < repeat; ++r)
      p.model.add(repeat == 1 ? t["name"].get<std::string>() : fmt::format("{}.{}", t["name"].get<std::string>(), r),
                  shape);
  }
  i = 0;
  for (auto const& c : list(j, "codecs")) {
    std::string const where = fmt::format("codecs[{}]", i++);
    p.codecs.push_back({parse_codec(c, where), number(c, "encode_ns_per_byte", where, 0.05) * 1e-9});
  }
  p.global_batches.clear();
  for (auto const& g : list(j, "global_batches"))
    p.global_batches.push_back(count(g, "global_batches", 1, batch_limit));
  if (j.contains("bucket_caps_mib")) {
    p.bucket_caps.clear();
    for (auto const& c : list(j, "bucket_caps_mib"))
      p.bucket_caps.push_back(count(c, "bucket_caps_mib", 1, max_bucket_cap_mib) << 20);
  }
  if (j.contains("staleness")) {
    p.staleness.clear();
    for (auto const& s : list(j, "staleness"))
      p.staleness.push_back(static_cast<int>(count(s, "staleness", 0, max_staleness)));
  }
  p.apply_seconds_per_byte = number(j, "apply_ns_per_byte", "input", 0.07) * 1e-9;
  if (j.contains("efficiency")) {
    auto const& e = j["efficiency"];
    p.efficiency.reference_steps = number(e, "reference_steps", "efficiency", p.efficiency.reference_steps);
    p.efficiency.reference_batch = number(e, "reference_batch", "efficiency", p.efficiency.reference_batch);
    p.efficiency.noise_scale = number(e, "noise_scale", "efficiency", p.efficiency.noise_scale);
    if (e.contains("compression_curve")) {
      require(e["compression_curve"].is_array(), errc::invalid_argument,
              "efficiency: compression_curve must be [[density, step multiplier], ...]");
      p.efficiency.compression_curve.clear();
      for (auto const& pt : e["compression_curve"]) {
        require(pt.is_array() && pt.size() == 2 && pt[0].is_number() && pt[1].is_number(), errc::invalid_argument,
                "efficiency: compression_curve points are [density, step multiplier]");
        p.efficiency.compression_curve.push_back({pt[0].get<double>(), pt[1].get<double>()});
      }
    }
    if (e.contains("staleness")) {
      require(e["staleness"].is_array() && e["staleness"].size() == 3, errc::invalid_argument,
              "efficiency: staleness is [m0, m1, m2]");
      for (std::size_t s = 0; s < 3; ++s) {
        require(e["staleness"][s].is_number(), errc::invalid_argument, "efficiency: staleness[{}] must be a number", s);
        p.efficiency.staleness[s] = e["staleness"][s].get<double>();
      }
    }
    if (e.contains("runs")) {
      // Measured steps to the target (fit_efficiency): they replace reference_steps, the
      // staleness multipliers they measure and the compression curve.
      std::vector<sluice::efficiency_run> runs;
      std::size_t k = 0;
      for (auto const& r : list(e, "runs")) {
        std::string const where = fmt::format("efficiency.runs[{}]", k++);
        require(r.is_object() && r.contains("global_batch") && r.contains("steps"), errc::invalid_argument,
                "{}: a run is {{\"density\": d (default 1), \"staleness\": s (default 0), \"global_batch\": b, "
                "\"steps\": n}}",
                where);
        runs.push_back({number(r, "density", where, 1.0),
                        static_cast<int>(count(r.contains("staleness") ? r["staleness"] : json(0), where + " staleness",
                                               0, max_staleness)),
                        count(r["global_batch"], where + " global_batch", 1, batch_limit),
                        number(r, "steps", where, -1)});
      }
      p.efficiency = sluice::fit_efficiency(runs, p.efficiency);
    }
  }
  return in;
}

sluice::config_request parse_fixed(json const& j) {
  sluice::config_request r;
  if (!j.contains("fixed")) return r;
  auto const& f = j["fixed"];
  if (f.contains("codec")) r.codec = parse_codec(f["codec"], "fixed.codec");
  if (f.contains("global_batch")) r.global_batch = count(f["global_batch"], "fixed.global_batch", 1, batch_limit);
  if (f.contains("batches")) {
    std::vector<std::size_t> b;
    require(f["batches"].is_array(), errc::invalid_argument, "fixed.batches must be an array, one batch per worker");
    for (auto const& x : f["batches"]) b.push_back(count(x, "fixed.batches", 1, batch_limit));
    r.batches = std::move(b);
  }
  if (f.contains("bucket_cap_mib"))
    r.bucket_cap_bytes = count(f["bucket_cap_mib"], "fixed.bucket_cap_mib", 1, max_bucket_cap_mib) << 20;
  if (f.contains("staleness"))
    r.staleness = static_cast<int>(count(f["staleness"], "fixed.staleness", 0, max_staleness));
  return r;
}

json to_json(sluice::plan const& p) {
  auto const& s = p.predicted.stages;
  return {{"codec", fmt::format("{}", p.codec)},
          {"density", sluice::density(p.codec)},
          {"global_batch", p.global_batch},
          {"batches", p.batches},
          {"bucket_cap_mib", static_cast<double>(p.bucket_cap_bytes) / (1 << 20)},
          {"staleness", p.staleness},
          {"step_seconds", p.predicted.step_seconds},
          {"steps_to_target", p.predicted.steps_to_target},
          {"time_to_accuracy_seconds", p.predicted.time_to_accuracy},
          {"bytes_per_step", p.predicted.bytes_per_step},
          {"stages",
           {{"compute", s.compute},
            {"encode", s.encode},
            {"exchange", s.exchange},
            {"apply", s.apply},
            {"pipelined", s.pipelined}}}};
}

// The exchange the plan is for, and (auto) what the other one would take.
struct exchange_note {
  bool hierarchical = false;
  sluice::plan const* other = nullptr;  // auto: the other exchange's best plan
};

void print_text(std::vector<sluice::plan> const& r, std::vector<double> const& bw, exchange_note const& x) {
  std::string links;
  for (double b : bw) links += fmt::format("{}{:g}", links.empty() ? "" : ", ", b * 8e-6);
  auto const& b = r.front();
  fmt::print("links [{}] Mbit/s\n", links);
  if (x.hierarchical)
    fmt::print("exchange hierarchical: groups sum on their leaders; the codec runs between the leaders\n");
  else if (x.other)
    fmt::print("exchange flat: every rank runs the codec's collective over every link\n");
  if (x.other)
    fmt::print("  chosen over {}: its best plan ({}) reaches the target in {:.0f} s (+{:.1f}%)\n",
               x.hierarchical ? "flat" : "hierarchical", x.other->codec, x.other->predicted.time_to_accuracy,
               100 * (x.other->predicted.time_to_accuracy / b.predicted.time_to_accuracy - 1));
  fmt::print("chosen: {}\n  batches {} (global {}), bucket cap {:g} MiB, staleness {}\n", b.codec,
             fmt::join(b.batches, " "), b.global_batch, static_cast<double>(b.bucket_cap_bytes) / (1 << 20),
             b.staleness);
  fmt::print(
      "  step {:.4f} s (compute {:.4f}, encode {:.4f}, exchange {:.4f}, apply {:.4f}), {:.3g} MB sent per step\n",
      b.predicted.step_seconds, b.predicted.stages.compute, b.predicted.stages.encode, b.predicted.stages.exchange,
      b.predicted.stages.apply, b.predicted.bytes_per_step * 1e-6);
  fmt::print("  time to accuracy {:.0f} s ({:.0f} steps)\n", b.predicted.time_to_accuracy, b.predicted.steps_to_target);
  if (r.size() > 1) fmt::print("runner-ups:\n");
  for (std::size_t i = 1; i < r.size(); ++i)
    fmt::print("  {}. {} global {} cap {:g} MiB s={}: step {:.4f} s, time to accuracy {:.0f} s (+{:.1f}%)\n", i + 1,
               r[i].codec, r[i].global_batch, static_cast<double>(r[i].bucket_cap_bytes) / (1 << 20), r[i].staleness,
               r[i].predicted.step_seconds, r[i].predicted.time_to_accuracy,
               100 * (r[i].predicted.time_to_accuracy / b.predicted.time_to_accuracy - 1));
}

char const* const example_input = R"({
  "workers": [{"fixed_seconds": 0.01, "per_sample_seconds": 0.006, "max_batch": 16},
              {"samples": [[2, 0.039], [4, 0.063], [8, 0.111]], "max_batch": 8}],
  "links": [{"group": 2, "mbps": 100, "latency_us": 200}],
  "model": [{"name": "embedding", "shape": [50257, 768]}, {"name": "block", "shape": [768, 3072], "repeat": 24},
            {"name": "biases", "shape": [100000]}],
  "codecs": [{"codec": "identity"}, {"codec": "maxmin_quantize", "bits": 4, "encode_ns_per_byte": 0.04},
             {"codec": "top_k", "ratio": 0.01, "encode_ns_per_byte": 0.05},
             {"codec": "block_top_k", "ratio": 0.003, "block": 16, "encode_ns_per_byte": 0.03}],
  "global_batches": [8, 16, 24],
  "bucket_caps_mib": [4, 25],
  "staleness": [0, 1, 2],
  "apply_ns_per_byte": 0.07,
  "efficiency": {"reference_steps": 50000, "reference_batch": 16, "noise_scale": 1024,
                 "compression_curve": [[1, 1], [0.1, 1.05], [0.01, 1.25], [0.001, 2]],
                 "staleness": [1, 1.05, 1.15]},
  "fixed": {"staleness": 1}
}
)";

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "sluice-plan: picks the codec, per-worker batch sizes, bucket cap and staleness that minimise predicted "
      "time-to-accuracy for the workers, links and model described in a JSON file (docs/solver.md)."};
  std::string input;
  std::size_t runner_ups = 3;
  std::vector<double> mbps;
  bool as_json = false, example = false;
  app.add_option("input", input, "JSON description (workers, links, model, codecs, ...); '-' reads stdin");
  app.add_option("--runner-ups,-n", runner_ups, "how many configurations to show after the chosen one")
      ->check(CLI::Range(0, 1000));
  app.add_option("--mbps", mbps, "override the link levels' bandwidths, Mbit/s, one per level");
  app.add_flag("--json", as_json, "print JSON instead of text");
  app.add_flag("--example", example, "print an example input and exit");
  CLI11_PARSE(app, argc, argv);
  if (example) {
    std::fputs(example_input, stdout);
    return 0;
  }
  if (input.empty()) {
    std::cerr << app.help();
    return 2;
  }
  try {
    json j;
    try {
      if (input == "-") {
        j = json::parse(std::cin);
      } else {
        std::ifstream f(input);
        require(f.good(), errc::invalid_argument, "cannot open '{}'", input);
        j = json::parse(f);
      }
    } catch (json::exception const& e) {
      sluice::throw_error(errc::invalid_argument, "input is not valid JSON: {}", e.what());
    }
    auto in = parse_problem(j);
    auto const req = parse_fixed(j);
    std::vector<double> bw;
    for (auto const& l : in.problem.links) bw.push_back(l.bytes_per_second);
    if (!mbps.empty()) {
      require(mbps.size() == bw.size(), errc::invalid_argument, "--mbps: {} values for {} link levels", mbps.size(),
              bw.size());
      for (std::size_t l = 0; l < bw.size(); ++l) bw[l] = mbps[l] * 1e6 / 8;
    }
    std::optional<sluice::exchange_choice> choice;
    if (in.auto_exchange) {
      choice = sluice::choose_exchange(in.problem, req, bw);
      in.problem.exchange = choice->exchange;
    }
    bool const hierarchical = in.problem.exchange == sluice::exchange_kind::hierarchical;
    exchange_note const note{hierarchical, choice ? (hierarchical ? &choice->flat : &choice->hierarchical) : nullptr};
    sluice::solver const s(std::move(in.problem));
    auto const r = s.ranked(req, bw, runner_ups + 1);
    if (as_json) {
      json out{{"bandwidths_mbps", json::array()},
               {"exchange", hierarchical ? "hierarchical" : "flat"},
               {"chosen", to_json(r.front())},
               {"runner_ups", json::array()}};
      if (note.other) out["other_exchange"] = to_json(*note.other);
      for (double b : bw) out["bandwidths_mbps"].push_back(b * 8e-6);
      for (std::size_t i = 1; i < r.size(); ++i) out["runner_ups"].push_back(to_json(r[i]));
      std::cout << out.dump(2) << "\n";
    } else {
      print_text(r, bw, note);
    }
  } catch (sluice::error const& e) {
    fmt::print(stderr, "sluice-plan: {}\n", e.what());
    return 1;
  } catch (json::exception const& e) {
    fmt::print(stderr, "sluice-plan: bad input: {}\n", e.what());
    return 1;
  }
  return 0;
}
