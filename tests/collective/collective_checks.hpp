// Checks shared by the local, MPI and ZeroMQ collective tests: deterministic per-rank gradients with
// exact integer sums, every collective against the reference sum, and bit-identical replicas
// (compared across ranks through the transport itself).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <sluice/collective/all.hpp>
#include <sluice/core/wire.hpp>

#include "support/test_codecs.hpp"

namespace sluice::test {

/// Integer-valued gradients in [-3, 3], about 70% zeros, so sums over ranks are exact in fp32.
inline float grad_value(int rank, std::size_t i, std::uint64_t step) {
  std::uint64_t h = (static_cast<std::uint64_t>(rank) + 1) * 0x9E3779B97F4A7C15ull ^ (i + 1) * 0xC2B2AE3D27D4EB4Full ^
                    (step + 7) * 0x165667B19E3779F9ull;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  if (h % 10 < 7) return 0.0f;
  return static_cast<float>(static_cast<int>((h >> 8) % 7) - 3);
}
inline std::vector<float> make_grad(int rank, std::size_t n, std::uint64_t step) {
  std::vector<float> g(n);
  for (std::size_t i = 0; i < n; ++i) g[i] = grad_value(rank, i, step);
  return g;
}
inline std::vector<float> reference_sum(int world, std::size_t n, std::uint64_t step) {
  std::vector<float> s(n, 0.0f);
  for (int r = 0; r < world; ++r)
    for (std::size_t i = 0; i < n; ++i) s[i] += grad_value(r, i, step);
  return s;
}

enum class algo {
  ring,
  ring_native,
  allgather_dense,
  allgather_sparse,
  allgather_dense_chunked,
  allgather_sparse_chunked,
  sra_quant,
  sra_dense,
  reduce_scatter,
  reduce_scatter_chunked,
  reduce_scatter_sparse_chunked,
  ps,
  ps_quant,
  hierarchical,
  hierarchical_quant
};

/// Elements per chunk of the chunked variants: n = 1000 and 4099 make 2 and 9 chunks (the last
/// one short), n = 1 and 7 a single chunk.
inline constexpr std::size_t test_chunk = 512;

inline char const* name(algo a) {
  switch (a) {
    case algo::ring:
      return "ring";
    case algo::ring_native:
      return "ring_native";
    case algo::allgather_dense:
      return "allgather_dense";
    case algo::allgather_sparse:
      return "allgather_sparse";
    case algo::allgather_dense_chunked:
      return "allgather_dense_chunked";
    case algo::allgather_sparse_chunked:
      return "allgather_sparse_chunked";
    case algo::reduce_scatter_chunked:
      return "reduce_scatter_chunked";
    case algo::reduce_scatter_sparse_chunked:
      return "reduce_scatter_sparse_chunked";
    case algo::sra_quant:
      return "sra_quant";
    case algo::sra_dense:
      return "sra_dense";
    case algo::reduce_scatter:
      return "reduce_scatter";
    case algo::ps:
      return "ps";
    case algo::ps_quant:
      return "ps_quant";
    case algo::hierarchical:
      return "hierarchical";
    case algo::hierarchical_quant:
      return "hierarchical_quant";
  }
  return "?";
}
inline bool lossy(algo a) { return a == algo::sra_quant || a == algo::ps_quant || a == algo::hierarchical_quant; }

inline std::vector<algo> all_algos() {
  return {algo::ring,
          algo::allgather_dense,
          algo::allgather_sparse,
          algo::allgather_dense_chunked,
          algo::allgather_sparse_chunked,
          algo::sra_quant,
          algo::sra_dense,
          algo::reduce_scatter,
          algo::reduce_scatter_chunked,
          algo::reduce_scatter_sparse_chunked,
          algo::ps,
          algo::ps_quant,
          algo::hierarchical,
          algo::hierarchical_quant};
}

/// Runs one collective on this rank's gradient and returns the result (dense).
template <Transport T>
std::vector<float> run(T& t, algo a, std::size_t n, collective_context const& ctx) {
  auto g = make_grad(t.rank(), n, ctx.step);
  std::vector<float> out(n);
  switch (a) {
    case algo::ring:
    case algo::ring_native: {
      ring_allreduce_workspace ws;
      out = g;
      ring_allreduce(t, std::span<float>(out), ctx, ws, {.use_native = a == algo::ring_native});
      break;
    }
    case algo::allgather_dense: {
      sparse_allgather_workspace<dense_codec> ws;
      sparse_allgather(t, dense_codec{}, std::span<float const>(g), std::span<float>(out), ctx, ws);
      break;
    }
    case algo::allgather_sparse: {
      sparse_allgather_workspace<sparse_codec> ws;
      sparse_buffer<float> s;
      sparse_allgather(t, sparse_codec{}, std::span<float const>(g), s, ctx, ws, {.dense_above = 0.5});
      s.view().validate("allgather result");
      std::fill(out.begin(), out.end(), 0.0f);
      scatter(std::as_const(s).view(), std::span<float>(out), false);
      break;
    }
    case algo::allgather_dense_chunked: {
      sparse_allgather_workspace<sparse_codec> ws;
      out = g;  // in place
      sparse_allgather(t, sparse_codec{}, std::span<float const>(out), std::span<float>(out), ctx, ws,
                       {.chunk_elements = test_chunk});
      break;
    }
    case algo::allgather_sparse_chunked: {
      sparse_allgather_workspace<sparse_codec> ws;
      sparse_buffer<float> s;
      sparse_allgather(t, sparse_codec{}, std::span<float const>(g), s, ctx, ws, {.chunk_elements = test_chunk});
      s.view().validate("chunked allgather result");
      std::fill(out.begin(), out.end(), 0.0f);
      scatter(std::as_const(s).view(), std::span<float>(out), false);
      break;
    }
    case algo::reduce_scatter_chunked: {
      sparse_reduce_scatter_workspace<sparse_codec> ws;
      out = g;  // in place
      sparse_reduce_scatter(t, sparse_codec{}, std::span<float const>(out), std::span<float>(out), ctx, ws,
                            {.chunk_elements = test_chunk});
      break;
    }
    case algo::reduce_scatter_sparse_chunked: {
      sparse_reduce_scatter_workspace<sparse_codec> ws;
      sparse_buffer<float> s;
      sparse_reduce_scatter(t, sparse_codec{}, std::span<float const>(g), s, ctx, ws, {.chunk_elements = test_chunk});
      s.view().validate("chunked reduce-scatter result");
      std::fill(out.begin(), out.end(), 0.0f);
      scatter(std::as_const(s).view(), std::span<float>(out), false);
      break;
    }
    case algo::sra_quant: {
      scatter_reduce_allgather_workspace<quant_codec> ws;
      scatter_reduce_allgather(t, quant_codec{}, std::span<float const>(g), std::span<float>(out), ctx, ws);
      break;
    }
    case algo::sra_dense: {
      scatter_reduce_allgather_workspace<dense_codec> ws;
      out = g;  // in place
      scatter_reduce_allgather(t, dense_codec{}, std::span<float const>(out), std::span<float>(out), ctx, ws);
      break;
    }
    case algo::reduce_scatter: {
      sparse_reduce_scatter_workspace<sparse_codec> ws;
      sparse_reduce_scatter(t, sparse_codec{}, std::span<float const>(g), std::span<float>(out), ctx, ws);
      break;
    }
    case algo::ps: {
      parameter_server_workspace<sparse_codec, dense_codec> ws;
      parameter_server(t, sparse_codec{}, dense_codec{}, std::span<float const>(g), std::span<float>(out), ctx, ws,
                       {.servers = std::min(2, t.size())});
      break;
    }
    case algo::ps_quant: {
      parameter_server_workspace<quant_codec, quant_codec> ws;
      parameter_server(t, quant_codec{}, quant_codec{}, std::span<float const>(g), std::span<float>(out), ctx, ws,
                       {.servers = 1});
      break;
    }
    case algo::hierarchical: {
      hierarchical_allreduce_workspace<dense_codec, sparse_codec> ws;
      hierarchical_allreduce(t, dense_codec{}, sparse_codec{}, std::span<float const>(g), std::span<float>(out), ctx,
                             ws, {.group_size = 2});
      break;
    }
    case algo::hierarchical_quant: {
      hierarchical_allreduce_workspace<sparse_codec, quant_codec> ws;
      hierarchical_allreduce(t, sparse_codec{}, quant_codec{}, std::span<float const>(g), std::span<float>(out), ctx,
                             ws, {.group_size = 3});
      break;
    }
  }
  return out;
}

inline std::uint64_t hash_of(std::vector<float> const& v) {
  detail::wire::checksum_state s;
  s.update(std::as_bytes(std::span<float const>(v)));
  return s.finish();
}

/// Throws std::runtime_error unless every rank passed the same hash (exchanged over `t`).
template <Transport T>
void require_identical(T& t, std::uint64_t h, std::string const& what, deadline d) {
  std::vector<std::byte> buf;
  std::vector<typename T::request> reqs;
  auto const bytes = std::as_bytes(std::span<std::uint64_t const>(&h, 1));
  for (int p = 0; p < t.size(); ++p)
    if (p != t.rank()) reqs.push_back(t.send(p, message_tag{tag_limit - 1}, bytes));
  for (int p = 0; p < t.size(); ++p) {
    if (p == t.rank()) continue;
    auto m = t.recv(p, message_tag{tag_limit - 1}, buf, d);
    std::uint64_t other = 0;
    if (m.size() == 8) std::memcpy(&other, m.data(), 8);
    if (other != h)
      throw std::runtime_error(fmt::format("{}: rank {} and rank {} hold different bits", what, t.rank(), p));
  }
  for (auto& q : reqs) q.wait(d);
}

/// Whether `out` is the sum (exactly, or within the quantizer's bound for lossy codecs).
inline bool matches(algo a, std::vector<float> const& out, std::vector<float> const& ref, int world) {
  double const tol = lossy(a) ? 8.0 * 3.0 * world / 127.0 + 1e-4 : 0.0;
  if (out.size() != ref.size()) return false;
  for (std::size_t i = 0; i < out.size(); ++i)
    if (!(std::fabs(static_cast<double>(out[i]) - ref[i]) <= tol)) return false;
  return true;
}

/// Runs `a` and checks the result against the reference sum (exact, or within the quantizer's
/// bound for lossy codecs) and that every rank holds the same bits.
template <Transport T>
void check(T& t, algo a, std::size_t n, std::uint64_t step, std::uint64_t tensor = 3) {
  collective_context const ctx{.step = step,
                               .tensor = tensor,
                               .seed = 11,
                               .timeout = std::chrono::seconds(30),
                               .tag = message_tag{16 * static_cast<std::uint32_t>(a)}};
  auto out = run(t, a, n, ctx);
  auto ref = reference_sum(t.size(), n, step);
  double const tol = lossy(a) ? 8.0 * 3.0 * t.size() / 127.0 + 1e-4 : 0.0;
  for (std::size_t i = 0; i < n; ++i)
    if (!(std::fabs(static_cast<double>(out[i]) - ref[i]) <= tol))
      throw std::runtime_error(fmt::format("{}: N={} n={} rank {}: element {} is {} where the sum is {}", name(a),
                                           t.size(), n, t.rank(), i, out[i], ref[i]));
  require_identical(t, hash_of(out), fmt::format("{} N={} n={}", name(a), t.size(), n),
                    deadline::after(std::chrono::seconds(30)));
}

/// Every collective at a few sizes (including sizes smaller than the world and not divisible by it).
template <Transport T>
void check_all(T& t, std::vector<algo> const& algos = all_algos()) {
  std::uint64_t step = 0;
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{4099}})
    for (algo a : algos) check(t, a, n, step++);
}

}  // namespace sluice::test
