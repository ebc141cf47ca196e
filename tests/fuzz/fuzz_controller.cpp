// libFuzzer target for the controller's messages (solver/controller.hpp): decoding and the receive
// side's checks. The first byte picks the mode: raw bytes as they are; raw bytes re-sealed
// (checksum recomputed) so the field checks behind it are reached; or edits ((offset, byte)
// pairs) of a valid switch message, re-sealed. Each message is decoded for a world of 2 and given
// to rank 1's controller at step 0. The only acceptable failure is a sluice::error of
// errc::malformed_message; a message that is taken must leave the controller in a state its own
// checks accept (a logged switch at step 0 + switch_delay to a candidate plan).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <sluice/core/serial.hpp>
#include <sluice/solver/controller.hpp>

#include "reseal.hpp"

namespace {

namespace cw = sluice::detail::controller_wire;
using access = sluice::detail::controller_access;

sluice::problem job() {
  sluice::problem p;
  p.workers = {{{0.01, 0.0005}, 64}, {{0.01, 0.0005}, 64}};
  p.links = {{2, 125e6, 50e-6}};
  p.model.add("w", {64, 64});
  p.codecs = {{sluice::identity{}, 0},
              {sluice::top_k{.ratio = 0.1}, 1e-9},
              {sluice::block_top_k{.ratio = 0.05}, 1e-9},
              {sluice::maxmin_quantize{.bits = 4}, 1e-9}};
  p.global_batches = {32};
  p.bucket_caps = {std::size_t{1} << 20};
  return p;
}

using sluice::fuzz::reseal;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  static sluice::solver const s(job());
  if (size == 0) return 0;
  unsigned const mode = data[0] % 3;
  std::span<std::byte const> const in(reinterpret_cast<std::byte const*>(data) + 1, size - 1);
  // decide_every 1000: step(switch_delay) below applies the switch without solving again.
  static sluice::controller_options const o{.decide_every = 1000, .switch_delay = 2, .min_dwell = 1};
  // Built (and solved) once; each input gets a fresh copy.
  static sluice::controller const agreed = [] {
    sluice::controller c(s, {}, o);
    access::agree_locally(c, 2);
    return c;
  }();
  sluice::controller c = agreed;
  std::vector<std::byte> bytes(in.begin(), in.end());
  if (mode == 1) reseal(bytes);
  if (mode == 2) {
    cw::message m{.what = cw::kind::decision,
                  .destination = 1,
                  .agreement = access::agreement(c),
                  .state = access::state_digest(c),
                  .switches = true};
    m.event = {0, o.switch_delay, c.current(), c.current(), "fuzz"};
    m.event.to.codec = c.current().codec == sluice::codec_value(sluice::identity{})
                           ? sluice::codec_value(sluice::top_k{.ratio = 0.1})
                           : sluice::codec_value(sluice::identity{});
    bytes = cw::encode(m);
    for (std::size_t i = 0; i + 1 < in.size(); i += 2)
      bytes[static_cast<std::size_t>(in[i]) % bytes.size()] = in[i + 1];
    reseal(bytes);
  }
  try {
    (void)cw::decode(bytes, 2, 0);
  } catch (sluice::error const& e) {
    if (e.code() != sluice::errc::malformed_message) __builtin_trap();
  }
  try {
    access::receive(c, 1, 2, 0, bytes);
    // Taken: either no switch, or one switch to a candidate at step switch_delay.
    if (c.log().size() > 1) __builtin_trap();
    if (c.log().size() == 1) {
      auto const& e = c.log().front();
      if (e.effective_step != o.switch_delay || e.to.same_config(c.current())) __builtin_trap();
      bool candidate = false;
      for (auto const& k : s.description().codecs) candidate = candidate || k.codec == e.to.codec;
      if (!candidate) __builtin_trap();
      (void)c.step(o.switch_delay, {});  // the switch applies without throwing
      if (!c.current().same_config(e.to)) __builtin_trap();
    }
  } catch (sluice::error const& e) {
    if (e.code() != sluice::errc::malformed_message) __builtin_trap();
  }
  return 0;
}
