// The solver's controller bound to a running pipeline on a local world of 4 threads: a bandwidth
// drop seen through the pipeline's telemetry makes every rank switch codec strength at the same
// step, and the parameters equal, bit for bit, a pipeline that called set_codec at that step (no
// residual lost). Controllers a pipeline cannot run are refused before anything changes.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <sluice/transport/local.hpp>

#include "pipeline/adaptive_run.hpp"
#include "support/local_world.hpp"

namespace {

using namespace sluice;
using namespace sluice::test;

constexpr int world = 4;

TEST_CASE("adaptive: a bandwidth drop switches every rank's codec at one step, parameters as a hand set_codec") {
  for (unsigned staleness : {0u, 1u, 2u}) {
    CAPTURE(staleness);
    solver const s(adaptive_job(world, staleness));
    std::vector<adaptive_outcome> out(world);
    auto const errors = run_local(world, [&](local_transport& ep) {
      out[static_cast<std::size_t>(ep.rank())] = adaptive_and_hand(ep, s, staleness);
    });
    rethrow_first(errors);
    for (int r = 0; r < world; ++r) {
      CAPTURE(r);
      std::string why;
      CHECK_MESSAGE(adaptive_checks(out[static_cast<std::size_t>(r)], staleness, why), why);
      CHECK(adaptive_digest(out[static_cast<std::size_t>(r)]) == adaptive_digest(out[0]));
    }
  }
}

// A one-rank pipeline and a controller from `p` with `o`; the error adaptive_control throws, if any.
std::string refusal(problem p, controller_options o, unsigned staleness = 1, config_request req = {},
                    bool attach_first = false) {
  auto eps = local_transport::create(1);
  model_params params(model());
  pipeline pipe{top_k{.ratio = 0.2}, residual{}, sgd{.lr = 0.05}, eps[0], small_buckets(staleness)};
  if (attach_first) {
    auto spans = params.spans();
    pipe.attach(model(), spans);
  }
  solver const s(std::move(p));
  try {
    adaptive_control const adapt(pipe, controller(s, std::move(req), o));
  } catch (error const& e) {
    return e.what();
  }
  return {};
}

TEST_CASE("adaptive: controllers the pipeline cannot run are refused with a clear error") {
  controller_options const ok{.switch_delay = 2};
  CHECK(refusal(adaptive_job(1, 1), ok).empty());

  problem other_codec = adaptive_job(1, 1);
  other_codec.codecs.push_back({maxmin_quantize{.bits = 4}, 1e-9});
  CHECK(refusal(other_codec, ok).find("maxmin_quantize") != std::string::npos);
  CHECK(refusal(adaptive_job(1, 1), ok, 1, {.codec = identity{}}).find("fixed codec") != std::string::npos);

  CHECK(refusal(adaptive_job(1, 1), {.switch_delay = 1}).find("switch_delay >= 2") != std::string::npos);
  CHECK(refusal(adaptive_job(1, 2), {.switch_delay = 2}, 2).find("switch_delay >= 3") != std::string::npos);

  problem any_staleness = adaptive_job(1, 1);
  any_staleness.staleness = {0, 1, 2};
  CHECK(refusal(any_staleness, ok).find("staleness 0") != std::string::npos);
  CHECK(refusal(any_staleness, ok, 1, {.staleness = 1}).empty());

  problem other_cap = adaptive_job(1, 1);
  other_cap.bucket_caps.push_back(std::size_t{25} << 20);
  CHECK(refusal(other_cap, ok).find("bucket_cap_bytes") != std::string::npos);

  CHECK(refusal(adaptive_job(4, 1), ok).find("4 workers") != std::string::npos);
  CHECK(refusal(adaptive_job(1, 1), {.switch_delay = 2, .tag = message_tag{16}}).find("tag") != std::string::npos);
  CHECK(refusal(adaptive_job(1, 1), ok, 1, {}, true).find("after attach") != std::string::npos);
}

}  // namespace
