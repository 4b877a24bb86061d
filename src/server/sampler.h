// Token sampling from one position's logits: temperature, top-k, top-p (nucleus), seeded.
//
// Temperature 0 is greedy and returns exactly ArgmaxToken (ties to the lowest id). Otherwise the
// candidates are sorted by logit (ties by id), cut to top_k, softmaxed at the temperature in
// double precision, cut to the smallest prefix whose mass reaches top_p, and one is drawn with a
// uniform number from a 64-bit Mersenne Twister: the same seed gives the same tokens on every
// machine (no std:: distributions, whose algorithms are implementation-defined).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "server/request.h"

namespace deltafin::server {

class Sampler {
 public:
  // Without a seed, the generator is seeded from std::random_device.
  explicit Sampler(const SamplingParams& params);
  int32_t Sample(std::span<const float> logits);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;
  std::vector<double> probs_;
};

}  // namespace deltafin::server
