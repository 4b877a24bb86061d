// Loading helpers for the golden data in tests/data/golden (provenance: tests/data/README.md).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace deltafin::testing {

inline std::string GoldenDir() { return std::string(DF_TEST_DATA_DIR) + "/golden"; }
inline std::string GoldenModelDir() { return GoldenDir() + "/tiny-k3"; }

inline nlohmann::json LoadJson(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

inline std::vector<float> LoadF32(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  const auto bytes = static_cast<size_t>(in.tellg());
  std::vector<float> v(bytes / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(bytes));
  return v;
}

template <typename T>
std::vector<T> Vec(const nlohmann::json& j) {
  return j.get<std::vector<T>>();
}

// Flattens a JSON array of arrays of numbers into one float vector.
inline std::vector<float> Flat(const nlohmann::json& j) {
  std::vector<float> out;
  for (const auto& row : j) {
    if (row.is_array()) {
      for (const auto& v : row) out.push_back(v.get<float>());
    } else {
      out.push_back(row.get<float>());
    }
  }
  return out;
}

inline double MaxAbs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

}  // namespace deltafin::testing
