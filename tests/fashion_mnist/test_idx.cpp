// The Fashion-MNIST IDX reader (examples/fashion_mnist/idx.hpp): the installed dataset reads with
// the documented sizes; files written to a temporary directory with a wrong magic number, rank or
// dimension, a truncated payload, trailing bytes, a damaged gzip stream, or inconsistent labels
// are refused with sluice::error naming the file; a missing file names the package to install.
#include <doctest/doctest.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "idx.hpp"

namespace {

namespace fs = std::filesystem;
using fashion_mnist::read_idx;

struct temp_dir {
  fs::path path = fs::temp_directory_path() / ("sluice-idx-" + std::to_string(::getpid()));
  temp_dir() { fs::create_directories(path); }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::vector<std::uint8_t> header(std::uint8_t type, std::vector<std::uint32_t> const& dims) {
  std::vector<std::uint8_t> h{0, 0, type, static_cast<std::uint8_t>(dims.size())};
  for (std::uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) h.push_back(static_cast<std::uint8_t>(d >> s));
  return h;
}
void write_gz(fs::path const& p, std::vector<std::uint8_t> const& bytes) {
  gzFile f = gzopen(p.string().c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}
std::vector<std::uint8_t> idx_bytes(std::vector<std::uint32_t> const& dims, std::size_t payload) {
  auto b = header(0x08, dims);
  for (std::size_t i = 0; i < payload; ++i) b.push_back(static_cast<std::uint8_t>(i % 10));
  return b;
}
std::string error_of(fs::path const& p, std::size_t rank) {
  try {
    (void)read_idx(p, rank);
  } catch (sluice::error const& e) {
    return e.what();
  }
  return "";
}
bool contains(std::string const& s, std::string const& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("the installed Fashion-MNIST files read with their documented sizes") {
  fs::path const dir{fashion_mnist::default_data_dir};
  auto const train = fashion_mnist::load(dir, "train");
  auto const test = fashion_mnist::load(dir, "t10k");
  CHECK(train.count == 60000);
  CHECK(test.count == 10000);
  CHECK(train.rows == 28);
  CHECK(train.cols == 28);
  CHECK(train.images.size() == 60000u * 784u);
  CHECK(test.labels.size() == 10000);
  std::array<std::size_t, 10> per_class{};
  for (auto l : train.labels) ++per_class[l];
  for (auto n : per_class) CHECK(n == 6000);  // the dataset is balanced
  auto const raw = read_idx(dir / "t10k-labels-idx1-ubyte.gz", 1);
  CHECK(raw.dims == std::vector<std::size_t>{10000});
}

TEST_CASE("a well-formed IDX file, gzip or plain, reads back exactly") {
  temp_dir t;
  auto const bytes = idx_bytes({3, 2, 2}, 12);
  write_gz(t.path / "good.gz", bytes);
  auto const a = read_idx(t.path / "good.gz", 3);
  CHECK(a.dims == std::vector<std::size_t>{3, 2, 2});
  CHECK(a.data == std::vector<std::uint8_t>(bytes.begin() + 16, bytes.end()));
  std::ofstream(t.path / "plain", std::ios::binary)
      .write(reinterpret_cast<char const*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  CHECK(read_idx(t.path / "plain", 3).data == a.data);
}

TEST_CASE("missing, truncated and damaged IDX files are refused with the file's name") {
  temp_dir t;
  auto const missing = error_of(t.path / "none.gz", 1);
  CHECK(contains(missing, "none.gz"));
  CHECK(contains(missing, "no such file"));
  CHECK(contains(missing, "apt-get install dataset-fashion-mnist"));

  write_gz(t.path / "empty.gz", {});
  CHECK(contains(error_of(t.path / "empty.gz", 1), "no IDX header"));

  auto bad_magic = idx_bytes({4}, 4);
  bad_magic[2] = 0x0d;  // float data, not unsigned bytes
  write_gz(t.path / "magic.gz", bad_magic);
  CHECK(contains(error_of(t.path / "magic.gz", 1), "not an IDX file of unsigned bytes"));

  write_gz(t.path / "rank.gz", idx_bytes({2, 2}, 4));
  CHECK(contains(error_of(t.path / "rank.gz", 1), "has 2 dimensions, expected 1"));

  auto short_header = header(0x08, {5, 5, 5});
  short_header.resize(10);
  write_gz(t.path / "header.gz", short_header);
  CHECK(contains(error_of(t.path / "header.gz", 3), "truncated inside its header"));

  write_gz(t.path / "zero.gz", idx_bytes({0}, 0));
  CHECK(contains(error_of(t.path / "zero.gz", 1), "dimension 0 is 0"));

  // 2^32 - 1 cubed: refused from the header, before any allocation.
  write_gz(t.path / "huge.gz", header(0x08, {0xffffffffu, 0xffffffffu, 0xffffffffu}));
  CHECK(contains(error_of(t.path / "huge.gz", 3), "the header is damaged"));

  write_gz(t.path / "short.gz", idx_bytes({100}, 99));
  auto const truncated = error_of(t.path / "short.gz", 1);
  CHECK(contains(truncated, "short.gz"));
  CHECK(contains(truncated, "truncated: its header announces 100 bytes"));

  write_gz(t.path / "long.gz", idx_bytes({100}, 101));
  CHECK(contains(error_of(t.path / "long.gz", 1), "bytes after the 100"));

  // A gzip stream cut in half, and one with its deflate data overwritten.
  auto const big = idx_bytes({20000}, 20000);
  write_gz(t.path / "whole.gz", big);
  std::ifstream whole(t.path / "whole.gz", std::ios::binary);
  std::vector<char> gz((std::istreambuf_iterator<char>(whole)), std::istreambuf_iterator<char>());
  std::ofstream(t.path / "cut.gz", std::ios::binary).write(gz.data(), static_cast<std::streamsize>(gz.size() / 2));
  CHECK(!error_of(t.path / "cut.gz", 1).empty());
  for (std::size_t i = 20; i < gz.size() - 8; i += 7) gz[i] = static_cast<char>(gz[i] ^ 0x5a);
  std::ofstream(t.path / "flipped.gz", std::ios::binary).write(gz.data(), static_cast<std::streamsize>(gz.size()));
  auto const damaged = error_of(t.path / "flipped.gz", 1);
  CHECK(contains(damaged, "flipped.gz"));
}

TEST_CASE("load() refuses labels that disagree with the images") {
  temp_dir t;
  write_gz(t.path / "x-images-idx3-ubyte.gz", idx_bytes({3, 2, 2}, 12));
  write_gz(t.path / "x-labels-idx1-ubyte.gz", idx_bytes({2}, 2));
  std::string msg;
  try {
    (void)fashion_mnist::load(t.path, "x");
  } catch (sluice::error const& e) {
    msg = e.what();
  }
  CHECK(contains(msg, "holds 3 images but"));
  auto labels = idx_bytes({3}, 3);
  labels.back() = 10;
  write_gz(t.path / "x-labels-idx1-ubyte.gz", labels);
  msg.clear();
  try {
    (void)fashion_mnist::load(t.path, "x");
  } catch (sluice::error const& e) {
    msg = e.what();
  }
  CHECK(contains(msg, "label 10 of item 2"));
}
