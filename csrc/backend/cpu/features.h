// The row pass of AffineAct (features.cpp), shared with the convolutions' fused epilogue
// (conv.cpp): one compiled function, so a fused epilogue rounds exactly as the separate pass.
#pragma once

#include <cstdint>

namespace lattice {

// Y[r, c] = act(X[r, c] * S[c] + H[c] [+ R[r, c]]) for rows [b, e) of C channels (R null:
// no residual; act = max(., 0) when relu, NaN kept), float32 without FMA contraction. X's and
// Y's rows are `ld` floats apart (C, or more where other columns follow them: the fused
// epilogue's concatenation), R's C. Y may be X. Declared without LATTICE_X86_CLONES: callers elsewhere call the ifunc symbol, which
// picks features.cpp's x86-64-v3 clone or its baseline as AffineAct's own calls do.
void affine_rows(const float* X, const float* S, const float* H, const float* R, float* Y, int64_t b, int64_t e,
                 int64_t C, int64_t ld, bool relu);

}  // namespace lattice
