// A multilayer perceptron written with Eigen: fully connected layers with ReLU between them and a
// softmax cross-entropy loss, 784-256-128-10 by default. Its parameters and gradients live in flat
// fp32 buffers, one per tensor (fc1.weight, fc1.bias, fc2.weight, ...; weights row-major
// [out, in] as in PyTorch), which is the form sluice::pipeline takes them in: parameters() and
// gradients() are spans over those buffers, layout() names and shapes them.
//
// Uses Eigen's own matrix products. Do not build it with EIGEN_USE_BLAS when ranks run as threads
// of one process: a BLAS that is not thread-safe (Debian's serial OpenBLAS is not) corrupts
// results silently when several threads call it at once.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <sluice/bucket/layout.hpp>
#include <sluice/core/error.hpp>

#include "idx.hpp"

namespace fashion_mnist {

/// splitmix64: the example's one source of randomness (initialization, shuffling), the same on
/// every platform and standard library.
constexpr std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
/// A uniform float in [0, 1) from (seed, counter).
constexpr float uniform01(std::uint64_t seed, std::uint64_t i) noexcept {
  return static_cast<float>(mix(mix(seed) ^ i) >> 40) * 0x1p-24f;
}

class mlp {
 public:
  using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using map = Eigen::Map<matrix>;
  using const_map = Eigen::Map<matrix const>;

  /// Layer widths, input first, classes last (at least two entries, all > 0). Weights are drawn
  /// He-uniform (bound sqrt(6 / fan_in)) from `seed`; biases start at zero.
  explicit mlp(std::vector<std::size_t> sizes = {784, 256, 128, 10}, std::uint64_t seed = 1)
      : sizes_(std::move(sizes)) {
    sluice::require(sizes_.size() >= 2, sluice::errc::invalid_argument,
                    "mlp: {} layer widths; give at least the input and the output width", sizes_.size());
    for (std::size_t w : sizes_)
      sluice::require(w > 0, sluice::errc::invalid_argument, "mlp: a layer width is 0 ({})", fmt::join(sizes_, "-"));
    for (std::size_t l = 0; l + 1 < sizes_.size(); ++l) {
      std::size_t const in = sizes_[l], out = sizes_[l + 1];
      auto& w = params_.emplace_back(in * out);
      float const bound = std::sqrt(6.0f / static_cast<float>(in));
      for (std::size_t i = 0; i < w.size(); ++i) w[i] = (2 * uniform01(seed + l, i) - 1) * bound;
      params_.emplace_back(out, 0.0f);
    }
    grads_.resize(params_.size());
    for (std::size_t i = 0; i < params_.size(); ++i) grads_[i].assign(params_[i].size(), 0.0f);
    acts_.resize(sizes_.size());
  }

  [[nodiscard]] std::vector<std::size_t> const& sizes() const noexcept { return sizes_; }
  [[nodiscard]] std::size_t layers() const noexcept { return sizes_.size() - 1; }

  /// fc1.weight [256, 784], fc1.bias [256], fc2.weight, ...: the tensors in parameters() order.
  [[nodiscard]] sluice::layout layout() const {
    sluice::layout l;
    for (std::size_t k = 0; k < layers(); ++k) {
      l.add(fmt::format("fc{}.weight", k + 1), {sizes_[k + 1], sizes_[k]});
      l.add(fmt::format("fc{}.bias", k + 1), {sizes_[k + 1]});
    }
    return l;
  }
  /// One span per tensor of layout(): what sluice::pipeline::attach takes.
  [[nodiscard]] std::vector<std::span<float>> parameters() {
    std::vector<std::span<float>> s;
    for (auto& p : params_) s.emplace_back(p);
    return s;
  }
  /// The gradients train_batch() wrote, one span per tensor: what sluice::pipeline::step takes.
  [[nodiscard]] std::vector<std::span<float const>> gradients() const {
    std::vector<std::span<float const>> s;
    for (auto const& g : grads_) s.emplace_back(g);
    return s;
  }

  /// Forward and backward over the images `batch` of `d`: writes the gradient of the mean loss
  /// into gradients() and returns the mean loss.
  float train_batch(dataset const& d, std::span<std::size_t const> batch) {
    forward(d, batch);
    auto const n = static_cast<Eigen::Index>(batch.size());
    matrix& g = acts_.back();  // logits -> dLoss/dlogits
    double loss = 0;
    for (Eigen::Index i = 0; i < n; ++i) {
      auto row = g.row(i);
      float const m = row.maxCoeff();
      row.array() = (row.array() - m).exp();
      float const sum = row.sum();
      row /= sum;
      auto const y = static_cast<Eigen::Index>(d.labels[batch[static_cast<std::size_t>(i)]]);
      loss -= std::log(std::max(row(y), 1e-30f));
      row(y) -= 1.0f;
    }
    g /= static_cast<float>(n);
    for (std::size_t k = layers(); k-- > 0;) {
      matrix const& in = acts_[k];
      map dw(grads_[2 * k].data(), static_cast<Eigen::Index>(sizes_[k + 1]), static_cast<Eigen::Index>(sizes_[k]));
      Eigen::Map<Eigen::RowVectorXf> db(grads_[2 * k + 1].data(), static_cast<Eigen::Index>(sizes_[k + 1]));
      dw.noalias() = g.transpose() * in;
      db = g.colwise().sum();
      if (k == 0) break;
      back_.noalias() = g * weight(k);
      back_.array() *= (in.array() > 0.0f).cast<float>();
      g.swap(back_);
    }
    return static_cast<float>(loss / static_cast<double>(n));
  }

  /// Fraction of `d` classified correctly (forward passes of 500 images).
  [[nodiscard]] double accuracy(dataset const& d) {
    std::size_t correct = 0;
    std::vector<std::size_t> idx;
    for (std::size_t at = 0; at < d.count; at += 500) {
      idx.clear();
      for (std::size_t i = at; i < std::min(d.count, at + 500); ++i) idx.push_back(i);
      forward(d, idx);
      matrix const& logits = acts_.back();
      for (Eigen::Index i = 0; i < logits.rows(); ++i) {
        Eigen::Index best = 0;
        logits.row(i).maxCoeff(&best);
        correct += static_cast<std::size_t>(best) == d.labels[idx[static_cast<std::size_t>(i)]] ? 1 : 0;
      }
    }
    return static_cast<double>(correct) / static_cast<double>(d.count);
  }

 private:
  [[nodiscard]] const_map weight(std::size_t k) const {
    return {params_[2 * k].data(), static_cast<Eigen::Index>(sizes_[k + 1]), static_cast<Eigen::Index>(sizes_[k])};
  }

  void forward(dataset const& d, std::span<std::size_t const> batch) {
    sluice::require(d.pixels() == sizes_[0], sluice::errc::size_mismatch,
                    "mlp: images have {} pixels but the input layer is {} wide", d.pixels(), sizes_[0]);
    auto const n = static_cast<Eigen::Index>(batch.size());
    acts_[0].resize(n, static_cast<Eigen::Index>(sizes_[0]));
    for (Eigen::Index i = 0; i < n; ++i) {
      auto const img = d.image(batch[static_cast<std::size_t>(i)]);
      acts_[0].row(i) = Eigen::Map<Eigen::RowVectorXf const>(img.data(), static_cast<Eigen::Index>(img.size()));
    }
    for (std::size_t k = 0; k < layers(); ++k) {
      Eigen::Map<Eigen::RowVectorXf const> b(params_[2 * k + 1].data(), static_cast<Eigen::Index>(sizes_[k + 1]));
      matrix& out = acts_[k + 1];
      out.noalias() = acts_[k] * weight(k).transpose();
      out.rowwise() += b;
      if (k + 1 < layers()) out = out.cwiseMax(0.0f);
    }
  }

  std::vector<std::size_t> sizes_;
  std::vector<std::vector<float>> params_, grads_;
  std::vector<matrix> acts_;  // acts_[0]: input batch, acts_[k]: output of layer k (logits last)
  matrix back_;
};

}  // namespace fashion_mnist
