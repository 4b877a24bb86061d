// The module include-graph test: every `#include "..."` line under src/, include/ and bench/ must
// name a module that the including file's module may include, per src/include_graph.txt (the one
// place the allowed graph is written; docs/ARCHITECTURE.md explains it). Also fails for a source
// file in no module, an include that names no module, a graph entry naming a missing directory or
// module, and a cycle in the graph outside a declared `unit`. The checker is run on small made-up
// trees first, so each kind of violation is shown to be caught, then on the repository.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "unit/test_files.h"

namespace deltafin {
namespace {

namespace fs = std::filesystem;

struct Module {
  std::string name;
  std::string dir;  // relative to the repository root, e.g. "src/base"
  std::set<std::string> may_include;
};

struct Graph {
  std::vector<Module> modules;
  std::set<std::string> externals;
  std::vector<std::set<std::string>> units;  // groups allowed to include each other
  std::vector<std::string> errors;           // problems with the graph file itself
};

Graph ParseGraph(const std::string& text) {
  Graph g;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string kind;
    if (!(words >> kind)) continue;
    std::vector<std::string> rest;
    for (std::string w; words >> w;) rest.push_back(w);
    if (kind == "module" && rest.size() >= 2) {
      g.modules.push_back({rest[0], rest[1], {rest.begin() + 2, rest.end()}});
    } else if (kind == "external" && !rest.empty()) {
      g.externals.insert(rest.begin(), rest.end());
    } else if (kind == "unit" && rest.size() >= 2) {
      g.units.emplace_back(rest.begin(), rest.end());
    } else {
      g.errors.push_back("graph line " + std::to_string(line_no) + ": cannot parse '" + line +
                         "' (expected module NAME DIR [MAY_INCLUDE...], external NAME..., or "
                         "unit NAME NAME...)");
    }
  }
  return g;
}

// The include prefix of a module is its directory's last component: src/base -> "base",
// include/deltafin -> "deltafin", bench -> "bench".
std::string IncludePrefix(const Module& m) { return fs::path(m.dir).filename().string(); }

struct Report {
  std::vector<std::string> violations;
  int files = 0;
  int includes = 0;
};

Report CheckTree(const fs::path& root, const Graph& g) {
  Report r;
  r.violations = g.errors;
  std::map<std::string, const Module*> by_name, by_prefix;
  for (const Module& m : g.modules) {
    by_name[m.name] = &m;
    by_prefix[IncludePrefix(m)] = &m;
    if (!fs::is_directory(root / m.dir)) {
      r.violations.push_back("module " + m.name + ": directory " + m.dir + " does not exist");
    }
  }
  for (const Module& m : g.modules) {
    for (const std::string& dep : m.may_include) {
      if (by_name.count(dep) == 0 && g.externals.count(dep) == 0) {
        r.violations.push_back("module " + m.name + " may include '" + dep +
                               "', which is neither a module nor an external");
      }
    }
  }
  // Owner of a file: the module whose directory is the longest prefix of its path.
  auto owner = [&](const std::string& rel) -> const Module* {
    const Module* best = nullptr;
    for (const Module& m : g.modules) {
      if (rel.rfind(m.dir + "/", 0) == 0 && (best == nullptr || m.dir.size() > best->dir.size())) {
        best = &m;
      }
    }
    return best;
  };
  static const std::regex kInclude(R"(^\s*#\s*include\s*"([^"]+)\")");
  static const std::set<std::string> kSourceExtensions = {".h", ".cc", ".hpp", ".cpp", ".inc"};
  std::vector<std::string> files;
  for (const char* top : {"src", "include", "bench"}) {
    if (!fs::is_directory(root / top)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(root / top)) {
      if (entry.is_regular_file() && kSourceExtensions.count(entry.path().extension().string())) {
        files.push_back(fs::relative(entry.path(), root).generic_string());
      }
    }
  }
  std::sort(files.begin(), files.end());
  for (const std::string& rel : files) {
    ++r.files;
    const Module* from = owner(rel);
    if (from == nullptr) {
      r.violations.push_back(rel + " is in no module of the graph (add its directory)");
      continue;
    }
    std::ifstream in(root / rel);
    std::string line;
    int line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      std::smatch match;
      if (!std::regex_search(line, match, kInclude)) continue;
      ++r.includes;
      const std::string target = match[1];
      const std::string where =
          rel + ":" + std::to_string(line_no) + ": #include \"" + target + "\": ";
      const size_t slash = target.find('/');
      if (slash == std::string::npos) {
        r.violations.push_back(where + "write the include with its module path (\"module/" +
                               target + "\")");
        continue;
      }
      const std::string prefix = target.substr(0, slash);
      std::string to;
      if (auto it = by_prefix.find(prefix); it != by_prefix.end()) {
        to = it->second->name;
      } else if (g.externals.count(prefix)) {
        to = prefix;
      } else {
        r.violations.push_back(where + "'" + prefix + "' is no module or external of the graph");
        continue;
      }
      if (to == from->name || from->may_include.count(to)) continue;
      std::string allowed;
      for (const auto& dep : from->may_include) allowed += " " + dep;
      r.violations.push_back(where + "module " + from->name + " may not include module " + to +
                             " (it may include:" + (allowed.empty() ? " nothing" : allowed) + ")");
    }
  }
  return r;
}

// Cycles among modules, with each `unit` collapsed into one node.
std::vector<std::string> FindCycles(const Graph& g) {
  std::map<std::string, std::string> node;  // module -> its unit's name
  for (const Module& m : g.modules) node[m.name] = m.name;
  for (const auto& unit : g.units) {
    std::string name;
    for (const auto& m : unit) name += (name.empty() ? "" : "+") + m;
    for (const auto& m : unit) node[m] = name;
  }
  std::map<std::string, std::set<std::string>> edges;
  for (const Module& m : g.modules) {
    for (const auto& dep : m.may_include) {
      if (node.count(dep) && node[dep] != node[m.name]) edges[node[m.name]].insert(node[dep]);
    }
  }
  std::vector<std::string> cycles;
  std::map<std::string, int> state;  // 0 unseen, 1 on the stack, 2 done
  std::vector<std::string> stack;
  std::function<void(const std::string&)> visit = [&](const std::string& n) {
    state[n] = 1;
    stack.push_back(n);
    for (const auto& next : edges[n]) {
      if (state[next] == 1) {
        std::string path;
        for (auto it = std::find(stack.begin(), stack.end(), next); it != stack.end(); ++it) {
          path += *it + " -> ";
        }
        cycles.push_back("the graph has a cycle: " + path + next);
      } else if (state[next] == 0) {
        visit(next);
      }
    }
    stack.pop_back();
    state[n] = 2;
  };
  for (const auto& [module, unit] : node) {
    if (state[unit] == 0) visit(unit);
  }
  return cycles;
}

std::string Join(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

// A made-up repository: files given as path -> contents.
class FakeTree {
 public:
  explicit FakeTree(const std::map<std::string, std::string>& files) {
    for (const auto& [rel, text] : files) {
      const fs::path p = fs::path(dir_.path()) / rel;
      fs::create_directories(p.parent_path());
      std::ofstream(p) << text;
    }
  }
  fs::path root() const { return dir_.path(); }

 private:
  testing::ScopedTempDir dir_;
};

const char kTwoModules[] = "module a src/a\nmodule b src/b a\nexternal ext\n";

TEST(IncludeGraphChecker, AcceptsAllowedIncludes) {
  FakeTree tree({{"src/a/x.h", "#include \"a/y.h\"\n#include <vector>\n#include \"ext/lib.h\"\n"},
                 {"src/a/y.h", "\n"},
                 {"src/b/z.cc", "#include \"a/x.h\"\n  #  include \"b/z.h\"\n"}});
  const Graph g = ParseGraph("module a src/a ext\nmodule b src/b a\nexternal ext\n");
  const Report r = CheckTree(tree.root(), g);
  EXPECT_TRUE(r.violations.empty()) << Join(r.violations);
  EXPECT_EQ(r.files, 3);
  EXPECT_EQ(r.includes, 4);
}

TEST(IncludeGraphChecker, ReportsAForbiddenInclude) {
  FakeTree tree({{"src/a/x.h", "// a\n#include \"b/z.h\"\n"}, {"src/b/z.h", "\n"}});
  const Report r = CheckTree(tree.root(), ParseGraph(kTwoModules));
  ASSERT_EQ(r.violations.size(), 1u) << Join(r.violations);
  EXPECT_NE(r.violations[0].find("src/a/x.h:2"), std::string::npos) << r.violations[0];
  EXPECT_NE(r.violations[0].find("module a may not include module b"), std::string::npos)
      << r.violations[0];
}

TEST(IncludeGraphChecker, ReportsStrayFilesUnknownModulesAndBareIncludes) {
  FakeTree tree({{"src/a/x.h", "#include \"zz/q.h\"\n#include \"y.h\"\n#include \"ext/e.h\"\n"},
                 {"src/b/z.h", "\n"},
                 {"src/c/new.cc", "\n"}});
  const Report r = CheckTree(tree.root(), ParseGraph(kTwoModules));
  const std::string all = Join(r.violations);
  EXPECT_EQ(r.violations.size(), 4u) << all;
  EXPECT_NE(all.find("'zz' is no module or external"), std::string::npos) << all;
  EXPECT_NE(all.find("with its module path"), std::string::npos) << all;
  EXPECT_NE(all.find("module a may not include module ext"), std::string::npos) << all;
  EXPECT_NE(all.find("src/c/new.cc is in no module"), std::string::npos) << all;
}

TEST(IncludeGraphChecker, ReportsBadGraphEntries) {
  FakeTree tree(std::map<std::string, std::string>{{"src/a/x.h", "\n"}});
  const Report r =
      CheckTree(tree.root(), ParseGraph("module a src/a nosuch\nmodule b src/b\nbogus\n"));
  const std::string all = Join(r.violations);
  EXPECT_NE(all.find("cannot parse 'bogus'"), std::string::npos) << all;
  EXPECT_NE(all.find("directory src/b does not exist"), std::string::npos) << all;
  EXPECT_NE(all.find("may include 'nosuch'"), std::string::npos) << all;
}

TEST(IncludeGraphChecker, ReportsCyclesOutsideUnits) {
  const std::string cyclic = "module a src/a b\nmodule b src/b c\nmodule c src/c a\n";
  const auto cycles = FindCycles(ParseGraph(cyclic));
  ASSERT_EQ(cycles.size(), 1u) << Join(cycles);
  EXPECT_NE(cycles[0].find("a -> b -> c -> a"), std::string::npos) << cycles[0];
  EXPECT_TRUE(FindCycles(ParseGraph(cyclic + "unit a b c\n")).empty());
  EXPECT_FALSE(FindCycles(ParseGraph(cyclic + "unit a b\n")).empty());
}

TEST(IncludeGraph, RepositoryFollowsSrcIncludeGraphTxt) {
  const fs::path root = DF_SOURCE_DIR;
  const Graph g = ParseGraph(testing::ReadTextFile((root / "src/include_graph.txt").string()));
  EXPECT_GE(g.modules.size(), 17u);
  const Report r = CheckTree(root, g);
  EXPECT_TRUE(r.violations.empty()) << Join(r.violations);
  // Guards against a scan that silently finds nothing (a moved tree, a broken pattern).
  EXPECT_GT(r.files, 100);
  EXPECT_GT(r.includes, 250);
  const auto cycles = FindCycles(g);
  EXPECT_TRUE(cycles.empty()) << Join(cycles);
}

}  // namespace
}  // namespace deltafin
