// Fashion-MNIST from the Debian package dataset-fashion-mnist: a reader for gzip-compressed IDX
// files (the format of MNIST and Fashion-MNIST; plain uncompressed IDX files are read too) that
// validates the magic number, the dimensions and the size of the payload, and a loader that
// turns the image and label files of one split into normalized fp32 images and labels.
//
// Every failure throws sluice::error naming the file, what is wrong with it and what to do.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <sluice/core/error.hpp>

namespace fashion_mnist {

/// Where dataset-fashion-mnist installs the four files.
inline constexpr std::string_view default_data_dir = "/usr/share/datasets/fashion-mnist";

/// One IDX file: dimensions (outermost first) and the unsigned-byte payload in row-major order.
struct idx_array {
  std::vector<std::size_t> dims;
  std::vector<std::uint8_t> data;
  [[nodiscard]] std::size_t elements() const noexcept {
    std::size_t n = 1;
    for (std::size_t d : dims) n *= d;
    return n;
  }
};

/// Reads an IDX file of unsigned bytes (type code 0x08) with `expected_rank` dimensions, gzip or
/// plain. errc::invalid_argument when the file cannot be opened; errc::malformed_message when its
/// magic number, type, rank or dimensions are wrong, when it is truncated or has trailing bytes, or
/// when the gzip stream is damaged. Dimensions are capped at `max_elements` elements in all, so a
/// damaged header never causes a huge allocation.
inline idx_array read_idx(std::filesystem::path const& file, std::size_t expected_rank,
                          std::size_t max_elements = std::size_t{1} << 28) {
  std::string const name = file.string();
  char const* const hint = "install it with `apt-get install dataset-fashion-mnist` or pass --data DIR";
  std::unique_ptr<gzFile_s, decltype(&gzclose)> gz(gzopen(name.c_str(), "rb"), &gzclose);
  sluice::require(gz != nullptr, sluice::errc::invalid_argument, "cannot open '{}' ({}); {}", name,
                  std::filesystem::exists(file) ? "not readable" : "no such file", hint);
  // Reads exactly out.size() bytes; false when the stream ends early. Throws on a damaged stream.
  auto read = [&](std::span<std::uint8_t> out) {
    std::size_t got = 0;
    while (got < out.size()) {
      auto const chunk = static_cast<unsigned>(std::min<std::size_t>(out.size() - got, std::size_t{1} << 30));
      int const n = gzread(gz.get(), out.data() + got, chunk);
      if (n < 0) {
        int code = 0;
        char const* msg = gzerror(gz.get(), &code);
        sluice::throw_error(sluice::errc::malformed_message, "'{}' is damaged (zlib: {}); {}", name, msg, hint);
      }
      if (n == 0) return false;
      got += static_cast<std::size_t>(n);
    }
    return true;
  };
  std::array<std::uint8_t, 4> magic{};
  sluice::require(read(magic), sluice::errc::malformed_message, "'{}' is truncated: no IDX header; {}", name, hint);
  sluice::require(magic[0] == 0 && magic[1] == 0 && magic[2] == 0x08, sluice::errc::malformed_message,
                  "'{}' is not an IDX file of unsigned bytes (magic {:02x}{:02x}{:02x}{:02x}, expected 000008xx); {}",
                  name, magic[0], magic[1], magic[2], magic[3], hint);
  sluice::require(magic[3] == expected_rank, sluice::errc::malformed_message,
                  "'{}' has {} dimensions, expected {} (is it the right file?)", name, magic[3], expected_rank);
  idx_array a;
  std::size_t total = 1;
  for (std::size_t i = 0; i < expected_rank; ++i) {
    std::array<std::uint8_t, 4> b{};
    sluice::require(read(b), sluice::errc::malformed_message, "'{}' is truncated inside its header; {}", name, hint);
    std::size_t const d = (std::size_t{b[0]} << 24) | (std::size_t{b[1]} << 16) | (std::size_t{b[2]} << 8) | b[3];
    sluice::require(d > 0 && d <= max_elements && total <= max_elements / d, sluice::errc::malformed_message,
                    "'{}': dimension {} is {}, outside (0, {}] elements in all; the header is damaged; {}", name, i, d,
                    max_elements, hint);
    total *= d;
    a.dims.push_back(d);
  }
  a.data.resize(total);
  sluice::require(read(a.data), sluice::errc::malformed_message,
                  "'{}' is truncated: its header announces {} bytes of data; {}", name, total, hint);
  std::array<std::uint8_t, 1> extra{};
  sluice::require(!read(extra), sluice::errc::malformed_message,
                  "'{}' has bytes after the {} its header announces; the file is damaged; {}", name, total, hint);
  return a;
}

/// One split of the dataset: `count` images of rows x cols pixels, normalized to zero mean and
/// unit variance over the training set ((x / 255 - 0.2860) / 0.3530), row-major, one image after
/// the other; labels in [0, 10).
struct dataset {
  std::size_t count = 0, rows = 0, cols = 0;
  std::vector<float> images;
  std::vector<std::uint8_t> labels;
  [[nodiscard]] std::size_t pixels() const noexcept { return rows * cols; }
  [[nodiscard]] std::span<float const> image(std::size_t i) const noexcept {
    return std::span<float const>(images).subspan(i * pixels(), pixels());
  }
};

inline constexpr std::size_t classes = 10;

/// Loads `split` ("train" or "t10k") from `dir`: {split}-images-idx3-ubyte.gz and
/// {split}-labels-idx1-ubyte.gz, checking that the counts agree and every label is a class.
inline dataset load(std::filesystem::path const& dir, std::string_view split) {
  auto const images_file = dir / (std::string(split) + "-images-idx3-ubyte.gz");
  auto const labels_file = dir / (std::string(split) + "-labels-idx1-ubyte.gz");
  idx_array const img = read_idx(images_file, 3);
  idx_array lab = read_idx(labels_file, 1);
  sluice::require(img.dims[0] == lab.dims[0], sluice::errc::malformed_message,
                  "'{}' holds {} images but '{}' holds {} labels; reinstall dataset-fashion-mnist",
                  images_file.string(), img.dims[0], labels_file.string(), lab.dims[0]);
  for (std::size_t i = 0; i < lab.data.size(); ++i)
    sluice::require(lab.data[i] < classes, sluice::errc::malformed_message,
                    "'{}': label {} of item {} is not a class in [0, {})", labels_file.string(), lab.data[i], i,
                    classes);
  dataset d;
  d.count = img.dims[0];
  d.rows = img.dims[1];
  d.cols = img.dims[2];
  d.images.resize(img.data.size());
  constexpr float mean = 0.2860f, inv_std = 1.0f / 0.3530f;
  for (std::size_t i = 0; i < img.data.size(); ++i)
    d.images[i] = (static_cast<float>(img.data[i]) / 255.0f - mean) * inv_std;
  d.labels = std::move(lab.data);
  return d;
}

}  // namespace fashion_mnist
