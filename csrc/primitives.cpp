// Autodiff and metadata of the lattice primitives (device independent).
#include "primitives.h"

#include <optional>

namespace lattice {

namespace {

bool same_bounds(const EdgeBounds& a, const EdgeBounds& b) { return a == b || (a && b && *a == *b); }

std::vector<mx::array> no_grad_for_rows(const std::vector<mx::array>& primals, int argnum) {
  return {mx::zeros_like(primals[argnum])};
}

}  // namespace

// The JVP of an op bilinear in its first two inputs (the rest are row indices, whose
// tangents do not move the output): the op with each input's tangent in its place, summed.
template <class Fn>
mx::array bilinear_jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                       const std::vector<int>& argnums, const mx::Stream& s, Fn&& op) {
  return tangent_sum(
      argnums, tangents,
      [&](int arg, const mx::array& t) -> std::optional<mx::array> {
        if (arg > 1) return std::nullopt;
        return arg == 0 ? op(t, primals[1]) : op(primals[0], t);
      },
      [&] { return mx::zeros_like(op(primals[0], primals[1]), s); }, s);
}

// ---- SparseConv ------------------------------------------------------------------

std::vector<mx::Shape> SparseConv::output_shapes(const std::vector<mx::array>& inputs) {
  const auto& w = inputs[1];
  return {{n_out_, transpose_w_ ? w.shape(1) : w.shape(2)}};
}

bool SparseConv::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const SparseConv&>(other);
  return n_out_ == o.n_out_ && transpose_w_ == o.transpose_w_ && identity_k_ == o.identity_k_ &&
         facts_ == o.facts_ && same_bounds(bounds_, o.bounds_);
}

std::vector<mx::array> SparseConv::vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                                       const std::vector<int>& argnums, const std::vector<mx::array>&) {
  const auto& x = primals[0];
  const auto& w = primals[1];
  const auto& in_rows = primals[2];
  const auto& out_rows = primals[3];
  const auto& dy = cotangents[0];
  std::vector<mx::array> grads;
  for (int arg : argnums) {
    if (arg == 0) {
      // dX[in] += dY[out] @ op(W)^T: the same relation walked backwards.
      grads.push_back(mx::astype(
          sparse_conv(dy, w, out_rows, in_rows, bounds_, x.shape(0), !transpose_w_, identity_k_, facts_, stream()), x.dtype(),
          stream()));
    } else if (arg == 1) {
      auto g = transpose_w_ ? sparse_conv_weight_grad(dy, x, out_rows, in_rows, bounds_, facts_, stream())
                            : sparse_conv_weight_grad(x, dy, in_rows, out_rows, bounds_, facts_, stream());
      grads.push_back(mx::astype(g, w.dtype(), stream()));
    } else {
      grads.push_back(no_grad_for_rows(primals, arg)[0]);
    }
  }
  return grads;
}

std::vector<mx::array> SparseConv::jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                                       const std::vector<int>& argnums) {
  const auto& in_rows = primals[2];
  const auto& out_rows = primals[3];
  const mx::Dtype dtype = primals[0].dtype();
  return {bilinear_jvp(primals, tangents, argnums, stream(), [&](const mx::array& x, const mx::array& w) {
    return mx::astype(sparse_conv(x, w, in_rows, out_rows, bounds_, n_out_, transpose_w_, identity_k_, facts_, stream()),
                      dtype, stream());
  })};
}

// ---- SparseConvWeightGrad ----------------------------------------------------------

std::vector<mx::Shape> SparseConvWeightGrad::output_shapes(const std::vector<mx::array>& inputs) {
  return {{static_cast<int>(bounds_->size()) - 1, inputs[0].shape(1), inputs[1].shape(1)}};
}

bool SparseConvWeightGrad::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const SparseConvWeightGrad&>(other);
  return facts_ == o.facts_ && same_bounds(bounds_, o.bounds_);
}

std::vector<mx::array> SparseConvWeightGrad::vjp(const std::vector<mx::array>& primals,
                                                 const std::vector<mx::array>& cotangents,
                                                 const std::vector<int>& argnums, const std::vector<mx::array>&) {
  const auto& a = primals[0];
  const auto& b = primals[1];
  const auto& ra = primals[2];
  const auto& rb = primals[3];
  const auto& dg = cotangents[0];
  std::vector<mx::array> grads;
  for (int arg : argnums) {
    if (arg == 0) {  // dA[ra] += B[rb] @ dG_k^T
      grads.push_back(mx::astype(sparse_conv(b, dg, rb, ra, bounds_, a.shape(0), true, -1, facts_, stream()), a.dtype(), stream()));
    } else if (arg == 1) {  // dB[rb] += A[ra] @ dG_k
      grads.push_back(mx::astype(sparse_conv(a, dg, ra, rb, bounds_, b.shape(0), false, -1, facts_, stream()), b.dtype(), stream()));
    } else {
      grads.push_back(no_grad_for_rows(primals, arg)[0]);
    }
  }
  return grads;
}

std::vector<mx::array> SparseConvWeightGrad::jvp(const std::vector<mx::array>& primals,
                                                 const std::vector<mx::array>& tangents,
                                                 const std::vector<int>& argnums) {
  const auto& ra = primals[2];
  const auto& rb = primals[3];
  return {bilinear_jvp(primals, tangents, argnums, stream(), [&](const mx::array& a, const mx::array& b) {
    return sparse_conv_weight_grad(a, b, ra, rb, bounds_, facts_, stream());
  })};
}

// ---- BlasGemm ------------------------------------------------------------------------

std::vector<mx::Shape> BlasGemm::output_shapes(const std::vector<mx::array>& inputs) {
  const auto& a = inputs[0];
  const auto& b = inputs[1];
  return {{trans_a_ ? a.shape(1) : a.shape(0), trans_b_ ? b.shape(0) : b.shape(1)}};
}

bool BlasGemm::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const BlasGemm&>(other);
  return trans_a_ == o.trans_a_ && trans_b_ == o.trans_b_;
}

std::vector<mx::array> BlasGemm::vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                                     const std::vector<int>& argnums, const std::vector<mx::array>&) {
  const auto& a = primals[0];
  const auto& b = primals[1];
  const auto& dc = cotangents[0];
  std::vector<mx::array> grads;
  for (int arg : argnums) {
    if (arg == 0) {
      auto g = trans_a_ ? blas_gemm(b, dc, trans_b_, true, stream()) : blas_gemm(dc, b, false, !trans_b_, stream());
      grads.push_back(mx::astype(g, a.dtype(), stream()));
    } else {
      auto g = trans_b_ ? blas_gemm(dc, a, true, trans_a_, stream()) : blas_gemm(a, dc, !trans_a_, false, stream());
      grads.push_back(mx::astype(g, b.dtype(), stream()));
    }
  }
  return grads;
}

std::vector<mx::array> BlasGemm::jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                                     const std::vector<int>& argnums) {
  return {bilinear_jvp(primals, tangents, argnums, stream(), [&](const mx::array& a, const mx::array& b) {
    return blas_gemm(a, b, trans_a_, trans_b_, stream());
  })};
}

// ---- AffineAct -----------------------------------------------------------------------

std::vector<mx::Shape> AffineAct::output_shapes(const std::vector<mx::array>& inputs) { return {inputs[0].shape()}; }

bool AffineAct::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const AffineAct&>(other);
  return has_residual_ == o.has_residual_ && relu_ == o.relu_;
}

// z = x * scale + shift + residual, out = relu(z): the cotangent passes where z > 0
// (where out > 0), then dx = g * scale, dscale = sum_rows(g * x), dshift = sum_rows(g),
// dresidual = g. Built from MLX ops, so higher derivatives follow.
std::vector<mx::array> AffineAct::vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                                      const std::vector<int>& argnums, const std::vector<mx::array>& outputs) {
  const auto s = stream();
  const auto& x = primals[0];
  auto g = mx::astype(cotangents[0], mx::float32, s);
  if (relu_) g = mx::where(mx::greater(outputs[0], mx::array(0.0f), s), g, mx::array(0.0f), s);
  std::vector<mx::array> grads;
  for (int arg : argnums) {
    if (arg == 0) grads.push_back(mx::astype(mx::multiply(g, primals[1], s), x.dtype(), s));
    else if (arg == 1)
      grads.push_back(mx::astype(mx::sum(mx::multiply(g, mx::astype(x, mx::float32, s), s), 0, false, s),
                                 primals[1].dtype(), s));
    else if (arg == 2) grads.push_back(mx::astype(mx::sum(g, 0, false, s), primals[2].dtype(), s));
    else grads.push_back(mx::astype(g, primals[3].dtype(), s));
  }
  return grads;
}

std::vector<mx::array> AffineAct::jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                                      const std::vector<int>& argnums) {
  const auto s = stream();
  const auto f32 = [&](const mx::array& a) { return mx::astype(a, mx::float32, s); };
  auto t = tangent_sum(
      argnums, tangents,
      [&](int arg, const mx::array& tan) -> std::optional<mx::array> {
        if (arg == 0) return mx::multiply(f32(tan), primals[1], s);
        if (arg == 1) return mx::multiply(f32(primals[0]), f32(tan), s);
        return mx::broadcast_to(f32(tan), primals[0].shape(), s);  // shift (C,) or residual (N, C)
      },
      [&] { return mx::zeros(primals[0].shape(), mx::float32, s); }, s);
  if (relu_) {
    auto z = mx::add(mx::multiply(f32(primals[0]), primals[1], s), primals[2], s);
    if (has_residual_) z = mx::add(z, f32(primals[3]), s);
    t = mx::where(mx::greater(z, mx::array(0.0f), s), t, mx::array(0.0f), s);
  }
  mx::Dtype dtype = mx::promote_types(primals[0].dtype(), mx::float32);
  return {mx::astype(t, has_residual_ ? mx::promote_types(dtype, primals[3].dtype()) : dtype, s)};
}

}  // namespace lattice
