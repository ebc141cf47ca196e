// The collectives with the real codecs of compress/ (top_k, block_top_k, maxmin_quantize) on local
// worlds: sparse results equal the rank-ordered sum of each rank's decoded message, quantized
// results stay within the two-quantization bound, and every rank holds the same bits.
#include <doctest/doctest.h>

#include <cmath>
#include <optional>
#include <string>

#include <sluice/collective/all.hpp>
#include <sluice/compress/block_top_k.hpp>
#include <sluice/compress/maxmin_quantize.hpp>
#include <sluice/compress/top_k.hpp>
#include <sluice/transport/local.hpp>

#include "collective/collective_checks.hpp"
#include "support/local_world.hpp"

using namespace sluice;
using namespace std::chrono_literals;

namespace {

// Sum over ranks (in rank order) of decode(encode(g_r)): what an exact sparse collective must return.
// With `chunk` elements per chunk, each chunk is encoded on its own with its salted stream.
template <class C>
std::vector<float> decoded_sum(C const& codec, int world, std::size_t n, collective_context const& ctx,
                               std::size_t chunk = 0) {
  std::vector<float> sum(n, 0.0f);
  detail::chunking const ch(n, chunk);
  for (int r = 0; r < world; ++r) {
    auto g = test::make_grad(r, n, ctx.step);
    codec_workspace<C, float> ws;
    std::vector<std::byte> msg;
    for (std::size_t c = 0; c < ch.count; ++c) {
      auto const e = detail::encode_ctx(ctx, r, ch.salt(c));
      detail::encode_into(codec, std::span<float const>(g).subspan(ch.begin(c), ch.length(c)), e, ws, msg);
      sluice::decode_add(codec, std::span<std::byte const>(msg), e, ws,
                         std::span<float>(sum).subspan(ch.begin(c), ch.length(c)));
    }
  }
  return sum;
}

// Runs f(t) -> result on every rank; checks all ranks agree bit for bit and returns rank 0's result.
template <class F>
std::vector<float> on_world(int world, F f) {
  std::vector<std::vector<float>> results(static_cast<std::size_t>(world));
  auto errors = test::run_local(world, [&](local_transport& t) { results[static_cast<std::size_t>(t.rank())] = f(t); });
  test::rethrow_first(errors);
  for (int r = 1; r < world; ++r)
    CHECK(test::hash_of(results[static_cast<std::size_t>(r)]) == test::hash_of(results[0]));
  return results[0];
}

double max_error(std::vector<float> const& a, std::vector<float> const& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

// Every sparse collective with `opt` (dense and sparse results), each as rank 0's dense result.
template <class C>
std::vector<std::vector<float>> sparse_collectives(C const& codec, int world, std::size_t n,
                                                   collective_context const& ctx, sparse_allgather_options const& opt) {
  auto dense_of = [n](sparse_buffer<float> const& s) {
    s.view().validate();
    std::vector<float> out(n, 0.0f);
    scatter(s.view(), std::span<float>(out), false);
    return out;
  };
  std::vector<std::vector<float>> results;
  results.push_back(on_world(world, [&](local_transport& t) {
    sparse_allgather_workspace<C> ws;
    auto g = test::make_grad(t.rank(), n, ctx.step);
    std::vector<float> out(n);
    sparse_allgather(t, codec, std::span<float const>(g), std::span<float>(out), ctx, ws, opt);
    return out;
  }));
  results.push_back(on_world(world, [&](local_transport& t) {
    sparse_allgather_workspace<C> ws;
    auto g = test::make_grad(t.rank(), n, ctx.step);
    sparse_buffer<float> s;
    sparse_allgather(t, codec, std::span<float const>(g), s, ctx, ws, opt);
    return dense_of(s);
  }));
  results.push_back(on_world(world, [&](local_transport& t) {
    sparse_reduce_scatter_workspace<C> ws;
    auto g = test::make_grad(t.rank(), n, ctx.step);
    sparse_reduce_scatter(t, codec, std::span<float const>(g), std::span<float>(g), ctx, ws, opt);  // in place
    return g;
  }));
  results.push_back(on_world(world, [&](local_transport& t) {
    sparse_reduce_scatter_workspace<C> ws;
    auto g = test::make_grad(t.rank(), n, ctx.step);
    sparse_buffer<float> s;
    sparse_reduce_scatter(t, codec, std::span<float const>(g), s, ctx, ws, opt);
    return dense_of(s);
  }));
  return results;
}

// The errc a rank threw; nullopt when it returned normally or threw something else.
std::optional<errc> kind_of(std::exception_ptr const& e) {
  if (!e) return std::nullopt;
  try {
    std::rethrow_exception(e);
  } catch (error const& x) {
    return x.kind();
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace

TEST_CASE("sparse collectives with top_k and block_top_k equal the sum of the decoded messages") {
  std::size_t const n = 10'000;
  for (int world : {1, 2, 3, 5, 8}) {
    CAPTURE(world);
    collective_context const ctx{.step = 4, .tensor = 12, .seed = 3, .timeout = 30s};
    SUBCASE("top_k") {
      top_k const codec{.ratio = 0.05};
      auto const ref = decoded_sum(codec, world, n, ctx);
      auto dense = on_world(world, [&](local_transport& t) {
        sparse_allgather_workspace<top_k> ws;
        auto g = test::make_grad(t.rank(), n, ctx.step);
        std::vector<float> out(n);
        sparse_allgather(t, codec, std::span<float const>(g), std::span<float>(out), ctx, ws);
        return out;
      });
      CHECK(dense == ref);
      for (double threshold : {0.0, 0.07, 1.0}) {  // dense from the start, switching mid-way, never
        auto merged = on_world(world, [&](local_transport& t) {
          sparse_allgather_workspace<top_k> ws;
          auto g = test::make_grad(t.rank(), n, ctx.step);
          sparse_buffer<float> s;
          sparse_allgather(t, codec, std::span<float const>(g), s, ctx, ws, {.dense_above = threshold});
          s.view().validate();
          std::vector<float> out(n, 0.0f);
          scatter(std::as_const(s).view(), std::span<float>(out), false);
          return out;
        });
        CHECK(merged == ref);
      }
      auto rs = on_world(world, [&](local_transport& t) {
        sparse_reduce_scatter_workspace<top_k> ws;
        auto g = test::make_grad(t.rank(), n, ctx.step);
        std::vector<float> out(n);
        sparse_reduce_scatter(t, codec, std::span<float const>(g), std::span<float>(out), ctx, ws);
        return out;
      });
      CHECK(rs == ref);
    }
    SUBCASE("block_top_k") {
      block_top_k const codec{.ratio = 0.05, .block = 16};
      auto const ref = decoded_sum(codec, world, n, ctx);
      auto rs = on_world(world, [&](local_transport& t) {
        sparse_reduce_scatter_workspace<block_top_k> ws;
        auto g = test::make_grad(t.rank(), n, ctx.step);
        sparse_buffer<float> s;
        sparse_reduce_scatter(t, codec, std::span<float const>(g), s, ctx, ws);
        CHECK(s.block_size() == 16);
        std::vector<float> out(n, 0.0f);
        scatter(std::as_const(s).view(), std::span<float>(out), false);
        return out;
      });
      CHECK(rs == ref);
      auto ag = on_world(world, [&](local_transport& t) {
        sparse_allgather_workspace<block_top_k> ws;
        auto g = test::make_grad(t.rank(), n, ctx.step);
        sparse_buffer<float> s;
        sparse_allgather(t, codec, std::span<float const>(g), s, ctx, ws);
        std::vector<float> out(n, 0.0f);
        scatter(std::as_const(s).view(), std::span<float>(out), false);
        return out;
      });
      CHECK(ag == ref);
    }
  }
}

TEST_CASE("scatter-reduce-allgather with maxmin_quantize: two quantizations, bit-identical replicas") {
  std::size_t const n = 20'000;
  for (auto round : {rounding::nearest, rounding::stochastic}) {
    for (int world : {1, 2, 3, 4, 7}) {
      CAPTURE(world);
      maxmin_quantize const codec{.bits = 4, .bucket = 512, .round = round};
      collective_context const ctx{.step = 9, .tensor = 2, .seed = 5, .timeout = 30s};
      auto const ref = test::reference_sum(world, n, ctx.step);
      auto out = on_world(world, [&](local_transport& t) {
        scatter_reduce_allgather_workspace<maxmin_quantize> ws;
        auto g = test::make_grad(t.rank(), n, ctx.step);
        std::vector<float> o(n);
        scatter_reduce_allgather(t, codec, std::span<float const>(g), std::span<float>(o), ctx, ws);
        return o;
      });
      // Each rank's values span [-3, 3] (unit 6/15); the sum spans at most [-3N, 3N] (unit 6N/15).
      double const bound = world * 6.0 / 15.0 + world * 6.0 / 15.0 + 1e-3;
      CHECK(max_error(out, ref) <= bound);
    }
  }
}

TEST_CASE("parameter server and hierarchical with real codecs: bit-identical replicas") {
  std::size_t const n = 8'192;
  for (int world : {2, 4, 6}) {
    CAPTURE(world);
    collective_context const ctx{.step = 1, .tensor = 6, .seed = 1, .timeout = 30s};
    auto const ref = test::reference_sum(world, n, ctx.step);
    auto ps = on_world(world, [&](local_transport& t) {
      parameter_server_workspace<top_k, maxmin_quantize> ws;
      auto g = test::make_grad(t.rank(), n, ctx.step);
      std::vector<float> o(n);
      parameter_server(t, top_k{.ratio = 0.3}, maxmin_quantize{.bits = 8, .bucket = 256}, std::span<float const>(g),
                       std::span<float>(o), ctx, ws, {.servers = 2});
      return o;
    });
    CHECK(ps.size() == n);
    auto h = on_world(world, [&](local_transport& t) {
      hierarchical_allreduce_workspace<top_k, maxmin_quantize> ws;
      auto g = test::make_grad(t.rank(), n, ctx.step);
      std::vector<float> o(n);
      hierarchical_allreduce(t, top_k{.ratio = 1.0}, maxmin_quantize{.bits = 8, .bucket = 256},
                             std::span<float const>(g), std::span<float>(o), ctx, ws, {.group_size = 2});
      return o;
    });
    // top_k at ratio 1 is exact; one 8-bit quantization level per leader plus the final one.
    double const bound = world * 6.0 / 255.0 * 2 + 1e-3;
    CHECK(max_error(h, ref) <= bound);
  }
}

TEST_CASE("tensors smaller than the world: empty chunks with real codecs") {
  collective_context const ctx{.step = 2, .tensor = 1, .timeout = 30s};
  for (std::size_t n : {std::size_t{1}, std::size_t{5}}) {
    auto out = on_world(8, [&](local_transport& t) {
      scatter_reduce_allgather_workspace<maxmin_quantize> ws;
      auto g = test::make_grad(t.rank(), n, ctx.step);
      std::vector<float> o(n);
      scatter_reduce_allgather(t, maxmin_quantize{.bits = 8, .bucket = 64}, std::span<float const>(g),
                               std::span<float>(o), ctx, ws);
      return o;
    });
    CHECK(max_error(out, test::reference_sum(8, n, ctx.step)) <= 8 * 6.0 / 255.0 * 2 + 1e-3);
    auto rs = on_world(8, [&](local_transport& t) {
      sparse_reduce_scatter_workspace<top_k> ws;
      auto g = test::make_grad(t.rank(), n, ctx.step);
      std::vector<float> o(n);
      sparse_reduce_scatter(t, top_k{.ratio = 1.0}, std::span<float const>(g), std::span<float>(o), ctx, ws);
      return o;
    });
    CHECK(rs == test::reference_sum(8, n, ctx.step));
  }
}

TEST_CASE("the running sparse sum has the same bits whether it stays sparse, starts dense or switches") {
  // Parts with blocks of 4 over an extent that is not a multiple of 4; values drawn so that
  // additions round, and some parts share indices.
  std::size_t const extent = 1'001, block = 4, blocks = (extent + block - 1) / block;
  std::vector<sparse_buffer<float>> parts(6);
  std::uint64_t s = 42;
  auto next = [&] { return s = s * 6364136223846793005ull + 1442695040888963407ull; };
  std::vector<float> dense(extent, 0.0f);  // the same sums, in the same order, on a dense array
  for (auto& p : parts) {
    p.reset(extent, block);
    std::vector<std::uint32_t> idx;
    for (std::uint32_t b = 0; b < blocks; ++b)
      if (next() % 8 == 0) idx.push_back(b);
    p.resize(idx.size());
    std::copy(idx.begin(), idx.end(), p.indices().begin());
    for (auto& v : p.values()) {  // some signed zeros: the merge's selects must keep their bits
      auto const r = next();
      v = r % 13 == 0   ? -0.0f
          : r % 17 == 0 ? 0.0f
                        : static_cast<float>(static_cast<double>(r >> 11) / 0x1p53 - 0.5) * 3.7f;
    }
    for (std::size_t k = 0; k < idx.size(); ++k)  // the padding past the extent is zero, as decoders write it
      for (std::size_t e = 0; e < block; ++e)
        if (idx[k] * block + e >= extent) p.values()[k * block + e] = 0.0f;
    scatter(std::as_const(p).view(), std::span<float>(dense), true);
  }
  auto sum_with = [&](double dense_above) {
    detail::sparse_sum sum;
    sum.reset(extent, dense_above);
    for (auto const& p : parts) sum.add(p);
    sparse_buffer<float> out;
    sum.finish(out);
    out.view().validate();
    std::vector<float> d(extent, 0.0f);
    scatter(std::as_const(out).view(), std::span<float>(d), false);
    return std::pair{d, std::vector<std::uint32_t>(out.indices().begin(), out.indices().end())};
  };
  auto const [sparse_d, sparse_i] = sum_with(1.0);  // never dense
  auto const [first_d, first_i] = sum_with(0.0);    // dense from the first part
  auto const [switch_d, switch_i] = sum_with(0.3);  // one part covers ~1/8, so it switches mid-way
  CHECK(test::hash_of(sparse_d) == test::hash_of(dense));
  CHECK(test::hash_of(first_d) == test::hash_of(dense));
  CHECK(test::hash_of(switch_d) == test::hash_of(dense));
  CHECK(sparse_i == first_i);
  CHECK(sparse_i == switch_i);
}

TEST_CASE("chunked sparse collectives: each chunk encoded on its own, encode overlapping the exchange") {
  std::size_t const n = 10'000;
  collective_context const ctx{.step = 6, .tensor = 13, .seed = 5, .timeout = 30s};
  for (int world : {1, 2, 3, 5}) {
    CAPTURE(world);
    SUBCASE("top_k: per-chunk selection, the last chunk short") {
      top_k const codec{.ratio = 0.05};
      auto const ref = decoded_sum(codec, world, n, ctx, 3000);
      for (auto const& r : sparse_collectives(codec, world, n, ctx, {.dense_above = 0.07, .chunk_elements = 3000}))
        CHECK(r == ref);
      // One chunk (chunk_elements >= n) is the unchunked call, bit for bit.
      auto const whole = decoded_sum(codec, world, n, ctx);
      for (auto const& r : sparse_collectives(codec, world, n, ctx, {.chunk_elements = n})) CHECK(r == whole);
    }
    SUBCASE("block_top_k: chunks on block boundaries") {
      block_top_k const codec{.ratio = 0.05, .block = 16};
      auto const ref = decoded_sum(codec, world, n, ctx, 1600);
      for (auto const& r : sparse_collectives(codec, world, n, ctx, {.chunk_elements = 1600})) CHECK(r == ref);
    }
  }
  SUBCASE("a sparse result with chunks off the block boundaries is errc::invalid_argument on every rank") {
    block_top_k const codec{.ratio = 0.05, .block = 16};
    auto errors = test::run_local(3, [&](local_transport& t) {
      sparse_allgather_workspace<block_top_k> ws;
      auto g = test::make_grad(t.rank(), n, ctx.step);
      sparse_buffer<float> s;
      sparse_allgather(t, codec, std::span<float const>(g), s, ctx, ws, {.chunk_elements = 1000});
    });
    for (auto const& e : errors) CHECK(kind_of(e) == errc::invalid_argument);
  }
  SUBCASE("an encode that throws on the helper thread reaches the caller") {
    top_k const bad{.ratio = 2.0};
    auto errors = test::run_local(2, [&](local_transport& t) {
      sparse_allgather_workspace<top_k> ws;
      auto g = test::make_grad(t.rank(), n, ctx.step);
      std::vector<float> out(n);
      sparse_allgather(t, bad, std::span<float const>(g), std::span<float>(out), ctx, ws, {.chunk_elements = 1000});
    });
    for (auto const& e : errors) CHECK(kind_of(e) == errc::invalid_argument);
  }
}
