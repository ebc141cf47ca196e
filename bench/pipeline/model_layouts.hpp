// The gradient layouts of real models (bench/pipeline/layouts/<model>.json, written by
// make_layouts.py), shared by the pipeline benchmarks.
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <sluice/bucket/layout.hpp>
#include <sluice/core/error.hpp>

namespace sluice::bench {

inline layout load_layout(std::string const& model) {
  std::ifstream in(std::string(SLUICE_BENCH_LAYOUTS) + "/" + model + ".json");
  if (!in) throw error(errc::invalid_argument, "bench_pipeline: no layout file for " + model);
  auto const j = nlohmann::json::parse(in);
  layout l;
  for (auto const& t : j.at("layout"))
    l.add(t.at("name").get<std::string>(), t.at("shape").get<std::vector<std::size_t>>());
  return l;
}

}  // namespace sluice::bench
