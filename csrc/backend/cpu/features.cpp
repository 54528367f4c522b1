// CPU row-wise feature pass: out = act(x * scale + shift [+ residual]) in one read of the
// operands and one write, rows spread over the cores (each element is computed alone, so
// the result does not depend on the thread count). This is what an eval-mode BatchNorm,
// the residual add after it and the ReLU cost together: MLX's CPU ops take one pass each.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/dtype_convert.h"
#include "core/parallel.h"
#include "primitives.h"

namespace lattice {

namespace {

// Rows [b, e) of C channels, float32 throughout.
void affine_rows(const float* __restrict X, const float* __restrict S, const float* __restrict H,
                 const float* __restrict R, float* __restrict Y, int64_t b, int64_t e, int64_t C, bool relu) {
  for (int64_t r = b; r < e; ++r) {
    const int64_t o = r * C;
    for (int64_t c = 0; c < C; ++c) {
      float v = X[o + c] * S[c] + H[c];
      if (R != nullptr) v += R[o + c];
      if (relu) v = v < 0.0f ? 0.0f : v;  // max(v, 0); NaN stays NaN as in mx.maximum
      Y[o + c] = v;
    }
  }
}

}  // namespace

void AffineAct::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  dispatch_cpu(stream(), inputs, outputs[0], [res = has_residual_, relu = relu_](std::vector<mx::array>& in,
                                                                                  mx::array& out) {
    const int64_t n = in[0].shape(0), C = in[0].shape(1);
    if (n == 0 || C == 0) return;
    // 16-bit operands are read through float32 copies and the result stored back (as_f32 /
    // store_from_f32, as the convolutions do); float32 ones are read and written in place.
    std::vector<float> xs, rs, ys;
    const float* X = as_f32(in[0], xs);
    const float* R = res ? as_f32(in[3], rs) : nullptr;
    const float* S = in[1].data<float>();
    const float* H = in[2].data<float>();
    float* Y = out.dtype() == mx::float32 ? out.data<float>() : (ys.resize(static_cast<size_t>(n) * C), ys.data());
    parallel_for(n, [&](int64_t b, int64_t e) { affine_rows(X, S, H, R, Y, b, e, C, relu); },
                 std::max<int64_t>(1, 16384 / C));
    if (out.dtype() != mx::float32) store_from_f32(Y, out);
  });
}

}  // namespace lattice
