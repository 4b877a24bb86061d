// End-to-end refusal of bad inputs: each test copies the golden tiny-k3 checkpoint, corrupts one
// thing (a shard's bytes or header, the index, config.json) and runs the real CLI,
// `deltafin logits --model DIR --tokens 1,2 --out OUT`. The run must fail cleanly: a non-zero exit
// code that is not a crash or a timeout, exactly one output line "error: ..." naming the file,
// tensor or field and what is wrong, and no --out file. Bad command-line values are covered too.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cli_runner.h"
#include "unit/test_files.h"

namespace deltafin {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using testing::ReadBinaryFile;
using testing::ReadLe64;
using testing::ReadTextFile;
using testing::WriteBinaryFile;
using testing::WriteLe64;
using testing::WriteTextFile;

std::string GoldenModelDir() { return std::string(DF_TEST_DATA_DIR) + "/golden/tiny-k3"; }

using testing::CliRun;
using testing::RunCli;
using testing::ShellQuote;

// The parsed header of one shard: JSON in file order, its length and the data section's size.
struct ShardHeader {
  ordered_json json;
  uint64_t header_bytes = 0;
  uint64_t data_offset = 0;
  uint64_t data_bytes = 0;
};

ShardHeader ReadShardHeader(const std::string& path) {
  const std::vector<uint8_t> file = ReadBinaryFile(path);
  ShardHeader h;
  if (file.size() < 8) {
    ADD_FAILURE() << path << " is too short";
    return h;
  }
  h.header_bytes = ReadLe64(file.data());
  h.data_offset = 8 + h.header_bytes;
  h.data_bytes = file.size() - h.data_offset;
  h.json =
      ordered_json::parse(file.begin() + 8, file.begin() + static_cast<ptrdiff_t>(h.data_offset));
  return h;
}

// Rewrites a shard's JSON header in place. The edited JSON is padded with spaces to the original
// header length so every data offset stays valid; an edit that makes it longer is a test bug (drop
// "__metadata__" to make room).
void EditHeader(const std::string& path, const std::function<void(ordered_json&)>& edit) {
  std::vector<uint8_t> file = ReadBinaryFile(path);
  ASSERT_GE(file.size(), 8u);
  const uint64_t n = ReadLe64(file.data());
  ASSERT_LE(8 + n, file.size());
  ordered_json header =
      ordered_json::parse(file.begin() + 8, file.begin() + 8 + static_cast<ptrdiff_t>(n));
  edit(header);
  std::string text = header.dump();
  ASSERT_LE(text.size(), n) << "test bug: the edited header of " << path << " grew by "
                            << text.size() - n << " bytes";
  text.append(n - text.size(), ' ');
  std::memcpy(file.data() + 8, text.data(), n);
  WriteBinaryFile(path, file);
}

// One tensor's location: absolute file offset and byte size.
struct Location {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

Location Locate(const std::string& shard, const std::string& tensor) {
  const ShardHeader h = ReadShardHeader(shard);
  if (!h.json.contains(tensor)) {
    ADD_FAILURE() << "test bug: " << tensor << " is not in " << shard;
    return {};
  }
  const auto& offsets = h.json[tensor]["data_offsets"];
  const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
  return {h.data_offset + begin, end - begin};
}

std::string LayerTensor(int layer, const std::string& suffix) {
  return "language_model.model.layers." + std::to_string(layer) + "." + suffix;
}

std::string ExpertTensor(int layer, int expert, const std::string& suffix) {
  return LayerTensor(layer, "block_sparse_moe.experts." + std::to_string(expert) + "." + suffix);
}

class BadModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = tmp_.Join("model");
    fs::copy(GoldenModelDir(), model_, fs::copy_options::recursive);
    out_ = tmp_.Join("logits.f32");
  }

  // Shard i (1-based) of the copy.
  std::string Shard(int i) const {
    return model_ + "/model-0000" + std::to_string(i) + "-of-000003.safetensors";
  }
  std::string ConfigPath() const { return model_ + "/config.json"; }
  std::string IndexPath() const { return model_ + "/model.safetensors.index.json"; }

  CliRun RunLogits(const std::string& model_dir, const std::string& tokens = "1,2") {
    return RunCli("logits --model " + ShellQuote(model_dir) + " --tokens " + ShellQuote(tokens) +
                  " --out " + ShellQuote(out_));
  }
  CliRun RunLogits() { return RunLogits(model_); }

  // A clean refusal: exit code 1..123, one line "error: ..." holding every `needles`, no output.
  void ExpectCleanError(const CliRun& run, const std::vector<std::string>& needles) {
    EXPECT_NE(run.exit_code, 0) << "the run succeeded; output:\n" << run.output;
    EXPECT_TRUE(run.exit_code > 0 && run.exit_code < 124)
        << "exit code " << run.exit_code << " (124: timeout, 128+N: signal N); output:\n"
        << run.output;
    EXPECT_EQ(run.output.rfind("error: ", 0), 0u) << "output:\n" << run.output;
    const size_t newline = run.output.find('\n');
    EXPECT_EQ(newline, run.output.size() - 1) << "expected exactly one line; output:\n"
                                              << run.output;
    for (const auto& needle : needles) EXPECT_HAS_SUBSTR(run.output, needle);
    EXPECT_FALSE(fs::exists(out_)) << "--out file was created";
    EXPECT_FALSE(fs::exists(out_ + ".partial")) << "a partial --out file was left behind";
  }

  void ExpectSuccess(const CliRun& run) {
    EXPECT_EQ(run.exit_code, 0) << run.output;
    ASSERT_TRUE(fs::exists(out_)) << run.output;
    EXPECT_EQ(fs::file_size(out_), 2u * 896u * sizeof(float));
  }

  // Sets byte `index` of a tensor's data.
  void PokeByte(int shard, const std::string& tensor, uint64_t index, uint8_t value) {
    const Location loc = Locate(Shard(shard), tensor);
    ASSERT_LT(index, loc.bytes);
    std::vector<uint8_t> file = ReadBinaryFile(Shard(shard));
    file[loc.offset + index] = value;
    WriteBinaryFile(Shard(shard), file);
  }

  void PokeF32(int shard, const std::string& tensor, uint64_t index, float value) {
    uint8_t bytes[4];
    std::memcpy(bytes, &value, 4);
    for (int i = 0; i < 4; ++i) {
      ASSERT_NO_FATAL_FAILURE(PokeByte(shard, tensor, index * 4 + i, bytes[i]));
    }
  }

  void EditConfig(const std::function<void(ordered_json&)>& edit) {
    ordered_json config = ordered_json::parse(ReadTextFile(ConfigPath()));
    edit(config);
    WriteTextFile(ConfigPath(), config.dump(2));
  }

  // Renames a tensor in the index (keeps the index consistent with a renamed header entry).
  void RenameInIndex(const std::string& from, const std::string& to) {
    ordered_json index = ordered_json::parse(ReadTextFile(IndexPath()));
    auto& map = index["weight_map"];
    ASSERT_TRUE(map.contains(from)) << from;
    map[to] = map[from];
    map.erase(from);
    WriteTextFile(IndexPath(), index.dump(2));
  }

  testing::ScopedTempDir tmp_;
  std::string model_;
  std::string out_;
};

// ---------------------------------------------------------------------------------------------
// Control: the untouched copy runs, so every failure below comes from its corruption.

TEST_F(BadModelTest, UntouchedCopyRuns) {
  const CliRun run = RunLogits();
  ExpectSuccess(run);
  EXPECT_HAS_SUBSTR(run.output, "wrote 2 x 896 fp32 logits");
  // The logits of a valid run are finite.
  const std::vector<uint8_t> bytes = ReadBinaryFile(out_);
  std::vector<float> logits(bytes.size() / sizeof(float));
  std::memcpy(logits.data(), bytes.data(), bytes.size());
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

// ---------------------------------------------------------------------------------------------
// Container damage (safetensors / index)

TEST_F(BadModelTest, TruncatedShard) {
  const std::string shard = Shard(3);
  const ShardHeader h = ReadShardHeader(shard);
  std::vector<uint8_t> file = ReadBinaryFile(shard);
  file.resize(file.size() / 2);
  WriteBinaryFile(shard, file);
  // The parser reports the first tensor (by name) that now ends past the data section.
  const uint64_t data_bytes = file.size() - h.data_offset;
  std::string first_cut;
  for (const auto& [name, entry] : h.json.items()) {
    if (name == "__metadata__") continue;
    if (entry["data_offsets"][1].get<uint64_t>() > data_bytes &&
        (first_cut.empty() || name < first_cut)) {
      first_cut = name;
    }
  }
  ASSERT_FALSE(first_cut.empty());
  ExpectCleanError(RunLogits(),
                   {shard, "tensor '" + first_cut + "'", "outside the data section", "truncated"});
}

TEST_F(BadModelTest, HeaderLengthBeyondFile) {
  const std::string shard = Shard(2);
  std::vector<uint8_t> file = ReadBinaryFile(shard);
  WriteLe64(file.size(), file.data());
  WriteBinaryFile(shard, file);
  ExpectCleanError(RunLogits(), {shard, "header length " + std::to_string(file.size()),
                                 "exceeds the file size " + std::to_string(file.size())});
}

TEST_F(BadModelTest, ShardHeaderNotJson) {
  const std::string shard = Shard(1);
  std::vector<uint8_t> file = ReadBinaryFile(shard);
  file[8] = '[';  // the header's opening brace
  WriteBinaryFile(shard, file);
  ExpectCleanError(RunLogits(), {shard, "not well-formed JSON"});
}

TEST_F(BadModelTest, TensorOffsetsOutsideDataSection) {
  const std::string shard = Shard(1);
  const std::string tensor = LayerTensor(0, "input_layernorm.weight");
  const uint64_t data_bytes = ReadShardHeader(shard).data_bytes;
  ASSERT_NO_FATAL_FAILURE(EditHeader(shard, [&](ordered_json& h) {
    h.erase("__metadata__");
    const uint64_t size =
        h[tensor]["data_offsets"][1].get<uint64_t>() - h[tensor]["data_offsets"][0].get<uint64_t>();
    h[tensor]["data_offsets"] = {data_bytes, data_bytes + size};
  }));
  ExpectCleanError(RunLogits(), {shard, "tensor '" + tensor + "'", "outside the data section"});
}

TEST_F(BadModelTest, OffsetsDisagreeWithShape) {
  const std::string shard = Shard(2);
  const std::string tensor = LayerTensor(4, "input_layernorm.weight");  // BF16 [160]
  ASSERT_NO_FATAL_FAILURE(EditHeader(shard, [&](ordered_json& h) {
    h.erase("__metadata__");
    h[tensor]["shape"] = {161};
  }));
  ExpectCleanError(RunLogits(), {shard, "tensor '" + tensor + "'", "span 320 bytes", "need 322"});
}

TEST_F(BadModelTest, OverlappingTensors) {
  const std::string shard = Shard(1);
  const std::string a = LayerTensor(1, "input_layernorm.weight");  // both BF16 [160]
  const std::string b = LayerTensor(1, "mlp_res_norm.weight");
  ASSERT_NO_FATAL_FAILURE(
      EditHeader(shard, [&](ordered_json& h) { h[b]["data_offsets"] = h[a]["data_offsets"]; }));
  ExpectCleanError(RunLogits(), {shard, "'" + a + "'", "'" + b + "'", "overlap"});
}

TEST_F(BadModelTest, UnknownDtype) {
  const std::string shard = Shard(3);
  const std::string tensor = "language_model.lm_head.weight";
  ASSERT_NO_FATAL_FAILURE(EditHeader(shard, [&](ordered_json& h) { h[tensor]["dtype"] = "F16"; }));
  ExpectCleanError(RunLogits(), {shard, "tensor '" + tensor + "'", "unsupported dtype 'F16'"});
}

TEST_F(BadModelTest, TensorMissingFromShardButListedInIndex) {
  const std::string shard = Shard(1);
  const std::string tensor = LayerTensor(2, "mlp_res_norm.weight");
  ASSERT_NO_FATAL_FAILURE(EditHeader(shard, [&](ordered_json& h) {
    ordered_json entry = h[tensor];
    h.erase(tensor);
    h[tensor.substr(0, tensor.size() - 1) + "X"] = entry;  // same length, other name
  }));
  ExpectCleanError(RunLogits(), {shard, "'" + tensor + "'", "missing"});
}

TEST_F(BadModelTest, IndexListsAMissingShard) {
  fs::remove(Shard(2));
  ExpectCleanError(RunLogits(), {Shard(2), "cannot open"});
}

TEST_F(BadModelTest, IndexNotJson) {
  WriteTextFile(IndexPath(), "{\"weight_map\": ");
  ExpectCleanError(RunLogits(), {IndexPath(), "not well-formed JSON"});
}

// ---------------------------------------------------------------------------------------------
// Roster damage: the container is valid but a tensor the model needs is absent or mis-typed.

TEST_F(BadModelTest, TensorMissingEverywhere) {
  // Renamed in the shard header and in the index alike, so only the roster check can notice.
  const std::string tensor = LayerTensor(2, "mlp_res_norm.weight");
  const std::string renamed = tensor.substr(0, tensor.size() - 1) + "X";
  ASSERT_NO_FATAL_FAILURE(EditHeader(Shard(1), [&](ordered_json& h) {
    ordered_json entry = h[tensor];
    h.erase(tensor);
    h[renamed] = entry;
  }));
  ASSERT_NO_FATAL_FAILURE(RenameInIndex(tensor, renamed));
  ExpectCleanError(RunLogits(), {"tensor " + tensor + " is missing"});
}

TEST_F(BadModelTest, ExpertTensorMissingEverywhere) {
  const std::string tensor = ExpertTensor(6, 11, "w3.weight_scale");  // shard 3
  const std::string renamed = tensor.substr(0, tensor.size() - 1) + "X";
  ASSERT_NO_FATAL_FAILURE(EditHeader(Shard(3), [&](ordered_json& h) {
    ordered_json entry = h[tensor];
    h.erase(tensor);
    h[renamed] = entry;
  }));
  ASSERT_NO_FATAL_FAILURE(RenameInIndex(tensor, renamed));
  ExpectCleanError(RunLogits(), {"tensor " + tensor + " is missing"});
}

TEST_F(BadModelTest, WrongDtype) {
  // Final norm: BF16 [160] relabelled F32 [80], same 320 bytes, so only the roster check fails.
  const std::string tensor = "language_model.model.norm.weight";
  ASSERT_NO_FATAL_FAILURE(EditHeader(Shard(3), [&](ordered_json& h) {
    h[tensor]["dtype"] = "F32";
    h[tensor]["shape"] = {80};
  }));
  ExpectCleanError(RunLogits(), {Shard(3), "tensor " + tensor + " has dtype F32, expected BF16"});
}

TEST_F(BadModelTest, WrongExpertDtype) {
  // An expert's U8 w1.weight_scale [96, 4] relabelled BF16 [96, 2] (same 384 bytes).
  const std::string tensor = ExpertTensor(2, 7, "w1.weight_scale");  // shard 1
  ASSERT_NO_FATAL_FAILURE(EditHeader(Shard(1), [&](ordered_json& h) {
    h.erase("__metadata__");
    h[tensor]["dtype"] = "BF16";
    h[tensor]["shape"] = {96, 2};
  }));
  ExpectCleanError(RunLogits(), {Shard(1), "tensor " + tensor + " has dtype BF16, expected U8"});
}

TEST_F(BadModelTest, WrongShape) {
  const std::string tensor = LayerTensor(4, "post_attention_layernorm.weight");  // shard 2
  ASSERT_NO_FATAL_FAILURE(EditHeader(Shard(2), [&](ordered_json& h) {
    h.erase("__metadata__");
    h[tensor]["shape"] = {1, 160};
  }));
  ExpectCleanError(RunLogits(),
                   {Shard(2), "tensor " + tensor + " has shape [1, 160], expected [160]"});
}

TEST_F(BadModelTest, WrongALogShape) {
  const std::string tensor = LayerTensor(0, "self_attn.A_log");  // F32 [128], shard 1
  ASSERT_NO_FATAL_FAILURE(EditHeader(Shard(1), [&](ordered_json& h) {
    h.erase("__metadata__");
    h[tensor]["shape"] = {2, 64};
  }));
  ExpectCleanError(RunLogits(),
                   {Shard(1), "tensor " + tensor + " has shape [2, 64], expected [128]"});
}

TEST_F(BadModelTest, ExpertNotContiguous) {
  // Swap where w1 and w3 packed live (same size): each tensor is fine, the expert span is not.
  const std::string w1 = ExpertTensor(8, 5, "w1.weight_packed");  // shard 3
  const std::string w3 = ExpertTensor(8, 5, "w3.weight_packed");
  ASSERT_NO_FATAL_FAILURE(EditHeader(
      Shard(3), [&](ordered_json& h) { std::swap(h[w1]["data_offsets"], h[w3]["data_offsets"]); }));
  ExpectCleanError(RunLogits(), {Shard(3), "experts.5.", "not contiguous"});
}

// ---------------------------------------------------------------------------------------------
// Value damage

TEST_F(BadModelTest, ScaleByteOutOfRange) {
  // w2.weight_scale is [128, 3]: byte 233 is row 77, group 2.
  for (const uint8_t bad : {uint8_t{1}, uint8_t{253}, uint8_t{0}, uint8_t{255}}) {
    SCOPED_TRACE(static_cast<int>(bad));
    fs::remove_all(model_);
    fs::copy(GoldenModelDir(), model_, fs::copy_options::recursive);
    const std::string tensor = ExpertTensor(4, 9, "w2.weight_scale");  // shard 2
    ASSERT_NO_FATAL_FAILURE(PokeByte(2, tensor, 233, bad));
    ExpectCleanError(RunLogits(), {"tensor " + tensor, "scale byte " + std::to_string(bad),
                                   "row 77, group 2", "outside [2, 252]"});
  }
}

TEST_F(BadModelTest, ScaleBytesAtTheEdgesOfTheRangeAreAccepted) {
  // 2 and 252 are allowed. The group's nibbles are zeroed so the extreme scales do not change
  // the model's output (0 x 2^125 = 0) — the run must simply succeed.
  const std::string packed = ExpertTensor(4, 9, "w2.weight_packed");  // [128, 48]
  const std::string scale = ExpertTensor(4, 9, "w2.weight_scale");    // [128, 3]
  for (uint64_t j = 0; j < 16; ++j) {
    ASSERT_NO_FATAL_FAILURE(PokeByte(2, packed, 77 * 48 + 2 * 16 + j, 0));
    ASSERT_NO_FATAL_FAILURE(PokeByte(2, packed, 78 * 48 + 0 * 16 + j, 0));
  }
  ASSERT_NO_FATAL_FAILURE(PokeByte(2, scale, 77 * 3 + 2, 252));
  ASSERT_NO_FATAL_FAILURE(PokeByte(2, scale, 78 * 3 + 0, 2));
  ExpectSuccess(RunLogits());
}

TEST_F(BadModelTest, ALogPaddingNonzero) {
  const std::string tensor = LayerTensor(0, "self_attn.A_log");  // shard 1; 2 heads
  ASSERT_NO_FATAL_FAILURE(PokeF32(1, tensor, 100, 0.25f));
  ExpectCleanError(RunLogits(), {"tensor " + tensor, "padding entry 100", "expected 0"});
}

TEST_F(BadModelTest, ALogNotFinite) {
  const std::string tensor = LayerTensor(5, "self_attn.A_log");  // shard 2
  ASSERT_NO_FATAL_FAILURE(PokeF32(2, tensor, 1, std::numeric_limits<float>::quiet_NaN()));
  ExpectCleanError(RunLogits(), {"tensor " + tensor, "entry 1 is not finite"});
}

// ---------------------------------------------------------------------------------------------
// config.json damage

TEST_F(BadModelTest, ConfigMissingField) {
  EditConfig([](ordered_json& c) { c["text_config"].erase("num_experts"); });
  ExpectCleanError(RunLogits(), {ConfigPath(), "field text_config.num_experts is missing"});
}

TEST_F(BadModelTest, ConfigUnsupportedValue) {
  EditConfig([](ordered_json& c) { c["text_config"]["hidden_act"] = "silu"; });
  ExpectCleanError(RunLogits(), {ConfigPath(), "field text_config.hidden_act", "\"silu\""});
}

TEST_F(BadModelTest, ConfigDisagreesWithTensors) {
  // A valid config whose hidden size does not match the checkpoint: the roster check names the
  // first tensor whose shape differs.
  EditConfig([](ordered_json& c) { c["text_config"]["hidden_size"] = 192; });
  ExpectCleanError(RunLogits(), {"tensor language_model.model.embed_tokens.weight",
                                 "has shape [896, 160], expected [896, 192]"});
}

TEST_F(BadModelTest, ConfigNotJson) {
  WriteTextFile(ConfigPath(), "{\"model_type\": \"kimi_k3\",");
  ExpectCleanError(RunLogits(), {ConfigPath(), "not well-formed JSON"});
}

// ---------------------------------------------------------------------------------------------
// Bad command-line values

TEST_F(BadModelTest, NonexistentModelDirectory) {
  const std::string dir = tmp_.Join("no-such-model");
  ExpectCleanError(RunLogits(dir), {dir});
}

TEST_F(BadModelTest, BadTokenList) {
  ExpectCleanError(RunLogits(model_, "1,x"), {"'x' is not a token id"});
  ExpectCleanError(RunLogits(model_, "1,,2"), {"'' is not a token id"});
  ExpectCleanError(RunLogits(model_, "1,99999999999"), {"'99999999999' is not a token id"});
}

TEST_F(BadModelTest, TokenIdOutsideVocabulary) {
  ExpectCleanError(RunLogits(model_, "1,896"), {"token id 896", "outside the vocabulary [0, 896)"});
  // The largest valid id runs.
  ExpectSuccess(RunLogits(model_, "895,0"));
}

}  // namespace
}  // namespace deltafin
