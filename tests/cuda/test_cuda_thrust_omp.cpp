// The Thrust formulations (sluice/cuda/thrust.cuh) on Thrust's OpenMP device system, compiled by
// the host compiler: no GPU needed. Their output must equal the CPU codecs and optimizers bit for
// bit, as the device kernels' must.
#include <doctest/doctest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <thrust/execution_policy.h>

#include <sluice/cuda/frame.hpp>
#include <sluice/cuda/thrust.cuh>
#include <sluice/optim/adam.hpp>
#include <sluice/optim/sgd.hpp>

#include "cuda/cuda_testing.hpp"

static_assert(THRUST_DEVICE_SYSTEM == THRUST_DEVICE_SYSTEM_OMP, "this test runs Thrust's OpenMP device system");

namespace {

using namespace sluice;
namespace sc = sluice::cuda;  // `cuda` alone would also name libcu++'s ::cuda, which Thrust brings in

using test::normal, test::same_bits;

}  // namespace

TEST_CASE("Thrust (OpenMP) fused feedback + max-min quantization equals the CPU codec, bytes and residual") {
  for (unsigned b : {4u, 3u, 8u})
    for (std::size_t bucket : {std::size_t{1024}, std::size_t{100}})
      for (auto round : {rounding::nearest, rounding::stochastic}) {
        CAPTURE(b);
        CAPTURE(bucket);
        std::size_t const n = bucket * 21 + 5;
        maxmin_quantize const c{.bits = b, .bucket = bucket, .round = round};
        sc::maxmin_params const p{b, static_cast<unsigned>(bucket), round == rounding::stochastic};
        encode_context const ctx{.seed = 8, .rank = 3, .step = 2, .tensor = 6};
        auto g = normal(n, b);
        g[bucket + 1] = std::numeric_limits<float>::quiet_NaN();
        auto const e0 = normal(n, 4, 0.1f);
        // CPU reference: compensate, encode, decode, subtract.
        auto const [ref, e_ref] = test::maxmin_feedback(c, ctx, g, e0);
        // Thrust.
        auto e = e0;
        auto const l = sc::layout_of(c, n);
        std::vector<std::uint8_t> payload(l.payload_bytes());
        sc::portable::feedback_maxmin(thrust::device, g.data(), e.data(), n, p, ctx.key(), payload.data());
        std::vector<std::byte> frame(l.frame_bytes);
        std::memcpy(frame.data() + l.ranges_offset, payload.data(), payload.size());
        frame.resize(sc::finish_maxmin_frame(c, ctx, n, frame));
        REQUIRE(frame.size() == ref.size());
        CHECK(std::memcmp(frame.data(), ref.data(), ref.size()) == 0);
        same_bits(e, e_ref, "residual");
        // Dequantize-add.
        auto dense = normal(n, 5), dense_ref = dense;
        codec_workspace<maxmin_quantize, float> ws;
        sc::portable::dequantize_add(thrust::device, dense.data(), n, p, payload.data());
        sluice::decode_add(c, std::span<std::byte const>(ref), ctx, ws, std::span<float>(dense_ref));
        same_bits(dense, dense_ref, "dequantize_add");
      }
}

TEST_CASE("Thrust (OpenMP) scatter-add equals top_k::decode_add") {
  std::size_t const n = 50000;
  auto const x = normal(n, 1);
  top_k const c{.ratio = 0.05};
  encode_context const ctx{};
  std::vector<std::byte> msg(c.max_encoded_bytes(n));
  codec_workspace<top_k, float> ws;
  msg.resize(c.encode(std::span<float const>(x), ctx, ws, msg));
  sparse_buffer<float> sp;
  c.decode_sparse(std::span<std::byte const>(msg), ctx, ws, sp);
  auto dense = normal(n, 2), dense_ref = dense;
  sluice::decode_add(c, std::span<std::byte const>(msg), ctx, ws, std::span<float>(dense_ref));
  std::vector<std::uint32_t> idx(sp.indices().begin(), sp.indices().end());
  sc::portable::scatter_add(thrust::device, dense.data(), idx.data(), sp.values().data(), idx.size());
  same_bits(dense, dense_ref, "scatter_add");
}

TEST_CASE("Thrust (OpenMP) adam and sgd steps equal the CPU optimizers") {
  std::size_t const n = 30001;
  auto const p0 = normal(n, 3);
  {
    adam const o{.lr = 1e-2, .weight_decay = 0.01};
    optimizer_state<adam> s(o, n);
    auto p = p0, q = p0;
    std::vector<float> m(n, 0.0f), v(n, 0.0f);
    for (std::uint32_t t = 1; t <= 3; ++t) {
      auto const g = normal(n, 10 + t);
      sluice::step(o, s, std::span<float>(p), std::span<float const>(g));
      sc::portable::adam_step(thrust::device, q.data(), g.data(), m.data(), v.data(), n,
                              sc::adam_element::from(o.kernel(t)));
    }
    same_bits(q, p, "adam params");
  }
  {
    sgd const o{.lr = 0.1, .momentum = 0.9, .nesterov = true};
    optimizer_state<sgd> s(o, n);
    auto p = p0, q = p0;
    std::vector<float> b(n, 0.0f);
    for (std::uint32_t t = 1; t <= 3; ++t) {
      auto const g = normal(n, 20 + t);
      sluice::step(o, s, std::span<float>(p), std::span<float const>(g));
      sc::portable::sgd_step(thrust::device, q.data(), g.data(), b.data(), n, sc::sgd_element::from(o.kernel(t)));
    }
    same_bits(q, p, "sgd params");
  }
}
