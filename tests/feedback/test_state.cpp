// feedback_state: bit-exact checkpoint round trip mid-run (identical continuation), refusal of
// damaged or mismatched checkpoints, and residuals that survive a change of bucket plan.
#include <doctest/doctest.h>

#include <bit>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <sluice/bucket/plan.hpp>
#include <sluice/feedback/all.hpp>

#include "codecs.hpp"

namespace {

std::vector<float> grad(std::size_t n, std::uint64_t step, std::size_t tensor) {
  std::mt19937 rng(static_cast<std::uint32_t>(step * 131 + tensor));
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> g(n);
  for (auto& x : g) x = d(rng);
  return g;
}

// Runs steps [from, to) of a two-tensor model; returns all messages.
template <class F, class C>
std::vector<std::vector<std::byte>> steps(F const& f, C const& c, sluice::feedback_state& s, std::uint64_t from,
                                          std::uint64_t to) {
  std::vector<std::vector<std::byte>> msgs;
  sluice::feedback_workspace<C, float> ws;
  for (std::uint64_t t = from; t < to; ++t)
    for (std::size_t k = 0; k < s.tensor_count(); ++k) {
      auto const g = grad(s.extent(k), t, k);
      std::vector<std::byte> out(s.warmup().peak(c).max_encoded_bytes(g.size()));
      sluice::encode_context const ctx{.seed = 3, .step = t, .tensor = k};
      auto const n = f.encode(c, s.slice(k), std::span<float const>(g), ctx, ws, std::span(out));
      out.resize(n);
      msgs.push_back(std::move(out));
    }
  return msgs;
}

}  // namespace

TEST_CASE("checkpoint mid-run gives a bit-identical continuation") {
  std::vector<std::size_t> const extents{1000, 357};
  std::vector<std::string> const names{"a", "b"};
  sluice::warmup const w{.steps = 8, .start = 0.5};
  auto check = [&](auto f, auto c) {
    sluice::feedback_state original(f, extents, names);
    original.set_warmup(w);
    steps(f, c, original, 0, 5);
    auto const ckpt = original.save();
    auto const cont_a = steps(f, c, original, 5, 12);

    sluice::feedback_state restored(f, extents, names);  // fresh: zero buffers, no warm-up
    restored.restore(ckpt);
    CHECK(restored.warmup() == w);
    auto const cont_b = steps(f, c, restored, 5, 12);
    CHECK(cont_a == cont_b);
    CHECK(original == restored);
  };
  check(sluice::residual{}, sluice::top_k{.ratio = 0.05});
  check(sluice::residual{.precision = sluice::element_type::bf16}, sluice::top_k{.ratio = 0.05});
  check(sluice::momentum_correction{}, sluice::top_k{.ratio = 0.05});
  check(sluice::momentum_correction{.nesterov = true, .precision = sluice::element_type::bf16},
        sluice::test::grid_codec{});
  check(sluice::ef21{.precision = sluice::element_type::bf16}, sluice::top_k{.ratio = 0.05});
}

TEST_CASE("restore refuses damaged or mismatched checkpoints and changes nothing") {
  std::vector<std::size_t> const extents{64, 32};
  std::vector<std::string> const names{"a", "b"};
  sluice::residual const f;
  sluice::feedback_state s(f, extents, names);
  steps(f, sluice::top_k{.ratio = 0.2}, s, 0, 3);
  auto const good = s.save();
  sluice::feedback_state target(f, extents, names);
  auto const untouched = target.save();
  auto kind_of = [&](std::span<std::byte const> bytes, sluice::feedback_state& into) {
    try {
      into.restore(bytes);
    } catch (sluice::error const& e) {
      return e.kind();
    }
    return sluice::errc{};
  };
  for (std::size_t cut = 0; cut < good.size(); cut += 7)
    CHECK(kind_of(std::span(good).first(cut), target) == sluice::errc::malformed_message);
  auto flipped = good;
  flipped[100] ^= std::byte{1};
  CHECK(kind_of(flipped, target) == sluice::errc::malformed_message);
  CHECK(target.save() == untouched);

  sluice::feedback_state other_names(f, extents, std::vector<std::string>{"a", "c"});
  CHECK(kind_of(good, other_names) == sluice::errc::size_mismatch);
  sluice::feedback_state other_sizes(f, std::vector<std::size_t>{64, 33}, names);
  CHECK(kind_of(good, other_sizes) == sluice::errc::size_mismatch);
  sluice::feedback_state bf16(sluice::residual{.precision = sluice::element_type::bf16}, extents, names);
  CHECK(kind_of(good, bf16) == sluice::errc::size_mismatch);
  sluice::feedback_state dgc(sluice::momentum_correction{}, extents, names);
  CHECK(kind_of(good, dgc) == sluice::errc::size_mismatch);
  CHECK(kind_of(good, target) == sluice::errc{});
  CHECK(target == s);
}

TEST_CASE("residuals survive a change of bucket plan (per-tensor state, chunked calls)") {
  sluice::layout l;
  l.add("w1", {64, 100}).add("w2", {30, 70}).add("bias", {64});
  auto const extents = l.extents();
  auto const names = l.names();
  // An element-wise codec gives the same residual whether a tensor is encoded whole or by
  // chunks, for any chunking: state is keyed by (tensor, element), never by bucket.
  for (auto precision : {sluice::element_type::f32, sluice::element_type::bf16}) {
    sluice::residual const f{.precision = precision};
    sluice::test::grid_codec const c{.step_size = 0.25f};
    sluice::feedback_state whole(f, extents, names), chunked(f, extents, names);
    sluice::feedback_workspace<sluice::test::grid_codec, float> ws;
    std::vector<std::byte> out(c.max_encoded_bytes(8000));
    for (std::uint64_t t = 0; t < 6; ++t) {
      sluice::bucket_plan const plan(l, {.cap_bytes = 4096u * (t + 1),
                                         .chunk_bytes = 1024u * (t + 1),
                                         .chunk_alignment = 64 + 32 * t,
                                         .bypass_max_dims = 0});
      for (std::size_t k = 0; k < l.size(); ++k) {
        auto const g = grad(extents[k], t, k);
        sluice::encode_context const ctx{.step = t, .tensor = k};
        f.encode(c, whole.slice(k), std::span<float const>(g), ctx, ws, std::span(out));
      }
      for (auto const& ch : plan.chunks()) {
        auto const g = grad(extents[ch.tensor], t, ch.tensor);
        sluice::encode_context const ctx{.step = t, .tensor = ch.tensor};
        f.encode(c, chunked.slice(ch.tensor, ch.offset, ch.count),
                 std::span<float const>(g).subspan(ch.offset, ch.count), ctx, ws, std::span(out));
      }
      REQUIRE(whole == chunked);
    }
  }
  // With a selecting codec the messages differ by chunking, but mass is conserved across the
  // change of plan at every step boundary.
  sluice::residual const f;
  sluice::top_k const c{.ratio = 0.05};
  sluice::feedback_state s(f, extents, names);
  sluice::feedback_workspace<sluice::top_k, float> ws;
  std::vector<std::vector<double>> total(l.size()), sent(l.size());
  for (std::size_t k = 0; k < l.size(); ++k) total[k].assign(extents[k], 0.0), sent[k].assign(extents[k], 0.0);
  for (std::uint64_t t = 0; t < 10; ++t) {
    sluice::bucket_plan const plan(
        l,
        {.cap_bytes = 2048u << (t % 4), .chunk_bytes = 512u << (t % 3), .chunk_alignment = 16, .bypass_max_dims = 0});
    for (auto const& ch : plan.chunks()) {
      auto const g = grad(extents[ch.tensor], t, ch.tensor);
      std::vector<std::byte> out(c.max_encoded_bytes(ch.count));
      sluice::encode_context const ctx{.step = t, .tensor = ch.tensor};
      auto const bytes = f.encode(c, s.slice(ch.tensor, ch.offset, ch.count),
                                  std::span<float const>(g).subspan(ch.offset, ch.count), ctx, ws, std::span(out));
      std::vector<float> d(ch.count);
      sluice::decode(c, std::span<std::byte const>(out.data(), bytes), ctx, ws.codec, std::span<float>(d));
      for (std::size_t i = 0; i < ch.count; ++i) {
        total[ch.tensor][ch.offset + i] += g[ch.offset + i];
        sent[ch.tensor][ch.offset + i] += d[i];
      }
    }
  }
  double worst = 0;
  for (std::size_t k = 0; k < l.size(); ++k)
    for (std::size_t i = 0; i < extents[k]; ++i)
      worst = std::max(worst, std::abs(sent[k][i] + s.value(k, 0, i) - total[k][i]));
  CHECK(worst < 1e-4);
}

TEST_CASE("feedback checkpoints use the shared record format and refuse impossible fields behind a valid checksum") {
  std::vector<std::size_t> const extents{8};
  sluice::residual const f;
  sluice::feedback_state s(f, extents);
  auto const good = s.save();
  // The same envelope as every saved state: magic, version, fields, stable_hash of the rest.
  std::uint64_t sum = 0;
  std::memcpy(&sum, good.data() + good.size() - 8, 8);
  CHECK(sum == sluice::serial::stable_hash(std::span(good).first(good.size() - 8)));
  auto edited = [&](std::size_t at, std::uint8_t v) {
    auto b = good;
    b[at] = std::byte{v};
    std::uint64_t const h = sluice::serial::stable_hash(std::span(b).first(b.size() - 8));
    std::memcpy(b.data() + b.size() - 8, &h, 8);
    return b;
  };
  sluice::feedback_state target(f, extents);
  auto malformed = [&](std::vector<std::byte> const& b) {
    try {
      target.restore(b);
    } catch (sluice::error const& e) {
      return e.kind() == sluice::errc::malformed_message;
    }
    return false;
  };
  // Offsets: 0 magic, 4 version, 6 kind, 8 precision, 9 buffers, 10 u16 0, 12 tensors, 20 warm-up
  // steps, 28 start, 36 stages, 44 shape, 45..51 reserved, 52 report (4 x u64), 84 tensor #0.
  CHECK(malformed(edited(10, 1)));       // reserved u16
  CHECK(malformed(edited(47, 1)));       // reserved warm-up bytes
  CHECK(malformed(edited(84 + 12, 1)));  // reserved u32 of tensor #0
  CHECK(malformed(edited(60, 7)));       // a last skipped step with no skip counted
  CHECK(malformed(edited(4, 2)));        // another version
  CHECK(target == sluice::feedback_state(f, extents));
}

TEST_CASE("a NaN or infinite residual behind a valid checksum is refused") {
  // No step leaves a non-finite value in a buffer (it is refused, skipped or reset to 0), so one
  // in a checkpoint is damage: restored, it would reach every later gradient.
  std::vector<std::size_t> const extents{8};
  for (auto const precision : {sluice::element_type::f32, sluice::element_type::bf16}) {
    CAPTURE(precision);
    sluice::residual const f{.precision = precision};
    sluice::feedback_state s(f, extents);
    (void)steps(f, sluice::top_k{.ratio = 0.25}, s, 0, 2);
    auto const good = s.save();
    std::size_t const es = precision == sluice::element_type::f32 ? 4 : 2;
    std::size_t const buffer_at = good.size() - 8 - 8 * es;  // the only buffer ends before the checksum
    sluice::feedback_state target(f, extents);
    auto const before = target.save();
    for (float v : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
      auto b = good;
      auto const bits = std::bit_cast<std::uint32_t>(v);
      if (es == 4)
        std::memcpy(b.data() + buffer_at + 3 * 4, &bits, 4);
      else {
        auto const h = static_cast<std::uint16_t>(bits >> 16);
        std::memcpy(b.data() + buffer_at + 3 * 2, &h, 2);
      }
      std::uint64_t const sum = sluice::serial::stable_hash(std::span(b).first(b.size() - 8));
      std::memcpy(b.data() + b.size() - 8, &sum, 8);
      try {
        target.restore(b);
        FAIL("a non-finite residual was restored");
      } catch (sluice::error const& e) {
        CHECK_MESSAGE(e.kind() == sluice::errc::malformed_message, e.what());
      }
    }
    CHECK(target.save() == before);
    target.restore(good);  // the record as saved is taken
    CHECK(target == s);
  }
}
