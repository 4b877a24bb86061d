// Tests of the container layer (src/format): the safetensors writer and header parser, and
// Checkpoint, which turns a model folder (single file or sharded with an index) into a tensor
// directory. Every rejected input must produce an error that names the file and the tensor or
// problem; the golden tiny-k3 checkpoint must open and expose the tensors the spec describes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "format/checkpoint.h"
#include "format/safetensors.h"
#include "unit/test_files.h"
#include "weights/config.h"
#include "weights/tensor_roster.h"

namespace deltafin {
namespace {

using ::deltafin::testing::ReadBinaryFile;
using ::deltafin::testing::ScopedTempDir;
using ::deltafin::testing::WriteBinaryFile;
using ::deltafin::testing::WriteLe64;
using ::deltafin::testing::WriteTextFile;

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// Helpers

// A tensor to write: name, dtype, shape and its raw bytes (size must match shape x dtype).
struct TestTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Deterministic distinct bytes so a view into the wrong place cannot compare equal.
std::vector<uint8_t> PatternBytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed * 31 + i * 7 + (i >> 8));
  return v;
}

TestTensor MakeTensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                      uint8_t seed) {
  size_t n = DTypeSize(dtype);
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return {name, dtype, std::move(shape), PatternBytes(n, seed)};
}

// Writes `tensors` with SafetensorsWriter, appending each tensor in two pieces.
void WriteSafetensors(const std::string& path, const std::vector<TestTensor>& tensors) {
  std::vector<SafetensorsWriter::Declaration> decls;
  for (const auto& t : tensors) decls.push_back({t.name, t.dtype, t.shape});
  SafetensorsWriter w;
  Status st = w.Open(path, decls);
  ASSERT_TRUE(st.ok()) << st.message();
  for (const auto& t : tensors) {
    const size_t half = t.bytes.size() / 2;
    st = w.Append(t.bytes.data(), half);
    ASSERT_TRUE(st.ok()) << st.message();
    st = w.Append(t.bytes.data() + half, t.bytes.size() - half);
    ASSERT_TRUE(st.ok()) << st.message();
  }
  st = w.Close();
  ASSERT_TRUE(st.ok()) << st.message();
}

// A safetensors file from a literal header (not padded) and `data_bytes` zero bytes of data.
std::vector<uint8_t> RawFile(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> f(8 + header.size() + data_bytes, 0);
  WriteLe64(header.size(), f.data());
  std::memcpy(f.data() + 8, header.data(), header.size());
  return f;
}

Result<SafetensorsHeader> Parse(const std::vector<uint8_t>& file, const std::string& label) {
  return ParseSafetensorsHeader(file.data(), file.size(), file.size(), label);
}

// Message of a parse that must fail (empty string, plus a test failure, if it succeeded).
std::string ParseError(const std::vector<uint8_t>& file, const std::string& label) {
  auto r = Parse(file, label);
  EXPECT_FALSE(r.ok()) << "parse unexpectedly succeeded";
  return r.ok() ? std::string() : r.status().message();
}

std::string Entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  uint64_t begin, uint64_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(end) + "]}";
}

// ---------------------------------------------------------------------------------------------
// SafetensorsWriter -> ParseSafetensorsHeader

TEST(SafetensorsWriterTest, RoundTripPreservesDtypesShapesOffsetsAndBytes) {
  ScopedTempDir dir;
  const std::vector<TestTensor> tensors = {
      MakeTensor("a.f32", DType::kF32, {3, 5}, 1),
      MakeTensor("b.bf16", DType::kBF16, {7}, 2),
      MakeTensor("c.u8", DType::kU8, {4, 3, 2}, 3),
      MakeTensor("d.scalar", DType::kF32, {}, 4),
      MakeTensor("e.empty", DType::kBF16, {0, 9}, 5),
      MakeTensor("f.after_empty", DType::kU8, {1}, 6),
  };
  const std::string path = dir.Join("rt.safetensors");
  ASSERT_NO_FATAL_FAILURE(WriteSafetensors(path, tensors));
  const std::vector<uint8_t> file = ReadBinaryFile(path);

  auto header = Parse(file, path);
  ASSERT_TRUE(header.ok()) << header.status().message();
  EXPECT_EQ(header->data_offset % 8, 0u) << "header not padded to a multiple of 8";
  ASSERT_EQ(header->tensors.size(), tensors.size());

  // Parsed entries, by name (the parser does not promise an order).
  std::map<std::string, SafetensorsEntry> by_name;
  for (const auto& e : header->tensors) by_name[e.name] = e;
  uint64_t expected_begin = 0;
  for (const auto& t : tensors) {
    SCOPED_TRACE(t.name);
    ASSERT_TRUE(by_name.count(t.name));
    const SafetensorsEntry& e = by_name[t.name];
    EXPECT_EQ(e.dtype, t.dtype);
    EXPECT_EQ(e.shape, t.shape);
    // Data is laid out in declaration order, back to back.
    EXPECT_EQ(e.begin, expected_begin);
    EXPECT_EQ(e.end - e.begin, t.bytes.size());
    expected_begin = e.end;
    ASSERT_LE(header->data_offset + e.end, file.size());
    const std::vector<uint8_t> stored(
        file.begin() + static_cast<ptrdiff_t>(header->data_offset + e.begin),
        file.begin() + static_cast<ptrdiff_t>(header->data_offset + e.end));
    EXPECT_EQ(stored, t.bytes);
  }
  EXPECT_EQ(header->data_offset + expected_begin, file.size()) << "trailing bytes after the data";

  // Header JSON: metadata present, padding is spaces.
  const uint64_t n = header->data_offset - 8;
  const std::string text(file.begin() + 8, file.begin() + 8 + static_cast<ptrdiff_t>(n));
  auto json = nlohmann::json::parse(text);
  EXPECT_EQ(json["__metadata__"]["format"], "pt");
  const size_t last = text.find_last_not_of(' ');
  EXPECT_EQ(text[last], '}');
  EXPECT_LT(n - (last + 1), 8u) << "more padding than needed";
}

TEST(SafetensorsWriterTest, HeaderIsPaddedToMultipleOf8ForEveryNameLength) {
  ScopedTempDir dir;
  for (size_t len = 1; len <= 16; ++len) {
    SCOPED_TRACE(len);
    const std::string path = dir.Join("pad" + std::to_string(len) + ".safetensors");
    ASSERT_NO_FATAL_FAILURE(
        WriteSafetensors(path, {MakeTensor(std::string(len, 'x'), DType::kU8, {3}, 9)}));
    const std::vector<uint8_t> file = ReadBinaryFile(path);
    ASSERT_GE(file.size(), 8u);
    EXPECT_EQ(testing::ReadLe64(file.data()) % 8, 0u);
    auto header = Parse(file, path);
    ASSERT_TRUE(header.ok()) << header.status().message();
    EXPECT_EQ(header->tensors.at(0).name, std::string(len, 'x'));
  }
}

TEST(SafetensorsWriterTest, CloseRefusesMissingBytesAndAppendRefusesExtraBytes) {
  ScopedTempDir dir;
  const std::string path = dir.Join("short.safetensors");
  {
    SafetensorsWriter w;
    ASSERT_TRUE(w.Open(path, {{"t", DType::kF32, {4}}}).ok());
    const uint8_t bytes[12] = {};
    ASSERT_TRUE(w.Append(bytes, sizeof(bytes)).ok());
    Status st = w.Close();
    ASSERT_FALSE(st.ok());
    EXPECT_HAS_SUBSTR(st.message(), path);
    EXPECT_HAS_SUBSTR(st.message(), "wrote 12");
    EXPECT_HAS_SUBSTR(st.message(), "declared 16");
  }
  {
    SafetensorsWriter w;
    ASSERT_TRUE(w.Open(path, {{"t", DType::kU8, {4}}}).ok());
    const uint8_t bytes[5] = {};
    Status st = w.Append(bytes, sizeof(bytes));
    ASSERT_FALSE(st.ok());
    EXPECT_HAS_SUBSTR(st.message(), path);
    EXPECT_HAS_SUBSTR(st.message(), "more tensor bytes than declared");
  }
}

TEST(SafetensorsWriterTest, TensorBytes) {
  EXPECT_EQ(SafetensorsWriter::TensorBytes({"x", DType::kBF16, {896, 160}}), 896u * 160u * 2u);
  EXPECT_EQ(SafetensorsWriter::TensorBytes({"x", DType::kF32, {}}), 4u);
  EXPECT_EQ(SafetensorsWriter::TensorBytes({"x", DType::kU8, {3072, 0}}), 0u);
}

// ---------------------------------------------------------------------------------------------
// ParseSafetensorsHeader: errors

TEST(SafetensorsParseTest, AcceptsHandWrittenHeader) {
  const std::string header = "{\"__metadata__\":{\"format\":\"pt\"}," +
                             Entry("w", "BF16", "[2,3]", 0, 12) + "," +
                             Entry("s", "U8", "[4]", 12, 16) + "}";
  auto r = Parse(RawFile(header, 16), "ok.safetensors");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->data_offset, 8 + header.size());
  ASSERT_EQ(r->tensors.size(), 2u);
}

TEST(SafetensorsParseTest, FileShorterThan8Bytes) {
  const std::vector<uint8_t> file = {1, 2, 3, 4, 5};
  const std::string msg = ParseError(file, "tiny.safetensors");
  EXPECT_HAS_SUBSTR(msg, "tiny.safetensors");
  EXPECT_HAS_SUBSTR(msg, "too short");
  EXPECT_HAS_SUBSTR(msg, "5 bytes");
  const std::string empty_msg = ParseError({}, "empty.safetensors");
  EXPECT_HAS_SUBSTR(empty_msg, "empty.safetensors");
  EXPECT_HAS_SUBSTR(empty_msg, "too short");
}

TEST(SafetensorsParseTest, HeaderLengthBeyondFile) {
  std::vector<uint8_t> file = RawFile("{}", 8);
  WriteLe64(1000, file.data());
  const std::string msg = ParseError(file, "long.safetensors");
  EXPECT_HAS_SUBSTR(msg, "long.safetensors");
  EXPECT_HAS_SUBSTR(msg, "header length 1000");
  EXPECT_HAS_SUBSTR(msg, std::to_string(file.size()));

  // A length whose 8 + N overflows 64 bits must not wrap around.
  WriteLe64(~0ull, file.data());
  EXPECT_HAS_SUBSTR(ParseError(file, "huge.safetensors"), "huge.safetensors: header length");
}

TEST(SafetensorsParseTest, MalformedJson) {
  const std::string msg = ParseError(RawFile("{\"w\": {\"dtype\": ", 0), "broken.safetensors");
  EXPECT_HAS_SUBSTR(msg, "broken.safetensors");
  EXPECT_HAS_SUBSTR(msg, "not well-formed JSON");

  const std::string array_msg = ParseError(RawFile("[1,2,3]", 0), "array.safetensors");
  EXPECT_HAS_SUBSTR(array_msg, "array.safetensors");
  EXPECT_HAS_SUBSTR(array_msg, "not a JSON object");
}

TEST(SafetensorsParseTest, UnknownDtype) {
  const std::string msg =
      ParseError(RawFile("{" + Entry("layer.w", "F16", "[4]", 0, 8) + "}", 8), "f16.safetensors");
  EXPECT_HAS_SUBSTR(msg, "f16.safetensors");
  EXPECT_HAS_SUBSTR(msg, "'layer.w'");
  EXPECT_HAS_SUBSTR(msg, "unsupported dtype 'F16'");
}

TEST(SafetensorsParseTest, MalformedEntries) {
  struct Case {
    std::string entry;
    std::string want;
  };
  const Case cases[] = {
      {"\"t\":[1,2]", "not an object"},
      {"\"t\":{\"shape\":[1],\"data_offsets\":[0,4]}", "dtype"},
      {"\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}", "shape"},
      {"\"t\":{\"dtype\":\"F32\",\"shape\":[1]}", "data_offsets"},
      {"\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}", "data_offsets"},
      {"\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}", "data_offsets"},
      {"\"t\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}", "dimension"},
      {"\"t\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}", "dimension"},
      {"\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}", "end precedes begin"},
      {"\"t\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,4294967296],"
       "\"data_offsets\":[0,4]}",
       "absurdly large"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.entry);
    const std::string msg = ParseError(RawFile("{" + c.entry + "}", 16), "bad.safetensors");
    EXPECT_HAS_SUBSTR(msg, "bad.safetensors: tensor 't'");
    EXPECT_HAS_SUBSTR(msg, c.want);
  }
}

TEST(SafetensorsParseTest, OffsetSpanDisagreesWithShapeAndDtype) {
  // [3, 2] BF16 needs 12 bytes; the offsets give 16.
  const std::string msg = ParseError(
      RawFile("{" + Entry("model.norm", "BF16", "[3,2]", 0, 16) + "}", 16), "span.safetensors");
  EXPECT_HAS_SUBSTR(msg, "span.safetensors");
  EXPECT_HAS_SUBSTR(msg, "'model.norm'");
  EXPECT_HAS_SUBSTR(msg, "span 16 bytes");
  EXPECT_HAS_SUBSTR(msg, "need 12");
}

TEST(SafetensorsParseTest, TensorOutsideDataSection) {
  // Two tensors of 16 bytes each, but the file was cut after 24 data bytes.
  const std::string header =
      "{" + Entry("first", "F32", "[4]", 0, 16) + "," + Entry("second", "F32", "[4]", 16, 32) + "}";
  const std::string msg = ParseError(RawFile(header, 24), "cut.safetensors");
  EXPECT_HAS_SUBSTR(msg, "cut.safetensors");
  EXPECT_HAS_SUBSTR(msg, "'second'");
  EXPECT_HAS_SUBSTR(msg, "outside the data section");
  EXPECT_HAS_SUBSTR(msg, "ends at 32");
  EXPECT_HAS_SUBSTR(msg, "24 bytes");
  // The same header with the full data section parses.
  EXPECT_TRUE(Parse(RawFile(header, 32), "full.safetensors").ok());
}

TEST(SafetensorsParseTest, OverlappingTensors) {
  const std::string header = "{" + Entry("a", "F32", "[4]", 0, 16) + "," +
                             Entry("b", "U8", "[4]", 20, 24) + "," +
                             Entry("c", "F32", "[4]", 8, 24) + "}";
  const std::string msg = ParseError(RawFile(header, 24), "overlap.safetensors");
  EXPECT_HAS_SUBSTR(msg, "overlap.safetensors");
  EXPECT_HAS_SUBSTR(msg, "overlap");
  EXPECT_HAS_SUBSTR(msg, "'a'");
  EXPECT_HAS_SUBSTR(msg, "'c'");

  // Identical ranges overlap too.
  const std::string same =
      "{" + Entry("x", "F32", "[2]", 0, 8) + "," + Entry("y", "U8", "[8]", 0, 8) + "}";
  const std::string same_msg = ParseError(RawFile(same, 8), "same.safetensors");
  EXPECT_HAS_SUBSTR(same_msg, "'x'");
  EXPECT_HAS_SUBSTR(same_msg, "'y'");

  // Zero-sized tensors occupy no bytes and overlap nothing; adjacent tensors do not overlap.
  const std::string ok = "{" + Entry("p", "F32", "[2]", 0, 8) + "," +
                         Entry("z", "F32", "[0]", 4, 4) + "," + Entry("q", "U8", "[8]", 8, 16) +
                         "}";
  auto r = Parse(RawFile(ok, 16), "ok.safetensors");
  EXPECT_TRUE(r.ok()) << r.status().message();
}

// ---------------------------------------------------------------------------------------------
// ParseShardName

TEST(ShardNameTest, FiveAndSixDigitTotals) {
  int index = 0, total = 0;
  EXPECT_TRUE(ParseShardName("model-00001-of-00003.safetensors", &index, &total));
  EXPECT_EQ(index, 1);
  EXPECT_EQ(total, 3);
  EXPECT_TRUE(ParseShardName("model-00096-of-000096.safetensors", &index, &total));
  EXPECT_EQ(index, 96);
  EXPECT_EQ(total, 96);
  EXPECT_TRUE(ParseShardName("model-00002-of-000003.safetensors", &index, &total));
  EXPECT_EQ(index, 2);
  EXPECT_EQ(total, 3);
}

TEST(ShardNameTest, RejectsOtherForms) {
  int index = 0, total = 0;
  for (const char* name : {
           "model.safetensors",
           "model-00000-of-00003.safetensors",      // index 0
           "model-00004-of-00003.safetensors",      // index beyond total
           "model-1-of-3.safetensors",              // too few digits
           "model-0001-of-00003.safetensors",       // 4-digit index
           "model-000001-of-000003.safetensors",    // 6-digit index
           "model-00001-of-0003.safetensors",       // 4-digit total
           "model-00001-of-0000003.safetensors",    // 7-digit total
           "model-00001-of-00003.safetensors.bak",  // suffix
           "xmodel-00001-of-00003.safetensors",     // prefix
           "model-00001-of-00003.bin",
       }) {
    EXPECT_FALSE(ParseShardName(name, &index, &total)) << name;
  }
}

// ---------------------------------------------------------------------------------------------
// Checkpoint::Open on hand-built folders

// A three-shard checkpoint: shard i holds "s<i>.a" (F32 [2,3]) and "s<i>.b" (U8 [5]).
class ShardedCheckpointTest : public ::testing::Test {
 protected:
  static std::string ShardName(int i, const std::string& total) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "%05d", i);
    return std::string("model-") + buf + "-of-" + total + ".safetensors";
  }
  static std::vector<TestTensor> ShardTensors(int i) {
    return {MakeTensor("s" + std::to_string(i) + ".a", DType::kF32, {2, 3},
                       static_cast<uint8_t>(10 * i)),
            MakeTensor("s" + std::to_string(i) + ".b", DType::kU8, {5},
                       static_cast<uint8_t>(10 * i + 1))};
  }
  // Writes the three shards and an index mapping every tensor to its shard.
  void Build(const std::string& total) {
    nlohmann::json map = nlohmann::json::object();
    for (int i = 1; i <= 3; ++i) {
      ASSERT_NO_FATAL_FAILURE(WriteSafetensors(dir_.Join(ShardName(i, total)), ShardTensors(i)));
      for (const auto& t : ShardTensors(i)) map[t.name] = ShardName(i, total);
    }
    WriteIndex(map);
  }
  void WriteIndex(const nlohmann::json& weight_map) {
    nlohmann::json index = {{"metadata", {{"total_size", 123}}}, {"weight_map", weight_map}};
    WriteTextFile(IndexPath(), index.dump(2));
  }
  nlohmann::json ReadWeightMap() {
    return nlohmann::json::parse(testing::ReadTextFile(IndexPath()))["weight_map"];
  }
  std::string IndexPath() const { return dir_.Join("model.safetensors.index.json"); }
  std::string OpenError() {
    auto r = Checkpoint::Open(dir_.path());
    EXPECT_FALSE(r.ok()) << "Checkpoint::Open unexpectedly succeeded";
    return r.ok() ? std::string() : r.status().message();
  }
  void ExpectOpensWithAllTensors(const std::string& total) {
    auto ckpt = Checkpoint::Open(dir_.path());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
    EXPECT_EQ(ckpt->dir(), dir_.path());
    ASSERT_EQ(ckpt->shard_paths().size(), 3u);
    EXPECT_EQ(ckpt->num_tensors(), 6u);
    std::vector<std::string> names = ckpt->Names();
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"s1.a", "s1.b", "s2.a", "s2.b", "s3.a", "s3.b"}));
    for (int i = 1; i <= 3; ++i) {
      for (const auto& t : ShardTensors(i)) {
        SCOPED_TRACE(t.name);
        const TensorRecord* rec = ckpt->Find(t.name);
        ASSERT_NE(rec, nullptr);
        EXPECT_EQ(fs::path(ckpt->shard_paths()[static_cast<size_t>(rec->shard)]).filename(),
                  ShardName(i, total));
        EXPECT_EQ(rec->entry.dtype, t.dtype);
        EXPECT_EQ(rec->entry.shape, t.shape);
        // file_offset is absolute: the shard's bytes at that offset are the tensor's bytes.
        const std::vector<uint8_t> shard =
            ReadBinaryFile(ckpt->shard_paths()[static_cast<size_t>(rec->shard)]);
        ASSERT_LE(rec->file_offset + t.bytes.size(), shard.size());
        EXPECT_EQ(0, std::memcmp(shard.data() + rec->file_offset, t.bytes.data(), t.bytes.size()));
        const TensorView v = ckpt->View(*rec);
        EXPECT_EQ(v.dtype, t.dtype);
        EXPECT_EQ(v.shape, t.shape);
        ASSERT_EQ(v.bytes, t.bytes.size());
        EXPECT_EQ(0, std::memcmp(v.data, t.bytes.data(), t.bytes.size()));
      }
    }
    EXPECT_EQ(ckpt->Find("s4.a"), nullptr);
  }

  ScopedTempDir dir_;
};

TEST_F(ShardedCheckpointTest, OpensFiveDigitTotal) {
  ASSERT_NO_FATAL_FAILURE(Build("00003"));
  ExpectOpensWithAllTensors("00003");
}

TEST_F(ShardedCheckpointTest, OpensSixDigitTotal) {
  ASSERT_NO_FATAL_FAILURE(Build("000003"));
  ExpectOpensWithAllTensors("000003");
}

TEST_F(ShardedCheckpointTest, IndexListsTensorMissingFromItsShard) {
  ASSERT_NO_FATAL_FAILURE(Build("000003"));
  nlohmann::json map = ReadWeightMap();
  map["s2.ghost"] = ShardName(2, "000003");
  WriteIndex(map);
  const std::string msg = OpenError();
  EXPECT_HAS_SUBSTR(msg, ShardName(2, "000003"));
  EXPECT_HAS_SUBSTR(msg, "'s2.ghost'");
  EXPECT_HAS_SUBSTR(msg, "missing");
}

TEST_F(ShardedCheckpointTest, IndexPutsTensorInTheWrongShard) {
  ASSERT_NO_FATAL_FAILURE(Build("00003"));
  nlohmann::json map = ReadWeightMap();
  map["s3.a"] = ShardName(1, "00003");  // really in shard 3
  WriteIndex(map);
  const std::string msg = OpenError();
  EXPECT_HAS_SUBSTR(msg, "'s3.a'");
  EXPECT_HAS_SUBSTR(msg, "model-0000");
}

TEST_F(ShardedCheckpointTest, ShardHoldsTensorTheIndexDoesNotList) {
  ASSERT_NO_FATAL_FAILURE(Build("00003"));
  nlohmann::json map = ReadWeightMap();
  map.erase("s2.b");
  WriteIndex(map);
  const std::string msg = OpenError();
  EXPECT_HAS_SUBSTR(msg, ShardName(2, "00003"));
  EXPECT_HAS_SUBSTR(msg, "tensor 's2.b' is in this shard but not in the index");
}

TEST_F(ShardedCheckpointTest, TensorInTwoShards) {
  ASSERT_NO_FATAL_FAILURE(Build("00003"));
  // Shard 2 gets a second copy of s1.a; the index still lists s1.a once (in shard 1).
  std::vector<TestTensor> shard2 = ShardTensors(2);
  shard2.push_back(MakeTensor("s1.a", DType::kF32, {2, 3}, 77));
  ASSERT_NO_FATAL_FAILURE(WriteSafetensors(dir_.Join(ShardName(2, "00003")), shard2));
  const std::string msg = OpenError();
  EXPECT_HAS_SUBSTR(msg, ShardName(2, "00003"));
  EXPECT_HAS_SUBSTR(msg, "'s1.a'");
  EXPECT_HAS_SUBSTR(msg, "another shard");
}

TEST_F(ShardedCheckpointTest, ShardMissingOnDisk) {
  ASSERT_NO_FATAL_FAILURE(Build("000003"));
  fs::remove(dir_.Join(ShardName(3, "000003")));
  const std::string msg = OpenError();
  EXPECT_HAS_SUBSTR(msg, ShardName(3, "000003"));
  EXPECT_HAS_SUBSTR(msg, "cannot open");
}

TEST_F(ShardedCheckpointTest, IndexIsNotJson) {
  ASSERT_NO_FATAL_FAILURE(Build("00003"));
  WriteTextFile(IndexPath(), "{\"weight_map\": {\"s1.a\": ");
  const std::string msg = OpenError();
  EXPECT_HAS_SUBSTR(msg, "model.safetensors.index.json");
  EXPECT_HAS_SUBSTR(msg, "not well-formed JSON");
}

TEST_F(ShardedCheckpointTest, IndexWithoutWeightMap) {
  ASSERT_NO_FATAL_FAILURE(Build("00003"));
  WriteTextFile(IndexPath(), "{\"metadata\": {}}");
  const std::string msg = OpenError();
  EXPECT_HAS_SUBSTR(msg, "model.safetensors.index.json");
  EXPECT_HAS_SUBSTR(msg, "weight_map");
}

TEST_F(ShardedCheckpointTest, IndexEntryIsNotAFileName) {
  ASSERT_NO_FATAL_FAILURE(Build("00003"));
  nlohmann::json map = ReadWeightMap();
  map["s1.a"] = 1;
  WriteIndex(map);
  const std::string msg = OpenError();
  EXPECT_HAS_SUBSTR(msg, "model.safetensors.index.json");
  EXPECT_HAS_SUBSTR(msg, "'s1.a'");
}

TEST_F(ShardedCheckpointTest, ShardNamesDisagreeOnTotal) {
  ASSERT_NO_FATAL_FAILURE(Build("00003"));
  // Shard 3 renamed to claim a total of 4 (and the index follows it).
  fs::rename(dir_.Join(ShardName(3, "00003")), dir_.Join(ShardName(3, "00004")));
  nlohmann::json map = ReadWeightMap();
  for (auto& [name, file] : map.items()) {
    if (file == ShardName(3, "00003")) file = ShardName(3, "00004");
  }
  WriteIndex(map);
  const std::string msg = OpenError();
  EXPECT_HAS_SUBSTR(msg, "model.safetensors.index.json");
  EXPECT_HAS_SUBSTR(msg, "disagrees on the shard count");
  EXPECT_HAS_SUBSTR(msg, "model-0000");
}

TEST_F(ShardedCheckpointTest, ShardNumberAbsent) {
  ASSERT_NO_FATAL_FAILURE(Build("000003"));
  // The index no longer mentions shard 2 (its file and tensors are gone).
  fs::remove(dir_.Join(ShardName(2, "000003")));
  nlohmann::json map = ReadWeightMap();
  map.erase("s2.a");
  map.erase("s2.b");
  WriteIndex(map);
  const std::string msg = OpenError();
  EXPECT_HAS_SUBSTR(msg, "model.safetensors.index.json");
  EXPECT_HAS_SUBSTR(msg, "shard 2 of 3");
}

TEST_F(ShardedCheckpointTest, ShardNameOfAnotherForm) {
  ASSERT_NO_FATAL_FAILURE(Build("00003"));
  nlohmann::json map = ReadWeightMap();
  map["s1.a"] = "weights-1.safetensors";
  WriteIndex(map);
  const std::string msg = OpenError();
  EXPECT_HAS_SUBSTR(msg, "model.safetensors.index.json");
  EXPECT_HAS_SUBSTR(msg, "'weights-1.safetensors'");
}

TEST_F(ShardedCheckpointTest, CorruptShardHeaderNamesTheShard) {
  ASSERT_NO_FATAL_FAILURE(Build("000003"));
  const std::string path = dir_.Join(ShardName(2, "000003"));
  std::vector<uint8_t> bytes = ReadBinaryFile(path);
  bytes.resize(bytes.size() - 3);  // the last tensor loses its tail
  WriteBinaryFile(path, bytes);
  const std::string msg = OpenError();
  EXPECT_HAS_SUBSTR(msg, ShardName(2, "000003"));
  EXPECT_HAS_SUBSTR(msg, "'s2.b'");
  EXPECT_HAS_SUBSTR(msg, "outside the data section");
}

TEST(CheckpointTest, SingleFile) {
  ScopedTempDir dir;
  const std::vector<TestTensor> tensors = {MakeTensor("x.weight", DType::kBF16, {4, 6}, 40),
                                           MakeTensor("x.bias", DType::kF32, {6}, 41)};
  ASSERT_NO_FATAL_FAILURE(WriteSafetensors(dir.Join("model.safetensors"), tensors));
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  ASSERT_EQ(ckpt->shard_paths().size(), 1u);
  EXPECT_EQ(fs::path(ckpt->shard_paths()[0]).filename(), "model.safetensors");
  EXPECT_EQ(ckpt->num_tensors(), 2u);
  for (const auto& t : tensors) {
    SCOPED_TRACE(t.name);
    const TensorRecord* rec = ckpt->Find(t.name);
    ASSERT_NE(rec, nullptr);
    EXPECT_EQ(rec->shard, 0);
    const TensorView v = ckpt->View(*rec);
    EXPECT_EQ(v.dtype, t.dtype);
    EXPECT_EQ(v.shape, t.shape);
    ASSERT_EQ(v.bytes, t.bytes.size());
    EXPECT_EQ(0, std::memcmp(v.data, t.bytes.data(), t.bytes.size()));
  }
  EXPECT_EQ(ckpt->Find("x.missing"), nullptr);
}

TEST(CheckpointTest, FolderWithoutWeights) {
  ScopedTempDir dir;
  auto empty = Checkpoint::Open(dir.path());
  ASSERT_FALSE(empty.ok());
  EXPECT_HAS_SUBSTR(empty.status().message(), dir.path());
  EXPECT_HAS_SUBSTR(empty.status().message(), "model.safetensors");

  auto missing = Checkpoint::Open(dir.Join("nope"));
  ASSERT_FALSE(missing.ok());
  EXPECT_HAS_SUBSTR(missing.status().message(), dir.Join("nope"));
  EXPECT_HAS_SUBSTR(missing.status().message(), "not a directory");
}

TEST(CheckpointTest, EmptySingleFileIsRejected) {
  ScopedTempDir dir;
  WriteBinaryFile(dir.Join("model.safetensors"), {});
  auto r = Checkpoint::Open(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_HAS_SUBSTR(r.status().message(), "model.safetensors");
  EXPECT_HAS_SUBSTR(r.status().message(), "too short");
}

// ---------------------------------------------------------------------------------------------
// The golden tiny-k3 checkpoint (tests/data/golden; README there describes its layout)

class GoldenCheckpointTest : public ::testing::Test {
 protected:
  static std::string Dir() { return std::string(DF_TEST_DATA_DIR) + "/golden/tiny-k3"; }
  void SetUp() override {
    auto r = Checkpoint::Open(Dir());
    ASSERT_TRUE(r.ok()) << r.status().message();
    ckpt_ = std::make_unique<Checkpoint>(std::move(r).value());
  }
  const TensorRecord& Get(const std::string& name) {
    const TensorRecord* rec = ckpt_->Find(name);
    EXPECT_NE(rec, nullptr) << name;
    static const TensorRecord kNone;
    return rec ? *rec : kNone;
  }
  std::string ShardFile(const TensorRecord& rec) {
    return fs::path(ckpt_->shard_paths()[static_cast<size_t>(rec.shard)]).filename().string();
  }
  std::unique_ptr<Checkpoint> ckpt_;
};

TEST_F(GoldenCheckpointTest, ShardsAndKnownTensors) {
  ASSERT_EQ(ckpt_->shard_paths().size(), 3u);
  EXPECT_EQ(ckpt_->num_tensors(), 1002u);

  const TensorRecord& lm_head = Get("language_model.lm_head.weight");
  EXPECT_EQ(lm_head.entry.dtype, DType::kBF16);
  EXPECT_EQ(lm_head.entry.shape, (std::vector<int64_t>{896, 160}));
  EXPECT_EQ(ShardFile(lm_head), "model-00003-of-000003.safetensors");
  EXPECT_EQ(ckpt_->View(lm_head).bytes, 896u * 160u * 2u);

  const TensorRecord& embed = Get("language_model.model.embed_tokens.weight");
  EXPECT_EQ(embed.entry.dtype, DType::kBF16);
  EXPECT_EQ(embed.entry.shape, (std::vector<int64_t>{896, 160}));
  EXPECT_EQ(ShardFile(embed), "model-00001-of-000003.safetensors");

  const TensorRecord& norm = Get("language_model.model.norm.weight");
  EXPECT_EQ(norm.entry.dtype, DType::kBF16);
  EXPECT_EQ(norm.entry.shape, (std::vector<int64_t>{160}));

  const TensorRecord& res_proj = Get("language_model.model.output_attn_res_proj.weight");
  EXPECT_EQ(res_proj.entry.shape, (std::vector<int64_t>{1, 160}));

  const TensorRecord& conv = Get("language_model.model.layers.1.self_attn.q_conv1d.weight");
  EXPECT_EQ(conv.entry.dtype, DType::kF32);
  EXPECT_EQ(conv.entry.shape, (std::vector<int64_t>{256, 1, 4}));

  const TensorRecord& bias =
      Get("language_model.model.layers.5.block_sparse_moe.gate.e_score_correction_bias");
  EXPECT_EQ(bias.entry.dtype, DType::kF32);
  EXPECT_EQ(bias.entry.shape, (std::vector<int64_t>{16}));

  const TensorRecord& kv_b = Get("language_model.model.layers.3.self_attn.kv_b_proj.weight");
  EXPECT_EQ(kv_b.entry.dtype, DType::kBF16);
  EXPECT_EQ(kv_b.entry.shape, (std::vector<int64_t>{4 * (32 + 32), 64}));
}

TEST_F(GoldenCheckpointTest, ALogIsPerHeadWithZeroPadding) {
  // Layer 0 A_log: F32 [128], 2 real per-head entries then zeros; exp(A_log) in [0.6, 2.7].
  const TensorRecord& rec = Get("language_model.model.layers.0.self_attn.A_log");
  ASSERT_EQ(rec.entry.dtype, DType::kF32);
  ASSERT_EQ(rec.entry.shape, (std::vector<int64_t>{128}));
  const TensorView v = ckpt_->View(rec);
  ASSERT_EQ(v.bytes, 512u);
  float a[128];
  std::memcpy(a, v.data, sizeof(a));
  for (int h = 0; h < 2; ++h) {
    EXPECT_GE(std::exp(a[h]), 0.6f) << h;
    EXPECT_LE(std::exp(a[h]), 2.7f) << h;
  }
  for (int h = 2; h < 128; ++h) EXPECT_EQ(a[h], 0.0f) << h;
}

TEST_F(GoldenCheckpointTest, ExpertTensorsAreContiguousWithSpecOffsets) {
  // docs/MODEL.md §7, tiny: w1p 0, w1s 6144, w2p 6528, w2s 12672, w3p 13056, w3s 19200, end 19584.
  const struct {
    const char* suffix;
    std::vector<int64_t> shape;
    uint64_t offset;
  } parts[] = {{"w1.weight_packed", {96, 64}, 0},     {"w1.weight_scale", {96, 4}, 6144},
               {"w2.weight_packed", {128, 48}, 6528}, {"w2.weight_scale", {128, 3}, 12672},
               {"w3.weight_packed", {96, 64}, 13056}, {"w3.weight_scale", {96, 4}, 19200}};
  for (int layer : {1, 7, 8}) {
    for (int expert : {0, 10, 15}) {
      SCOPED_TRACE("layer " + std::to_string(layer) + " expert " + std::to_string(expert));
      const std::string prefix = "language_model.model.layers." + std::to_string(layer) +
                                 ".block_sparse_moe.experts." + std::to_string(expert) + ".";
      const TensorRecord& first = Get(prefix + parts[0].suffix);
      for (const auto& p : parts) {
        const TensorRecord& rec = Get(prefix + p.suffix);
        EXPECT_EQ(rec.entry.dtype, DType::kU8) << p.suffix;
        EXPECT_EQ(rec.entry.shape, p.shape) << p.suffix;
        EXPECT_EQ(rec.shard, first.shard) << p.suffix;
        EXPECT_EQ(rec.file_offset - first.file_offset, p.offset) << p.suffix;
      }
      EXPECT_EQ(Get(prefix + "w3.weight_scale").entry.end - first.entry.begin, 19584u);
      // Scale bytes of the golden checkpoint lie in 121..125 (golden README).
      const TensorView scale = ckpt_->View(Get(prefix + "w2.weight_scale"));
      for (size_t i = 0; i < scale.bytes; ++i) {
        ASSERT_GE(scale.data[i], 121) << i;
        ASSERT_LE(scale.data[i], 125) << i;
      }
    }
  }
  // Experts of odd layers live in a different shard from the rest of their layer.
  EXPECT_EQ(
      ShardFile(Get("language_model.model.layers.7.block_sparse_moe.experts.0.w1.weight_packed")),
      "model-00001-of-000003.safetensors");
  EXPECT_EQ(ShardFile(Get("language_model.model.layers.7.block_sparse_moe.gate.weight")),
            "model-00003-of-000003.safetensors");
}

TEST_F(GoldenCheckpointTest, TensorSetEqualsTheRoster) {
  // The checkpoint holds exactly the tensors the roster derives from its config: no more, no less.
  auto config = LoadModelConfig(Dir());
  ASSERT_TRUE(config.ok()) << config.status().message();
  std::map<std::string, TensorSpec> roster;
  auto add = [&](const std::vector<TensorSpec>& specs) {
    for (const auto& s : specs) EXPECT_TRUE(roster.emplace(s.name, s).second) << s.name;
  };
  add(GlobalTensorSpecs(*config));
  for (int64_t layer = 0; layer < config->num_hidden_layers; ++layer) {
    add(LayerTensorSpecs(*config, layer));
    if (!config->IsMoeLayer(layer)) continue;
    for (int64_t e = 0; e < config->num_experts; ++e) add(ExpertTensorSpecs(*config, layer, e));
  }
  EXPECT_EQ(roster.size(), ckpt_->num_tensors());
  for (const auto& [name, spec] : roster) {
    const TensorRecord* rec = ckpt_->Find(name);
    ASSERT_NE(rec, nullptr) << "roster tensor absent from the checkpoint: " << name;
    EXPECT_EQ(rec->entry.dtype, spec.dtype) << name;
    EXPECT_EQ(rec->entry.shape, spec.shape) << name;
  }
  for (const auto& name : ckpt_->Names()) {
    EXPECT_TRUE(roster.count(name)) << "checkpoint tensor not in the roster: " << name;
  }
}

}  // namespace
}  // namespace deltafin
