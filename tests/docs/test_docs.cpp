// Docs that cannot drift: every C++ block (a ```cpp or ```c++ fence) in README.md and docs/**/*.md
// is tied to a compiled file by a marker on the line before its fence:
//   <!-- example: <file> <name> -->  the block is exactly the lines of <file> between
//                                    `// example-begin <name>` and `// example-end <name>`
//                                    (their common indentation removed): code a test or an
//                                    example compiles (and runs);
//   <!-- excerpt: <file> -->         the block is a fragment of <file>: each of its non-blank
//                                    lines, leading and trailing spaces aside, is a line of <file>,
//                                    in the same order (a declaration quoted from a header); a
//                                    comment line starting `// ...` stands for lines left out.
// A block without a marker, a marker without a block, a region that does not exist and a file
// outside include/, examples/ and tests/ (the compiled trees) all fail.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

std::vector<std::string> read_lines(fs::path const& p) {
  std::ifstream in(p);
  REQUIRE_MESSAGE(in.good(), "cannot read " << p);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

std::string trim(std::string const& s) {
  auto const b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

/// The lines between `// example-begin name` and `// example-end name`, common indentation removed.
std::vector<std::string> region(fs::path const& file, std::string const& name) {
  auto const lines = read_lines(file);
  std::vector<std::string> out;
  bool in = false;
  std::size_t indent = std::string::npos;
  for (auto const& l : lines) {
    if (trim(l) == "// example-end " + name) break;
    bool const marker = trim(l).rfind("// example-begin ", 0) == 0 || trim(l).rfind("// example-end ", 0) == 0;
    if (in && !marker) {  // a region nested in this one shows in both, without its markers
      out.push_back(l);
      if (auto const at = l.find_first_not_of(' '); at != std::string::npos) indent = std::min(indent, at);
    }
    if (trim(l) == "// example-begin " + name) in = true;
  }
  for (auto& l : out) l = l.size() >= indent ? l.substr(indent) : std::string{};
  return out;
}

/// The first line of `block` that is not a line of `file` after the previous one matched; empty
/// when every non-blank line matched in order.
std::string first_unmatched(fs::path const& file, std::vector<std::string> const& block) {
  auto const lines = read_lines(file);
  std::size_t at = 0;
  for (auto const& b : block) {
    auto const want = trim(b);
    if (want.empty() || want.rfind("// ...", 0) == 0) continue;
    while (at < lines.size() && trim(lines[at]) != want) ++at;
    if (at == lines.size()) return b;
    ++at;
  }
  return {};
}

bool is_cpp_fence(std::string const& l) {
  auto const info = trim(l.rfind("```", 0) == 0 ? l.substr(3) : std::string{"-"});
  return info == "cpp" || info == "c++";
}

bool in_compiled_tree(std::string const& file) {
  return file.rfind("include/", 0) == 0 || file.rfind("examples/", 0) == 0 || file.rfind("tests/", 0) == 0;
}

std::vector<fs::path> pages(fs::path const& root) {
  std::vector<fs::path> out{root / "README.md"};
  for (auto const& e : fs::recursive_directory_iterator(root / "docs"))
    if (e.path().extension() == ".md") out.push_back(e.path());
  std::sort(out.begin() + 1, out.end());
  return out;
}

}  // namespace

TEST_CASE("docs: every C++ block is compiled code (an example region) or an excerpt of a compiled file") {
  fs::path const root = SLUICE_SOURCE_DIR;
  int examples = 0, excerpts = 0;
  for (auto const& page : pages(root)) {
    auto const lines = read_lines(page);
    for (std::size_t i = 0; i < lines.size(); ++i) {
      std::string const example = "<!-- example: ", excerpt = "<!-- excerpt: ";
      bool const is_example = lines[i].rfind(example, 0) == 0, is_excerpt = lines[i].rfind(excerpt, 0) == 0;
      std::string const where = fs::relative(page, root).string() + ":" + std::to_string(i + 1);
      CAPTURE(where);
      if (is_cpp_fence(lines[i])) {
        bool const marked = i > 0 && (lines[i - 1].rfind(example, 0) == 0 || lines[i - 1].rfind(excerpt, 0) == 0);
        CHECK_MESSAGE(marked, where << ": a C++ block without '<!-- example: <file> <name> -->' or "
                                       "'<!-- excerpt: <file> -->' on the line before its fence");
      }
      if (!is_example && !is_excerpt) continue;
      std::istringstream words(lines[i].substr(example.size()));
      std::string file, name;
      words >> file;
      if (is_example) words >> name;
      CAPTURE(file);
      CAPTURE(name);
      CHECK_MESSAGE(in_compiled_tree(file), where << ": " << file << " is not under include/, examples/ or tests/");
      REQUIRE_MESSAGE(fs::exists(root / file), where << ": " << file << " does not exist");
      REQUIRE_MESSAGE(i + 1 < lines.size(), where << ": a marker at the end of the page");
      REQUIRE_MESSAGE(is_cpp_fence(lines[i + 1]), where << ": the marker is not followed by a ```cpp or ```c++ fence");
      std::vector<std::string> block;
      std::size_t j = i + 2;
      for (; j < lines.size() && lines[j].rfind("```", 0) != 0; ++j) block.push_back(lines[j]);
      REQUIRE_MESSAGE(j < lines.size(), where << ": the block is not closed");
      if (is_example) {
        auto const expect = region(root / file, name);
        REQUIRE_MESSAGE(!expect.empty(), where << ": " << file << " has no region '// example-begin " << name << "'");
        CHECK_MESSAGE(block == expect, where << ": the block differs from " << file << "'s region " << name);
        ++examples;
      } else {
        auto const missing = first_unmatched(root / file, block);
        CHECK_MESSAGE(missing.empty(), where << ": this line of the excerpt is not in " << file
                                             << " (or not in the same order): " << missing);
        ++excerpts;
      }
      i = j;
    }
  }
  MESSAGE(examples << " example blocks, " << excerpts << " excerpts");
  CHECK(examples >= 1);  // the README's example is one
}
