// Prefill waves (docs/STREAMING.md "Prefill waves") on the golden tiny K3 checkpoint: the planned
// wave (the whole prompt in one forward pass), fixed chunks of 32 and 7 and token-by-token
// prefill (--prefill-chunk 1) give the same logits at every position, bit for bit, with experts
// mapped, streamed through the smallest cache (so a layer's union needs several batches) and
// with the spine streamed through its ring; greedy decoding after a wave is plain decoding's. A
// wave reads each expert it needs once per MoE layer; a prefill of several waves allocates
// nothing after warm-up; a prompt longer than the context fails before any work; the plan prints
// the wave and refuses one that does not fit, with the numbers; an interrupt stops a wave and
// resets the session.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "deltafin/engine.h"
#include "golden/golden_data.h"
#include "weights/config.h"
#include "weights/expert_streamer.h"

namespace deltafin::testing {
extern std::atomic<uint64_t> g_allocations;
}

namespace deltafin {
namespace {

constexpr int64_t kPromptTokens = 70;
constexpr int kDecodeSteps = 6;

std::vector<int32_t> Prompt(int64_t vocab) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < kPromptTokens; ++i)
    ids.push_back(static_cast<int32_t>((5 + 131 * i) % vocab));
  return ids;
}

struct Result {
  std::vector<float> prompt_logits;  // every prompt position
  std::vector<float> last_logits;    // Logits() after a prefill without all_logits
  std::vector<int32_t> greedy;       // tokens decoded after that prefill
  std::vector<float> decode_logits;  // each decode step's
  SessionStats prefill_stats;        // the all_logits prefill's
  int64_t wave = 0;
  uint64_t spine_streamed_bytes = 0;  // per pass (a streamed spine)
};

Result Prefill(EngineOptions options, int64_t chunk) {
  options.prefill_chunk = chunk;
  Result r;
  auto engine = Engine::Load(options);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  if (!engine.ok()) return r;
  r.wave = (*engine)->info().prefill_wave;
  r.spine_streamed_bytes = (*engine)->info().spine_streamed_bytes;
  const int64_t vocab = (*engine)->info().vocab_size;
  const auto prompt = Prompt(vocab);
  auto session = (*engine)->NewSession();
  r.prompt_logits.resize(prompt.size() * static_cast<size_t>(vocab));
  Status st = session->Prefill(prompt, r.prompt_logits);
  EXPECT_TRUE(st.ok()) << st.message();
  r.prefill_stats = session->stats();
  // Again without all_logits: only the last position's logits are computed.
  session->Reset();
  st = session->Prefill(prompt);
  EXPECT_TRUE(st.ok()) << st.message();
  r.last_logits.assign(session->Logits().begin(), session->Logits().end());
  for (int i = 0; i < kDecodeSteps && st.ok(); ++i) {
    r.greedy.push_back(ArgmaxToken(session->Logits()));
    st = session->Decode(r.greedy.back());
    EXPECT_TRUE(st.ok()) << st.message();
    r.decode_logits.insert(r.decode_logits.end(), session->Logits().begin(),
                           session->Logits().end());
  }
  return r;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Token-by-token prefill (chunk 1) is the reference: no split changes any arithmetic.
// `whole_prompt`: the budget holds a wave of the whole prompt.
void ExpectWavesMatchSteps(const EngineOptions& options, bool whole_prompt = true) {
  const Result steps = Prefill(options, 1);
  ASSERT_FALSE(steps.prompt_logits.empty());
  const size_t vocab = steps.last_logits.size();
  // The last prompt position's row is what a plain prefill leaves in Logits().
  EXPECT_EQ(std::memcmp(steps.prompt_logits.data() + (kPromptTokens - 1) * vocab,
                        steps.last_logits.data(), vocab * sizeof(float)),
            0);
  for (int64_t chunk : {int64_t{0}, int64_t{32}, int64_t{7}}) {
    SCOPED_TRACE(chunk == 0 ? std::string("planned wave") : "chunk " + std::to_string(chunk));
    const Result got = Prefill(options, chunk);
    if (chunk == 0 && whole_prompt) {
      EXPECT_GE(got.wave, kPromptTokens) << "the whole prompt should be one wave";
    } else if (chunk == 0) {
      EXPECT_GE(got.wave, 32);
    } else {
      EXPECT_EQ(got.wave, chunk);
    }
    const auto waves = static_cast<uint64_t>((kPromptTokens + got.wave - 1) / got.wave);
    EXPECT_EQ(got.prefill_stats.forward_calls, waves);
    // A streamed spine: each streamed layer is read once per wave.
    EXPECT_EQ(got.prefill_stats.spine_bytes_read, waves * got.spine_streamed_bytes);
    EXPECT_TRUE(SameBits(got.prompt_logits, steps.prompt_logits)) << "prompt logits differ";
    EXPECT_TRUE(SameBits(got.last_logits, steps.last_logits)) << "last logits differ";
    EXPECT_EQ(got.greedy, steps.greedy);
    EXPECT_TRUE(SameBits(got.decode_logits, steps.decode_logits)) << "decode logits differ";
  }
}

EngineOptions Golden() {
  EngineOptions o;
  o.model_dir = testing::GoldenModelDir();
  o.context_capacity = 128;  // the prompt and the decode steps; small buffers keep this quick
  return o;
}

// Streamed experts through the smallest cache: max_batch() (5 here) is below a 70-position
// wave's union (all 16 experts), so every layer runs in several batches.
EngineOptions StreamedSmallestCache() {
  EngineOptions o = Golden();
  o.experts = EngineOptions::Experts::kStreamed;
  o.io_threads = 2;
  auto config = LoadModelConfig(o.model_dir);
  EXPECT_TRUE(config.ok());
  o.expert_cache_bytes = ExpertStreamer::MinCacheBytes(*config, o.io_threads);
  return o;
}

TEST(PrefillWave, MappedExpertsResidentSpine) {
  EngineOptions o = Golden();
  o.experts = EngineOptions::Experts::kMapped;
  ExpectWavesMatchSteps(o);
}

TEST(PrefillWave, StreamedExpertsSmallestCache) {
  for (auto lookahead : {EngineOptions::Lookahead::kLayerOutput, EngineOptions::Lookahead::kOff,
                         EngineOptions::Lookahead::kBoth}) {
    SCOPED_TRACE("lookahead " + std::to_string(static_cast<int>(lookahead)));
    EngineOptions o = StreamedSmallestCache();
    o.lookahead = lookahead;
    ExpectWavesMatchSteps(o);
  }
}

TEST(PrefillWave, StreamedExpertsAndStreamedSpine) {
  EngineOptions o = StreamedSmallestCache();
  o.expert_cache_bytes = 0;
  auto config = LoadModelConfig(o.model_dir);
  ASSERT_TRUE(config.ok());
  auto full = Engine::Plan(o);
  ASSERT_TRUE(full.ok()) << full.status().message();
  // Just under what a resident spine needs with the smallest wave: the spine streams, and the
  // pins take most of what is left, so the wave stays near the smallest (several waves).
  EngineOptions smallest = o;
  smallest.prefill_chunk = 32;
  auto small = Engine::Plan(smallest);
  ASSERT_TRUE(small.ok()) << small.status().message();
  o.mem_limit = small->session_bytes + ExpertStreamer::MinCacheBytes(*config, o.io_threads) +
                full->spine_bytes - 4096;
  auto plan = Engine::Plan(o);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_FALSE(plan->spine_resident) << plan->memory_plan;
  ASSERT_GT(plan->spine_streamed_bytes, 0u) << plan->memory_plan;
  ExpectWavesMatchSteps(o, false);
}

// In one wave each MoE layer reads each expert it needs once: the loads are the layers' unions
// (at most every expert of every MoE layer), every byte read was needed, and fixed chunks of 7
// load (and read) more.
TEST(PrefillWave, AWaveReadsEachNeededExpertOnce) {
  EngineOptions o = StreamedSmallestCache();
  o.lookahead = EngineOptions::Lookahead::kOff;
  auto config = LoadModelConfig(o.model_dir);
  ASSERT_TRUE(config.ok());
  const Result wave = Prefill(o, 0);
  const SessionStats& s = wave.prefill_stats;
  EXPECT_EQ(s.forward_calls, 1u);
  EXPECT_LE(s.expert_loads, static_cast<uint64_t>(config->num_moe_layers() * config->num_experts));
  EXPECT_GT(s.expert_loads, 0u);
  EXPECT_EQ(s.expert_bytes_read, s.expert_bytes_needed);
  // Cold: the only hits are the next batch's experts, read ahead as guesses while a batch ran.
  EXPECT_LE(s.expert_cache_hits, s.prefetch_hits);
  const Result chunks = Prefill(o, 7);
  EXPECT_GT(chunks.prefill_stats.expert_loads, s.expert_loads);
  EXPECT_GT(chunks.prefill_stats.expert_bytes_read, s.expert_bytes_read);
}

// After a warm-up prefill, a prefill of several waves (streamed experts and guesses included)
// allocates nothing: every buffer was reserved for the wave when the session was made.
TEST(PrefillWave, SeveralWavesAllocateNothingAfterWarmUp) {
  for (int64_t chunk : {int64_t{0}, int64_t{16}}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    EngineOptions o = StreamedSmallestCache();
    o.lookahead = EngineOptions::Lookahead::kBoth;
    o.prefill_chunk = chunk;
    auto engine = Engine::Load(o);
    ASSERT_TRUE(engine.ok()) << engine.status().message();
    const auto prompt = Prompt((*engine)->info().vocab_size);
    auto session = (*engine)->NewSession();
    std::vector<float> all(prompt.size() * static_cast<size_t>((*engine)->info().vocab_size));
    ASSERT_TRUE(session->Prefill(prompt, all).ok());
    session->Reset();
    int64_t waves = 0;
    const PrefillProgress count = [&waves](int64_t, int64_t) { ++waves; };
    const uint64_t before = testing::g_allocations.load();
    const Status st = session->Prefill(prompt, all, count);
    const uint64_t after = testing::g_allocations.load();
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(after - before, 0u);
    EXPECT_EQ(waves, chunk == 0 ? 1 : (kPromptTokens + chunk - 1) / chunk);
  }
}

// Raises the interrupt flag when a forward pass reaches `layer`'s attention, as a server's
// disconnect would in the middle of a wave.
class RaiseAt : public ForwardObserver {
 public:
  RaiseAt(std::atomic<bool>* flag, int64_t layer) : flag_(flag), layer_(layer) {}
  void OnActivation(int64_t, int64_t layer, const char* name, std::span<const float>) override {
    if (layer == layer_ && std::strcmp(name, "attn_in") == 0) flag_->store(true);
  }

 private:
  std::atomic<bool>* flag_;
  int64_t layer_;
};

// An interrupt raised in the middle of a wave (experts streamed, so the MoE layers check between
// experts too) stops the prefill before the wave's end and leaves the session reset; a prefill
// afterwards gives the logits of a session that was never interrupted.
TEST(PrefillWave, AnInterruptStopsTheWaveAndResetsTheSession) {
  for (const EngineOptions& o : {Golden(), StreamedSmallestCache()}) {
    auto engine = Engine::Load(o);
    ASSERT_TRUE(engine.ok()) << engine.status().message();
    const auto prompt = Prompt((*engine)->info().vocab_size);
    auto reference = (*engine)->NewSession();
    ASSERT_TRUE(reference->Prefill(prompt).ok());
    const std::vector<float> expected(reference->Logits().begin(), reference->Logits().end());

    auto session = (*engine)->NewSession();
    std::atomic<bool> stop{false};
    RaiseAt raise(&stop, 3);
    session->SetObserver(&raise);
    session->SetInterrupt(&stop);
    const Status st = session->Prefill(prompt);
    ASSERT_FALSE(st.ok());
    EXPECT_TRUE(IsInterrupted(st)) << st.message();
    EXPECT_EQ(session->position(), 0);
    // A flag already up stops the next prefill before its first layer.
    EXPECT_TRUE(IsInterrupted(session->Prefill(prompt)));
    // Lowered (or cleared), the session prefills as a fresh one would.
    stop.store(false);
    session->SetObserver(nullptr);
    ASSERT_TRUE(session->Prefill(prompt).ok());
    const std::vector<float> got(session->Logits().begin(), session->Logits().end());
    EXPECT_TRUE(SameBits(got, expected));
    // Decode ignores the flag.
    stop.store(true);
    EXPECT_TRUE(session->Decode(prompt[0]).ok());
  }
}

TEST(PrefillWave, APromptLongerThanTheContextFailsBeforeAnyWork) {
  EngineOptions o = Golden();
  o.context_capacity = 40;
  o.prefill_chunk = 8;
  auto engine = Engine::Load(o);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  auto session = (*engine)->NewSession();
  const auto prompt = Prompt((*engine)->info().vocab_size);
  const Status st = session->Prefill(prompt);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("prompt too long: 70 tokens at position 0 exceed the context "
                              "capacity of 40"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(session->position(), 0);
  EXPECT_EQ(session->stats().forward_calls, 0u);
}

TEST(PrefillWave, ThePlanPrintsTheWaveAndRefusesOneThatDoesNotFit) {
  EngineOptions o = Golden();
  o.context_capacity = 512;
  auto plan = Engine::Plan(o);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->prefill_wave, 512);  // the whole context fits this machine
  EXPECT_FALSE(plan->prefill_wave_fixed);
  EXPECT_NE(plan->memory_plan.find("prefill wave: 512 positions (the whole context)"),
            std::string::npos)
      << plan->memory_plan;
  // A budget that holds the smallest wave but not the whole context: the wave is what half the
  // memory left holds, and the session's bytes count its buffers.
  o.experts = EngineOptions::Experts::kStreamed;
  o.mem_limit = 0;
  auto streamed = Engine::Plan(o);
  ASSERT_TRUE(streamed.ok()) << streamed.status().message();
  o.context_capacity = 8192;
  o.mem_limit = streamed->session_bytes + streamed->spine_bytes + (24ull << 20);
  auto tight = Engine::Plan(o);
  ASSERT_TRUE(tight.ok()) << tight.status().message();
  EXPECT_GE(tight->prefill_wave, 32);
  EXPECT_LT(tight->prefill_wave, 8192);
  EXPECT_NE(tight->memory_plan.find("(what the budget holds)"), std::string::npos)
      << tight->memory_plan;
  EXPECT_LE(tight->session_bytes + tight->spine_bytes + tight->expert_cache_bytes,
            tight->memory_budget);
  // A fixed chunk too large for the budget fails at startup with the numbers.
  o.prefill_chunk = 8192;
  auto refused = Engine::Plan(o);
  ASSERT_FALSE(refused.ok());
  const std::string& m = refused.status().message();
  EXPECT_NE(m.find("too small"), std::string::npos) << m;
  EXPECT_NE(m.find("with prefill buffers for 8192 positions (--prefill-chunk)"), std::string::npos)
      << m;
  // With fixed chunks the plan says so.
  o.prefill_chunk = 16;
  auto fixed = Engine::Plan(o);
  ASSERT_TRUE(fixed.ok()) << fixed.status().message();
  EXPECT_EQ(fixed->prefill_wave, 16);
  EXPECT_TRUE(fixed->prefill_wave_fixed);
  EXPECT_NE(fixed->memory_plan.find("prefill: fixed chunks of 16 positions"), std::string::npos)
      << fixed->memory_plan;
}

}  // namespace
}  // namespace deltafin
