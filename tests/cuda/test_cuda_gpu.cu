// The device kernels against the CPU codecs and optimizers: byte-identical frames (max-min
// quantization, top-k, block top-k and random-k, each with fused feedback), bit-identical
// residuals, decodes and optimizer states (dense, lazy sparse, fp32 or bf16 moments). Without a
// CUDA device the binary prints why and exits 77, which ctest reports as skipped.
#define DOCTEST_CONFIG_IMPLEMENT
// The CPU's fused block feedback loops `k < FixedB` with FixedB = 0 for the general block size:
// nvcc's front end remarks on the comparison (#186); gcc does not.
#pragma nv_diag_suppress 186
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <thrust/execution_policy.h>

#include <sluice/cuda/frame.hpp>
#include <sluice/cuda/kernels.cuh>
#include <sluice/cuda/thrust.cuh>
#include <sluice/cuda/transfer.cuh>
#include <sluice/feedback/residual.hpp>
#include <sluice/feedback/state.hpp>
#include <sluice/optim/adam.hpp>
#include <sluice/optim/adamw.hpp>
#include <sluice/optim/sgd.hpp>

#if defined(SLUICE_TEST_NCCL)
#include <sluice/cuda/nccl.cuh>
#include <sluice/transport/local.hpp>
#endif

#include "cuda/cuda_testing.hpp"

namespace {

// No `using namespace sluice` in a .cu file: it would make `cuda` ambiguous at global scope
// (sluice::cuda and libcu++'s ::cuda), where nvcc's generated launch stubs name ::cuda types.
namespace sc = sluice::cuda;
using sluice::adam, sluice::adamw, sluice::sgd, sluice::maxmin_quantize, sluice::top_k, sluice::block_top_k,
    sluice::rounding, sluice::encode_context, sluice::codec_workspace, sluice::optimizer_state;

using sluice::test::normal, sluice::test::same_bits;

template <class T>
sc::device_buffer<T> upload(std::vector<T> const& v) {
  sc::device_buffer<T> d(v.size());
  sc::check(cudaMemcpy(d.data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  return d;
}

template <class T>
std::vector<T> download(T const* p, std::size_t n) {
  std::vector<T> v(n);
  sc::check(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "download");
  return v;
}

}  // namespace

TEST_CASE("device max-min quantization with fused feedback writes the CPU encoder's bytes") {
  for (unsigned bits : {4u, 3u, 8u, 1u})
    for (std::size_t bucket : {std::size_t{1024}, std::size_t{100}})
      for (auto round : {rounding::nearest, rounding::stochastic})
        for (bool fb : {false, true}) {
          CAPTURE(bits);
          CAPTURE(bucket);
          CAPTURE(fb);
          std::size_t const n = bucket * 37 + 11;
          maxmin_quantize const c{.bits = bits, .bucket = bucket, .round = round};
          sc::maxmin_params const p{bits, static_cast<unsigned>(bucket), round == rounding::stochastic};
          encode_context const ctx{.seed = 3, .rank = 1, .step = 9, .tensor = 2};
          auto g = normal(n, bits);
          g[bucket * 2 + 3] = std::numeric_limits<float>::quiet_NaN();
          for (std::size_t j = 0; j < bucket; ++j) g[bucket * 4 + j] = 0.25f;
          auto const e0 = normal(n, 7, 0.1f);
          // Host reference through the same functors (pinned by the CPU test against the codec).
          auto e_host = e0;
          auto const l = sc::layout_of(c, n);
          std::vector<std::byte> ref(l.payload_bytes());
          auto const bad = sc::host::feedback_maxmin(g, fb ? e_host.data() : nullptr, c, ctx.key(), ref);
          // Device.
          auto dg = upload(g), de = upload(e0);
          sc::device_buffer<std::byte> payload(sc::maxmin_payload_bytes(n, p));
          sc::non_finite_counter nf;
          CHECK(nf.find(dg.span(), nullptr) == bucket * 2 + 3);
          sc::check(sc::feedback_maxmin(dg.span(), fb ? de.span() : std::span<float>(), p, ctx.key(), payload.span(),
                                        nf.count(), nullptr),
                    "feedback_maxmin");
          sc::check(cudaDeviceSynchronize(), "sync");
          CHECK(bad == (fb ? 1u : 0u));
          CHECK(nf.take(nullptr) == bad);
          auto const got = download(payload.data(), l.payload_bytes());
          CHECK(std::memcmp(got.data(), ref.data(), ref.size()) == 0);
          if (fb) same_bits(download(de.data(), n), e_host, "residual");
          // The whole frame equals the CPU codec's.
          std::vector<std::byte> frame(l.frame_bytes);
          std::memcpy(frame.data() + l.ranges_offset, got.data(), got.size());
          frame.resize(sc::finish_maxmin_frame(c, ctx, n, frame));
          std::vector<float> cv(n);
          for (std::size_t i = 0; i < n; ++i) cv[i] = fb ? g[i] + e0[i] : g[i];
          std::vector<std::byte> cpu(c.max_encoded_bytes(n));
          codec_workspace<maxmin_quantize, float> ws;
          cpu.resize(c.encode(std::span<float const>(cv), ctx, ws, cpu));
          REQUIRE(frame.size() == cpu.size());
          CHECK(std::memcmp(frame.data(), cpu.data(), cpu.size()) == 0);
          // Dequantize-add on the device equals decode_add on the CPU.
          auto dense = normal(n, 5);
          auto dd = upload(dense);
          sc::check(
              sc::dequantize_add(dd.span(), p, std::span<std::byte const>(payload.data(), payload.size()), nullptr),
              "dequantize_add");
          sluice::decode_add(c, std::span<std::byte const>(cpu), ctx, ws, std::span<float>(dense));
          same_bits(download(dd.data(), n), dense, "dequantize_add");
        }
}

TEST_CASE("device top-k selects the CPU top_k's entries, with and without feedback") {
  for (double ratio : {0.01, 0.2})
    for (bool ties : {false, true})
      for (bool fb : {false, true}) {
        CAPTURE(ratio);
        CAPTURE(ties);
        CAPTURE(fb);
        std::size_t const n = (1u << 20) + 13;
        auto g = normal(n, 1), e0 = normal(n, 2, 0.5f);
        if (ties)
          for (std::size_t i = 0; i < n; i += 2) g[i] = 4.0f, e0[i] = 0.0f;  // far more ties than k
        if (fb) {  // NaN and Inf compensated values: sent first, their residual +0 as the CPU's
          g[7] = std::numeric_limits<float>::quiet_NaN();
          g[n - 2] = -std::numeric_limits<float>::infinity();
          g[1001] = 3.0e38f, e0[1001] = 3.0e38f;
        }
        top_k const c{.ratio = ratio};
        std::size_t const k = c.keep(n);
        encode_context const ctx{.step = 1};
        std::vector<float> cv(n);
        for (std::size_t i = 0; i < n; ++i) cv[i] = fb ? g[i] + e0[i] : g[i];
        std::vector<std::byte> cpu(c.max_encoded_bytes(n));
        codec_workspace<top_k, float> ws;
        cpu.resize(c.encode(std::span<float const>(cv), ctx, ws, cpu));

        auto dg = upload(g), dx = upload(fb ? e0 : g);
        sc::device_buffer<std::uint32_t> idx(k);
        sc::device_buffer<float> val(k);
        sc::top_k_workspace tw(n);
        sc::non_finite_counter nf;
        sc::check(sc::top_k_select(fb ? dg.span() : std::span<float>(), dx.span(), k, tw, idx.span(), val.span(),
                                   nf.count(), nullptr),
                  "top_k_select");
        sc::check(cudaDeviceSynchronize(), "sync");
        CHECK(nf.take(nullptr) == (fb ? 3u : 0u));
        auto const hi = download(idx.data(), k);
        auto const hv = download(val.data(), k);
        std::vector<std::byte> frame(c.max_encoded_bytes(n));
        frame.resize(sc::write_top_k_frame(c, ctx, n, hi, hv, frame));
        REQUIRE(frame.size() == cpu.size());
        CHECK(std::memcmp(frame.data(), cpu.data(), cpu.size()) == 0);
        if (fb) {  // residual's: c - decode(frame), +0 where not finite (nvcc's front end cannot
                   // instantiate residual::encode for top_k; test_cuda_functors compares with it)
          std::vector<float> d(n);
          sluice::decode(c, std::span<std::byte const>(cpu), ctx, ws, std::span<float>(d));
          same_bits(download(dx.data(), n), sluice::test::kept_residual(cv, d), "top-k residual");
        }
        // Scatter-add of the selection equals decode_add.
        auto dense = normal(n, 9);
        auto dd = upload(dense);
        sc::check(sc::scatter_add(dd.span(), std::span<std::uint32_t const>(idx.data(), k),
                                  std::span<float const>(val.data(), k), nullptr),
                  "scatter_add");
        sluice::decode_add(c, std::span<std::byte const>(cpu), ctx, ws, std::span<float>(dense));
        same_bits(download(dd.data(), n), dense, "scatter_add");
      }
}

TEST_CASE("device random-k draws random_k's indices and writes its frame, with and without feedback") {
  for (double ratio : {0.001, 0.01, 0.5, 1.0})
    for (bool rescale : {false, true})
      for (bool fb : {false, true}) {
        CAPTURE(ratio);
        CAPTURE(rescale);
        CAPTURE(fb);
        std::size_t const n = (1u << 20) + 13;
        auto g = normal(n, 3), e0 = normal(n, 4, 0.5f);
        g[5] = std::numeric_limits<float>::quiet_NaN();
        sluice::random_k const c{.ratio = ratio, .rescale = rescale};
        std::size_t const k = c.keep(n);
        encode_context const ctx{.seed = 17, .rank = 2, .step = 6, .tensor = 3};
        std::vector<float> cv(n), d(n);
        for (std::size_t i = 0; i < n; ++i) cv[i] = fb ? g[i] + e0[i] : g[i];
        std::vector<std::byte> cpu(c.max_encoded_bytes(n));
        codec_workspace<sluice::random_k, float> ws;
        cpu.resize(c.encode(std::span<float const>(cv), ctx, ws, cpu));

        auto dg = upload(g), dx = upload(fb ? e0 : g);
        sc::device_buffer<std::uint32_t> idx(k);
        sc::device_buffer<float> val(k);
        sc::random_k_workspace rw(n, k);
        sc::non_finite_counter nf;
        sc::check(sc::random_k_select(fb ? dg.span() : std::span<float>(), dx.span(), k, ctx.key().shared(),
                                      sc::random_k_element::of(n, k, rescale), rw, idx.span(), val.span(), nf.count(),
                                      nullptr),
                  "random_k_select");
        sc::check(cudaDeviceSynchronize(), "sync");
        CHECK(nf.take(nullptr) == (fb ? 1u : 0u));
        auto const hi = download(idx.data(), k);
        CHECK(std::equal(hi.begin(), hi.end(), ws.indices.begin()));
        auto const hv = download(val.data(), k);
        std::vector<std::byte> frame(c.max_encoded_bytes(n));
        frame.resize(sc::write_random_k_frame(c, ctx, n, hv, frame));
        REQUIRE(frame.size() == cpu.size());
        CHECK(std::memcmp(frame.data(), cpu.data(), cpu.size()) == 0);
        if (fb) {  // residual's: c - decode(frame), +0 where not finite
          sluice::decode(c, std::span<std::byte const>(cpu), ctx, ws, std::span<float>(d));
          same_bits(download(dx.data(), n), sluice::test::kept_residual(cv, d), "random-k residual");
        } else {
          same_bits(download(dx.data(), n), g, "input untouched");
        }
      }
}

TEST_CASE("device block top-k selects block_top_k's blocks") {
  for (auto score : {sluice::block_score::l1, sluice::block_score::l2})
    for (std::size_t block : {std::size_t{16}, std::size_t{7}}) {
      CAPTURE(block);
      std::size_t const n = (1u << 18) + 3;
      auto x = normal(n, 21);
      for (std::size_t i = 0; i < 4 * block; ++i) x[i] = 1.5f;  // tied blocks
      block_top_k const c{.ratio = 0.02, .block = block, .score = score};
      encode_context const ctx{.step = 5};
      std::vector<std::byte> cpu(c.max_encoded_bytes(n));
      codec_workspace<block_top_k, float> ws;
      cpu.resize(c.encode(std::span<float const>(x), ctx, ws, cpu));
      std::size_t const kb = c.keep_blocks(n);
      auto dx = upload(x);
      sc::block_top_k_workspace bw(n, block);
      sc::device_buffer<std::uint32_t> blocks(kb);
      sc::device_buffer<float> vals(kb * block);
      sc::check(sc::block_top_k_select(dx.span(), block, score == sluice::block_score::l2, kb, bw, blocks.span(),
                                       vals.span(), nullptr),
                "block_top_k_select");
      auto const hb = download(blocks.data(), kb);
      auto const hv = download(vals.data(), kb * block);
      std::vector<std::byte> frame(c.max_encoded_bytes(n));
      frame.resize(sc::write_block_top_k_frame(c, ctx, n, hb, hv, frame));
      REQUIRE(frame.size() == cpu.size());
      CHECK(std::memcmp(frame.data(), cpu.data(), cpu.size()) == 0);
    }
}

TEST_CASE("device block top-k with fused feedback equals residual around block_top_k") {
  for (auto score : {sluice::block_score::l1, sluice::block_score::l2})
    for (std::size_t block : {std::size_t{16}, std::size_t{7}}) {
      CAPTURE(block);
      std::size_t const n = (1u << 18) + 3;
      block_top_k const c{.ratio = 0.02, .block = block, .score = score};
      sluice::residual const f{.non_finite = sluice::non_finite_policy::propagate};
      sluice::feedback_state st(f, std::vector<std::size_t>{n});
      sluice::feedback_workspace<block_top_k, float> fw;
      std::size_t const kb = c.keep_blocks(n);
      sc::non_finite_counter nf;
      std::uint64_t recorded = 0;
      sc::device_buffer<float> de(n);
      sc::check(cudaMemset(de.data(), 0, 4 * n), "memset");
      sc::block_top_k_workspace bw(n, block);
      sc::device_buffer<std::uint32_t> blocks(kb);
      sc::device_buffer<float> vals(kb * block);
      for (std::uint64_t step = 0; step < 3; ++step) {
        auto g = normal(n, static_cast<std::uint32_t>(30 + step));
        if (step == 1)
          g[3] = std::numeric_limits<float>::quiet_NaN(), g[n - 1] = std::numeric_limits<float>::infinity();
        encode_context const ctx{.step = step};
        std::vector<std::byte> cpu(c.max_encoded_bytes(n));
        cpu.resize(f.encode(c, st.slice(0), std::span<float const>(g), ctx, fw, std::span(cpu)));
        auto dg = upload(g);
        sc::check(sc::block_top_k_select(dg.span(), de.span(), block, score == sluice::block_score::l2, kb, bw,
                                         blocks.span(), vals.span(), nf.count(), nullptr),
                  "block_top_k_select");
        recorded += nf.take(nullptr);
        CHECK(recorded == st.report().non_finite_values);
        auto const hb = download(blocks.data(), kb);
        auto const hv = download(vals.data(), kb * block);
        std::vector<std::byte> frame(c.max_encoded_bytes(n));
        frame.resize(sc::write_block_top_k_frame(c, ctx, n, hb, hv, frame));
        REQUIRE(frame.size() == cpu.size());
        CHECK(std::memcmp(frame.data(), cpu.data(), cpu.size()) == 0);
        auto const res = st.slice(0).buffer<float>(0);
        same_bits(download(de.data(), n), std::vector<float>(res.begin(), res.end()), "block residual");
      }
    }
}

TEST_CASE("device adam, adamw and sgd steps give the CPU optimizers' bits, bf16 shadow included") {
  std::size_t const n = 100003;
  auto const p0 = normal(n, 4);
  auto run = [&](auto const& o) {
    using O = std::decay_t<decltype(o)>;
    optimizer_state<O> s(o, n);
    std::vector<float> p = p0;
    std::vector<sluice::bfloat16> shadow(n);
    auto dp = upload(p0);
    sc::device_buffer<float> m(n), v(n);
    sc::check(cudaMemset(m.data(), 0, 4 * n), "memset");
    sc::check(cudaMemset(v.data(), 0, 4 * n), "memset");
    sc::device_buffer<std::uint16_t> sh(n);
    for (std::uint32_t t = 1; t <= 3; ++t) {
      auto const g = normal(n, 50 + t);
      sluice::step(o, s, std::span<float>(p), std::span<float const>(g), std::span<sluice::bfloat16>(shadow));
      auto dg = upload(g);
      if constexpr (std::is_same_v<O, sgd>)
        sc::check(sc::sgd_step(dp.span(), dg.span(), m.span(), sc::sgd_element::from(o.kernel(t)), sh.span(), nullptr),
                  "sgd_step");
      else
        sc::check(sc::adam_step(dp.span(), dg.span(), m.span(), v.span(), sc::adam_element::from(o.kernel(t)),
                                sh.span(), nullptr),
                  "adam_step");
      sc::check(cudaDeviceSynchronize(), "sync");
    }
    same_bits(download(dp.data(), n), p, "params");
    auto const hs = download(sh.data(), n);
    CHECK(std::memcmp(hs.data(), shadow.data(), 2 * n) == 0);
    std::size_t const moments = o.layout().moments;
    std::vector<float> m0(n), m1(n);
    for (std::size_t i = 0; i < n; ++i) {
      if (moments > 0) m0[i] = s.moment(0, i);
      if (moments > 1) m1[i] = s.moment(1, i);
    }
    if (moments > 0) same_bits(download(m.data(), n), m0, "moment 0");
    if (moments > 1) same_bits(download(v.data(), n), m1, "moment 1");
  };
  run(adam{.lr = 1e-2, .weight_decay = 0.01});
  run(adamw{.lr = 1e-2, .weight_decay = 0.05});
  run(sgd{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
}

TEST_CASE("device sparse and bf16-moment steps give the CPU optimizers' bits") {
  std::size_t const n = 100003;
  auto const p0 = normal(n, 14);
  auto run = [&](auto o, std::size_t block) {
    using O = decltype(o);
    CAPTURE(block);
    CAPTURE(static_cast<int>(o.state_type));
    CAPTURE(static_cast<int>(o.sparse));
    bool const bf16 = o.state_type == sluice::element_type::bf16;
    bool const catch_up = o.sparse == sluice::sparse_mode::catch_up;
    optimizer_state<O> s(o, n, 6);
    sc::device_buffer<std::uint32_t> last(n);  // catch_up's per-entry step counters
    sc::check(cudaMemset(last.data(), 0, 4 * n), "memset");
    std::vector<float> p = p0;
    std::vector<sluice::bfloat16> shadow(n);
    auto dp = upload(p0);
    sc::device_buffer<float> m(n), v(n);
    sc::device_buffer<std::uint16_t> m16(n), v16(n), sh(n);
    auto moments = [&](std::uint32_t t) {
      sc::device_moments mom;
      if (bf16)
        mom.m16 = m16.span(), mom.v16 = v16.span(), mom.rounding = sc::bf16_moment_rounding::of(o.seed, t, 6);
      else
        mom.m = m.span(), mom.v = v.span();
      if constexpr (std::is_same_v<O, sgd>) mom.v = {}, mom.v16 = {};
      return mom;
    };
    // A step through the device wrappers: lazy, or catch_up with the counters.
    auto device_step = [&](std::uint32_t t, sc::device_moments const& mom, std::span<std::uint32_t const> is,
                           std::span<float const> vs, std::size_t bs) {
      if constexpr (std::is_same_v<O, sgd>) {
        auto const f = sc::sgd_element::from(o.kernel(t));
        if (catch_up)
          return sc::sgd_sparse_step(dp.span(), is, vs, bs, mom, f, last.span(), sc::sgd_catch_up::from(o.kernel(t)),
                                     sh.span(), nullptr);
        return is.empty() ? sc::sgd_step(dp.span(), vs, mom, f, sh.span(), nullptr)
                          : sc::sgd_sparse_step(dp.span(), is, vs, bs, mom, f, sh.span(), nullptr);
      } else {
        auto const f = sc::adam_element::from(o.kernel(t));
        if (catch_up)
          return sc::adam_sparse_step(dp.span(), is, vs, bs, mom, f, last.span(), sc::adam_catch_up::from(o.kernel(t)),
                                      sh.span(), nullptr);
        return is.empty() ? sc::adam_step(dp.span(), vs, mom, f, sh.span(), nullptr)
                          : sc::adam_sparse_step(dp.span(), is, vs, bs, mom, f, sh.span(), nullptr);
      }
    };
    for (void* q : {static_cast<void*>(m.data()), static_cast<void*>(v.data())})
      sc::check(cudaMemset(q, 0, 4 * n), "memset");
    for (void* q : {static_cast<void*>(m16.data()), static_cast<void*>(v16.data()), static_cast<void*>(sh.data())})
      sc::check(cudaMemset(q, 0, 2 * n), "memset");
    std::size_t const nb = (n + block - 1) / block;
    for (std::uint32_t t = 1; t <= 4; ++t) {
      auto const mom = moments(t);
      if (t == 2) {  // a dense step between the sparse ones
        auto const g = normal(n, 80 + t);
        sluice::step(o, s, std::span<float>(p), std::span<float const>(g), std::span<sluice::bfloat16>(shadow));
        auto dg = upload(g);
        sc::check(device_step(t, mom, {}, dg.span(), 1), "dense step");
        sc::check(cudaDeviceSynchronize(), "sync");
        continue;
      }
      std::vector<std::uint32_t> idx;
      for (std::uint32_t b = t % 3; b < nb; b += 1 + t) idx.push_back(b);
      if (idx.back() != nb - 1) idx.push_back(static_cast<std::uint32_t>(nb - 1));
      auto const vals = normal(idx.size() * block, 90 + t);
      sluice::step(o, s, std::span<float>(p), sluice::sparse_view<float const>{idx, vals, n, block},
                   std::span<sluice::bfloat16>(shadow));
      auto di = upload(idx);
      auto dv = upload(vals);
      std::span<std::uint32_t const> const is(di.data(), idx.size());
      std::span<float const> const vs(dv.data(), vals.size());
      sc::check(device_step(t, mom, is, vs, block), "sparse step");
      sc::check(cudaDeviceSynchronize(), "sync");
    }
    if (catch_up) {  // every lagging entry replayed up to step 4
      sluice::flush(o, s, std::span<float>(p), std::span<sluice::bfloat16>(shadow));
      if constexpr (std::is_same_v<O, sgd>)
        sc::check(
            sc::sgd_flush(dp.span(), moments(4), last.span(), sc::sgd_catch_up::from(o.kernel(4)), sh.span(), nullptr),
            "sgd_flush");
      else
        sc::check(sc::adam_flush(dp.span(), moments(4), last.span(), sc::adam_catch_up::from(o.kernel(4)), sh.span(),
                                 nullptr),
                  "adam_flush");
      auto const hl = download(last.data(), n);
      for (std::size_t i = 0; i < n; ++i) REQUIRE(hl[i] == s.last_step(i));
    }
    same_bits(download(dp.data(), n), p, "params");
    auto const hs = download(sh.data(), n);
    CHECK(std::memcmp(hs.data(), shadow.data(), 2 * n) == 0);
    for (std::size_t j = 0; j < o.layout().moments; ++j) {
      std::vector<float> got(n), ref(n);
      if (bf16) {
        auto const b = download(j == 0 ? m16.data() : v16.data(), n);
        for (std::size_t i = 0; i < n; ++i) got[i] = sc::bf16_value(b[i]);
      } else {
        got = download(j == 0 ? m.data() : v.data(), n);
      }
      for (std::size_t i = 0; i < n; ++i) ref[i] = s.moment(j, i);
      same_bits(got, ref, j == 0 ? "moment 0" : "moment 1");
    }
  };
  for (auto mode : {sluice::sparse_mode::lazy, sluice::sparse_mode::catch_up})
    for (auto st : {sluice::element_type::f32, sluice::element_type::bf16})
      for (std::size_t block : {std::size_t{1}, std::size_t{16}, std::size_t{7}}) {
        run(adam{.lr = 1e-2, .weight_decay = 0.01, .sparse = mode, .state_type = st, .seed = 5}, block);
        run(adamw{.lr = 1e-2, .weight_decay = 0.05, .sparse = mode, .state_type = st, .seed = 5}, block);
        run(sgd{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .sparse = mode, .state_type = st, .seed = 5}, block);
      }
}

#if defined(SLUICE_TEST_NCCL)
TEST_CASE("cuda::allreduce over NCCL with max-min quantization decodes every rank's CPU frame in rank order") {
  using namespace std::chrono_literals;
  auto eps = sluice::local_transport::create(1);
  sluice::nccl_transport<sluice::local_transport> t(eps[0], {.device = 0}, sluice::deadline::after(60s));
  std::size_t const n = 1000 * 33 + 5;
  maxmin_quantize const c{.bits = 4, .bucket = 1000, .round = rounding::stochastic};
  sluice::collective_context const cc{.step = 4, .tensor = 1, .seed = 2, .timeout = 30s};
  encode_context const ctx = cc.for_rank(0);
  auto g = normal(n, 12);
  g[2001] = std::numeric_limits<float>::infinity();
  auto const e0 = normal(n, 13, 0.1f);
  auto dg = upload(g), de = upload(e0);
  sc::device_buffer<float> sum(n);
  sc::allreduce_workspace<maxmin_quantize> ws(n, c, 1);
  sluice::residual const propagate{.non_finite = sluice::non_finite_policy::propagate};
  auto const r = sc::allreduce(t, c, propagate, dg.span(), de.span(), sum.span(), cc, ws, nullptr);
  sc::check(cudaDeviceSynchronize(), "sync");
  CHECK_FALSE(r.skipped);
  CHECK(r.non_finite == 1);
  // The CPU: residual feedback's frame, decoded (one rank: the sum is its decode).
  auto const ref = sluice::test::maxmin_feedback(c, ctx, g, e0);
  std::vector<float> d(n);
  codec_workspace<maxmin_quantize, float> cw;
  sluice::decode(c, std::span<std::byte const>(ref.frame), ctx, cw, std::span<float>(d));
  same_bits(download(sum.data(), n), d, "sum");
  same_bits(download(de.data(), n), ref.residual, "residual");
  // A sum of the wrong size is refused before anything is queued.
  CHECK_THROWS_AS(
      sc::allreduce(t, c, propagate, dg.span(), de.span(), std::span<float>(sum.data(), n - 1), cc, ws, nullptr),
      sluice::error);
  // The feedback's non_finite policy runs before anything changes: throw_error names the element,
  // skip_step skips on every rank; neither touches the residual or the sum.
  auto const e1 = download(de.data(), n);
  auto const s1 = download(sum.data(), n);
  try {
    (void)sc::allreduce(t, c, sluice::residual{}, dg.span(), de.span(), sum.span(), cc, ws, nullptr);
    FAIL("a non-finite gradient under throw_error must throw");
  } catch (sluice::error const& e) {
    CHECK(e.code() == sluice::errc::non_finite);
    CHECK(std::string(e.what()).find("element 2001") != std::string::npos);
  }
  sluice::residual const skip{.non_finite = sluice::non_finite_policy::skip_step};
  CHECK(sc::allreduce(t, c, skip, dg.span(), de.span(), sum.span(), cc, ws, nullptr).skipped);
  sc::check(cudaDeviceSynchronize(), "sync");
  same_bits(download(de.data(), n), e1, "residual after refusals");
  same_bits(download(sum.data(), n), s1, "sum after refusals");
  // A bf16 residual is not kept on the device.
  CHECK_THROWS_AS(sc::allreduce(t, c, sluice::residual{.precision = sluice::element_type::bf16}, dg.span(), de.span(),
                                sum.span(), cc, ws, nullptr),
                  sluice::error);
}

TEST_CASE(
    "cuda::allreduce over NCCL with top-k, block top-k and random-k decodes every rank's CPU frame in rank order") {
  using namespace std::chrono_literals;
  auto eps = sluice::local_transport::create(1);
  sluice::nccl_transport<sluice::local_transport> t(eps[0], {.device = 0}, sluice::deadline::after(60s));
  std::size_t const n = (1u << 16) + 7;
  sluice::collective_context const cc{.step = 3, .tensor = 2, .seed = 5, .timeout = 30s};
  encode_context const ctx = cc.for_rank(0);
  auto g = normal(n, 14);
  g[4099] = -std::numeric_limits<float>::infinity();  // sent first by top-k; +0 residuals after
  auto const e0 = normal(n, 15, 0.5f);
  // The CPU: decode_add of the frame of c = g + e (or g) into zeros (one rank: the sum is its
  // decode), the residual c - decode, +0 where not finite.
  auto reference = [&](auto const& c, bool fb, std::vector<float>& residual) {
    std::vector<float> cv(n), d(n), sum(n, 0.0f);
    for (std::size_t i = 0; i < n; ++i) cv[i] = fb ? g[i] + e0[i] : g[i];
    std::vector<std::byte> frame(c.max_encoded_bytes(n));
    codec_workspace<std::decay_t<decltype(c)>, float> cw;
    frame.resize(c.encode(std::span<float const>(cv), ctx, cw, frame));
    sluice::decode_add(c, std::span<std::byte const>(frame), ctx, cw, std::span<float>(sum));
    sluice::decode(c, std::span<std::byte const>(frame), ctx, cw, std::span<float>(d));
    residual = sluice::test::kept_residual(cv, d);
    return sum;
  };
  sluice::residual const with{.non_finite = sluice::non_finite_policy::propagate};
  sluice::no_feedback const without{.non_finite = sluice::non_finite_policy::propagate};
  // One call for either feedback policy: the residual span is empty without feedback.
  auto run = [&](auto const& c, bool fb, std::span<float const> grad, std::span<float> e, std::span<float> sum,
                 auto& ws) {
    return fb ? sc::allreduce(t, c, with, grad, e, sum, cc, ws, nullptr)
              : sc::allreduce(t, c, without, grad, std::span<float>(), sum, cc, ws, nullptr);
  };
  for (bool fb : {true, false}) {
    CAPTURE(fb);
    top_k const c{.ratio = 0.01};
    std::vector<float> residual;
    auto const want = reference(c, fb, residual);
    auto dg = upload(g), de = upload(e0);
    sc::device_buffer<float> sum(n);
    sc::allreduce_workspace<top_k> ws(n, c, 1);
    auto const r = run(c, fb, dg.span(), de.span(), sum.span(), ws);
    sc::check(cudaDeviceSynchronize(), "sync");
    CHECK(r.non_finite == (fb ? 1u : 0u));
    same_bits(download(sum.data(), n), want, "top-k sum");
    same_bits(download(de.data(), n), fb ? residual : e0, "top-k residual");
    same_bits(download(dg.data(), n), g, "gradient untouched");
    CHECK_THROWS_AS(run(c, fb, dg.span(), de.span(), std::span<float>(sum.data(), n - 1), ws), sluice::error);
    sc::allreduce_workspace<top_k> small(n / 2, c, 1);
    CHECK_THROWS_AS(run(c, fb, dg.span(), de.span(), sum.span(), small), sluice::error);
  }
  for (std::size_t block : {std::size_t{16}, std::size_t{7}})
    for (auto score : {sluice::block_score::l1, sluice::block_score::l2})
      for (bool fb : {true, false}) {
        CAPTURE(block);
        CAPTURE(fb);
        block_top_k const c{.ratio = 0.01, .block = block, .score = score};
        std::vector<float> residual;
        auto const want = reference(c, fb, residual);
        auto dg = upload(g), de = upload(e0);
        sc::device_buffer<float> sum(n);
        sc::allreduce_workspace<block_top_k> ws(n, c, 1);
        auto const r = run(c, fb, dg.span(), de.span(), sum.span(), ws);
        sc::check(cudaDeviceSynchronize(), "sync");
        CHECK(r.non_finite == (fb ? 1u : 0u));
        same_bits(download(sum.data(), n), want, "block-top-k sum");
        same_bits(download(de.data(), n), fb ? residual : e0, "block-top-k residual");
        same_bits(download(dg.data(), n), g, "gradient untouched");
      }
  for (bool rescale : {false, true})
    for (bool fb : {true, false}) {
      CAPTURE(rescale);
      CAPTURE(fb);
      sluice::random_k const c{.ratio = 0.02, .rescale = rescale};
      std::vector<float> residual;
      auto const want = reference(c, fb, residual);
      auto dg = upload(g), de = upload(e0);
      sc::device_buffer<float> sum(n);
      sc::allreduce_workspace<sluice::random_k> ws(n, c, 1);
      // cc names the step, tensor and seed; the draw uses the shared key, as the CPU codec does.
      auto const r = run(c, fb, dg.span(), de.span(), sum.span(), ws);
      sc::check(cudaDeviceSynchronize(), "sync");
      CHECK(r.non_finite == (fb ? 1u : 0u));
      same_bits(download(sum.data(), n), want, "random-k sum");
      same_bits(download(de.data(), n), fb ? residual : e0, "random-k residual");
      // A workspace sized for fewer entries (another ratio) is refused before anything is queued.
      sc::allreduce_workspace<sluice::random_k> fewer(n, sluice::random_k{.ratio = 0.01}, 1);
      CHECK_THROWS_AS(run(c, fb, dg.span(), de.span(), sum.span(), fewer), sluice::error);
    }
}
#endif

TEST_CASE("the Thrust formulations on the CUDA system write the kernels' bytes") {
  std::size_t const n = 1000 * 77 + 3;
  sc::maxmin_params const p{3, 1000, true};
  auto const g = normal(n, 12), e0 = normal(n, 13, 0.1f);
  auto dg = upload(g), de1 = upload(e0), de2 = upload(e0);
  std::size_t const bytes = sc::maxmin_payload_bytes(n, p);
  sc::device_buffer<std::byte> a(bytes), b(bytes);
  sluice::stream_key const key{1, 2, 3, 4};
  sc::check(sc::feedback_maxmin(dg.span(), de1.span(), p, key, a.span(), nullptr), "feedback_maxmin");
  sc::portable::feedback_maxmin(thrust::cuda::par, dg.data(), de2.data(), n, p, key,
                                reinterpret_cast<std::uint8_t*>(b.data()));
  sc::check(cudaDeviceSynchronize(), "sync");
  std::size_t const used = 8 * ((n + 999) / 1000) + (3 * n + 7) / 8;
  auto const ha = download(a.data(), used), hb = download(b.data(), used);
  CHECK(std::memcmp(ha.data(), hb.data(), used) == 0);
  same_bits(download(de1.data(), n), download(de2.data(), n), "residual");
}

TEST_CASE("the staged device-to-host path delivers the bytes and reports completion") {
  std::size_t const n = (1u << 20) + 5;
  auto const x = normal(n, 8);
  auto dx = upload(x);
  sc::stream s;
  sc::staging_ring ring(2, 4 * n);
  auto slot = ring.copy_to_host(std::as_bytes(dx.span()), s.get());
  slot.wait();
  CHECK(std::memcmp(slot.bytes().data(), x.data(), 4 * n) == 0);
}

int main(int argc, char** argv) {
  if (sluice::cuda::device_count() == 0) {
    std::printf("test_cuda_gpu: SKIPPED: no CUDA device is visible (these tests need a GPU)\n");
    return 77;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
