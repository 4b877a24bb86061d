// The decode driver (deltafin/generator.h) on the golden model: its steps do not allocate after
// warm-up (speculation on and off, greedy and seeded sampling); the ids, and the logits handed out
// with each of them, are the same with speculation on and off; each stop rule ends with its own
// finish reason; and a constrained generation is masked and never speculates.
#include "deltafin/generator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "deltafin/engine.h"
#include "golden/golden_data.h"
#include "golden/test_drafters.h"

namespace deltafin::testing {
extern std::atomic<uint64_t> g_allocations;
}

namespace deltafin {
namespace {

std::unique_ptr<Engine> Load(int64_t context_capacity = 0) {
  EngineOptions options;
  options.model_dir = testing::GoldenModelDir();
  options.max_draft = 8;
  options.threads = 1;  // a tiny model: the pool's hand-offs would cost more than the work
  options.context_capacity = context_capacity;
  auto engine = Engine::Load(options);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

// A prompt that repeats a phrase, so the n-gram drafter has matches to offer.
std::vector<int32_t> CopyPrompt(int64_t vocab) {
  std::vector<int32_t> phrase;
  std::mt19937 rng(7);
  for (int i = 0; i < 12; ++i) phrase.push_back(static_cast<int32_t>(rng() % vocab));
  std::vector<int32_t> prompt = phrase;
  prompt.insert(prompt.end(), phrase.begin(), phrase.begin() + 6);
  return prompt;
}

// Records the tokens, a hash of the logits each was drawn from, and the allocations from the
// first step's start to the end of the generation (nothing here allocates: room is reserved).
class Recorder : public GenerationCallbacks {
 public:
  explicit Recorder(int64_t stop_after = -1) : stop_after_(stop_after) {
    tokens.reserve(256);
    logit_hashes.reserve(256);
  }
  void OnStepStart() override {
    if (first_start_) start_allocations = testing::g_allocations.load();
    first_start_ = false;
  }
  void OnStep(const GenerationStep& step) override {
    if (step.pass.rows > 1) ++verify_steps;
    if (step.tokens.size() > 1) ++multi_token_steps;
  }
  bool OnToken(int32_t token, std::span<const float> logits) override {
    tokens.push_back(token);
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the logits' bytes
    for (float f : logits) {
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof bits);
      h = (h ^ bits) * 1099511628211ull;
    }
    logit_hashes.push_back(h);
    return stop_after_ < 0 || static_cast<int64_t>(tokens.size()) < stop_after_;
  }
  std::vector<int32_t> tokens;
  std::vector<uint64_t> logit_hashes;
  uint64_t start_allocations = 0;
  int64_t verify_steps = 0, multi_token_steps = 0;

 private:
  int64_t stop_after_;
  bool first_start_ = true;
};

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<uint64_t> logit_hashes;
  GenerationResult result;
  uint64_t allocations = 0;  // in the measured (second) generation's steps
  int64_t verify_steps = 0, multi_token_steps = 0;
  std::vector<int32_t> fed;
  bool speculated = false;
};

using testing::CorruptedReplay;

// Generates twice from a fresh prefill of `prompt` with one Generator (the first is the
// warm-up), and returns the second. `speculate` without a `drafter`: n-gram drafts.
Outcome Generate(const Engine& engine, const std::vector<int32_t>& prompt, bool speculate,
                 GenerationParams params, int64_t stop_after = -1,
                 std::shared_ptr<Drafter> drafter = nullptr) {
  auto session = engine.NewSession();
  GeneratorOptions options;
  // Always draft (not adaptive), so the verify path is what runs.
  if (speculate) options.drafter = drafter ? drafter : std::make_shared<NgramDrafter>(4, 1);
  options.speculate.adaptive = false;
  Generator generator(session.get(), engine.info(), options);
  Outcome run;
  for (int pass = 0; pass < 2; ++pass) {
    session->Reset();
    EXPECT_TRUE(session->Prefill(prompt).ok());
    Recorder recorder(stop_after);
    run.result = generator.Generate(prompt, params, recorder);
    run.allocations = testing::g_allocations.load() - recorder.start_allocations;
    run.tokens = recorder.tokens;
    run.logit_hashes = recorder.logit_hashes;
    run.verify_steps = recorder.verify_steps;
    run.multi_token_steps = recorder.multi_token_steps;
  }
  run.fed.assign(generator.fed().begin(), generator.fed().end());
  run.speculated = generator.speculated();
  return run;
}

TEST(Generator, SameIdsAndLogitsWithSpeculationOnAndOffWithoutAllocating) {
  auto engine = Load();
  ASSERT_NE(engine, nullptr);
  const auto prompt = CopyPrompt(engine->info().vocab_size);
  SamplingParams seeded;
  seeded.temperature = 0.8;
  seeded.seed = 7;
  for (const SamplingParams& sampling : {SamplingParams{}, seeded}) {
    const std::string what = sampling.temperature > 0 ? "seed 7, temperature 0.8" : "greedy";
    const GenerationParams params{.sampling = sampling, .max_tokens = 40};
    const Outcome plain = Generate(*engine, prompt, false, params);
    const Outcome fast = Generate(*engine, prompt, true, params);
    const Outcome replayed =
        Generate(*engine, prompt, true, params, -1,
                 std::make_shared<CorruptedReplay>(
                     plain.tokens, static_cast<int64_t>(prompt.size()), engine->info().vocab_size));
    EXPECT_EQ(plain.tokens, replayed.tokens) << what;
    EXPECT_EQ(plain.logit_hashes, replayed.logit_hashes) << what;
    EXPECT_GT(replayed.multi_token_steps, 0) << what;  // passes that accepted drafts
    EXPECT_EQ(replayed.allocations, 0u) << what << ", replayed drafts";
    EXPECT_EQ(plain.result.reason, FinishReason::kLength) << what;
    EXPECT_EQ(plain.tokens.size(), 40u) << what;
    EXPECT_EQ(plain.tokens, fast.tokens) << what;
    EXPECT_EQ(plain.logit_hashes, fast.logit_hashes) << what;
    EXPECT_FALSE(plain.speculated) << what;
    EXPECT_TRUE(fast.speculated) << what;
    EXPECT_EQ(plain.verify_steps, 0) << what;
    EXPECT_GT(fast.verify_steps, 0) << what;  // the verify path ran
    EXPECT_EQ(plain.allocations, 0u) << what << ", plain";
    EXPECT_EQ(fast.allocations, 0u) << what << ", speculating";
    // Every token but the last was fed (verify passes may have fed more: they were not here).
    EXPECT_EQ(plain.fed, std::vector<int32_t>(plain.tokens.begin(), plain.tokens.end() - 1));
  }
  // The hooks are live.
  const uint64_t probe = testing::g_allocations.load();
  void* p = ::operator new(16);
  ::operator delete(p);
  EXPECT_GT(testing::g_allocations.load(), probe);
}

TEST(Generator, StopRulesEndWithTheirFinishReason) {
  auto engine = Load();
  ASSERT_NE(engine, nullptr);
  const auto prompt = CopyPrompt(engine->info().vocab_size);
  const Outcome reference = Generate(*engine, prompt, false, {.max_tokens = 30});
  ASSERT_EQ(reference.tokens.size(), 30u);
  // Speculating with the reference's own continuation as drafts (every third wrong), so verify
  // passes draw past the stops.
  const auto drafter = std::make_shared<CorruptedReplay>(
      reference.tokens, static_cast<int64_t>(prompt.size()), engine->info().vocab_size);
  for (const bool speculate : {false, true}) {
    const std::string what = speculate ? "speculating" : "plain";
    const auto generate = [&](const GenerationParams& params, int64_t stop_after = -1) {
      return Generate(*engine, prompt, speculate, params, stop_after, drafter);
    };
    // max_tokens.
    const Outcome length = generate({.max_tokens = 5});
    EXPECT_EQ(length.result.reason, FinishReason::kLength) << what;
    EXPECT_EQ(length.result.tokens, 5) << what;
    EXPECT_EQ(length.tokens,
              std::vector<int32_t>(reference.tokens.begin(), reference.tokens.begin() + 5))
        << what;
    // An end token: the generation ends at its first occurrence, which is handed out.
    const int32_t end = reference.tokens[7];
    const auto first = std::find(reference.tokens.begin(), reference.tokens.end(), end);
    const auto expected = static_cast<size_t>(first - reference.tokens.begin()) + 1;
    const Outcome eos = generate({.max_tokens = 30, .end_tokens = {&end, 1}});
    EXPECT_EQ(eos.result.reason, FinishReason::kEos) << what;
    EXPECT_EQ(eos.tokens.size(), expected) << what;
    EXPECT_EQ(eos.tokens.back(), end) << what;
    EXPECT_GE(eos.fed.size(), expected - 1) << what;  // a verify pass may have fed past it
    // The callback's stop.
    const Outcome stopped = generate({.max_tokens = 30}, 3);
    EXPECT_EQ(stopped.result.reason, FinishReason::kStopped) << what;
    EXPECT_EQ(stopped.tokens.size(), 3u) << what;
  }
  // The context: 5 positions after the prompt, so 5 tokens are fed and a 6th is drawn from the
  // last one's logits; it cannot be fed.
  auto small = Load(static_cast<int64_t>(prompt.size()) + 5);
  ASSERT_NE(small, nullptr);
  for (const bool speculate : {false, true}) {
    const Outcome context = Generate(*small, prompt, speculate, {.max_tokens = 30}, -1, drafter);
    EXPECT_EQ(context.result.reason, FinishReason::kContext) << speculate;
    EXPECT_EQ(context.tokens,
              std::vector<int32_t>(reference.tokens.begin(), reference.tokens.begin() + 6))
        << speculate;
  }
}

// Allows only the ids in [lo, lo + width) and is complete after `length` tokens.
class RangeConstraint : public TokenConstraint {
 public:
  RangeConstraint(int32_t lo, int32_t width, int64_t length)
      : lo_(lo), width_(width), length_(length) {}
  bool Ended() const override { return accepted_ >= length_; }
  int64_t Mask(std::span<uint8_t> allowed) override {
    std::fill(allowed.begin(), allowed.end(), 0);
    for (int32_t i = lo_; i < lo_ + width_; ++i) allowed[static_cast<size_t>(i)] = 1;
    return width_;
  }
  bool Accept(int32_t token) override {
    if (token < lo_ || token >= lo_ + width_) return false;
    ++accepted_;
    return true;
  }

 private:
  int32_t lo_, width_;
  int64_t length_;
  int64_t accepted_ = 0;
};

TEST(Generator, ConstrainedGenerationIsMaskedAndNeverSpeculates) {
  auto engine = Load();
  ASSERT_NE(engine, nullptr);
  const auto prompt = CopyPrompt(engine->info().vocab_size);
  SamplingParams seeded;
  seeded.temperature = 1;
  seeded.seed = 3;
  RangeConstraint constraint(10, 4, 6);
  auto session = engine->NewSession();
  ASSERT_TRUE(session->Prefill(prompt).ok());
  GeneratorOptions options;
  options.drafter = std::make_shared<NgramDrafter>(4, 1);
  Generator generator(session.get(), engine->info(), options);
  Recorder recorder;
  const GenerationResult result = generator.Generate(
      prompt, {.sampling = seeded, .max_tokens = 30, .constraint = &constraint}, recorder);
  EXPECT_EQ(result.reason, FinishReason::kConstraintComplete);
  EXPECT_EQ(recorder.tokens.size(), 6u);
  for (int32_t t : recorder.tokens) EXPECT_TRUE(t >= 10 && t < 14) << t;
  EXPECT_FALSE(generator.speculated());
  EXPECT_EQ(recorder.verify_steps, 0);
}

}  // namespace
}  // namespace deltafin
