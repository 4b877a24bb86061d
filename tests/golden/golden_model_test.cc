// Whole-model golden tests on the tiny K3-shaped checkpoint: logits of every position against the
// fp64 reference (max |Δ| ≤ 1e-3, argmax equal), routes (expert sets, weights), the 16-token
// greedy continuation, prefill-vs-decode agreement, and an allocation-free decode step.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>

#include "base/aligned_buffer.h"
#include "deltafin/engine.h"
#include "golden/golden_data.h"
#include "io/direct_file.h"
#include "model/forward.h"
#include "unit/test_files.h"
#include "weights/expert_streamer.h"
#include "weights/spine_ring.h"
#include "weights/weights.h"

namespace deltafin::testing {
extern std::atomic<uint64_t> g_allocations;
}

namespace deltafin {
namespace {

using testing::GoldenDir;
using testing::LoadF32;
using testing::LoadJson;

const nlohmann::json& Reference() {
  static const nlohmann::json ref = LoadJson(GoldenDir() + "/reference.json");
  return ref;
}

std::unique_ptr<Engine> LoadGolden(int64_t prefill_chunk = 32) {
  EngineOptions options;
  options.model_dir = testing::GoldenModelDir();
  options.prefill_chunk = prefill_chunk;
  options.audit_expert_scales = EngineOptions::ScaleAudit::kOn;
  auto engine = Engine::Load(options);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

class RouteRecorder : public ForwardObserver {
 public:
  void OnRoute(int64_t position, int64_t layer, std::span<const int32_t> experts,
               std::span<const float> weights) override {
    auto& r = routes[{position, layer}];
    r.first.assign(experts.begin(), experts.end());
    r.second.assign(weights.begin(), weights.end());
  }
  std::map<std::pair<int64_t, int64_t>, std::pair<std::vector<int32_t>, std::vector<float>>> routes;
};

TEST(GoldenModel, LogitsRoutesAndArgmaxMatchReference) {
  auto engine = LoadGolden();
  ASSERT_NE(engine, nullptr);
  const int64_t vocab = engine->info().vocab_size;
  ASSERT_EQ(vocab, 896);
  double worst = 0, worst_weight = 0;
  for (const auto& seq : Reference()["sequences"]) {
    const auto ids = seq["ids"].get<std::vector<int32_t>>();
    SCOPED_TRACE(seq["file"].get<std::string>());
    const auto want = LoadF32(GoldenDir() + "/" + seq["file"].get<std::string>());
    ASSERT_EQ(want.size(), ids.size() * static_cast<size_t>(vocab));
    auto session = engine->NewSession();
    RouteRecorder recorder;
    session->SetObserver(&recorder);
    std::vector<float> got(want.size());
    ASSERT_TRUE(session->Prefill(ids, got).ok());
    const auto argmax = seq["argmax"].get<std::vector<int32_t>>();
    for (size_t t = 0; t < ids.size(); ++t) {
      std::span<const float> row(got.data() + t * vocab, static_cast<size_t>(vocab));
      double max_diff = 0;
      for (int64_t v = 0; v < vocab; ++v) {
        max_diff = std::max(max_diff, double{std::abs(row[v] - want[t * vocab + v])});
      }
      EXPECT_LE(max_diff, 1e-3) << "position " << t;
      worst = std::max(worst, max_diff);
      EXPECT_EQ(ArgmaxToken(row), argmax[t]) << "position " << t;
      const auto& layers = seq["routes"][t];
      for (const auto& r : layers) {
        if (r.is_null()) continue;
        const int64_t layer = r["layer"];
        const auto& [experts, weights] = recorder.routes[{static_cast<int64_t>(t), layer}];
        const auto want_experts = r["experts"].get<std::vector<int32_t>>();
        const auto want_weights = r["weights"].get<std::vector<double>>();
        EXPECT_EQ(std::set<int32_t>(experts.begin(), experts.end()),
                  std::set<int32_t>(want_experts.begin(), want_experts.end()))
            << "position " << t << " layer " << layer;
        for (size_t k = 0; k < want_experts.size(); ++k) {
          for (size_t j = 0; j < experts.size(); ++j) {
            if (experts[j] != want_experts[k]) continue;
            EXPECT_LE(std::abs(weights[j] - want_weights[k]), 1e-5);
            worst_weight = std::max(worst_weight, std::abs(weights[j] - want_weights[k]));
          }
        }
      }
    }
  }
  std::printf("max |logit - reference| = %.3g, max |route weight - reference| = %.3g\n", worst,
              worst_weight);
}

TEST(GoldenModel, GreedyContinuationIsIdentical) {
  auto engine = LoadGolden();
  ASSERT_NE(engine, nullptr);
  const auto& greedy = Reference()["greedy"];
  const auto prompt = greedy["prompt_ids"].get<std::vector<int32_t>>();
  const auto want = greedy["new_tokens"].get<std::vector<int32_t>>();
  auto session = engine->NewSession();
  ASSERT_TRUE(session->Prefill(prompt).ok());
  std::vector<int32_t> got;
  for (size_t i = 0; i < want.size(); ++i) {
    got.push_back(ArgmaxToken(session->Logits()));
    ASSERT_TRUE(session->Decode(got.back()).ok());
  }
  EXPECT_EQ(got, want);
}

// Multi-token prefill (several chunk sizes, crossing chunk boundaries) and token-by-token decode
// must give the same logits: relative difference ≤ 1e-5 of the largest logit.
TEST(GoldenModel, PrefillMatchesTokenByTokenDecode) {
  const auto ids = Reference()["sequences"][2]["ids"].get<std::vector<int32_t>>();
  auto decode_engine = LoadGolden(1);
  ASSERT_NE(decode_engine, nullptr);
  const auto vocab = static_cast<size_t>(decode_engine->info().vocab_size);
  std::vector<float> stepwise;
  auto session = decode_engine->NewSession();
  for (int32_t id : ids) {
    ASSERT_TRUE(session->Decode(id).ok());
    stepwise.insert(stepwise.end(), session->Logits().begin(), session->Logits().end());
  }
  for (int64_t chunk : {5, 24, 64}) {
    auto engine = LoadGolden(chunk);
    ASSERT_NE(engine, nullptr);
    auto s = engine->NewSession();
    std::vector<float> batched(ids.size() * vocab);
    ASSERT_TRUE(s->Prefill(ids, batched).ok());
    double scale = 0, diff = 0;
    for (size_t i = 0; i < batched.size(); ++i) {
      scale = std::max(scale, double{std::abs(stepwise[i])});
      diff = std::max(diff, double{std::abs(batched[i] - stepwise[i])});
    }
    EXPECT_LE(diff, 1e-5 * scale) << "chunk " << chunk;
  }
}

// Session::SaveState / RestoreState (the server's prefix cache): a restored session is the saved
// one, bit for bit: its logits, and every logit that follows, in another session of another
// Engine instance of the same model. With prefill_chunk 1 no split changes the arithmetic, so
// there a restore followed by the suffix must equal one full prefill exactly.
TEST(GoldenModel, RestoredStateGivesIdenticalLogits) {
  const auto ids = Reference()["sequences"][2]["ids"].get<std::vector<int32_t>>();
  ASSERT_GE(ids.size(), 6u);
  const size_t cut = ids.size() / 2;
  const std::span<const int32_t> prefix(ids.data(), cut),
      suffix(ids.data() + cut, ids.size() - cut);
  for (int64_t chunk : {1, 32}) {
    auto engine = LoadGolden(chunk);
    ASSERT_NE(engine, nullptr);
    const auto vocab = static_cast<size_t>(engine->info().vocab_size);
    auto a = engine->NewSession();
    ASSERT_TRUE(a->Prefill(prefix).ok());
    std::vector<uint8_t> state;
    ASSERT_TRUE(a->SaveState(&state).ok());
    EXPECT_EQ(state.size(), a->StateBytes());
    const std::vector<float> at_cut(a->Logits().begin(), a->Logits().end());
    std::vector<float> expect(suffix.size() * vocab);
    ASSERT_TRUE(a->Prefill(suffix, expect).ok());

    auto other = LoadGolden(chunk);  // a fresh engine: nothing shared but the files
    ASSERT_NE(other, nullptr);
    auto b = other->NewSession();
    ASSERT_TRUE(b->Prefill(suffix).ok());  // some other state, to be overwritten
    ASSERT_TRUE(b->RestoreState(state).ok());
    EXPECT_EQ(b->position(), static_cast<int64_t>(cut));
    EXPECT_EQ(std::vector<float>(b->Logits().begin(), b->Logits().end()), at_cut);
    std::vector<float> got(suffix.size() * vocab);
    ASSERT_TRUE(b->Prefill(suffix, got).ok());
    EXPECT_EQ(got, expect) << "chunk " << chunk;
    if (chunk == 1) {
      auto full = engine->NewSession();
      std::vector<float> all(ids.size() * vocab);
      ASSERT_TRUE(full->Prefill(ids, all).ok());
      EXPECT_EQ(std::vector<float>(all.begin() + static_cast<ptrdiff_t>(cut * vocab), all.end()),
                got);
    }
    // Damaged snapshots are refused and leave a reset session.
    std::vector<uint8_t> cut_short(state.begin(), state.end() - 4);
    EXPECT_FALSE(b->RestoreState(cut_short).ok());
    EXPECT_EQ(b->position(), 0);
    std::vector<uint8_t> bad_magic = state;
    bad_magic[0] ^= 1;
    EXPECT_FALSE(b->RestoreState(bad_magic).ok());
  }
}

TEST(GoldenModel, ResetStartsANewSequence) {
  auto engine = LoadGolden();
  ASSERT_NE(engine, nullptr);
  const auto ids = Reference()["sequences"][1]["ids"].get<std::vector<int32_t>>();
  auto session = engine->NewSession();
  ASSERT_TRUE(session->Prefill(ids).ok());
  const std::vector<float> first(session->Logits().begin(), session->Logits().end());
  session->Reset();
  EXPECT_EQ(session->position(), 0);
  ASSERT_TRUE(session->Prefill(ids).ok());
  EXPECT_EQ(std::vector<float>(session->Logits().begin(), session->Logits().end()), first);
}

TEST(GoldenModel, ContextCapacityIsEnforced) {
  EngineOptions options;
  options.model_dir = testing::GoldenModelDir();
  options.context_capacity = 4;
  auto engine = Engine::Load(options);
  ASSERT_TRUE(engine.ok());
  auto session = (*engine)->NewSession();
  const std::vector<int32_t> ids = {1, 2, 3, 4};
  ASSERT_TRUE(session->Prefill(ids).ok());
  const Status st = session->Decode(5);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("context full"), std::string::npos) << st.message();
}

TEST(GoldenModel, RejectsTokenOutsideVocabulary) {
  auto engine = LoadGolden();
  ASSERT_NE(engine, nullptr);
  auto session = engine->NewSession();
  const Status st = session->Decode(896);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("outside the vocabulary"), std::string::npos) << st.message();
  EXPECT_EQ(session->position(), 0);
}

// Prefills a short prompt, then checks that each of 8 greedy decode steps makes no allocation,
// and neither does a further prefill of the same session; `session` is left for further checks.
// The hooks (alloc_hooks.cc) count plain and aligned operator new, which AlignedBuffer (every
// activation, scratch buffer and cache slot) allocates through.
void ExpectDecodeDoesNotAllocate(const Engine& engine, std::unique_ptr<Session>* out) {
  auto& session = *out = engine.NewSession();
  const std::vector<int32_t> prompt = {632, 304, 32};
  ASSERT_TRUE(session->Prefill(prompt).ok());
  // The hooks must be live, or this test could not fail.
  const uint64_t probe = testing::g_allocations.load();
  // A direct call of the allocation function, which (unlike a new-expression) cannot be elided.
  void* p = ::operator new(16);
  ::operator delete(p);
  ASSERT_GT(testing::g_allocations.load(), probe);
  const uint64_t aligned_probe = testing::g_allocations.load();
  { AlignedBuffer<float> buffer(16); }
  ASSERT_GT(testing::g_allocations.load(), aligned_probe) << "AlignedBuffer is not counted";
  for (int i = 0; i < 8; ++i) {
    const int32_t next = ArgmaxToken(session->Logits());
    const uint64_t before = testing::g_allocations.load();
    const Status st = session->Decode(next);
    const uint64_t after = testing::g_allocations.load();
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(after - before, 0u) << "decode step " << i << " allocated";
  }
  // Prefill of further prompt tokens (a chat turn) into the warm session.
  const std::vector<int32_t> more = {304, 32, 632};
  const uint64_t before = testing::g_allocations.load();
  ASSERT_TRUE(session->Prefill(more).ok());
  EXPECT_EQ(testing::g_allocations.load() - before, 0u) << "prefill allocated";
}

TEST(GoldenModel, DecodeStepDoesNotAllocate) {
  auto engine = LoadGolden();
  ASSERT_NE(engine, nullptr);
  std::unique_ptr<Session> session;
  ExpectDecodeDoesNotAllocate(*engine, &session);
}

// The same with experts read from disk through the smallest cache (so slots are evicted and
// reused every layer) and both lookaheads issuing guesses: the streamer's queues, slots and I/O
// threads allocate nothing per step either (the counter is process-wide, so the I/O threads are
// counted too).
TEST(GoldenModel, StreamedDecodeStepDoesNotAllocate) {
  EngineOptions options;
  options.model_dir = testing::GoldenModelDir();
  options.experts = EngineOptions::Experts::kStreamed;
  options.io_threads = 2;
  options.lookahead = EngineOptions::Lookahead::kBoth;
  auto config = LoadModelConfig(options.model_dir);
  ASSERT_TRUE(config.ok());
  options.expert_cache_bytes = ExpertStreamer::MinCacheBytes(*config, options.io_threads);
  auto engine = Engine::Load(options);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  ASSERT_TRUE((*engine)->info().experts_streamed);
  std::unique_ptr<Session> session;
  ExpectDecodeDoesNotAllocate(**engine, &session);
  EXPECT_GT(session->stats().expert_bytes_read, 0u);
}

// The op-family breakdown (SessionStats::op_seconds, docs/BREAKDOWN.md) over `steps` greedy
// decode steps: the families sum to the wall time measured around Decode() within 5%, the
// unattributed `other` bucket stays under 5% of it, and the families every K3 layer has took time.
// Totals over the steps, so one preemption between two clock reads cannot fail it.
void ExpectBreakdownSumsToWallTime(Session& session, int steps) {
  const std::vector<int32_t> prompt = {632, 304, 32};
  ASSERT_TRUE(session.Prefill(prompt).ok());
  const SessionStats before = session.stats();
  double wall = 0;
  for (int i = 0; i < steps; ++i) {
    const int32_t next = ArgmaxToken(session.Logits());
    const auto t0 = std::chrono::steady_clock::now();
    const Status st = session.Decode(next);
    wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(st.ok()) << st.message();
  }
  const SessionStats& after = session.stats();
  std::array<double, kOpFamilyCount> ops{};
  double sum = 0;
  std::string report;
  for (size_t f = 0; f < kOpFamilyCount; ++f) {
    ops[f] = after.op_seconds[f] - before.op_seconds[f];
    EXPECT_GE(ops[f], 0.0) << OpFamilyName(static_cast<OpFamily>(f));
    sum += ops[f];
    report += std::string(OpFamilyName(static_cast<OpFamily>(f))) + " " +
              std::to_string(ops[f] * 1e3) + " ms\n";
  }
  SCOPED_TRACE(report + "wall " + std::to_string(wall * 1e3) + " ms");
  EXPECT_NEAR(sum, wall, 0.05 * wall);
  EXPECT_LT(ops[static_cast<size_t>(OpFamily::kOther)], 0.05 * wall);
  for (OpFamily f : {OpFamily::kEmbedding, OpFamily::kKdaProjections, OpFamily::kKdaConv,
                     OpFamily::kKdaRecurrence, OpFamily::kMlaProjections, OpFamily::kMlaAttention,
                     OpFamily::kAttnRes, OpFamily::kRouter, OpFamily::kRoutedExperts,
                     OpFamily::kSharedExperts, OpFamily::kLatentProjections, OpFamily::kLmHead}) {
    EXPECT_GT(ops[static_cast<size_t>(f)], 0.0) << OpFamilyName(f);
  }
}

TEST(GoldenModel, OpBreakdownSumsToWallTime) {
  auto engine = LoadGolden();
  ASSERT_NE(engine, nullptr);
  auto session = engine->NewSession();
  ExpectBreakdownSumsToWallTime(*session, 24);
  // Mapped experts and a resident spine: nothing to wait for.
  EXPECT_EQ(session->stats().op(OpFamily::kExpertIoWait), 0.0);
  EXPECT_EQ(session->stats().op(OpFamily::kSpineIoWait), 0.0);
}

// Prefill and four greedy steps: every logit equals the mapped engine's, bit for bit.
void ExpectLogitsMatchMappedEngine(Session* session) {
  auto mapped = LoadGolden();
  ASSERT_NE(mapped, nullptr);
  auto reference = mapped->NewSession();
  const std::vector<int32_t> prompt = {632, 304, 32, 17, 5};
  session->Reset();
  ASSERT_TRUE(session->Prefill(prompt).ok());
  ASSERT_TRUE(reference->Prefill(prompt).ok());
  for (int i = 0; i < 4; ++i) {
    const auto got = session->Logits(), want = reference->Logits();
    ASSERT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << "step " << i;
    const int32_t next = ArgmaxToken(want);
    ASSERT_TRUE(session->Decode(next).ok());
    ASSERT_TRUE(reference->Decode(next).ok());
  }
}

// Experts streamed and a budget too small for the spine, so every layer's spine pages are checked
// (and brought in when evicted) before it runs: the waits are charged to their own families, the
// sum still matches, the step still allocates nothing, and the logits are the mapped engine's.
TEST(GoldenModel, OpBreakdownWithStreamedExpertsAndSpine) {
  EngineOptions options;
  options.model_dir = testing::GoldenModelDir();
  options.experts = EngineOptions::Experts::kStreamed;
  options.io_threads = 2;
  auto config = LoadModelConfig(options.model_dir);
  ASSERT_TRUE(config.ok());
  // The smallest budget the planner accepts for streaming is below spine + streaming minimum.
  auto plan = Engine::Plan(options);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  options.mem_limit = plan->spine_bytes / 2 +
                      ExpertStreamer::MinCacheBytes(*config, options.io_threads) + (40ull << 20);
  plan = Engine::Plan(options);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_NE(plan->memory_plan.find("spine: "), std::string::npos);
  ASSERT_NE(plan->memory_plan.find("does not fit"), std::string::npos) << plan->memory_plan;
  auto engine = Engine::Load(options);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  ASSERT_TRUE((*engine)->info().experts_streamed);
  std::unique_ptr<Session> session;
  ExpectDecodeDoesNotAllocate(**engine, &session);
  session->Reset();
  ExpectBreakdownSumsToWallTime(*session, 16);
  EXPECT_GT(session->stats().op(OpFamily::kExpertIoWait), 0.0);
  EXPECT_GT(session->stats().op(OpFamily::kSpineIoWait), 0.0);

  ExpectLogitsMatchMappedEngine(session.get());
}

// A streamed spine reads each layer into a ring slot ahead of use, or keeps the layers the plan
// pinned: every ring depth computes the mapped engine's logits exactly, each token reads exactly
// the streamed groups' bytes, and the plan printed at startup says what is pinned and streams.
TEST(GoldenModel, StreamedSpineRingDepthsAreBitIdentical) {
  EngineOptions options;
  options.model_dir = testing::GoldenModelDir();
  options.experts = EngineOptions::Experts::kStreamed;
  options.io_threads = 2;
  // Fixed chunks: the session's bytes below are then the ones the budget must hold (a planned
  // wave would grow into what the budget leaves).
  options.prefill_chunk = 32;
  auto config = LoadModelConfig(options.model_dir);
  ASSERT_TRUE(config.ok());
  auto full = Engine::Plan(options);
  ASSERT_TRUE(full.ok()) << full.status().message();
  // Just under what a resident spine needs: the ring, and pins with what it leaves.
  options.mem_limit = full->session_bytes +
                      ExpertStreamer::MinCacheBytes(*config, options.io_threads) +
                      full->spine_bytes - 4096;
  uint64_t previous_pinned = ~uint64_t{0};
  for (int readahead : {0, 1, 3}) {
    SCOPED_TRACE("readahead " + std::to_string(readahead));
    options.spine_readahead = readahead;
    auto engine = Engine::Load(options);
    ASSERT_TRUE(engine.ok()) << engine.status().message();
    const ModelInfo& info = (*engine)->info();
    ASSERT_FALSE(info.spine_resident) << info.memory_plan;
    EXPECT_EQ(info.spine_ring_depth, readahead + 1);
    EXPECT_NE(info.memory_plan.find("spine ring: "), std::string::npos) << info.memory_plan;
    EXPECT_GT(info.spine_pinned_bytes, 0u) << info.memory_plan;
    EXPECT_LE(info.spine_pinned_bytes, previous_pinned);  // a deeper ring leaves less to pin
    previous_pinned = info.spine_pinned_bytes;
    EXPECT_GT(info.spine_streamed_bytes, 0u);
    auto session = (*engine)->NewSession();
    ExpectLogitsMatchMappedEngine(session.get());
    // Every streamed byte is read once per token, pinned ones never again.
    const SessionStats before = session->stats();
    ASSERT_TRUE(session->Decode(7).ok());
    EXPECT_EQ(session->stats().spine_bytes_read - before.spine_bytes_read,
              info.spine_streamed_bytes);
    // The disk probe for this plan reads one step's ring chunks and experts (bench decode).
    auto probe = (*engine)->ProbeDiskBandwidth(16, 5);
    ASSERT_TRUE(probe.ok()) << probe.status().message();
    EXPECT_GT(probe->bytes_per_second, 0.0);
    EXPECT_EQ(probe->pattern.rfind("one decode step's reads: the streamed spine's ring chunks", 0),
              0u)
        << probe->pattern;
  }
  // With a resident spine decode reads only experts, and so does the probe.
  options.mem_limit = 0;
  auto resident = Engine::Load(options);
  ASSERT_TRUE(resident.ok()) << resident.status().message();
  ASSERT_TRUE((*resident)->info().spine_resident);
  auto probe = (*resident)->ProbeDiskBandwidth(16, 5);
  ASSERT_TRUE(probe.ok()) << probe.status().message();
  EXPECT_GT(probe->bytes_per_second, 0.0);
  EXPECT_EQ(probe->pattern, "16 random expert reads");
}

// The reads a disk probe makes for one step of a streamed spine are the ring's own: every chunk
// of every streamed group once, in pass order, and nothing of a pinned group.
TEST(SpineRing, StreamedReadsAreOnePassOfTheStreamedGroups) {
  auto weights = ModelWeights::Load(testing::GoldenModelDir(), BindOptions{});
  ASSERT_TRUE(weights.ok()) << weights.status().message();
  const ModelWeights& w = **weights;
  std::vector<bool> every_other(w.layers.size() + 1);
  for (size_t g = 0; g < every_other.size(); g += 2) every_other[g] = true;
  SpineRingOptions o;
  o.pinned = every_other;
  auto ring = SpineRing::Create(w, o);
  ASSERT_TRUE(ring.ok()) << ring.status().message();
  const auto reads = (*ring)->StreamedReads();
  ASSERT_FALSE(reads.empty());
  uint64_t bytes = 0;
  int64_t previous_group = -1;
  for (const auto& r : reads) {
    EXPECT_FALSE(every_other[static_cast<size_t>(r.group)]) << r.group;
    EXPECT_GE(r.group, previous_group);
    EXPECT_LE(r.bytes, SpineRing::kChunkBytes);
    previous_group = r.group;
    bytes += r.bytes;
  }
  // The ring counts a group's bytes from block-aligned extent starts, rounded up to whole blocks
  // between extents; the chunks cover each extent exactly, so they can only be fewer.
  EXPECT_LE(bytes, (*ring)->streamed_bytes_per_pass());
  EXPECT_GT(bytes + 4096 * reads.size(), (*ring)->streamed_bytes_per_pass());
  const size_t capacity = DirectFile::BufferBytesFor(SpineRing::kChunkBytes);
  std::unique_ptr<uint8_t, decltype(&std::free)> buffer(
      static_cast<uint8_t*>(std::aligned_alloc(DirectFile::kIoAlignment, capacity)), &std::free);
  for (const auto& r : reads) {
    const Status st = (*ring)->ReadForProbe(r, buffer.get(), capacity);
    ASSERT_TRUE(st.ok()) << st.message();
  }
}

// A spine read that fails (here: the ring reads a shard that is short, while the mapping the
// rest of the model uses still sees the whole file) fails the pass with an error naming the
// layer, the tensor, the file and the offset; nothing of the failed read is used: with the file
// whole again, the next pass reads the layer again and computes the mapped engine's logits.
TEST(SpineRing, AShortReadNamesLayerTensorFileAndOffsetAndIsReadAgain) {
  testing::ScopedTempDir dir;
  for (const auto& entry : std::filesystem::directory_iterator(testing::GoldenModelDir())) {
    std::filesystem::copy(entry.path(), dir.Join(entry.path().filename().string()));
  }
  // Shard 2 holds layer 3's spine from byte 70768 on; cut at 400000, layer 3's attention
  // matrices come back short.
  const std::string shard = dir.Join("model-00002-of-000003.safetensors");
  std::ifstream in(shard, std::ios::binary);
  const std::string original((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  in.close();
  ASSERT_GT(original.size(), 400000u);
  auto weights = ModelWeights::Load(dir.path(), BindOptions{});  // maps the whole file
  ASSERT_TRUE(weights.ok()) << weights.status().message();
  {  // a new, short file under the shard's name: the ring opens this one, the mapping keeps its own
    std::ofstream out(shard + ".short", std::ios::binary);
    out.write(original.data(), 400000);
  }
  std::filesystem::rename(shard + ".short", shard);
  SpineRingOptions o;
  o.depth = 2;
  o.readers = 2;
  auto ring = SpineRing::Create(**weights, o);
  ASSERT_TRUE(ring.ok()) << ring.status().message();
  ForwardPass pass(**weights, 8, 64);
  pass.SetSpineSource(ring->get());
  const std::vector<int32_t> prompt = {632, 304, 32};
  std::vector<float> logits(prompt.size() * static_cast<size_t>((*weights)->config.vocab_size));
  const Status st = pass.Run(prompt.data(), 3, true, logits.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("spine layer 3 "), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("model-00002-of-000003.safetensors"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("offset"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("short read"), std::string::npos) << st.message();
  // Pinned groups are read at construction, by several threads: the same short read fails
  // Create, named the same way.
  SpineRingOptions all_pinned = o;
  all_pinned.pinned.assign((*weights)->layers.size() + 1, true);
  all_pinned.readers = 4;
  auto refused = SpineRing::Create(**weights, all_pinned);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("spine layer 3 "), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("short read"), std::string::npos)
      << refused.status().message();
  {
    std::ofstream out(shard, std::ios::binary | std::ios::trunc);
    out.write(original.data(), static_cast<std::streamsize>(original.size()));
  }
  ForwardPass again(**weights, 8, 64), plain(**weights, 8, 64);
  again.SetSpineSource(ring->get());
  std::vector<float> want(logits.size());
  ASSERT_TRUE(plain.Run(prompt.data(), 3, true, want.data()).ok());
  const Status retry = again.Run(prompt.data(), 3, true, logits.data());
  ASSERT_TRUE(retry.ok()) << retry.message();
  EXPECT_EQ(logits, want);
}

// The ring under the forward pass directly, with mapped experts: no layer pinned, every other
// one pinned, and depths 1, 2 and 4 all give the plain pass's logits for a prefill chunk and the
// decode steps after it. Two passes sharing one ring (as sessions of one engine do) stay exact.
TEST(SpineRing, MatchesTheMappedSpineForEveryDepthAndPinSet) {
  auto weights = ModelWeights::Load(testing::GoldenModelDir(), BindOptions{});
  ASSERT_TRUE(weights.ok()) << weights.status().message();
  const ModelWeights& w = **weights;
  const int64_t vocab = w.config.vocab_size;
  const size_t groups = w.layers.size() + 1;
  std::vector<bool> every_other(groups);
  for (size_t g = 0; g < groups; g += 2) every_other[g] = true;
  const std::vector<int32_t> prompt = {632, 304, 32, 17, 5};
  for (const auto& pinned : {std::vector<bool>{}, every_other}) {
    for (int depth : {1, 2, 4}) {
      SCOPED_TRACE("depth " + std::to_string(depth) + (pinned.empty() ? ", none pinned" : ""));
      SpineRingOptions o;
      o.depth = depth;
      o.readers = 3;
      o.pinned = pinned;
      auto ring = SpineRing::Create(w, o);
      ASSERT_TRUE(ring.ok()) << ring.status().message();
      EXPECT_EQ((*ring)->depth(), depth);
      ForwardPass plain(w, 8, 64), a(w, 8, 64), b(w, 8, 64);
      a.SetSpineSource(ring->get());
      b.SetSpineSource(ring->get());
      std::vector<float> want(prompt.size() * vocab), got(prompt.size() * vocab);
      ASSERT_TRUE(plain.Run(prompt.data(), 5, true, want.data()).ok());
      for (ForwardPass* f : {&a, &b}) {
        ASSERT_TRUE(f->Run(prompt.data(), 5, true, got.data()).ok());
        ASSERT_EQ(got, want);
      }
      for (int32_t token : {3, 99, 250}) {
        ASSERT_TRUE(plain.Run(&token, 1, false, want.data()).ok());
        for (ForwardPass* f : {&a, &b}) {
          ASSERT_TRUE(f->Run(&token, 1, false, got.data()).ok());
          ASSERT_TRUE(std::equal(want.begin(), want.begin() + vocab, got.begin()));
        }
      }
    }
  }
}

}  // namespace
}  // namespace deltafin
