// Entry point of kernels/activation.h: one Highway dispatch per call, elements split over the
// default pool in parts of at least kMinElementsPerPart (smaller calls stay on the calling thread).
#include "kernels/activation.h"

#include "base/thread_pool.h"
#include "kernels/dispatch.h"
#include "kernels/ref/activation_ref.h"

namespace deltafin::kernels {

namespace {
constexpr int64_t kMinElementsPerPart = 16 * 1024;
}  // namespace

void SituInPlace(float* gate, const float* up, int64_t n, float beta, float linear_beta) {
  const internal::SituFn fn = internal::ChooseSitu();
  DefaultPool().ParallelRanges(n, kMinElementsPerPart, [&](int64_t i0, int64_t i1) {
    fn(gate + i0, up + i0, i1 - i0, beta, linear_beta);
  });
}

namespace {
void SplitOverPool(internal::GateFn fn, float* x, int64_t n) {
  DefaultPool().ParallelRanges(n, kMinElementsPerPart,
                               [&](int64_t i0, int64_t i1) { fn(x + i0, i1 - i0); });
}
}  // namespace

void ExpInPlace(float* x, int64_t n) { SplitOverPool(internal::ChooseExp(), x, n); }
void SigmoidInPlace(float* x, int64_t n) { SplitOverPool(internal::ChooseSigmoid(), x, n); }
void SiluInPlace(float* x, int64_t n) { SplitOverPool(internal::ChooseSilu(), x, n); }
float Sigmoid(float x) { return ref::Sigmoid(x); }
void SoftmaxInPlace(float* x, int64_t n) { internal::ChooseSoftmax()(x, n); }

}  // namespace deltafin::kernels
