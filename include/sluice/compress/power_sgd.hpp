// PowerSGD (Vogels et al., NeurIPS 2019): a rank-r approximation P Q^T of a matrix-shaped gradient
// by one step of subspace iteration, warm-started from the previous step's Q, with P
// orthogonalized. One frame carries P and Q; 1-D tensors (and matrices too small to gain) go dense.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include <fmt/core.h>

#include <sluice/compress/concepts.hpp>
#include <sluice/compress/decode.hpp>
#include <sluice/compress/detail/common.hpp>
#include <sluice/compress/detail/low_rank.hpp>
#include <sluice/core/random.hpp>
#include <sluice/core/serial.hpp>

namespace sluice {

/// Rank-r PowerSGD. The matrix is rows = shape[0] by cols = product of the rest of
/// encode_context::shape, row-major. Per step: P = M Q, P orthonormalized (modified Gram-Schmidt),
/// Q = M^T P; Q stays in the workspace for the next step's warm start (initially drawn from the
/// shared stream of (seed, tensor), so every rank starts alike). Wire (flags 0): section 0 =
/// {u64 rows, u64 cols, u32 rank, u32 0}, section 1 = P (rows x r, f32, row-major), section 2 =
/// Q (cols x r). Decoded: P Q^T, the projection of M onto span(P), so ||M - P Q^T||_F <= ||M||_F and
/// it is exact when rank(M) <= r after enough steps. Dense fallback (flags 1, section 0 = n values
/// as T, exact) for empty or 1-D shapes and whenever the low-rank frame would not be smaller.
struct power_sgd {
  using codec_concept = codec_tag;

  unsigned rank = 4;  ///< r, in [1, 1024]
  /// Warm-up moves the rank, from 4 times the target rank.
  static constexpr codec_strength<power_sgd, unsigned> strength{&power_sgd::rank, "rank", 4, true};

  friend bool operator==(power_sgd const&, power_sgd const&) = default;
  /// Identity of the value (attach checks, checkpoints): its fields, not its printed form.
  friend void hash_append(serial::hasher& h, power_sgd const& v) { h("power_sgd", v.rank); }

  /// Magic of a saved warm start ("SPSG").
  static constexpr std::uint32_t state_magic = 0x47535053u;

  /// Per-tensor state (Q, checkpointable) and scratch. Matrices are row-major float vectors.
  template <Element T>
  struct workspace {
    std::vector<float> q{};  ///< q_rows x q_cols warm start (cols x r); empty until the first low-rank step
    std::size_t q_rows = 0, q_cols = 0;
    std::vector<float> qt{};    ///< r x cols scratch: Q transposed
    std::vector<float> pt{};    ///< r x rows scratch: P transposed
    std::vector<float> p{};     ///< rows x r scratch: P as on the wire
    std::vector<float> m{};     ///< fp32 copy of the tensor for 16-bit T (or a scaled one)
    std::vector<float> q_in{};  ///< the sender's Q while decoding
    std::vector<float> dense{};

    /// Bytes save() writes.
    [[nodiscard]] std::size_t state_bytes() const noexcept {
      return serial::record_overhead + 16 + q.size() * sizeof(float);
    }
    /// Writes the warm start as a record of the shared persistence format (core/serial.hpp):
    /// u32 "SPSG", u16 version 1, u64 rows of Q, u64 cols of Q, Q as f32 (row-major), u64
    /// checksum. errc::size_mismatch if `out` is shorter than state_bytes().
    void save(std::span<std::byte> out) const {
      require(out.size() >= state_bytes(), errc::size_mismatch, "power_sgd: state needs {} bytes, got {}",
              state_bytes(), out.size());
      std::vector<std::byte> rec;
      rec.reserve(state_bytes());
      serial::start_record(rec, state_magic, 1);
      serial::put(rec, static_cast<std::uint64_t>(q_rows));
      serial::put(rec, static_cast<std::uint64_t>(q_cols));
      serial::append(rec, std::as_bytes(std::span<float const>(q)));
      serial::seal(rec);
      std::memcpy(out.data(), rec.data(), rec.size());
    }
    /// Restores what save() wrote, bit-exactly. errc::malformed_message (as for every saved state)
    /// for damaged bytes or a shape that is not a rank-1..1024 warm start (or empty); on error
    /// nothing changes.
    void restore(std::span<std::byte const> in) {
      auto r = serial::open_record(in, state_magic, 1, "power_sgd state");
      std::uint64_t rows = 0, cols = 0;
      require(r.get(rows) && r.get(cols), errc::malformed_message, "power_sgd state: truncated shape");
      bool const empty = rows == 0 && cols == 0;
      // Bounded by the bytes present before anything is sized.
      require(empty || (cols >= 1 && cols <= 1024 && rows >= 1 && rows <= r.left() / sizeof(float) / cols &&
                        r.left() == rows * cols * sizeof(float)),
              errc::malformed_message, "power_sgd state: {} bytes do not hold a {} x {} warm start (rank 1..1024)",
              r.left(), rows, cols);
      require(empty ? r.left() == 0 : true, errc::malformed_message, "power_sgd state: {} trailing bytes", r.left());
      q.resize(static_cast<std::size_t>(rows * cols));
      q_rows = static_cast<std::size_t>(rows);
      q_cols = static_cast<std::size_t>(cols);
      if (!q.empty()) std::memcpy(q.data(), in.data() + serial::record_head_bytes + 16, r.left());
    }
  };

  /// Rows and columns for n elements of shape `shape` (rows = 0 when the tensor is not a matrix).
  static std::pair<std::size_t, std::size_t> matrix_shape(std::size_t n, std::span<std::size_t const> shape) {
    if (shape.size() < 2 || n == 0) return {0, 0};
    std::size_t cols = 1;
    for (std::size_t i = 1; i < shape.size(); ++i) {
      if (shape[i] == 0 || cols > std::numeric_limits<std::size_t>::max() / shape[i]) return {0, 0};
      cols *= shape[i];
    }
    if (shape[0] == 0 || shape[0] > std::numeric_limits<std::size_t>::max() / cols || shape[0] * cols != n)
      return {0, 0};
    return {shape[0], cols};
  }

  /// Frame bytes of the low-rank form for a rows x cols matrix.
  [[nodiscard]] std::size_t low_rank_bytes(std::size_t rows, std::size_t cols) const noexcept {
    return wire::frame_bytes({24, rows * rank * 4, cols * rank * 4});
  }

  /// Whether a tensor of n elements of T and this shape is sent low-rank.
  template <Element T>
  [[nodiscard]] bool uses_low_rank(std::size_t n, std::span<std::size_t const> shape) const {
    auto const [rows, cols] = matrix_shape(n, shape);
    return rows != 0 && rank < std::min(rows, cols) && low_rank_bytes(rows, cols) < wire::frame_bytes({n * sizeof(T)});
  }

  /// Exact bound on the frame size for n elements of T whatever the shape (the default, float,
  /// bounds every T): the low-rank form is used only when smaller than the dense one.
  template <Element T = float>
  [[nodiscard]] std::size_t max_encoded_bytes(std::size_t n) const noexcept {
    return wire::frame_bytes({n * sizeof(T)});
  }

  /// Throws errc::invalid_argument for a rank outside [1, 1024].
  void validate() const {
    require(rank >= 1 && rank <= 1024, errc::invalid_argument, "power_sgd: rank {} is outside [1, 1024]", rank);
  }

  /// Encodes `in` into `out` (at least max_encoded_bytes<T>(in.size()) bytes); returns bytes written.
  template <Element T>
  std::size_t encode(std::type_identity_t<std::span<T const>> in, encode_context const& ctx, workspace<T>& ws,
                     std::span<std::byte> out) const {
    validate();
    std::size_t const n = in.size();
    detail::compress::check_out(out.size(), max_encoded_bytes<T>(n), "power_sgd");
    if (!uses_low_rank<T>(n, ctx.shape)) {
      wire::writer w(out, detail::compress::make_header<T>(wire::codec_id::power_sgd, ctx, n, 1));
      w.write(std::as_bytes(in));
      return w.finish();
    }
    auto const [rows, cols] = matrix_shape(n, ctx.shape);
    std::size_t const r = rank;
    float const* src;
    if constexpr (std::is_same_v<T, float>) {
      src = in.data();
    } else {
      ws.m.resize(n);
      for (std::size_t i = 0; i < n; ++i) ws.m[i] = to_float(in[i]);
      src = ws.m.data();
    }
    if (ws.q_rows != cols || ws.q_cols != r) {
      // Shared start: every rank draws the same Q from (seed, tensor), uniform in [-1, 1).
      random_stream const stream(
          stream_key{ctx.seed, stream_key::shared_rank, 0, static_cast<std::uint32_t>(ctx.tensor)});
      ws.q.resize(cols * r);
      for (std::size_t i = 0; i < ws.q.size(); ++i) ws.q[i] = 2.0f * stream.uniform(i) - 1.0f;
      ws.q_rows = cols;
      ws.q_cols = r;
    }
    ws.qt.resize(r * cols);
    ws.pt.resize(r * rows);
    ws.p.resize(rows * r);
    detail::compress::transpose(ws.q.data(), cols, r, ws.qt.data());
    float const amax = detail::compress::project_rows(src, rows, cols, ws.qt.data(), r, ws.pt.data());  // P = M Q
    // Gradients beyond 2^32 are scaled by a power of two 2^-e to below 1 first (exact), and 2^e is
    // given back half to P and half to Q on the wire: in float, M Q overflows to Inf (and P to
    // NaN) once |M| passes ~1e19 with a warm-started Q. Smaller gradients keep their bits as sent
    // (and P from the pass that found the largest magnitude).
    int e = 0;
    if (amax > 0x1p32f && std::isfinite(amax)) {
      (void)std::frexp(amax, &e);  // amax * 2^-e < 1
      float const down = std::ldexp(1.0f, -e);
      ws.m.resize(n);
      for (std::size_t i = 0; i < n; ++i) ws.m[i] = src[i] * down;
      src = ws.m.data();
      (void)detail::compress::project_rows(src, rows, cols, ws.qt.data(), r, ws.pt.data());
    }
    detail::compress::orthonormalize_rows(ws.pt.data(), r, rows);
    detail::compress::project_cols(src, rows, cols, ws.pt.data(), r, ws.qt.data());  // Q = M^T P
    detail::compress::transpose(ws.qt.data(), r, cols, ws.q.data());
    detail::compress::transpose(ws.pt.data(), r, rows, ws.p.data());
    wire::writer w(out, detail::compress::make_header<T>(wire::codec_id::power_sgd, ctx, n, 0));
    std::uint64_t const params[3] = {rows, cols, rank};
    w.write(std::as_bytes(std::span(params)));
    auto factor = [&w](std::vector<float> const& f, int up) {
      if (up == 0) return w.write(std::as_bytes(std::span<float const>(f)));
      float const scale = std::ldexp(1.0f, up);
      std::byte* const o = w.next().data();
      for (std::size_t i = 0; i < f.size(); ++i) {
        float const v = f[i] * scale;
        std::memcpy(o + 4 * i, &v, 4);
      }
      w.commit(4 * f.size());
    };
    factor(ws.p, e / 2);
    factor(ws.q, e - e / 2);  // ws.q stays scaled: only its direction warm-starts
    if (!std::all_of(ws.q.begin(), ws.q.end(), [](float v) { return std::isfinite(v); })) {
      ws.q.clear();  // a non-finite step is sent, never kept as warm start
      ws.q_rows = ws.q_cols = 0;
    }
    return w.finish();
  }

  /// Decodes into `dense`: overwrites every element (overwrite) or adds into it (accumulate).
  template <Element T, DecodeMode M>
  void decode_into(std::span<std::byte const> msg, encode_context const& ctx, workspace<T>& ws,
                   std::type_identity_t<std::span<T>> dense, M) const {
    constexpr bool add = M::accumulates;
    validate();
    std::size_t const n = dense.size();
    wire::frame const f = detail::compress::parse_frame<T>(msg, wire::codec_id::power_sgd, n,
                                                           detail::compress::any_sections, ctx, element_type_of<T>, 1);
    if (f.head.flags == 1) {
      require(f.section_count == 1 && f.sections[0].size() == n * sizeof(T), errc::malformed_message,
              "power_sgd: dense frame does not hold {} values", n);
      for (std::size_t i = 0; i < n; ++i) {
        T v;
        std::memcpy(&v, f.sections[0].data() + i * sizeof(T), sizeof(T));
        dense[i] = add ? from_float<T>(to_float(dense[i]) + to_float(v)) : v;
      }
      return;
    }
    require(f.head.flags == 0 && f.section_count == 3 && f.sections[0].size() == 24, errc::malformed_message,
            "power_sgd: unknown frame layout (flags {}, {} sections)", f.head.flags, f.section_count);
    std::uint64_t params[3];
    std::memcpy(params, f.sections[0].data(), 24);
    std::size_t const dims[2] = {static_cast<std::size_t>(params[0]), static_cast<std::size_t>(params[1])};
    auto const [rows, cols] = matrix_shape(n, std::span<std::size_t const>(dims, 2));
    std::uint64_t const r = params[2];
    require(r == rank, errc::malformed_message, "power_sgd: frame of rank {}, this decoder has rank {}", r, rank);
    require(rows != 0 && r >= 1 && r <= 1024 && f.sections[1].size() / 4 / r == rows &&
                f.sections[1].size() == rows * r * 4 && f.sections[2].size() == cols * r * 4,
            errc::malformed_message, "power_sgd: factors do not match a {} x {} matrix of rank {}", params[0],
            params[1], r);
    std::size_t const rr = static_cast<std::size_t>(r);
    ws.p.resize(rows * rr);
    std::memcpy(ws.p.data(), f.sections[1].data(), f.sections[1].size());
    ws.q_in.resize(cols * rr);  // ws.q, this rank's warm start, is left alone
    std::memcpy(ws.q_in.data(), f.sections[2].data(), f.sections[2].size());
    ws.qt.resize(rr * cols);
    detail::compress::transpose(ws.q_in.data(), cols, rr, ws.qt.data());
    if constexpr (std::is_same_v<T, float>) {
      detail::compress::expand(ws.p.data(), ws.qt.data(), rows, cols, rr, dense.data(), add);
    } else {
      detail::compress::grow(ws.dense, n);
      detail::compress::expand(ws.p.data(), ws.qt.data(), rows, cols, rr, ws.dense.data(), false);
      for (std::size_t i = 0; i < n; ++i)
        dense[i] = add ? from_float<T>(to_float(dense[i]) + ws.dense[i]) : from_float<T>(ws.dense[i]);
    }
  }
};

// Conformance to its concepts: tests/static/test_conformance.cpp (checked there, not in every unit).

}  // namespace sluice

template <>
struct fmt::formatter<sluice::power_sgd> : sluice::detail::compress::policy_formatter {
  template <class FormatContext>
  auto format(sluice::power_sgd const& c, FormatContext& ctx) const {
    return fmt::format_to(ctx.out(), "power_sgd{{.rank = {}}}", c.rank);
  }
};
