// Docs that cannot drift: every code block in README.md and docs/*.md introduced by
// `<!-- example: <file> <name> -->` must equal the lines of <file> between `// example-begin <name>`
// and `// example-end <name>` (indentation removed), and every such marker must name a region.
#include <doctest/doctest.h>

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

std::vector<std::string> region(fs::path const& file, std::string const& name) {
  auto const lines = read_lines(file);
  std::vector<std::string> out;
  bool in = false;
  std::size_t indent = std::string::npos;
  for (auto const& l : lines) {
    if (l.find("// example-end " + name) != std::string::npos) {
      in = false;
      break;
    }
    if (in) {
      out.push_back(l);
      if (auto const at = l.find_first_not_of(' '); at != std::string::npos) indent = std::min(indent, at);
    }
    if (l.find("// example-begin " + name) != std::string::npos) in = true;
  }
  for (auto& l : out) l = l.size() >= indent ? l.substr(indent) : std::string{};
  return out;
}

}  // namespace

TEST_CASE("docs: code blocks marked as examples equal the compiled example regions") {
  fs::path const root = SLUICE_SOURCE_DIR;
  std::vector<fs::path> pages{root / "README.md"};
  for (auto const& e : fs::directory_iterator(root / "docs"))
    if (e.path().extension() == ".md") pages.push_back(e.path());
  int blocks = 0;
  for (auto const& page : pages) {
    auto const lines = read_lines(page);
    for (std::size_t i = 0; i < lines.size(); ++i) {
      std::string const marker = "<!-- example: ";
      if (lines[i].rfind(marker, 0) != 0) continue;
      std::istringstream words(lines[i].substr(marker.size()));
      std::string file, name;
      words >> file >> name;
      CAPTURE(page);
      CAPTURE(file);
      CAPTURE(name);
      auto const expect = region(root / file, name);
      REQUIRE_FALSE(expect.empty());
      REQUIRE(i + 1 < lines.size());
      REQUIRE(lines[i + 1].rfind("```", 0) == 0);
      std::vector<std::string> block;
      for (std::size_t j = i + 2; j < lines.size() && lines[j].rfind("```", 0) != 0; ++j) block.push_back(lines[j]);
      CHECK(block == expect);
      ++blocks;
    }
  }
  CHECK(blocks >= 1);  // the README's example is one
}
