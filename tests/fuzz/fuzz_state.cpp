// libFuzzer target for every restore of saved or exchanged state: feedback_state, optimizer_state
// (each layout), the PowerSGD warm start and a layout received from a peer. The first byte picks
// the reader and whether the record's checksum (core/serial.hpp) is recomputed first, or the input
// is taken as edits of a valid record (then resealed), so mutations reach every field check. The only acceptable
// failure is a sluice::error of errc::malformed_message or errc::size_mismatch (a well-formed checkpoint of another
// shape).
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

// With `edit`, the input is not the record itself but edits of a valid one: (offset, byte) pairs
// applied to `valid`, then the checksum recomputed, so every field check is reached.
std::vector<std::byte> edited(std::vector<std::byte> valid, std::span<std::byte const> edits) {
  for (std::size_t i = 0; i + 1 < edits.size() && !valid.empty(); i += 2)
    valid[static_cast<std::size_t>(edits[i]) % valid.size()] = edits[i + 1];
  if (valid.size() >= sluice::serial::record_trailer_bytes) {
    std::uint64_t const h = sluice::serial::stable_hash(std::span<std::byte const>(valid.data(), valid.size() - 8));
    std::memcpy(valid.data() + valid.size() - 8, &h, 8);
  }
  return valid;
}

template <class O>
void optimizer(std::span<std::byte const> in, sluice::state_layout l, bool edit) {
  sluice::optimizer_state<O> s(l, 3, 1);
  std::vector<std::byte> bytes(in.begin(), in.end());
  if (edit) {
    sluice::optimizer_state<O> v(l, 5, 2);
    bytes = edited(v.save(), in);
  }
  guarded([&] {
    s.restore(bytes);
    // A restored state must save back to the same bytes.
    if (s.save() != bytes) __builtin_trap();
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  if (size == 0) return 0;
  unsigned const pick = data[0] % 8;
  bool const reseal = (data[0] & 0x80) != 0;
  bool const edit = (data[0] & 0x40) != 0;
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
      auto const bytes = edit ? edited(s.save(), in) : std::vector<std::byte>(in.begin(), in.end());
      guarded([&] { s.restore(bytes); });
      break;
    }
    case 1: {
      std::size_t const extents[1] = {2};
      sluice::feedback_state s(3, 2, sluice::element_type::bf16, extents);
      auto const bytes = edit ? edited(s.save(), in) : std::vector<std::byte>(in.begin(), in.end());
      guarded([&] { s.restore(bytes); });
      break;
    }
    case 2:
      optimizer<sluice::adam>(in, {2, sluice::element_type::f32, false}, edit);
      break;
    case 3:
      optimizer<sluice::adam>(in, {2, sluice::element_type::bf16, true}, edit);
      break;
    case 4:
      optimizer<sluice::sgd>(in, {1, sluice::element_type::f32, true}, edit);
      break;
    case 5: {
      sluice::power_sgd::workspace<float> ws;
      ws.q.assign(6, 0.5f);  // a 3 x 2 warm start
      ws.q_rows = 3;
      ws.q_cols = 2;
      std::vector<std::byte> valid(ws.state_bytes());
      ws.save(valid);
      auto const bytes = edit ? edited(valid, in) : std::vector<std::byte>(in.begin(), in.end());
      guarded([&] { ws.restore(bytes); });
      break;
    }
    case 6: {
      sluice::power_sgd::workspace<sluice::half> ws;
      guarded([&] { ws.restore(in); });
      break;
    }
    default:
      guarded([&] {
        sluice::layout two;
        two.add("a", {2, 3}).add("bias", {3}, sluice::element_type::bf16);
        auto const bytes = edit ? edited(two.serialize(), in) : std::vector<std::byte>(in.begin(), in.end());
        auto const l = sluice::layout::deserialize(bytes);
        std::size_t total = 0;
        for (auto const& t : l.tensors()) total += t.bytes();  // checked in add(): cannot wrap
        if (l.total_elements() > total) __builtin_trap();
      });
      break;
  }
  return 0;
}
