// The CUDA backend's per-element functors (sluice/cuda/functors.hpp), run on the CPU, against the
// CPU codecs and optimizers: byte-identical frames, bit-identical residuals, decodes and optimizer
// states. The device kernels use the same functors, so these tests pin the GPU wire format too.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <sluice/cuda/frame.hpp>
#include <sluice/cuda/functors.hpp>
#include <sluice/cuda/status.hpp>
#include <sluice/feedback/non_finite.hpp>
#include <sluice/feedback/residual.hpp>
#include <sluice/feedback/state.hpp>
#include <sluice/optim/adam.hpp>
#include <sluice/optim/adamw.hpp>
#include <sluice/optim/sgd.hpp>

#include "cuda/cuda_testing.hpp"

namespace {

using namespace sluice;

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

using test::normal;

// Buckets that exercise the special grids: constant (unit 0), a subnormal range (infinite
// reciprocal), a NaN and an infinity (NaN grid), zeros.
std::vector<float> awkward(std::size_t n, std::size_t bucket, std::uint32_t seed) {
  auto v = normal(n, seed);
  auto fill = [&](std::size_t b, auto f) {
    for (std::size_t j = b * bucket; j < std::min(n, (b + 1) * bucket); ++j) f(v[j], j);
  };
  if (n > 1 * bucket) fill(1, [](float& x, std::size_t) { x = 0.75f; });
  if (n > 2 * bucket) fill(2, [](float& x, std::size_t j) { x = static_cast<float>(j % 7) * 1e-44f; });
  if (n > 3 * bucket) v[3 * bucket + 5] = std::numeric_limits<float>::quiet_NaN();
  if (n > 4 * bucket) v[4 * bucket + 1] = -std::numeric_limits<float>::infinity();
  if (n > 5 * bucket) fill(5, [](float& x, std::size_t) { x = 0.0f; });
  if (n > 6 * bucket) fill(6, [](float& x, std::size_t j) { x = static_cast<float>(j) * 1e30f; });
  return v;
}

void check_same_bits(std::vector<float> const& a, std::vector<float> const& b, char const* what) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    if (bits(a[i]) != bits(b[i])) FAIL(what << ": element " << i << ": " << a[i] << " vs " << b[i]);
}

// The frame the device path produces: sections from the functors, finished on the host.
std::vector<std::byte> device_path_frame(maxmin_quantize const& c, encode_context const& ctx,
                                         std::vector<float> const& g, float* e) {
  auto const l = cuda::layout_of(c, g.size());
  std::vector<std::byte> frame(l.frame_bytes, std::byte{0xAB});
  std::vector<std::byte> payload(l.payload_bytes());
  cuda::host::feedback_maxmin(g, e, c, ctx.key(), payload);
  std::memcpy(frame.data() + l.ranges_offset, payload.data(), payload.size());
  frame.resize(cuda::finish_maxmin_frame(c, ctx, g.size(), frame));
  return frame;
}

}  // namespace

TEST_CASE("the device operations' NaN results are this CPU's: x86_nan maps a GPU's canonical NaN to them") {
  // A GPU returns 0x7fffffff for every NaN result; x86_nan(r, a, b) must turn that into what this
  // CPU computed, for every NaN source: a NaN operand (its payload and sign, quieted) and an
  // invalid operation on numbers. volatile keeps the compiler from folding the operations.
  float const inf = std::numeric_limits<float>::infinity();
  auto nan_bits = [](std::uint32_t u) {
    float x;
    std::memcpy(&x, &u, 4);
    return x;
  };
  std::vector<float> const xs = {0.0f,
                                 -0.0f,
                                 1.5f,
                                 -3.0f,
                                 inf,
                                 -inf,
                                 nan_bits(0x7fc00000u),
                                 nan_bits(0xffc00123u),
                                 nan_bits(0x7f800001u) /* signalling */,
                                 nan_bits(0xff812345u) /* signalling */};
  float const gpu_nan = nan_bits(0x7fffffffu);
  auto gpu = [&](float r) { return r != r ? gpu_nan : r; };
  int nan_results = 0;
  for (float a : xs)
    for (float b : xs) {
      volatile float va = a, vb = b;
      bool const both = a != a && b != b;  // add and mul commute: the compiler picks the first operand
      float const r[4] = {va + vb, va - vb, va * vb, va / vb};
      for (int op = 0; op < 4; ++op) {
        if (both && (op == 0 || op == 2)) continue;
        CAPTURE(op);
        CAPTURE(bits(a));
        CAPTURE(bits(b));
        CHECK(bits(detail::ieee::x86_nan(gpu(r[op]), a, b)) == bits(r[op]));
        nan_results += r[op] != r[op];
      }
      volatile double da = a, db = b;
      double const rd = da - db, gd = rd != rd ? std::numeric_limits<double>::quiet_NaN() : rd;
      double const back = detail::ieee::x86_nan(gd, double{a}, double{b});
      CHECK(std::memcmp(&back, &rd, 8) == 0);
    }
  CHECK(nan_results > 100);  // the NaN paths were exercised
  for (float a : {-1.0f, -inf, nan_bits(0xffc00123u)}) {
    volatile float va = a;
    float const r = std::sqrt(static_cast<float>(va));
    CHECK(bits(detail::ieee::x86_nan(gpu(r), a, a)) == bits(r));
  }
}

TEST_CASE("philox_stream draws random_stream's words") {
  for (auto const key : {stream_key{0, 0, 0, 0}, stream_key{0x123456789abcdefull, 3, 17, 5},
                         stream_key{42, stream_key::shared_rank, 1, 9}}) {
    random_stream const ref(key);
    cuda::philox_stream const dev(key);
    for (std::uint64_t i : {0ull, 1ull, 2ull, 3ull, 4ull, 5ull, 1023ull, 1ull << 20, (1ull << 34) - 1})
      CHECK(dev.word(i) == ref.word(i));
    for (std::uint64_t i = 0; i < 64; ++i) CHECK(bits(dev.uniform(i)) == bits(ref.uniform(i)));
  }
}

TEST_CASE("max-min quantization through the functors is byte-identical to maxmin_quantize::encode") {
  for (unsigned b : {1u, 2u, 3u, 4u, 5u, 8u})
    for (std::size_t bucket : {std::size_t{64}, std::size_t{100}, std::size_t{1024}})
      for (auto round : {rounding::nearest, rounding::stochastic})
        for (std::size_t n : {bucket * 8 + 37, bucket * 3, std::size_t{1}}) {
          CAPTURE(b);
          CAPTURE(bucket);
          CAPTURE(static_cast<int>(round));
          CAPTURE(n);
          maxmin_quantize const c{.bits = b, .bucket = bucket, .round = round};
          encode_context const ctx{.seed = 99, .rank = 2, .step = 7, .tensor = 4};
          auto const x = awkward(n, bucket, static_cast<std::uint32_t>(n + b));
          std::vector<std::byte> ref(c.max_encoded_bytes(n));
          codec_workspace<maxmin_quantize, float> ws;
          ref.resize(c.encode(std::span<float const>(x), ctx, ws, ref));
          auto const got = device_path_frame(c, ctx, x, nullptr);
          REQUIRE(got.size() == ref.size());
          CHECK(std::memcmp(got.data(), ref.data(), ref.size()) == 0);
        }
}

TEST_CASE("fused feedback + max-min quantization equals compensate, encode, decode, subtract") {
  for (unsigned b : {2u, 4u, 8u})
    for (auto round : {rounding::nearest, rounding::stochastic}) {
      std::size_t const n = 4096 * 3 + 500;
      maxmin_quantize const c{.bits = b, .bucket = 512, .round = round};
      encode_context const ctx{.seed = 5, .rank = 1, .step = 3, .tensor = 8};
      auto const g = awkward(n, 512, b);
      auto const e0 = normal(n, 77, 0.1f);
      // Reference: the unfused composition on the CPU codec.
      auto const [ref, e_ref] = test::maxmin_feedback(c, ctx, g, e0);
      // Functors.
      auto e = e0;
      auto const got = device_path_frame(c, ctx, g, e.data());
      REQUIRE(got.size() == ref.size());
      CHECK(std::memcmp(got.data(), ref.data(), ref.size()) == 0);
      check_same_bits(e, e_ref, "residual");
    }
}

TEST_CASE("dequantize-add through the functors equals maxmin_quantize::decode_add") {
  for (unsigned b : {1u, 3u, 4u, 7u}) {
    std::size_t const n = 1000 * 5 + 3;
    maxmin_quantize const c{.bits = b, .bucket = 1000};
    encode_context const ctx{};
    auto const x = awkward(n, 1000, b + 10);
    std::vector<std::byte> msg(c.max_encoded_bytes(n));
    codec_workspace<maxmin_quantize, float> ws;
    msg.resize(c.encode(std::span<float const>(x), ctx, ws, msg));
    auto ref = normal(n, 3), got = ref;
    sluice::decode_add(c, std::span<std::byte const>(msg), ctx, ws, std::span<float>(ref));
    auto const l = cuda::layout_of(c, n);
    auto const* ranges = msg.data() + l.ranges_offset;
    auto const* levels = reinterpret_cast<std::uint8_t const*>(ranges + l.ranges_bytes);
    for (std::size_t i = 0; i < n; ++i) {
      cuda::maxmin_grid gr;
      std::memcpy(&gr.min, ranges + 8 * (i / c.bucket), 4);
      std::memcpy(&gr.unit, ranges + 8 * (i / c.bucket) + 4, 4);
      got[i] = cuda::dequantize_add_element{}(got[i], gr, cuda::unpack_level(levels, i, b));
    }
    check_same_bits(got, ref, "decode_add");
  }
}

// The device's top-k rule on the CPU: the k-th largest key T, then key > T, or key == T and index
// below the index past the ties-th element with key T.
static std::vector<std::uint32_t> select_like_device(std::vector<float> const& x, std::size_t k) {
  std::size_t const n = x.size();
  std::vector<std::uint32_t> keys(n);
  for (std::size_t i = 0; i < n; ++i) keys[i] = cuda::magnitude_key(x[i]);
  auto sorted = keys;
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(k - 1), sorted.end(), std::greater<>());
  std::uint32_t const t = sorted[k - 1];
  auto const above = static_cast<std::size_t>(std::count_if(keys.begin(), keys.end(), [&](auto v) { return v > t; }));
  std::size_t const ties = k - above;
  std::size_t seen = 0;
  std::uint32_t limit = 0;
  for (std::size_t i = 0; i < n && seen < ties; ++i)
    if (keys[i] == t && ++seen == ties) limit = static_cast<std::uint32_t>(i + 1);
  std::vector<std::uint32_t> idx;
  for (std::size_t i = 0; i < n; ++i)
    if (keys[i] > t || (keys[i] == t && i < limit)) idx.push_back(static_cast<std::uint32_t>(i));
  return idx;
}

// The residual and count the device writes for top-k with feedback fused: c = g + e ranked, c - c
// where sent, c elsewhere, every non-finite residual +0 when any c was not finite.
static std::uint64_t top_k_feedback_like_device(std::vector<float> const& g, std::vector<float>& e, std::size_t k,
                                                std::vector<std::uint32_t>& idx, std::vector<float>& val) {
  std::uint64_t bad = 0;
  for (std::size_t i = 0; i < e.size(); ++i)
    bad += cuda::non_finite_count(e[i] = cuda::feedback_maxmin_element::compensate(g[i], e[i]));
  idx = select_like_device(e, k);
  val.resize(k);
  for (std::size_t j = 0; j < k; ++j) val[j] = e[idx[j]], e[idx[j]] = val[j] - val[j];
  if (bad != 0)
    for (auto& x : e) x = cuda::kept_residual(x);
  return bad;
}

TEST_CASE("block scores and the device's selection rule give block_top_k::encode's frame") {
  for (auto score : {block_score::l1, block_score::l2})
    for (std::size_t block : {std::size_t{16}, std::size_t{5}, std::size_t{64}}) {
      CAPTURE(block);
      std::size_t const n = 10007;
      auto x = normal(n, 31);
      for (std::size_t i = 0; i < 3 * block; ++i) x[i] = 0.5f;  // tied blocks
      block_top_k const c{.ratio = 0.05, .block = block, .score = score};
      encode_context const ctx{.step = 4};
      std::vector<std::byte> ref(c.max_encoded_bytes(n));
      codec_workspace<block_top_k, float> ws;
      ref.resize(c.encode(std::span<float const>(x), ctx, ws, ref));
      std::size_t const nb = c.block_count(n), kb = c.keep_blocks(n);
      std::vector<float> scores(nb);
      for (std::size_t j = 0; j < nb; ++j)
        scores[j] =
            cuda::block_top_k_score(x.data() + j * block, std::min(block, n - j * block), score == block_score::l2);
      auto const blocks = select_like_device(scores, kb);
      std::vector<float> vals(kb * block, 0.0f);
      for (std::size_t j = 0; j < kb; ++j)
        for (std::size_t e = 0; e < block && blocks[j] * block + e < n; ++e)
          vals[j * block + e] = x[blocks[j] * block + e];
      std::vector<std::byte> got(c.max_encoded_bytes(n));
      got.resize(cuda::write_block_top_k_frame(c, ctx, n, blocks, vals, got));
      REQUIRE(got.size() == ref.size());
      CHECK(std::memcmp(got.data(), ref.data(), ref.size()) == 0);
    }
}

TEST_CASE("block top-k with fused feedback through the functors equals residual around block_top_k") {
  for (auto score : {block_score::l1, block_score::l2})
    for (std::size_t block : {std::size_t{16}, std::size_t{5}}) {
      CAPTURE(block);
      std::size_t const n = 10007;
      block_top_k const c{.ratio = 0.05, .block = block, .score = score};
      residual const f{};
      feedback_state st(f, std::vector<std::size_t>{n});
      feedback_workspace<block_top_k, float> fw;
      std::vector<float> e(n, 0.0f);
      for (std::uint64_t step = 0; step < 3; ++step) {
        auto g = normal(n, static_cast<std::uint32_t>(40 + step));
        for (std::size_t i = 0; i < 2 * block; ++i) g[i] = 0.5f - e[i];  // tied blocks of c
        encode_context const ctx{.step = step};
        std::vector<std::byte> ref(c.max_encoded_bytes(n));
        ref.resize(f.encode(c, st.slice(0), std::span<float const>(g), ctx, fw, std::span(ref)));
        // The device's decomposition: c = g + e with the block scores, selection, gather, kept blocks to +0.
        std::size_t const nb = c.block_count(n), kb = c.keep_blocks(n);
        std::vector<float> scores(nb);
        for (std::size_t j = 0; j < nb; ++j) {
          std::size_t const first = j * block, len = std::min(block, n - first);
          for (std::size_t i = first; i < first + len; ++i)
            e[i] = cuda::feedback_maxmin_element::compensate(g[i], e[i]);
          scores[j] = cuda::block_top_k_score(e.data() + first, len, score == block_score::l2);
        }
        auto const blocks = select_like_device(scores, kb);
        std::vector<float> vals(kb * block, 0.0f);
        for (std::size_t j = 0; j < kb; ++j)
          for (std::size_t i = blocks[j] * block; i < std::min(n, (blocks[j] + 1) * block); ++i)
            vals[j * block + i - blocks[j] * block] = e[i], e[i] = 0.0f;
        std::vector<std::byte> got(c.max_encoded_bytes(n));
        got.resize(cuda::write_block_top_k_frame(c, ctx, n, blocks, vals, got));
        REQUIRE(got.size() == ref.size());
        CHECK(std::memcmp(got.data(), ref.data(), ref.size()) == 0);
        auto const res = st.slice(0).buffer<float>(0);
        check_same_bits(e, std::vector<float>(res.begin(), res.end()), "residual");
      }
    }
}

TEST_CASE("top-k by threshold (key, tie index) and scatter-add equal top_k::encode and decode_add") {
  for (double ratio : {0.01, 0.1, 1.0}) {
    std::size_t const n = 20000;
    auto x = normal(n, 11);
    for (std::size_t i = 0; i < n; i += 3) x[i] = 0.5f;  // many ties
    x[17] = -std::numeric_limits<float>::infinity();
    x[4000] = std::numeric_limits<float>::quiet_NaN();
    top_k const c{.ratio = ratio};
    encode_context const ctx{.step = 2, .tensor = 1};
    std::vector<std::byte> ref(c.max_encoded_bytes(n));
    codec_workspace<top_k, float> ws;
    ref.resize(c.encode(std::span<float const>(x), ctx, ws, ref));
    // The device's selection rule: the k-th largest key T, then key > T or (key == T and index <
    // the index of the ties-th element with key T).
    std::size_t const k = c.keep(n);
    std::vector<std::uint32_t> keys(n);
    for (std::size_t i = 0; i < n; ++i) keys[i] = cuda::magnitude_key(x[i]);
    auto sorted = keys;
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(k - 1), sorted.end(),
                     std::greater<>());
    std::uint32_t const t = sorted[k - 1];
    std::size_t const above =
        static_cast<std::size_t>(std::count_if(keys.begin(), keys.end(), [&](auto v) { return v > t; }));
    std::size_t ties = k - above, seen = 0;
    std::uint32_t limit = 0;
    for (std::size_t i = 0; i < n && seen < ties; ++i)
      if (keys[i] == t && ++seen == ties) limit = static_cast<std::uint32_t>(i + 1);
    std::vector<std::uint32_t> idx;
    std::vector<float> val;
    for (std::size_t i = 0; i < n; ++i)
      if (keys[i] > t || (keys[i] == t && i < limit)) idx.push_back(static_cast<std::uint32_t>(i)), val.push_back(x[i]);
    REQUIRE(idx.size() == k);
    std::vector<std::byte> got(c.max_encoded_bytes(n));
    got.resize(cuda::write_top_k_frame(c, ctx, n, idx, val, got));
    REQUIRE(got.size() == ref.size());
    CHECK(std::memcmp(got.data(), ref.data(), ref.size()) == 0);

    auto dense = normal(n, 12), dense_ref = dense;
    sluice::decode_add(c, std::span<std::byte const>(ref), ctx, ws, std::span<float>(dense_ref));
    for (std::size_t j = 0; j < k; ++j) dense[idx[j]] = cuda::scatter_add_element{}(dense[idx[j]], val[j]);
    check_same_bits(dense, dense_ref, "scatter-add");
  }
}

TEST_CASE("random_k's draws split per thread give random_k's indices and frame") {
  // Dense draws (a bitmap on the CPU) and sparse ones (a hash table): the same set either way.
  for (double ratio : {0.0005, 0.01, 0.3, 0.9, 1.0})
    for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{100003}})
      for (bool rescale : {false, true})
        for (std::uint64_t seed : {0ull, 0x9e3779b97f4a7c15ull}) {
          CAPTURE(ratio);
          CAPTURE(n);
          CAPTURE(rescale);
          random_k const c{.ratio = ratio, .rescale = rescale};
          encode_context const ctx{.seed = seed, .rank = 3, .step = 11 + n % 5, .tensor = 2 + seed % 7};
          auto const x = normal(n, static_cast<std::uint32_t>(n + seed));
          std::vector<std::byte> ref(c.max_encoded_bytes(n));
          codec_workspace<random_k, float> ws;
          ref.resize(c.encode(std::span<float const>(x), ctx, ws, ref));
          std::size_t const k = c.keep(n);
          std::vector<std::uint32_t> idx(k);
          std::vector<float> val(k), xin = x;
          cuda::host::random_k_select({}, xin, k, ctx.key().shared(), cuda::random_k_element::of(n, k, rescale), idx,
                                      val);
          CHECK(std::equal(idx.begin(), idx.end(), ws.indices.begin()));
          std::vector<std::byte> got(c.max_encoded_bytes(n));
          got.resize(cuda::write_random_k_frame(c, ctx, n, val, got));
          REQUIRE(got.size() == ref.size());
          CHECK(std::memcmp(got.data(), ref.data(), ref.size()) == 0);
          check_same_bits(xin, x, "input untouched");
        }
}

TEST_CASE("random_k with fused feedback equals residual around random_k, NaN and Inf included") {
  for (bool rescale : {false, true})
    for (std::uint64_t step : {1ull, 2ull, 77ull}) {
      std::size_t const n = 50021;
      random_k const c{.ratio = 0.02, .rescale = rescale};
      encode_context const ctx{.seed = 8, .rank = 1, .step = step, .tensor = 0};
      auto g = normal(n, static_cast<std::uint32_t>(step));
      g[10] = std::numeric_limits<float>::quiet_NaN();
      g[n - 1] = std::numeric_limits<float>::infinity();
      auto const e0 = normal(n, 91, 0.1f);
      residual const f{.non_finite = non_finite_policy::propagate};
      feedback_state st(f, std::vector<std::size_t>{n});
      std::copy(e0.begin(), e0.end(), st.buffer<float>(0, 0).begin());
      feedback_workspace<random_k, float> fw;
      std::vector<std::byte> ref(c.max_encoded_bytes(n));
      ref.resize(f.encode(c, st.slice(0), std::span<float const>(g), ctx, fw, std::span(ref)));
      std::size_t const k = c.keep(n);
      std::vector<std::uint32_t> idx(k);
      std::vector<float> val(k), e = e0;
      auto const bad =
          cuda::host::random_k_select(g, e, k, ctx.key().shared(), cuda::random_k_element::of(n, k, rescale), idx, val);
      std::vector<std::byte> got(c.max_encoded_bytes(n));
      got.resize(cuda::write_random_k_frame(c, ctx, n, val, got));
      REQUIRE(got.size() == ref.size());
      CHECK(std::memcmp(got.data(), ref.data(), ref.size()) == 0);
      auto const res = st.slice(0).buffer<float>(0);
      check_same_bits(e, std::vector<float>(res.begin(), res.end()), "residual");
      CHECK(bad == 2);
      CHECK(st.report().non_finite_values == bad);
    }
}

TEST_CASE("non-finite gradients through the functors give residual's residual bits and counters") {
  float const nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::size_t const n = 4096 + 1000;
  auto g = normal(n, 5);
  g[3] = nan;
  g[700] = -inf;
  g[2049] = inf;
  g[4500] = nan;
  auto e0 = normal(n, 6, 0.1f);
  // Finite gradients whose compensation overflows: counted under every policy.
  g[1500] = 3.0e38f, e0[1500] = 3.0e38f;
  auto const g_finite = [&] {
    auto x = g;
    for (std::size_t i : {3, 700, 2049, 4500}) x[i] = 1.0f;
    return x;
  }();
  for (auto policy : {non_finite_policy::propagate, non_finite_policy::skip_step, non_finite_policy::throw_error})
    for (bool finite_g : {false, true}) {
      CAPTURE(static_cast<int>(policy));
      CAPTURE(finite_g);
      auto const& gr = finite_g ? g_finite : g;
      encode_context const ctx{.seed = 4, .rank = 0, .step = 12, .tensor = 0};
      // The device's sequence: find the first NaN or Inf of g, apply the policy, run the fused
      // call, record the count.
      auto run = [&](auto const& codec, auto&& device_call) {
        using C = std::decay_t<decltype(codec)>;
        for (bool fuse : {true, false}) {
          CAPTURE(fuse);
          residual const f{.non_finite = policy, .fuse = fuse};
          feedback_state st(f, std::vector<std::size_t>{n}), dst(f, std::vector<std::size_t>{n});
          std::copy(e0.begin(), e0.end(), st.buffer<float>(0, 0).begin());
          std::copy(e0.begin(), e0.end(), dst.buffer<float>(0, 0).begin());
          feedback_workspace<C, float> fw;
          std::vector<std::byte> ref(codec.max_encoded_bytes(n)), got(codec.max_encoded_bytes(n));
          bool threw = false, dthrew = false;
          try {
            ref.resize(f.encode(codec, st.slice(0), std::span<float const>(gr), ctx, fw, std::span(ref)));
          } catch (error const& x) {
            threw = true;
            CHECK(x.kind() == errc::non_finite);
          }
          auto e = e0;
          try {
            if (cuda::apply_non_finite_policy(policy, dst.slice(0), first_non_finite(std::span<float const>(gr)),
                                              ctx.step)) {
              got.clear();
            } else {
              auto const [bytes, bad] = device_call(gr, e, got);
              got.resize(bytes);
              dst.record_non_finite(bad);
              auto const d = dst.buffer<float>(0, 0);
              std::copy(e.begin(), e.end(), d.begin());
            }
          } catch (error const& x) {
            dthrew = true;
            CHECK(x.kind() == errc::non_finite);
          }
          CHECK(threw == dthrew);
          if (threw) continue;
          REQUIRE(got.size() == ref.size());
          CHECK(std::memcmp(got.data(), ref.data(), ref.size()) == 0);
          CHECK(dst.report() == st.report());
          auto const a = st.buffer<float>(0, 0), b = dst.buffer<float>(0, 0);
          check_same_bits(std::vector<float>(b.begin(), b.end()), std::vector<float>(a.begin(), a.end()), "residual");
          if (policy == non_finite_policy::propagate) CHECK(st.report().non_finite_values == (finite_g ? 1u : 5u));
        }
      };
      for (unsigned b : {4u, 3u})
        for (auto round : {rounding::nearest, rounding::stochastic}) {
          CAPTURE(b);
          maxmin_quantize const c{.bits = b, .bucket = 512, .round = round};
          run(c, [&](std::vector<float> const& gg, std::vector<float>& e, std::vector<std::byte>& frame) {
            auto const l = cuda::layout_of(c, n);
            std::vector<std::byte> payload(l.payload_bytes());
            auto const bad = cuda::host::feedback_maxmin(gg, e.data(), c, ctx.key(), payload);
            std::memcpy(frame.data() + l.ranges_offset, payload.data(), payload.size());
            return std::pair{cuda::finish_maxmin_frame(c, ctx, n, frame), bad};
          });
        }
      random_k const rk{.ratio = 0.05, .rescale = true};
      run(rk, [&](std::vector<float> const& gg, std::vector<float>& e, std::vector<std::byte>& frame) {
        std::size_t const k = rk.keep(n);
        std::vector<std::uint32_t> idx(k);
        std::vector<float> val(k);
        auto const bad =
            cuda::host::random_k_select(gg, e, k, ctx.key().shared(), cuda::random_k_element::of(n, k, true), idx, val);
        return std::pair{cuda::write_random_k_frame(rk, ctx, n, val, frame), bad};
      });
      for (std::size_t block : {std::size_t{16}, std::size_t{5}}) {
        block_top_k const bk{.ratio = 0.05, .block = block};
        run(bk, [&](std::vector<float> const& gg, std::vector<float>& e, std::vector<std::byte>& frame) {
          std::size_t const nb = bk.block_count(n), kb = bk.keep_blocks(n);
          std::vector<float> scores(nb);
          std::uint64_t bad = 0;
          for (std::size_t j = 0; j < nb; ++j) {
            std::size_t const first = j * block, len = std::min(block, n - first);
            for (std::size_t i = first; i < first + len; ++i)
              bad += cuda::non_finite_count(e[i] = cuda::feedback_maxmin_element::compensate(gg[i], e[i]));
            scores[j] = cuda::block_top_k_score(e.data() + first, len, false);
          }
          auto const blocks = select_like_device(scores, kb);
          std::vector<float> vals(kb * block, 0.0f);
          for (std::size_t j = 0; j < kb; ++j)
            for (std::size_t i = blocks[j] * block; i < std::min(n, (blocks[j] + 1) * block); ++i)
              vals[j * block + i - blocks[j] * block] = e[i], e[i] = 0.0f;
          if (bad != 0)
            for (auto& x : e) x = cuda::kept_residual(x);
          return std::pair{cuda::write_block_top_k_frame(bk, ctx, n, blocks, vals, frame), bad};
        });
      }
      top_k const tk{.ratio = 0.05};
      run(tk, [&](std::vector<float> const& gg, std::vector<float>& e, std::vector<std::byte>& frame) {
        std::vector<std::uint32_t> idx;
        std::vector<float> val;
        auto const bad = top_k_feedback_like_device(gg, e, tk.keep(n), idx, val);
        return std::pair{cuda::write_top_k_frame(tk, ctx, n, idx, val, frame), bad};
      });
    }
}

TEST_CASE("adam, adamw and sgd element functors give the CPU optimizers' bits") {
  std::size_t const n = 1003;
  auto const p0 = normal(n, 1);
  auto run = [&](auto const& o, auto make) {
    using O = std::decay_t<decltype(o)>;
    optimizer_state<O> s(o, n);
    auto p = p0, q = p0;
    std::size_t const moments = o.layout().moments;
    std::vector<float> m0(n, 0.0f), m1(n, 0.0f);
    for (std::uint32_t t = 1; t <= 4; ++t) {
      auto const g = normal(n, 100 + t);
      sluice::step(o, s, std::span<float>(p), std::span<float const>(g));
      auto const f = make(o.kernel(t));
      for (std::size_t i = 0; i < n; ++i) {
        if constexpr (std::is_same_v<O, sgd>)
          f(q[i], g[i], m0[i]);
        else
          f(q[i], g[i], m0[i], m1[i]);
      }
    }
    check_same_bits(q, p, "params");
    std::vector<float> sm0(n), sm1(n);
    for (std::size_t i = 0; i < n; ++i) {
      if (moments > 0) sm0[i] = s.moment(0, i);
      if (moments > 1) sm1[i] = s.moment(1, i);
    }
    if (moments > 0) check_same_bits(m0, sm0, "moment 0");
    if (moments > 1) check_same_bits(m1, sm1, "moment 1");
  };
  auto adam_of = [](auto const& k) { return cuda::adam_element::from(k); };
  auto sgd_of = [](auto const& k) { return cuda::sgd_element::from(k); };
  run(adam{.lr = 1e-2}, adam_of);
  run(adam{.lr = 3e-3, .weight_decay = 0.1}, adam_of);
  run(adamw{.lr = 1e-2, .weight_decay = 0.05}, adam_of);
  run(sgd{.lr = 0.1}, sgd_of);
  run(sgd{.lr = 0.1, .weight_decay = 0.01}, sgd_of);
  run(sgd{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01}, sgd_of);
  run(sgd{.lr = 0.05, .momentum = 0.9, .nesterov = true}, sgd_of);
}

// One optimizer step as the device kernels run it: the element functor at every element a
// gradient value targets, moments widened from and rounded to bf16 when the state is bf16.
template <class O>
struct device_like_optimizer {
  O o;
  std::size_t n;
  bool bf16;
  std::vector<float> p, m[2];
  std::vector<std::uint16_t> mb[2], shadow;
  std::vector<std::uint32_t> last;  // per-entry step counters (catch_up)
  std::uint64_t t = 0;

  device_like_optimizer(O const& policy, std::vector<float> const& p0)
      : o(policy),
        n(p0.size()),
        bf16(policy.state_type == element_type::bf16),
        p(p0),
        shadow(p0.size()),
        last(p0.size(), 0) {
    for (int j = 0; j < 2; ++j) m[j].assign(n, 0.0f), mb[j].assign(n, 0);
  }
  /// One step (values non-null) or the flush (values null), as the device kernel runs it.
  void step(cuda::sparse_target const& at, std::vector<float> const* values) {
    if (values != nullptr) ++t;
    auto const r = cuda::bf16_moment_rounding::of(o.seed, t, 0);
    bool const catch_up = o.sparse == sparse_mode::catch_up;
    std::uint64_t const target = values != nullptr ? t - 1 : t;
    for (std::size_t v = 0; v < (values != nullptr ? values->size() : n); ++v) {
      std::size_t const i = at.at(v);
      if (i == n) continue;
      float mm[2] = {bf16 ? cuda::bf16_value(mb[0][i]) : m[0][i], bf16 ? cuda::bf16_value(mb[1][i]) : m[1][i]};
      if constexpr (std::is_same_v<O, sgd>) {
        if (catch_up) cuda::sgd_catch_up::from(o.kernel(t))(p[i], mm[0], last[i], target);
        if (values != nullptr) cuda::sgd_element::from(o.kernel(t))(p[i], (*values)[v], mm[0]);
      } else {
        if (catch_up) cuda::adam_catch_up::from(o.kernel(t))(p[i], mm[0], mm[1], last[i], target);
        if (values != nullptr) cuda::adam_element::from(o.kernel(t))(p[i], (*values)[v], mm[0], mm[1]);
      }
      if (catch_up) last[i] = static_cast<std::uint32_t>(t);
      for (unsigned j = 0; j < 2; ++j) {
        if (bf16)
          mb[j][i] = r(mm[j], i, j);
        else
          m[j][i] = mm[j];
      }
      shadow[i] = cuda::bf16_nearest(p[i]);
    }
  }
  void check_against(optimizer_state<O> const& s, std::vector<float> const& ref_p,
                     std::vector<sluice::bfloat16> const& ref_shadow) const {
    check_same_bits(p, ref_p, "params");
    CHECK(std::memcmp(shadow.data(), ref_shadow.data(), 2 * n) == 0);
    if (o.sparse == sparse_mode::catch_up)
      for (std::size_t i = 0; i < n; ++i)
        if (last[i] != s.last_step(i))
          FAIL("last step of element " << i << ": " << last[i] << " vs " << s.last_step(i));
    for (std::size_t j = 0; j < s.layout().moments; ++j) {
      std::vector<float> got(n), ref(n);
      for (std::size_t i = 0; i < n; ++i) got[i] = bf16 ? cuda::bf16_value(mb[j][i]) : m[j][i], ref[i] = s.moment(j, i);
      check_same_bits(got, ref, j == 0 ? "moment 0" : "moment 1");
    }
  }
};

TEST_CASE_TEMPLATE("sparse and bf16-moment steps through the element functors give the CPU optimizer's bits", O, adam,
                   adamw, sgd) {
  std::size_t const n = 5003;
  auto const p0 = normal(n, 2);
  std::vector<O> policies;
  for (auto mode : {sparse_mode::lazy, sparse_mode::catch_up})
    for (auto st : {element_type::f32, element_type::bf16}) {
      O o{};
      o.lr = 0.01, o.weight_decay = 0.01, o.state_type = st, o.seed = 99, o.sparse = mode;
      if constexpr (std::is_same_v<O, sgd>) o.momentum = 0.9, o.dampening = 0.1;
      policies.push_back(o);
    }
  for (auto const& o : policies)
    for (std::size_t block : {std::size_t{1}, std::size_t{16}, std::size_t{7}}) {
      CAPTURE(block);
      CAPTURE(static_cast<int>(o.state_type));
      CAPTURE(static_cast<int>(o.sparse));
      optimizer_state<O> s(o, n);
      std::vector<float> p = p0;
      std::vector<sluice::bfloat16> shadow(n);
      device_like_optimizer<O> dev(o, p0);
      std::size_t const nb = (n + block - 1) / block;
      for (std::uint32_t step = 1; step <= 5; ++step) {
        if (step == 3) {  // a dense step between the sparse ones
          auto const g = normal(n, 40 + step);
          sluice::step(o, s, std::span<float>(p), std::span<float const>(g), std::span<sluice::bfloat16>(shadow));
          dev.step(cuda::sparse_target{nullptr, 1, n}, &g);
          continue;
        }
        std::vector<std::uint32_t> idx;
        for (std::uint32_t b = step % 3; b < nb; b += 2 + step) idx.push_back(b);
        if (idx.back() != nb - 1) idx.push_back(static_cast<std::uint32_t>(nb - 1));  // the cut last block
        auto const vals = normal(idx.size() * block, 60 + step);
        sparse_view<float const> const g{idx, vals, n, block};
        sluice::step(o, s, std::span<float>(p), g, std::span<sluice::bfloat16>(shadow));
        dev.step(cuda::sparse_target{idx.data(), block, n}, &vals);
      }
      if (o.sparse == sparse_mode::catch_up) {  // the replay of every lagging entry, then flush
        dev.check_against(s, p, shadow);
        sluice::flush(o, s, std::span<float>(p), std::span<sluice::bfloat16>(shadow));
        dev.step(cuda::sparse_target{nullptr, 1, n}, nullptr);
      }
      dev.check_against(s, p, shadow);
    }
}

TEST_CASE("bf16_nearest rounds as sluice::bfloat16") {
  auto x = normal(4096, 21, 100.0f);
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  x.push_back(-std::numeric_limits<float>::quiet_NaN());
  x.push_back(std::numeric_limits<float>::infinity());
  x.push_back(3.0e38f);
  x.push_back(1e-40f);
  for (float v : x) {
    sluice::bfloat16 const ref(v);
    std::uint16_t rb;
    std::memcpy(&rb, &ref, 2);
    CHECK(cuda::bf16_nearest(v) == rb);
  }
}

TEST_CASE("device statuses map to sluice errors at the host boundary") {
  CHECK_NOTHROW(cuda::check(cuda::device_status::ok, "k"));
  CHECK_THROWS_AS(cuda::check(cuda::device_status::size_mismatch, "k"), error);
  CHECK(cuda::to_errc(cuda::device_status::no_device) == errc::unsupported);
  // A launch failure names the status and carries the runtime's text (cuda::status_of keeps it;
  // set by hand here, without the runtime).
  detail::cuda::runtime_error_name = "cudaErrorLaunchOutOfResources";
  detail::cuda::runtime_error_text = "too many resources requested for launch";
  try {
    cuda::check(cuda::device_status::launch_failed, "top_k_select(tensor 3)");
    FAIL("no throw");
  } catch (error const& e) {
    CHECK(e.code() == errc::unsupported);
    CHECK(std::string(e.what()).find("top_k_select(tensor 3): device status launch_failed (CUDA error "
                                     "cudaErrorLaunchOutOfResources: too many resources requested for launch)") !=
          std::string::npos);
  }
  try {
    cuda::check(cuda::device_status::size_mismatch, "k");
    FAIL("no throw");
  } catch (error const& e) {
    CHECK(std::string(e.what()).find("k: device status size_mismatch") != std::string::npos);
    CHECK(std::string(e.what()).find("CUDA error") == std::string::npos);
  }
}
