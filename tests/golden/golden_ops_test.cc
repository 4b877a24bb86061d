// Per-op golden vectors (tests/data/golden/ops/ops.json, computed in fp64 by an independent
// reference): MXFP4 GEMV, SiTU, AttnRes mix, router, one KDA layer and one MLA layer of the tiny
// checkpoint. Tolerances are the ones ops.json states for an fp32 engine.
#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "golden/golden_data.h"
#include "kernels/activation.h"
#include "kernels/matvec.h"
#include "kernels/ref/activation_ref.h"
#include "model/kda.h"
#include "model/mla.h"
#include "model/ops.h"
#include "quant/mxfp4.h"
#include "weights/weights.h"

namespace deltafin {
namespace {

using testing::Flat;
using testing::GoldenDir;
using testing::LoadJson;
using testing::Vec;

const nlohmann::json& Ops() {
  static const nlohmann::json ops = LoadJson(GoldenDir() + "/ops/ops.json");
  return ops;
}

std::vector<uint8_t> Bytes(const nlohmann::json& rows) {
  std::vector<uint8_t> out;
  for (const auto& row : rows) {
    for (const auto& b : row) out.push_back(b.get<uint8_t>());
  }
  return out;
}

TEST(GoldenOps, Mxfp4GemvWithinAbsSumTolerance) {
  const auto& cases = Ops()["mxfp4_gemv"]["cases"];
  ASSERT_EQ(cases.size(), 5u);
  for (const auto& cs : cases) {
    SCOPED_TRACE(cs["name"].get<std::string>());
    const int64_t rows = cs["rows"], cols = cs["cols"];
    const auto packed = Bytes(cs["weight_packed"]);
    const auto scales = Bytes(cs["weight_scale"]);
    const auto x = Vec<float>(cs["x"]);
    const auto y = Vec<double>(cs["y"]);
    const auto abs_sum = Vec<double>(cs["abs_sum"]);
    std::vector<float> got(static_cast<size_t>(rows));
    kernels::MatVecMxfp4(packed.data(), scales.data(), rows, cols, x.data(), got.data());
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_LE(std::abs(got[r] - y[r]), 1e-5 * abs_sum[r]) << "row " << r;
    }
    // Dequantisation is exact.
    std::vector<float> row0(static_cast<size_t>(cols));
    DequantizeMxfp4Row(packed.data(), scales.data(), cols, row0.data());
    const auto want = Vec<double>(cs["row0_dequant_first64"]);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(row0[i], want[i]) << "element " << i;
  }
}

TEST(GoldenOps, SituEdgeCases) {
  const auto& cases = Ops()["situ"]["cases"];
  ASSERT_EQ(cases.size(), 155u);
  // All cases in one call (the dispatched SIMD kernel) and one by one (the scalar reference).
  std::vector<float> gates, ups;
  for (const auto& cs : cases) {
    gates.push_back(cs["gate"]);
    ups.push_back(cs["up"]);
  }
  std::vector<float> got = gates;
  kernels::SituInPlace(got.data(), ups.data(), static_cast<int64_t>(got.size()), 4.0f, 25.0f);
  for (size_t i = 0; i < cases.size(); ++i) {
    const double y = cases[i]["y"];
    const float gate = gates[i], up = ups[i];
    EXPECT_LE(std::abs(got[i] - y), 2e-6 * std::abs(y) + 1e-30) << "gate " << gate << " up " << up;
    EXPECT_EQ(got[i], kernels::ref::Situ(gate, up, 4.0f, 25.0f)) << "gate " << gate << " up " << up;
  }
}

TEST(GoldenOps, AttnResMix) {
  const auto& cases = Ops()["attnres_mix"]["cases"];
  ASSERT_EQ(cases.size(), 5u);
  for (const auto& cs : cases) {
    const int64_t width = cs["hidden"];
    const int64_t n = cs["n_sources"];
    std::vector<std::vector<float>> sources;
    std::vector<const float*> ptrs;
    double max_src = 0;
    for (const auto& s : cs["sources"]) {
      sources.push_back(Vec<float>(s));
      for (float v : sources.back()) max_src = std::max(max_src, std::abs(double{v}));
    }
    for (const auto& s : sources) ptrs.push_back(s.data());
    const auto norm_w = Vec<float>(cs["norm_w"]), proj_w = Vec<float>(cs["proj_w"]);
    std::vector<float> query(static_cast<size_t>(width));
    for (int64_t d = 0; d < width; ++d) query[d] = norm_w[d] * proj_w[d];
    std::vector<float> out(static_cast<size_t>(width)), alpha(static_cast<size_t>(n));
    AttnResMix(ptrs.data(), n, query.data(), width, cs["eps"].get<float>(), out.data(),
               alpha.data());
    const auto want = Vec<double>(cs["out"]);
    const auto want_alpha = Vec<double>(cs["alpha"]);
    for (int64_t d = 0; d < width; ++d) EXPECT_LE(std::abs(out[d] - want[d]), 1e-5 * max_src);
    for (int64_t j = 0; j < n; ++j) EXPECT_NEAR(alpha[j], want_alpha[j], 1e-5);
  }
}

TEST(GoldenOps, RouterSelectionAndWeights) {
  const auto& cases = Ops()["router"]["cases"];
  ASSERT_EQ(cases.size(), 6u);
  for (const auto& cs : cases) {
    SCOPED_TRACE(cs["name"].get<std::string>());
    RouterConfig rc{cs["num_experts"],
                    cs["top_k"],
                    cs["num_expert_group"],
                    cs["topk_group"],
                    cs["renormalize"].get<bool>(),
                    cs["routed_scaling_factor"].get<float>()};
    const auto logits = Vec<float>(cs["logits"]);
    const auto bias = Vec<float>(cs["e_score_correction_bias"]);
    std::vector<float> scratch(static_cast<size_t>(2 * rc.num_experts + rc.num_groups));
    std::vector<int32_t> ids(static_cast<size_t>(rc.top_k));
    std::vector<float> weights(static_cast<size_t>(rc.top_k));
    Route(rc, logits.data(), bias.data(), scratch.data(), ids.data(), weights.data());
    const auto want_ids = Vec<int32_t>(cs["expected_ids"]);
    const auto want_w = Vec<double>(cs["expected_weights"]);
    // Our documented order is the reference's: selection score descending, ties lowest id.
    EXPECT_EQ(ids, want_ids);
    for (size_t k = 0; k < ids.size() && k < want_w.size(); ++k) {
      EXPECT_LE(std::abs(weights[k] - want_w[k]), 1e-6) << "slot " << k;
    }
  }
}

// The selection rule written the plain way: k passes, each taking the highest selection score
// left (ties to the lowest id) after the group mask. Route picks in one pass; it must choose the
// same experts in the same order, with the same weights, on scores full of ties.
std::vector<int32_t> RouteByPasses(const RouterConfig& rc, const std::vector<float>& logits,
                                   const std::vector<float>& bias) {
  const int64_t n = rc.num_experts;
  std::vector<float> selection(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) {
    selection[static_cast<size_t>(e)] =
        kernels::ref::Sigmoid(logits[static_cast<size_t>(e)]) + bias[static_cast<size_t>(e)];
  }
  std::vector<bool> allowed(static_cast<size_t>(n), true);
  if (rc.num_groups > 1 && rc.num_groups > rc.topk_groups) {
    const int64_t per = n / rc.num_groups;
    std::vector<float> group(static_cast<size_t>(rc.num_groups));
    for (int64_t g = 0; g < rc.num_groups; ++g) {
      std::vector<float> v(selection.begin() + g * per, selection.begin() + (g + 1) * per);
      std::sort(v.begin(), v.end(), std::greater<float>());
      group[static_cast<size_t>(g)] = v[0] + v[1];
    }
    std::vector<bool> kept(static_cast<size_t>(rc.num_groups), false);
    for (int64_t i = 0; i < rc.topk_groups; ++i) {
      int64_t best = -1;
      for (int64_t g = 0; g < rc.num_groups; ++g) {
        if (!kept[static_cast<size_t>(g)] &&
            (best < 0 || group[static_cast<size_t>(g)] > group[static_cast<size_t>(best)])) {
          best = g;
        }
      }
      kept[static_cast<size_t>(best)] = true;
    }
    for (int64_t e = 0; e < n; ++e)
      allowed[static_cast<size_t>(e)] = kept[static_cast<size_t>(e / per)];
  }
  std::vector<int32_t> ids;
  std::vector<bool> taken(static_cast<size_t>(n), false);
  for (int64_t k = 0; k < rc.top_k; ++k) {
    int64_t best = -1;
    for (int64_t e = 0; e < n; ++e) {
      if (taken[static_cast<size_t>(e)]) continue;
      const float v = allowed[static_cast<size_t>(e)] ? selection[static_cast<size_t>(e)]
                                                      : -std::numeric_limits<float>::infinity();
      const float b =
          best < 0 ? 0.0f
                   : (allowed[static_cast<size_t>(best)] ? selection[static_cast<size_t>(best)]
                                                         : -std::numeric_limits<float>::infinity());
      if (best < 0 || v > b) best = e;
    }
    taken[static_cast<size_t>(best)] = true;
    ids.push_back(static_cast<int32_t>(best));
  }
  return ids;
}

TEST(Router, OnePassChoosesWhatKPassesChoose) {
  std::mt19937 rng(7);
  int cases = 0;
  for (const auto& [n, k, groups, kept] : std::vector<std::array<int64_t, 4>>{{896, 16, 1, 1},
                                                                              {64, 6, 1, 1},
                                                                              {64, 8, 8, 3},
                                                                              {32, 32, 1, 1},
                                                                              {256, 8, 8, 4},
                                                                              {16, 2, 4, 1}}) {
    const RouterConfig rc{n, k, groups, kept, true, 2.5f};
    for (int seed = 0; seed < 200; ++seed, ++cases) {
      // Few distinct logits and biases: many exact ties in the selection scores.
      const int levels = seed % 3 == 0 ? 3 : (seed % 3 == 1 ? 17 : 100000);
      std::vector<float> logits(static_cast<size_t>(n)), bias(static_cast<size_t>(n));
      for (auto& v : logits)
        v = static_cast<float>(static_cast<int>(rng() % levels) - levels / 2) / 7.0f;
      for (auto& v : bias) v = seed % 2 == 0 ? 0.0f : static_cast<float>(rng() % 4) * 0.125f;
      if (seed % 5 == 0) {
        for (int64_t e = 0; e < n; e += 3) logits[static_cast<size_t>(e)] = -200.0f;  // sigmoid 0
      }
      std::vector<float> scratch(static_cast<size_t>(2 * n + groups));
      std::vector<int32_t> ids(static_cast<size_t>(k));
      std::vector<float> weights(static_cast<size_t>(k));
      Route(rc, logits.data(), bias.data(), scratch.data(), ids.data(), weights.data());
      const auto want = RouteByPasses(rc, logits, bias);
      ASSERT_EQ(ids, want) << "n=" << n << " k=" << k << " seed=" << seed;
      float sum = 0.0f;
      for (int32_t id : want) sum += kernels::ref::Sigmoid(logits[static_cast<size_t>(id)]);
      for (int64_t i = 0; i < k; ++i) {
        const float raw =
            kernels::ref::Sigmoid(logits[static_cast<size_t>(want[static_cast<size_t>(i)])]);
        EXPECT_EQ(weights[static_cast<size_t>(i)], raw / (sum + 1e-20f) * 2.5f);
      }
    }
  }
  EXPECT_EQ(cases, 1200);
}

class GoldenLayer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto w = ModelWeights::Load(testing::GoldenModelDir(), BindOptions{true});
    ASSERT_TRUE(w.ok()) << w.status().message();
    weights_ = std::move(w).value().release();
  }
  static void TearDownTestSuite() {
    delete weights_;
    weights_ = nullptr;
  }
  static ModelWeights* weights_;
};
ModelWeights* GoldenLayer::weights_ = nullptr;

void ExpectClose(const std::vector<float>& got, const std::vector<double>& want, double rel,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double scale = testing::MaxAbs(want);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(std::abs(got[i] - want[i]), rel * scale) << what << " element " << i;
  }
}

// Runs the KDA layer of the vector either one position per call or all positions in one call.
void CheckKda(const ModelWeights& w, int64_t chunk) {
  const auto& v = Ops()["kda_layer"];
  const ModelConfig& c = w.config;
  const int64_t layer = v["checkpoint_layer"], steps = v["positions"], h = c.hidden_size;
  const LayerWeights& lw = w.layers[static_cast<size_t>(layer)];
  ASSERT_EQ(lw.kind, AttentionKind::kKda);
  KdaState state;
  state.Init(c);
  KdaScratch scratch;
  scratch.Reserve(c, chunk);
  std::vector<float> x, out(static_cast<size_t>(steps * h));
  for (const auto& step : v["steps"]) {
    for (float f : Vec<float>(step["x"])) x.push_back(f);
  }
  for (int64_t t = 0; t < steps; t += chunk) {
    KdaForward(c, lw.kda, x.data() + t * h, chunk, &state, &scratch, out.data() + t * h);
  }
  for (int64_t t = 0; t < steps; ++t) {
    std::vector<float> got(out.begin() + t * h, out.begin() + (t + 1) * h);
    ExpectClose(got, Vec<double>(v["steps"][t]["out"]), 1e-5, "kda out, step " + std::to_string(t));
  }
  const auto final_state = testing::LoadF32(GoldenDir() + "/ops/kda_final_state.f32");
  ASSERT_EQ(final_state.size(), state.recurrent.size());
  for (size_t i = 0; i < final_state.size(); ++i) {
    EXPECT_NEAR(state.recurrent[i], final_state[i], 1e-6) << "state element " << i;
  }
  // Conv history: [K-1, P] raw projections, oldest first.
  const struct {
    const char* name;
    const AlignedBuffer<float>* buf;
  } hist[] = {{"q", &state.conv_q}, {"k", &state.conv_k}, {"v", &state.conv_v}};
  for (const auto& hst : hist) {
    const auto want = Vec<double>(v["final_conv_history"][hst.name]);
    ASSERT_EQ(want.size(), hst.buf->size());
    const double scale = testing::MaxAbs(want);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_LE(std::abs((*hst.buf)[i] - want[i]), 1e-5 * scale) << hst.name << " " << i;
    }
  }
}

TEST_F(GoldenLayer, KdaLayerTokenByToken) { CheckKda(*weights_, 1); }
TEST_F(GoldenLayer, KdaLayerWholeChunk) { CheckKda(*weights_, 8); }

void CheckMla(const ModelWeights& w, int64_t chunk) {
  const auto& v = Ops()["mla_layer"];
  const ModelConfig& c = w.config;
  const int64_t layer = v["checkpoint_layer"], steps = v["positions"], h = c.hidden_size;
  const LayerWeights& lw = w.layers[static_cast<size_t>(layer)];
  ASSERT_EQ(lw.kind, AttentionKind::kMla);
  MlaCache cache;
  cache.Init(c, steps);
  MlaScratch scratch;
  scratch.Reserve(c, chunk, steps, /*slots=*/3);
  std::vector<float> x, out(static_cast<size_t>(steps * h));
  for (const auto& step : v["steps"]) {
    for (float f : Vec<float>(step["x"])) x.push_back(f);
  }
  for (int64_t t = 0; t < steps; t += chunk) {
    ASSERT_TRUE(
        MlaForward(c, lw.mla, x.data() + t * h, chunk, &cache, &scratch, out.data() + t * h).ok());
  }
  for (int64_t t = 0; t < steps; ++t) {
    std::vector<float> got(out.begin() + t * h, out.begin() + (t + 1) * h);
    ExpectClose(got, Vec<double>(v["steps"][t]["out"]), 1e-5, "mla out, step " + std::to_string(t));
  }
  // The cache is full now: one more position must be refused, not written out of bounds.
  EXPECT_FALSE(MlaForward(c, lw.mla, x.data(), 1, &cache, &scratch, out.data()).ok());
}

TEST_F(GoldenLayer, MlaLayerTokenByToken) { CheckMla(*weights_, 1); }
TEST_F(GoldenLayer, MlaLayerWholeChunk) { CheckMla(*weights_, 8); }

}  // namespace
}  // namespace deltafin
