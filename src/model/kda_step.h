// The KDA recurrence's per-head inner loops (docs/MODEL.md §4.4), in a file of their own so that
// GCC's loop vectorizer can be switched on for them alone (src/CMakeLists.txt; GCC's -O2 leaves
// loops of a run-time length scalar). Every loop here is elementwise: each state or output element
// gets the same multiplies and adds in the same order as one scalar iteration would, so the vector
// code gives the same bits. Reductions (the L2 and RMS norms) stay in kda.cc, where no vectorizer
// may reorder them.
#pragma once

#include <cstdint>

namespace deltafin {

// One position's state update of one head, S [dim k, dim v] row-major: 1. decay rows
// S[k][:] *= g[k]; 2. δ = v − Σ_k k̂[k]·S[k][:] (accumulated over k in increasing order, each
// element on its own); 3. S += β·k̂·δᵀ. δ is written to `delta`. The forward pass and the
// verify-pass replay (KdaRollbackTo) both call this one function, so a replayed state equals the
// decoded one bit for bit.
void KdaUpdateState(float* S, const float* g, const float* k, const float* v, float beta,
                    int64_t dim, float* delta);

// o = Σ_k q[k]·S[k][:] (over k in increasing order, each output element on its own).
void KdaReadState(const float* S, const float* q, int64_t dim, float* out);

}  // namespace deltafin
