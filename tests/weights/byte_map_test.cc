// The spine byte map (weights/spine_map.h) and the plan quantities read from it.
//
// The map binding writes must agree with the checkpoint's own safetensors headers, read here
// independently of the loader: every spine tensor once, in the file and at the offset and size its
// header gives. The map made from the config alone (what Engine::Plan sums before any weight is
// read) must be the bound map without files and offsets. Roles decide what the row-int8 spine
// replaces, so they must select exactly the tensors the converter's name rule selects. And a
// session must reserve what the plan counts for it (ModelInfo::session_bytes).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "deltafin/engine.h"
#include "golden/golden_data.h"
#include "modelgen/make_model.h"
#include "weights/spine_int8.h"
#include "weights/spine_map.h"
#include "weights/tensor_roster.h"
#include "weights/weights.h"

namespace deltafin {
namespace {

// One tensor as a safetensors header states it.
struct HeaderTensor {
  std::string path;
  std::string dtype;
  uint64_t offset = 0;  // absolute, in the file
  uint64_t bytes = 0;
};

// The headers of every shard of `dir`, parsed with nothing but the format's definition: an
// 8-byte little-endian length, that many bytes of JSON, then the data section.
std::map<std::string, HeaderTensor> ReadHeaders(const std::vector<std::string>& paths) {
  std::map<std::string, HeaderTensor> out;
  for (const std::string& path : paths) {
    std::ifstream in(path, std::ios::binary);
    unsigned char len_bytes[8] = {};
    in.read(reinterpret_cast<char*>(len_bytes), 8);
    uint64_t len = 0;
    for (int i = 7; i >= 0; --i) len = (len << 8) | len_bytes[i];
    std::string text(len, '\0');
    in.read(text.data(), static_cast<std::streamsize>(len));
    EXPECT_TRUE(in.good()) << path;
    const auto header = nlohmann::json::parse(text);
    for (const auto& [name, t] : header.items()) {
      if (name == "__metadata__") continue;
      const uint64_t begin = t["data_offsets"][0], end = t["data_offsets"][1];
      EXPECT_EQ(out.count(name), 0u) << name << " in two shards";
      out[name] = {path, t["dtype"].get<std::string>(), 8 + len + begin, end - begin};
    }
  }
  return out;
}

// The roster's spine tensors in map order, with their names.
std::vector<TensorSpec> SpineSpecs(const ModelConfig& c) {
  std::vector<TensorSpec> all = GlobalTensorSpecs(c);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (TensorSpec& s : LayerTensorSpecs(c, l)) all.push_back(std::move(s));
  }
  std::vector<TensorSpec> out;
  for (TensorSpec& s : all) {
    if (s.role != SpineRole::kNone) out.push_back(std::move(s));
  }
  return out;
}

bool IsTextSpineName(const std::string& name) {
  return name.rfind("language_model.", 0) == 0 && name.find(".experts.") == std::string::npos;
}

TEST(ByteMap, MatchesTheSafetensorsHeadersOfTheGoldenModel) {
  auto w = ModelWeights::Load(testing::GoldenModelDir(), BindOptions{});
  ASSERT_TRUE(w.ok()) << w.status().message();
  const ModelWeights& m = **w;
  const auto headers = ReadHeaders(m.checkpoint.shard_paths());
  const std::vector<TensorSpec> specs = SpineSpecs(m.config);
  ASSERT_EQ(m.spine_map.size(), specs.size());

  std::map<std::string, int> seen;
  for (size_t i = 0; i < specs.size(); ++i) {
    const SpineTensorEntry& e = m.spine_map[i];
    const TensorSpec& spec = specs[i];
    SCOPED_TRACE(spec.name);
    EXPECT_EQ(e.role, spec.role);
    EXPECT_EQ(e.layer, spec.name.rfind(kLayerPrefix, 0) == 0
                           ? std::stoll(spec.name.substr(std::strlen(kLayerPrefix)))
                           : -1);
    auto it = headers.find(spec.name);
    ASSERT_NE(it, headers.end()) << "not in any header";
    ASSERT_GE(e.file, 0);
    ASSERT_LT(static_cast<size_t>(e.file), m.num_spine_files());
    EXPECT_EQ(m.SpineFilePath(e.file), it->second.path);
    EXPECT_EQ(e.offset, it->second.offset);
    EXPECT_EQ(e.bytes, it->second.bytes);
    EXPECT_EQ(DTypeName(e.dtype), it->second.dtype);
    EXPECT_EQ(static_cast<uint64_t>(e.rows * e.cols) * DTypeSize(e.dtype), e.bytes);
    EXPECT_FALSE(e.row_int8);
    ++seen[spec.name];
  }
  // Every spine tensor of the checkpoint is in the map, once.
  size_t spine_in_headers = 0;
  for (const auto& [name, t] : headers) {
    if (!IsTextSpineName(name)) continue;
    ++spine_in_headers;
    EXPECT_EQ(seen[name], 1) << name;
  }
  EXPECT_EQ(spine_in_headers, m.spine_map.size());

  // The config's table is the same rows without files and offsets.
  const std::vector<SpineTensorEntry> table = SpineTensorTable(m.config, false);
  ASSERT_EQ(table.size(), m.spine_map.size());
  for (size_t i = 0; i < table.size(); ++i) {
    SCOPED_TRACE(specs[i].name);
    EXPECT_EQ(table[i].file, -1);
    EXPECT_EQ(table[i].layer, m.spine_map[i].layer);
    EXPECT_EQ(table[i].role, m.spine_map[i].role);
    EXPECT_EQ(table[i].bytes, m.spine_map[i].bytes);
    EXPECT_EQ(table[i].dtype, m.spine_map[i].dtype);
    EXPECT_EQ(table[i].rows, m.spine_map[i].rows);
    EXPECT_EQ(table[i].cols, m.spine_map[i].cols);
  }
}

// The roles the row-int8 spine replaces at run time are the tensors the converter's name rule
// picks, less kv_b_proj; on the golden config (KDA and MLA, dense and MoE layers) and the bench
// preset's (K3's layout).
TEST(ByteMap, LinearRolesAreTheInt8Targets) {
  auto golden = LoadModelConfig(testing::GoldenModelDir());
  ASSERT_TRUE(golden.ok()) << golden.status().message();
  auto bench_text = PresetConfigJson("bench", {});
  ASSERT_TRUE(bench_text.ok()) << bench_text.status().message();
  auto bench = ParseModelConfig(*bench_text, "bench");
  ASSERT_TRUE(bench.ok()) << bench.status().message();
  for (const ModelConfig* c : {&*golden, &*bench}) {
    for (const TensorSpec& s : SpineSpecs(*c)) {
      const bool by_name =
          IsSpineInt8Target(s.name, s.dtype, s.shape.size()) && !KeptBf16AtRuntime(s.name);
      EXPECT_EQ(IsLinearRole(s.role), by_name) << s.name;
      const std::vector<SpineTensorEntry> one = [&] {
        std::vector<SpineTensorEntry> v;
        AppendSpineEntries({s}, 0, true, &v);
        return v;
      }();
      ASSERT_EQ(one.size(), 1u);
      EXPECT_EQ(ResidentBytes(one[0]), SpineInt8TensorBytes(s.name, s.dtype, s.shape)) << s.name;
    }
  }
}

// Shape() gives Plan()'s shape and workload without a memory budget, and Plan() of a config's
// text equals Plan() of the folder holding it.
TEST(ByteMap, ShapeAndPlanFromTextAgreeWithTheFolder) {
  const std::string dir = testing::GoldenModelDir();
  auto text = ReadFileToString(dir + "/config.json");
  ASSERT_TRUE(text.ok());
  for (const bool int8 : {false, true}) {
    EngineOptions o;
    o.model_dir = dir;
    o.spine_int8 = int8;
    o.mem_limit = 8ull << 30;
    auto folder = Engine::Plan(o);
    ASSERT_TRUE(folder.ok()) << folder.status().message();
    EngineOptions t = o;
    t.model_dir.clear();
    auto from_text = Engine::Plan(t, *text);
    ASSERT_TRUE(from_text.ok()) << from_text.status().message();
    auto shape = Engine::Shape(t, *text);
    ASSERT_TRUE(shape.ok()) << shape.status().message();
    for (const ModelInfo* i : {&*from_text, &*shape}) {
      EXPECT_EQ(i->spine_bytes, folder->spine_bytes);
      EXPECT_EQ(i->spine_bytes_per_token, folder->spine_bytes_per_token);
      EXPECT_EQ(i->spine_products_per_token, folder->spine_products_per_token);
      EXPECT_EQ(i->router_bytes, folder->router_bytes);
      EXPECT_EQ(i->unoverlapped_spine_bytes_per_token, folder->unoverlapped_spine_bytes_per_token);
      EXPECT_EQ(i->recurrent_state_bytes, folder->recurrent_state_bytes);
      EXPECT_EQ(i->linear_macs_per_token, folder->linear_macs_per_token);
      EXPECT_EQ(i->lm_head_macs, folder->lm_head_macs);
      EXPECT_EQ(i->context_capacity, folder->context_capacity);
    }
    EXPECT_EQ(from_text->session_bytes, folder->session_bytes);
    EXPECT_EQ(from_text->memory_budget, folder->memory_budget);
    EXPECT_EQ(shape->memory_budget, 0u);  // no plan was made
  }
}

// The session's own reservations against the plan's count: never more than the plan's formula
// (less its stated 32 MiB margin for small buffers) counts, so the memory plan never
// under-counts a session, and that formula no more than 1/8 above them (it rounds some
// per-position buffers up: 2-10 % over on these models when written).
void ExpectSessionBytesMatch(const EngineOptions& o) {
  auto engine = Engine::Load(o);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  const ModelInfo& info = (*engine)->info();
  const auto session = (*engine)->NewSession();
  const uint64_t reserved = session->ReservedBytes();
  const uint64_t margin = 32ull << 20;
  EXPECT_LE(reserved, info.session_bytes);
  ASSERT_GE(info.session_bytes, margin);
  const uint64_t counted = info.session_bytes - margin;
  EXPECT_GE(counted, reserved) << "the plan's formula misses some of the session's buffers";
  EXPECT_LE(counted - reserved, reserved / 8 + (64u << 10))
      << "planned " << counted << " B (margin aside), reserved " << reserved << " B";
}

TEST(SessionBytes, GoldenModelReservesWhatThePlanCounts) {
  EngineOptions o;
  o.model_dir = testing::GoldenModelDir();
  ExpectSessionBytesMatch(o);
  o.prefill_chunk = 5;
  o.max_draft = 4;
  ExpectSessionBytesMatch(o);
  o.rollback = EngineOptions::Rollback::kSnapshot;
  ExpectSessionBytesMatch(o);
}

// The trained demo model: another shape (hidden 128, its own expert and context sizes).
TEST(SessionBytes, DemoModelReservesWhatThePlanCounts) {
  EngineOptions o;
  o.model_dir = DF_DEMO_MODEL_DIR;
  ExpectSessionBytesMatch(o);
  o.max_draft = 8;
  ExpectSessionBytesMatch(o);
}

}  // namespace
}  // namespace deltafin
