// File helpers shared by the unit tests: a self-deleting temporary directory and whole-file
// binary/text reads and writes (tests build small checkpoints and corrupt copies of real ones).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace deltafin::testing {

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class ScopedTempDir {
 public:
  ScopedTempDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "deltafin-test-XXXXXX").string();
    if (::mkdtemp(templ.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp failed for " << templ;
    } else {
      path_ = templ;
    }
  }
  ~ScopedTempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Join(const std::string& name) const {
    return (std::filesystem::path(path_) / name).string();
  }

 private:
  std::string path_;
};

inline std::vector<uint8_t> ReadBinaryFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void WriteBinaryFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  EXPECT_TRUE(out.good()) << "cannot write " << path;
}

inline std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  EXPECT_TRUE(out.good()) << "cannot write " << path;
}

// Predicate-format helper behind EXPECT_HAS_SUBSTR (gmock is not linked into the tests).
inline ::testing::AssertionResult AssertHasSubstr(const char* text_expr, const char* needle_expr,
                                                  const std::string& text,
                                                  const std::string& needle) {
  if (text.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << text_expr << " does not contain " << needle_expr << "\n  text:   \"" << text
         << "\"\n  needle: \"" << needle << "\"";
}

// The 8-byte little-endian length prefix of a safetensors file.
inline uint64_t ReadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

inline void WriteLe64(uint64_t v, uint8_t* p) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace deltafin::testing

// Expects `text` (a std::string) to contain `needle`, printing both when it does not.
#define EXPECT_HAS_SUBSTR(text, needle) \
  EXPECT_PRED_FORMAT2(::deltafin::testing::AssertHasSubstr, text, needle)
