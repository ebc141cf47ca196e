// Controller messages over threads on the local transport: ranks built from different problems,
// requests or options are refused on every rank at the first step; a message that is damaged,
// meant for another rank or step, or that states a switch the agreed problem cannot produce is
// refused by its receiver (errc::malformed_message), so no two ranks run different codecs at the
// same step. Forged messages are re-sealed (valid checksum), as an attacker or a bug would make
// them; a flipped byte goes through the fault-injecting transport.
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <sluice/transport/fault.hpp>

#include "solver/controller_run.hpp"
#include "support/local_world.hpp"

using namespace sluice;
namespace cw = sluice::detail::controller_wire;

namespace {

constexpr int world = 3;
constexpr std::uint64_t steps = 60;
controller_options const options{.switch_delay = 3, .min_dwell = 5, .timeout = std::chrono::milliseconds(3000)};

// Rewrites rank 0's controller messages to rank `peer` with `edit` (re-encoded, so re-sealed);
// `edit` returns whether it changed the message. Everything else passes through.
template <Transport Inner>
class forging {
 public:
  using transport_concept = transport_tag;
  using request = typename Inner::request;
  forging(Inner& inner, int peer, std::function<bool(cw::message&)> edit)
      : inner_(&inner), peer_(peer), edit_(std::move(edit)) {}
  [[nodiscard]] int rank() const noexcept { return inner_->rank(); }
  [[nodiscard]] int size() const noexcept { return inner_->size(); }
  request send(int peer, message_tag tag, std::span<std::byte const> bytes) {
    if (rank() == 0 && peer == peer_ && tag == options.tag) {
      auto m = cw::decode(bytes, static_cast<std::size_t>(size()), 0);
      if (edit_(m)) {
        auto const forged = cw::encode(m);
        return inner_->send(peer, tag, forged);  // the local transport copies
      }
    }
    return inner_->send(peer, tag, bytes);
  }
  std::span<std::byte const> recv(int peer, message_tag tag, std::vector<std::byte>& buffer, deadline d) {
    return inner_->recv(peer, tag, buffer, d);
  }
  void barrier(deadline d) { inner_->barrier(d); }
  void cancel(request& r) { inner_->cancel(r); }

 private:
  Inner* inner_;
  int peer_;
  std::function<bool(cw::message&)> edit_;
};

struct outcome {
  std::vector<codec_value> codecs{};  // per step completed
  std::optional<errc> error{};
  std::string what{};
};

// Runs `steps` controller steps on every rank; rank 0's link drops at step 30, so it decides one
// switch. `make` builds each rank's controller; `run` wraps the rank's transport.
template <class Run>
std::vector<outcome> run_world(Run&& run) {
  std::vector<outcome> out(world);
  auto errors = test::run_local(world, [&](local_transport& t) {
    auto& o = out[static_cast<std::size_t>(t.rank())];
    try {
      run(t, o);
    } catch (sluice::error const& e) {
      o.error = e.kind();
      o.what = e.what();
    }
  });
  test::rethrow_first(errors);  // anything but a sluice::error fails the test
  return out;
}

template <Transport T>
void drive(T& t, controller& ctl, outcome& o) {
  for (std::uint64_t k = 0; k < steps; ++k) {
    std::vector<double> const bw{t.rank() == 0 ? test::controller_bandwidth(k) : 1.0};
    o.codecs.push_back(ctl.step(t, k, bw).codec);
  }
}

// No two ranks ran different codecs at a step both completed.
void check_agreed(std::vector<outcome> const& out) {
  for (int r = 1; r < world; ++r) {
    auto const& a = out[0].codecs;
    auto const& b = out[static_cast<std::size_t>(r)].codecs;
    for (std::size_t k = 0; k < std::min(a.size(), b.size()); ++k) {
      CAPTURE(r);
      CAPTURE(k);
      CHECK(a[k] == b[k]);
    }
  }
}

// Every rank fails at the first step with errc::invalid_argument when rank `odd` is built from
// `other` (problem) / `req` / `opt`.
void expect_refused_everywhere(int odd, problem const& other, config_request const& odd_req,
                               controller_options const& odd_opt) {
  solver const same(test::controller_job(world));
  solver const diff(other);
  auto const out = run_world([&](local_transport& t, outcome& o) {
    bool const me = t.rank() == odd;
    controller ctl(me ? diff : same, me ? odd_req : config_request{}, me ? odd_opt : options);
    drive(t, ctl, o);
  });
  for (int r = 0; r < world; ++r) {
    CAPTURE(r);
    auto const& o = out[static_cast<std::size_t>(r)];
    REQUIRE(o.error.has_value());
    CHECK_MESSAGE(*o.error == errc::invalid_argument, o.what);
    CHECK(o.codecs.empty());  // refused before the first step runs
    CHECK(o.what.find(std::to_string(odd)) != std::string::npos);
  }
}

// Rank 0's switch message to rank 1 is edited by `edit`; rank 1 must refuse it (or the next
// message) with errc::malformed_message, and no two ranks may differ at a completed step.
void expect_forgery_refused(std::string const& why, std::function<bool(cw::message&)> edit) {
  solver const s(test::controller_job(world));
  auto const out = run_world([&](local_transport& t, outcome& o) {
    controller ctl(s, {}, options);
    forging<local_transport> f(t, 1, edit);
    drive(f, ctl, o);
  });
  REQUIRE(out[1].error.has_value());
  CHECK_MESSAGE(*out[1].error == errc::malformed_message, out[1].what);
  CHECK_MESSAGE(out[1].what.find(why) != std::string::npos, out[1].what);
  CHECK(!out[0].error.has_value());
  CHECK(!out[2].error.has_value());
  check_agreed(out);
}

bool first_switch(cw::message const& m) { return m.what == cw::kind::decision && m.switches; }

}  // namespace

TEST_CASE("an unedited run switches every rank at one step (the baseline of the cases below)") {
  solver const s(test::controller_job(world));
  auto const out = run_world([&](local_transport& t, outcome& o) {
    controller ctl(s, {}, options);
    forging<local_transport> f(t, 1, [](cw::message&) { return false; });
    drive(f, ctl, o);
  });
  for (auto const& o : out) {
    CHECK_MESSAGE(!o.error.has_value(), o.what);
    CHECK(o.codecs.size() == steps);
  }
  CHECK(out[0].codecs.front() != out[0].codecs.back());  // a switch happened
  check_agreed(out);
}

TEST_CASE("ranks with other candidates, link figures, requests or options are refused on every rank") {
  auto other = test::controller_job(world);
  SUBCASE("other codec candidates") {
    other.codecs.back().codec = maxmin_quantize{.bits = 2};
    expect_refused_everywhere(2, other, {}, options);
  }
  SUBCASE("other link figures") {
    other.links.front().bytes_per_second *= 2;
    expect_refused_everywhere(1, other, {}, options);
  }
  SUBCASE("another model") {
    other.model = layout{};
    other.model.add("w", {256, 255});
    expect_refused_everywhere(2, other, {}, options);
  }
  SUBCASE("another request") { expect_refused_everywhere(1, other, {.staleness = 1}, options); }
  SUBCASE("other options") {
    auto o = options;
    o.switch_delay = 4;
    expect_refused_everywhere(1, other, {}, o);
  }
}

TEST_CASE("forged switch messages are refused by their receiver; no rank runs another codec") {
  SUBCASE("a switch step other than step + switch_delay") {
    expect_forgery_refused("not at step + switch_delay", [](cw::message& m) {
      if (!first_switch(m)) return false;
      m.event.effective_step -= 1;
      return true;
    });
  }
  SUBCASE("a ratio that is no candidate") {
    expect_forgery_refused("not among the candidates", [](cw::message& m) {
      if (!first_switch(m)) return false;
      REQUIRE(std::holds_alternative<top_k>(m.event.to.codec));
      m.event.to.codec = top_k{.ratio = 0.02};
      return true;
    });
  }
  SUBCASE("another candidate than rank 0 chose (caught at the next message, before it takes effect)") {
    expect_forgery_refused("another switch state", [](cw::message& m) {
      if (!first_switch(m)) return false;
      m.event.to.codec = m.event.to.codec == codec_value(top_k{.ratio = 0.01}) ? codec_value(top_k{.ratio = 0.1})
                                                                               : codec_value(top_k{.ratio = 0.01});
      return true;
    });
  }
  SUBCASE("a switch the sender never decided") {
    solver const s(test::controller_job(world));
    plan const first = s.solve({});
    expect_forgery_refused("another switch state", [&](cw::message& m) {
      if (m.what != cw::kind::decision || m.step != 10) return false;
      m.switches = true;
      m.event = {10, 10 + options.switch_delay, first, first, "forged"};
      m.event.to.codec = first.codec == codec_value(top_k{.ratio = 0.01}) ? codec_value(identity{})
                                                                          : codec_value(top_k{.ratio = 0.01});
      return true;
    });
  }
  SUBCASE("a message for another step") {
    expect_forgery_refused("is for step 13", [](cw::message& m) {
      if (m.what != cw::kind::decision || m.step != 12) return false;
      m.step = 13;
      return true;
    });
  }
  SUBCASE("a message for another rank") {
    expect_forgery_refused("destination 2", [](cw::message& m) {
      if (m.what != cw::kind::decision || m.step != 12) return false;
      m.destination = 2;
      return true;
    });
  }
}

TEST_CASE("a flipped byte in a controller message is refused (checksum)") {
  solver const s(test::controller_job(world));
  for (std::size_t offset : {0, 9, 20, 40, 60}) {
    CAPTURE(offset);
    // Rank 0's sends to rank 1: the verdict (0), then one decision per step; flip one in the switch.
    auto const out = run_world([&](local_transport& t, outcome& o) {
      controller ctl(s, {}, options);
      fault_plan plan{.corrupt_send = 31, .corrupt_offset = offset, .peer = 1};
      faulty<local_transport> f(t, t.rank() == 0 ? plan : fault_plan{});
      drive(f, ctl, o);
    });
    REQUIRE(out[1].error.has_value());
    CHECK_MESSAGE(*out[1].error == errc::malformed_message, out[1].what);
    check_agreed(out);
  }
}

TEST_CASE("a forged codec kind is a sluice::error, never std::bad_variant_access") {
  solver const s(test::controller_job(2));
  controller c0(s, {}, options), c1(s, {}, options);
  detail::controller_access::agree_locally(c1, 2);
  cw::message m{.what = cw::kind::decision,
                .destination = 1,
                .step = 0,
                .agreement = detail::controller_access::agreement(c1),
                .state = detail::controller_access::state_digest(c1),
                .switches = true};
  m.event = {0, options.switch_delay, c1.current(), c1.current(), "forged"};
  m.event.to.codec =
      c1.current().codec == codec_value(identity{}) ? codec_value(top_k{.ratio = 0.01}) : codec_value(identity{});
  auto bytes = cw::encode(m);
  // The `to` plan's codec kind byte: after the header (magic and version 6, kind and reserved 4,
  // origin and destination 8, step, agreement and state 24: 42), the switch flag (1), the effective
  // step (8) and the `from` plan.
  std::vector<std::byte> from_bytes;
  detail::put_plan(from_bytes, m.event.from);
  std::size_t const kind_at = 42 + 1 + 8 + from_bytes.size();
  REQUIRE(bytes[kind_at] == std::byte{static_cast<unsigned char>(m.event.to.codec.index())});
  for (std::uint8_t k : {std::uint8_t{4}, std::uint8_t{7}, std::uint8_t{0xff}}) {
    auto b = bytes;
    b[kind_at] = std::byte{k};
    std::uint64_t const h = serial::stable_hash(std::span<std::byte const>(b.data(), b.size() - 8));
    std::memcpy(b.data() + b.size() - 8, &h, 8);
    try {
      detail::controller_access::receive(c1, 1, 2, 0, b);
      FAIL("a forged codec kind was accepted");
    } catch (sluice::error const& e) {
      CHECK_MESSAGE(e.kind() == errc::malformed_message, e.what());
    }
  }
  CHECK(c1.log().empty());
  // The unedited message is taken.
  detail::controller_access::receive(c1, 1, 2, 0, bytes);
  CHECK(c1.log().size() == 1);
}
