// The placement file (weights/placement.h): a saved placement reads back exactly; a torn,
// corrupt or foreign one is refused with the reason.
#include "weights/placement.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "unit/test_files.h"

namespace deltafin {
namespace {

using testing::ReadTextFile;
using testing::ScopedTempDir;

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A safetensors file of one F32 tensor "w" of `floats` values, all `fill`.
void WriteShard(const std::string& path, int floats, float fill) {
  std::string header = "{\"w\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(floats) +
                       "],\"data_offsets\":[0," + std::to_string(4 * floats) + "]}}";
  while (header.size() % 8 != 0) header += ' ';
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    bytes[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  bytes += header;
  for (int i = 0; i < floats; ++i) bytes.append(reinterpret_cast<const char*>(&fill), 4);
  WriteText(path, bytes);
}

class PlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.Join("model");
    std::filesystem::create_directories(dir_);
    WriteText(dir_ + "/config.json", "{\"a\": 1}");
    WriteShard(dir_ + "/model-1.safetensors", 25, 1.0f);
    WriteShard(dir_ + "/model-2.safetensors", 12, 2.0f);
    auto m = DescribePlacementModel(dir_);
    ASSERT_TRUE(m.ok()) << m.status().message();
    model_ = *m;
    p_.model = model_;
    p_.drives = {"/mnt/a", "/mnt/b"};
    p_.num_layers = 2;
    p_.num_experts = 3;
    p_.copies = {0, 0, 0, 1, 3, 6};
    p_.sha256 = {"", "", "", "ab", "cd", "ef"};
  }
  ScopedTempDir tmp_;
  std::string dir_;
  PlacementModel model_;
  Placement p_;
};

TEST_F(PlacementTest, RoundTrips) {
  EXPECT_EQ(model_.shards.size(), 2u);
  EXPECT_EQ(model_.shards[0].name, "model-1.safetensors");
  EXPECT_EQ(model_.shards[1].size, std::filesystem::file_size(dir_ + "/model-2.safetensors"));
  auto none = LoadPlacement(dir_, model_);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  ASSERT_TRUE(SavePlacement(dir_, p_).ok());
  auto back = LoadPlacement(dir_, model_);
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_TRUE(back->has_value());
  EXPECT_EQ((*back)->drives, p_.drives);
  EXPECT_EQ((*back)->copies, p_.copies);
  EXPECT_EQ((*back)->sha256, p_.sha256);
  EXPECT_EQ((*back)->DrivePath(dir_, 0), dir_);
  EXPECT_EQ((*back)->DrivePath(dir_, 2), "/mnt/b");
}

TEST_F(PlacementTest, RefusesACorruptFile) {
  ASSERT_TRUE(SavePlacement(dir_, p_).ok());
  std::string text = ReadTextFile(PlacementPath(dir_));
  text[text.size() - 5] ^= 1;
  WriteText(PlacementPath(dir_), text);
  auto r = LoadPlacement(dir_, model_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("fails its checksum"), std::string::npos)
      << r.status().message();
  WriteText(PlacementPath(dir_), text.substr(0, 20));  // torn
  r = LoadPlacement(dir_, model_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not a deltafin-placement/1 file"), std::string::npos)
      << r.status().message();
}

TEST_F(PlacementTest, RefusesAnotherModelOrRevision) {
  ASSERT_TRUE(SavePlacement(dir_, p_).ok());
  PlacementModel other = model_;
  other.config_sha256[0] = other.config_sha256[0] == '0' ? '1' : '0';
  auto r = LoadPlacement(dir_, other);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("was made for another model"), std::string::npos)
      << r.status().message();
  // Same config and sizes, other weights (a make-model seed): the spine sample tells them apart.
  WriteShard(dir_ + "/model-2.safetensors", 12, 3.0f);
  auto reweighted = DescribePlacementModel(dir_);
  ASSERT_TRUE(reweighted.ok()) << reweighted.status().message();
  EXPECT_EQ(reweighted->shards, model_.shards);
  r = LoadPlacement(dir_, *reweighted);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("its weights differ"), std::string::npos)
      << r.status().message();
  other = model_;
  other.shards[1].size += 1;
  r = LoadPlacement(dir_, other);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("another revision"), std::string::npos)
      << r.status().message();
}

TEST_F(PlacementTest, RefusesACopyOnAnUnknownDrive) {
  p_.copies[5] = 8;  // drive 3 of 2
  ASSERT_TRUE(SavePlacement(dir_, p_).ok());
  auto r = LoadPlacement(dir_, model_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unknown drive"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace deltafin
