// Token sampling from one position's logits: temperature, top-k, top-p (nucleus), seeded. Part
// of the engine API next to ArgmaxToken, so `deltafin run` and the server draw tokens the same
// way from the same flags or request fields.
//
// Temperature 0 is greedy and returns exactly ArgmaxToken (ties to the lowest id). Otherwise the
// candidates are sorted by logit (ties by id), cut to top_k, softmaxed at the temperature in
// double precision, cut to the smallest prefix whose mass reaches top_p, and one is drawn with a
// uniform number from a 64-bit Mersenne Twister: the same seed gives the same tokens on every
// machine (no std:: distributions, whose algorithms are implementation-defined).
//
// Penalties (docs/SERVER.md "Penalties"), applied to a copy of the logits before everything else
// (greedy included): repetition_penalty with llama-server / Hugging Face semantics (a positive
// logit is divided by it, a negative one multiplied) over the distinct tokens among the last
// repeat_last_n tokens, prompt included; then frequency_penalty * count + presence_penalty
// subtracted for every token the sampler has produced so far (OpenAI: generated tokens only).
// The sampler records each token it returns (Sample, AcceptOrResample: one call per emitted
// token, in order, also under speculation, so a verified draft is judged with the penalties of the
// tokens before it); Peek draws without recording. Buffers are sized once from the vocabulary, so
// a step does not allocate.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace deltafin {

struct SamplingParams {
  double temperature = 0;  // 0 = greedy (ArgmaxToken)
  double top_p = 1;        // nucleus mass in (0, 1]; 1 = no cut
  int64_t top_k = 0;       // 0 = no top-k cut
  std::optional<uint64_t> seed;
  double frequency_penalty = 0;   // -2..2, per earlier occurrence in the answer
  double presence_penalty = 0;    // -2..2, once for a token the answer already has
  double repetition_penalty = 1;  // > 0; 1 = off
  int64_t repeat_last_n = 64;     // the repetition penalty's window (prompt included); 0 = off
  bool penalized() const {
    return frequency_penalty != 0 || presence_penalty != 0 ||
           (repetition_penalty != 1 && repeat_last_n > 0);
  }
};

class Sampler {
 public:
  // Without a seed, the generator is seeded from std::random_device.
  explicit Sampler(const SamplingParams& params);
  int32_t Sample(std::span<const float> logits);
  // The same draw restricted to the ids with allowed[id] != 0 (constrained decoding; allowed has
  // logits.size() entries): the others are not candidates, so greedy is the best allowed id and
  // top-k/top-p count allowed ids only. Returns -1 when nothing is allowed. Allocation-free once
  // the candidate buffer has grown to the allowed count.
  int32_t Sample(std::span<const float> logits, std::span<const uint8_t> allowed);
  // Sample(logits, allowed) without recording the token (a draw that may be refused); Record
  // then counts the token that was emitted.
  int32_t Peek(std::span<const float> logits, std::span<const uint8_t> allowed);
  void Record(int32_t token);
  // Sizes the candidate and penalty buffers for a vocabulary, so that no later draw allocates
  // (a masked draw otherwise grows them to the most ids it has allowed).
  void Reserve(size_t vocab);
  // The prompt's tokens, for the repetition penalty's window (before the first draw).
  void SetPrompt(std::span<const int32_t> prompt);
  // Speculative verification (deltafin/speculate.h): draws this position's token exactly as
  // Sample does (the same single random number) and keeps the point-mass draft `draft` iff it is
  // that token, so P(keep) = p(draft) and the token has distribution p. Returns the token and sets
  // *accepted. One draw per emitted token, as in plain decoding: a seed's tokens do not depend on
  // how many drafts were verified. Greedy: accepted iff draft is ArgmaxToken(logits) (which is
  // returned either way); no random number is drawn.
  int32_t AcceptOrResample(std::span<const float> logits, int32_t draft, bool* accepted);

 private:
  // Fills cand_ (sorted), probs_ (unnormalised) and returns the kept count; 0 when greedy.
  size_t Prepare(std::span<const float> logits, std::span<const uint8_t> allowed);
  double Uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }
  // The logits to draw from: `logits` itself, or the penalised copy.
  std::span<const float> Penalize(std::span<const float> logits);
  void Size(size_t vocab);  // sizes the penalty buffers (once)

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;
  std::vector<double> probs_;
  // Penalties.
  std::vector<float> work_;        // the penalised logits
  std::vector<int32_t> counts_;    // per token: times produced
  std::vector<int32_t> produced_;  // the distinct produced tokens
  std::vector<int32_t> window_;    // ring of the last repeat_last_n tokens
  size_t window_next_ = 0, window_size_ = 0;
  std::vector<uint8_t> applied_;  // per token: repetition penalty applied this draw
};

}  // namespace deltafin
