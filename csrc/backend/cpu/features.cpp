// CPU row-wise feature pass: out = act(x * scale + shift [+ residual]) in one read of the
// operands and one write, rows spread over the cores (each element is computed alone, so
// the result does not depend on the thread count). This is what an eval-mode BatchNorm,
// the residual add after it and the ReLU cost together: MLX's CPU ops take one pass each.
#include <cstdint>

#include "backend/cpu/dispatch.h"
#include "core/parallel.h"
#include "primitives.h"

namespace lattice {

namespace {

template <class T>
inline float load(const T* p, int64_t i) {
  return static_cast<float>(p[i]);
}

// One row block [b, e) of C channels; X, R and O of their own element types.
template <class TX, class TR, class TO>
void affine_rows(const TX* __restrict X, const float* __restrict S, const float* __restrict H,
                 const TR* __restrict R, TO* __restrict O, int64_t b, int64_t e, int64_t C, bool relu) {
  for (int64_t r = b; r < e; ++r) {
    const int64_t o = r * C;
    for (int64_t c = 0; c < C; ++c) {
      float v = load(X, o + c) * S[c] + H[c];
      if (R != nullptr) v += load(R, o + c);
      if (relu) v = v < 0.0f ? 0.0f : v;  // max(v, 0); NaN stays NaN as in mx.maximum
      O[o + c] = static_cast<TO>(v);
    }
  }
}

template <class TX, class TR, class TO>
void run_affine(const mx::array& x, const mx::array& scale, const mx::array& shift, const mx::array* residual,
                mx::array& out, bool relu) {
  const int64_t n = x.shape(0), C = x.shape(1);
  if (n == 0 || C == 0) return;
  const TX* X = x.data<TX>();
  const TR* R = residual ? residual->data<TR>() : nullptr;
  const float* S = scale.data<float>();
  const float* H = shift.data<float>();
  TO* O = out.data<TO>();
  parallel_for(n, [&](int64_t b, int64_t e) { affine_rows(X, S, H, R, O, b, e, C, relu); },
               std::max<int64_t>(1, 16384 / std::max<int64_t>(C, 1)));
}

// The element types as template arguments: x, the residual (x's when absent) and the output.
template <class TX, class TR>
void with_output(const mx::array& x, const mx::array& s, const mx::array& h, const mx::array* r, mx::array& out,
                 bool relu) {
  switch (out.dtype()) {
    case mx::float32: return run_affine<TX, TR, float>(x, s, h, r, out, relu);
    case mx::float16: return run_affine<TX, TR, mx::float16_t>(x, s, h, r, out, relu);
    default: return run_affine<TX, TR, mx::bfloat16_t>(x, s, h, r, out, relu);
  }
}

template <class TX>
void with_residual(const mx::array& x, const mx::array& s, const mx::array& h, const mx::array* r, mx::array& out,
                   bool relu) {
  switch (r ? r->dtype() : x.dtype()) {
    case mx::float32: return with_output<TX, float>(x, s, h, r, out, relu);
    case mx::float16: return with_output<TX, mx::float16_t>(x, s, h, r, out, relu);
    default: return with_output<TX, mx::bfloat16_t>(x, s, h, r, out, relu);
  }
}

}  // namespace

void AffineAct::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  dispatch_cpu(stream(), inputs, outputs[0], [res = has_residual_, relu = relu_](std::vector<mx::array>& in,
                                                                                  mx::array& out) {
    const mx::array* r = res ? &in[3] : nullptr;
    switch (in[0].dtype()) {
      case mx::float32: return with_residual<float>(in[0], in[1], in[2], r, out, relu);
      case mx::float16: return with_residual<mx::float16_t>(in[0], in[1], in[2], r, out, relu);
      default: return with_residual<mx::bfloat16_t>(in[0], in[1], in[2], r, out, relu);
    }
  });
}

}  // namespace lattice
