// sluice::error and errc: category, codes, messages, and the require() helper.
#include <doctest/doctest.h>

#include <sluice/compress/power_sgd.hpp>
#include <sluice/error.hpp>

TEST_CASE("errc values map into sluice's error category") {
  std::error_code const ec = sluice::errc::timeout;
  CHECK(ec.category() == sluice::error_category());
  CHECK(std::string(ec.category().name()) == "sluice");
  CHECK(ec.message() == "timeout");
  CHECK(sluice::make_error_code(sluice::errc::malformed_message).message() == "malformed message");
  CHECK(sluice::error_category().message(999) == "unknown sluice error");
}

TEST_CASE("sluice::error is a system_error carrying the errc and the message") {
  try {
    sluice::throw_error(sluice::errc::size_mismatch, "tensor {} has {} elements", "fc1.weight", 7);
    FAIL("throw_error returned");
  } catch (std::system_error const& e) {
    CHECK(e.code() == sluice::errc::size_mismatch);
    CHECK(std::string(e.what()).find("tensor fc1.weight has 7 elements") != std::string::npos);
    auto const* se = dynamic_cast<sluice::error const*>(&e);
    REQUIRE(se != nullptr);
    CHECK(se->kind() == sluice::errc::size_mismatch);
  }
}

TEST_CASE("require throws only when the condition is false") {
  CHECK_NOTHROW(sluice::require(true, sluice::errc::invalid_argument, "never"));
  CHECK_THROWS_AS(sluice::require(false, sluice::errc::invalid_argument, "x={}", 1), sluice::error);
}

TEST_CASE("messages format every kind of argument, with or without the compile-time format check") {
  std::string const name = "fc2.bias";
  std::string_view const sv = "view";
  double const ratio = 0.25;
  try {
    sluice::require(false, sluice::errc::invalid_argument, "{} {} {:.2f} {} {} {}", name, sv, ratio, std::size_t{3}, -2,
                    sluice::errc::timeout == sluice::errc::timeout);
    FAIL("require returned");
  } catch (sluice::error const& e) {
    CHECK(std::string(e.what()).find("fc2.bias view 0.25 3 -2 true") == 0);
  }
  // A library message, through a policy's own validation.
  try {
    sluice::power_sgd{.rank = 0}.validate();
    FAIL("validate returned");
  } catch (sluice::error const& e) {
    CHECK(e.kind() == sluice::errc::invalid_argument);
    CHECK(std::string(e.what()).find("power_sgd: rank 0 is outside [1, 1024]") == 0);
  }
#if defined(SLUICE_CHECK_MESSAGES)
  MESSAGE("format strings checked at compile time");
#else
  MESSAGE("format strings taken as they are (a consumer's build)");
#endif
}
