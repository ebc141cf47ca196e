// libFuzzer target for every restore of saved or exchanged state: feedback_state, optimizer_state
// (each layout), the PowerSGD warm start and a layout received from a peer. The first byte picks
// the reader and whether the record's checksum (core/serial.hpp) is recomputed first, so mutations
// also reach the field checks behind it. The only acceptable failure is a sluice::error of
// errc::malformed_message or errc::size_mismatch (a well-formed checkpoint of another shape).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <sluice/bucket/layout.hpp>
#include <sluice/compress/power_sgd.hpp>
#include <sluice/core/serial.hpp>
#include <sluice/feedback/state.hpp>
#include <sluice/optim/all.hpp>

namespace {

template <class F>
void guarded(F&& f) {
  try {
    f();
  } catch (sluice::error const& e) {
    if (e.code() != sluice::errc::malformed_message && e.code() != sluice::errc::size_mismatch) __builtin_trap();
  }
}

template <class O>
void optimizer(std::span<std::byte const> in, sluice::state_layout l) {
  sluice::optimizer_state<O> s(l, 3, 1);
  guarded([&] {
    s.restore(in);
    // A restored state must save back to the same bytes.
    if (s.save().size() != in.size()) __builtin_trap();
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  if (size == 0) return 0;
  unsigned const pick = data[0] % 8;
  bool const reseal = (data[0] & 0x80) != 0;
  std::vector<std::byte> buf(size - 1);
  if (size > 1) std::memcpy(buf.data(), data + 1, size - 1);
  if (reseal && buf.size() >= sluice::serial::record_trailer_bytes) {
    std::uint64_t const h = sluice::serial::stable_hash(std::span<std::byte const>(buf.data(), buf.size() - 8));
    std::memcpy(buf.data() + buf.size() - 8, &h, 8);
  }
  std::span<std::byte const> const in(buf);
  switch (pick) {
    case 0: {
      std::size_t const extents[2] = {3, 0};
      std::string const names[2] = {"w", "b"};
      sluice::feedback_state s(1, 1, sluice::element_type::f32, extents, names);
      guarded([&] { s.restore(in); });
      break;
    }
    case 1: {
      std::size_t const extents[1] = {2};
      sluice::feedback_state s(3, 2, sluice::element_type::bf16, extents);
      guarded([&] { s.restore(in); });
      break;
    }
    case 2:
      optimizer<sluice::adam>(in, {2, sluice::element_type::f32, false});
      break;
    case 3:
      optimizer<sluice::adam>(in, {2, sluice::element_type::bf16, true});
      break;
    case 4:
      optimizer<sluice::sgd>(in, {1, sluice::element_type::f32, true});
      break;
    case 5: {
      sluice::power_sgd::workspace<float> ws;
      guarded([&] { ws.restore(in); });
      break;
    }
    case 6: {
      sluice::power_sgd::workspace<Eigen::half> ws;
      guarded([&] { ws.restore(in); });
      break;
    }
    default:
      guarded([&] {
        auto const l = sluice::layout::deserialize(in);
        std::size_t bytes = 0;
        for (auto const& t : l.tensors()) bytes += t.bytes();  // checked in add(): cannot wrap
        if (l.total_elements() > bytes) __builtin_trap();
      });
      break;
  }
  return 0;
}
