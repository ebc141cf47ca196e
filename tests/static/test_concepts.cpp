// Compile-time facts about the vocabulary types, plus run-time checks of the small helpers.
#include <doctest/doctest.h>

#include <sluice/cuda/status.hpp>
#include <sluice/pipeline/concepts.hpp>
#include <sluice/sluice.hpp>
#include <sluice/solver/concepts.hpp>

static_assert(sluice::is_auto_select_v<sluice::auto_select const>);
static_assert(!sluice::is_auto_select_v<double>);
static_assert(sluice::TelemetrySink<sluice::null_telemetry>);
static_assert(std::regular<sluice::stage_sample>);
static_assert(std::regular<sluice::stream_key>);
static_assert(std::regular<sluice::wire::header>);
static_assert(sluice::SparseIndex<std::uint64_t> && !sluice::SparseIndex<std::int32_t>);
static_assert(sluice::wire::header_bytes % sluice::wire::section_alignment == 0);
static_assert(sluice::wire::frame_bytes({1, 8, 0}) == 80 + 8 + 8 + 0);

namespace {
struct fixed_cost {
  double step_seconds(int candidate, double bandwidth) const { return candidate / bandwidth; }
};
struct not_a_cost_model {};
}  // namespace
static_assert(sluice::CostModel<fixed_cost, int, double>);
static_assert(!sluice::CostModel<not_a_cost_model, int, double>);

TEST_CASE("device statuses become sluice errors at the host boundary") {
  using sluice::cuda::device_status;
  CHECK_NOTHROW(sluice::cuda::check(device_status::ok, "k"));
  try {
    sluice::cuda::check(device_status::malformed_message, "decode_kernel(tensor 3)");
    FAIL("no throw");
  } catch (sluice::error const& e) {
    CHECK(e.code() == sluice::errc::malformed_message);
    CHECK(std::string(e.what()).find("decode_kernel(tensor 3)") != std::string::npos);
  }
  CHECK(sluice::cuda::to_errc(device_status::launch_failed) == sluice::errc::unsupported);
  CHECK(sluice::to_string(sluice::stage::exchange) == "exchange");
}
