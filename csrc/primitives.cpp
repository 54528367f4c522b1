// Autodiff and metadata of the lattice primitives (device independent).
#include "primitives.h"

#include <optional>

#include "mlx/transforms.h"

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
  return {{n_out_, c_out(inputs[1]) + epilogue_.append}};
}

bool SparseConv::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const SparseConv&>(other);
  return n_out_ == o.n_out_ && transpose_w_ == o.transpose_w_ && identity_k_ == o.identity_k_ &&
         facts_ == o.facts_ && kernel_ == o.kernel_ && epilogue_ == o.epilogue_ && same_bounds(bounds_, o.bounds_);
}

mx::array SparseConv::plain(const std::vector<mx::array>& primals) {
  return mx::array({n_out_, c_out(primals[1])}, primals[0].dtype(),
                   std::make_shared<SparseConv>(stream(), bounds_, n_out_, transpose_w_, identity_k_, facts_, kernel_),
                   {primals[0], primals[1], primals[2], primals[3]});
}

namespace {

// A fused epilogue's primals and argnums as AffineAct's: (the plain convolution, scale, shift
// [, residual]); argnums 4.. become 1.., and 0 stands for x and w (through the convolution).
// The appended array (the last primal where Epilogue::append) is not AffineAct's: `append_arg`.
struct AffinePart {
  std::vector<mx::array> primals;
  std::vector<int> argnums;
  std::vector<int> from;       // the fused argnum each entry of argnums stands for (-1: the convolution)
  int append_arg = -1;         // the appended array's argnum, or -1
  std::vector<int> conv_args;  // the fused argnums that are the convolution's own (x: 0, w: 1)
};

AffinePart affine_part(const mx::array& pre, const std::vector<mx::array>& primals, const std::vector<int>& argnums,
                       const Epilogue& epilogue) {
  AffinePart a{{pre}, {}, {}, -1, {}};
  const int end = 6 + (epilogue.residual ? 1 : 0);  // past AffineAct's operands
  if (epilogue.append > 0) a.append_arg = end;
  for (int i = 4; i < end; ++i) a.primals.push_back(primals[i]);
  for (int arg : argnums)
    if (arg < 2) a.conv_args.push_back(arg);
  if (!a.conv_args.empty()) {
    a.argnums.push_back(0);
    a.from.push_back(-1);
  }
  for (int arg : argnums)
    if (arg >= 4 && arg < end) {
      a.argnums.push_back(arg - 3);
      a.from.push_back(arg);
    }
  return a;
}

// Columns [b, e) of a 2-D array.
mx::array columns(const mx::array& a, int b, int e, const mx::Stream& s) {
  return mx::slice(a, {0, b}, {a.shape(0), e}, s);
}

}  // namespace

std::vector<mx::array> SparseConv::vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                                       const std::vector<int>& argnums, const std::vector<mx::array>& outputs) {
  if (epilogue_.affine) {
    // The plain convolution (recomputed), AffineAct's VJP onto it, then the convolution's;
    // the appended columns' cotangent is theirs.
    const auto s = stream();
    auto pre = plain(primals);
    const int c_out = pre.shape(1), width = outputs[0].shape(1);
    AffinePart a = affine_part(pre, primals, argnums, epilogue_);
    const auto g = columns(cotangents[0], 0, c_out, s);
    std::vector<mx::array> ag;
    if (!a.argnums.empty()) {
      AffineAct act(s, epilogue_.residual, epilogue_.relu);
      ag = act.vjp(a.primals, {g}, a.argnums, {columns(outputs[0], 0, c_out, s)});
    }
    std::vector<mx::array> cg;
    if (!a.conv_args.empty())
      cg = pre.primitive().vjp({primals[0], primals[1], primals[2], primals[3]}, {ag[0]}, a.conv_args, {pre});
    std::vector<mx::array> grads;
    size_t ci = 0;
    for (int arg : argnums) {
      if (arg < 2) grads.push_back(cg[ci++]);
      else if (arg < 4) grads.push_back(no_grad_for_rows(primals, arg)[0]);
      else if (arg == a.append_arg) grads.push_back(columns(cotangents[0], c_out, width, s));
      else
        for (size_t j = 0; j < a.from.size(); ++j)
          if (a.from[j] == arg) grads.push_back(ag[j]);
    }
    return grads;
  }
  const auto& x = primals[0];
  const auto& w = primals[1];
  const auto& in_rows = primals[2];
  const auto& out_rows = primals[3];
  const auto& dy = cotangents[0];
  std::vector<mx::array> grads;
  for (int arg : argnums) {
    if (arg == 0) {
      // dX[in] += dY[out] @ op(W)^T: the same relation walked backwards, or where it is mirrored
      // (EdgeFacts) forwards with W's offsets reversed — sum over offset k's edges (i, o) of
      // dY[o] W[k]^T is the sum over offset K-1-k's edges (o, i) — in its output-row order.
      const bool mirrored = facts_.mirrored && x.shape(0) == n_out_;
      // W's offsets reversed as a view (a negative offset stride: weight_view in conv.cpp reads
      // it in place, no copy of the weight per backward pass)
      const int K = w.shape(0);
      const auto wd = mirrored ? mx::slice(w, {K - 1, 0, 0}, {-K - 1, w.shape(1), w.shape(2)}, {-1, 1, 1}, stream()) : w;
      grads.push_back(mx::astype(sparse_conv(dy, wd, mirrored ? in_rows : out_rows, mirrored ? out_rows : in_rows,
                                             bounds_, x.shape(0), !transpose_w_, identity_k_, facts_, kernel_, stream()),
                                 x.dtype(), stream()));
    } else if (arg == 1) {
      auto g = transpose_w_ ? sparse_conv_weight_grad(dy, x, out_rows, in_rows, bounds_, facts_, kernel_, stream())
                            : sparse_conv_weight_grad(x, dy, in_rows, out_rows, bounds_, facts_, kernel_, stream());
      grads.push_back(mx::astype(g, w.dtype(), stream()));
    } else {
      grads.push_back(no_grad_for_rows(primals, arg)[0]);
    }
  }
  return grads;
}

std::vector<mx::array> SparseConv::jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                                       const std::vector<int>& argnums) {
  if (epilogue_.affine) {
    // The plain convolution's tangent, then AffineAct's JVP with it as its input's tangent;
    // the appended columns' tangent after it.
    const auto s = stream();
    auto pre = plain(primals);
    AffinePart a = affine_part(pre, primals, argnums, epilogue_);
    std::vector<mx::array> conv_tangents, act_tangents;
    std::optional<mx::array> append_tangent;
    for (size_t i = 0; i < argnums.size(); ++i) {
      if (argnums[i] < 2) conv_tangents.push_back(tangents[i]);
      else if (argnums[i] == a.append_arg) append_tangent = tangents[i];
    }
    if (!a.conv_args.empty())
      act_tangents.push_back(
          pre.primitive().jvp({primals[0], primals[1], primals[2], primals[3]}, conv_tangents, a.conv_args)[0]);
    for (size_t i = 0; i < argnums.size(); ++i)
      if (argnums[i] >= 4 && argnums[i] != a.append_arg) act_tangents.push_back(tangents[i]);
    mx::array t = a.argnums.empty() ? mx::zeros(pre.shape(), mx::float32, s)
                                    : AffineAct(s, epilogue_.residual, epilogue_.relu).jvp(a.primals, act_tangents,
                                                                                             a.argnums)[0];
    if (epilogue_.append == 0) return {t};
    const auto& appended = primals[a.append_arg];
    auto at = append_tangent ? mx::astype(*append_tangent, mx::float32, s) : mx::zeros(appended.shape(), mx::float32, s);
    return {mx::concatenate({mx::astype(t, mx::float32, s), at}, 1, s)};
  }
  const auto& in_rows = primals[2];
  const auto& out_rows = primals[3];
  const mx::Dtype dtype = primals[0].dtype();
  return {bilinear_jvp(primals, tangents, argnums, stream(), [&](const mx::array& x, const mx::array& w) {
    return mx::astype(sparse_conv(x, w, in_rows, out_rows, bounds_, n_out_, transpose_w_, identity_k_, facts_, kernel_, stream()),
                      dtype, stream());
  })};
}

// ---- SparseConvWeightGrad ----------------------------------------------------------

std::vector<mx::Shape> SparseConvWeightGrad::output_shapes(const std::vector<mx::array>& inputs) {
  return {{static_cast<int>(bounds_->size()) - 1, inputs[0].shape(1), inputs[1].shape(1)}};
}

bool SparseConvWeightGrad::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const SparseConvWeightGrad&>(other);
  return facts_ == o.facts_ && kernel_ == o.kernel_ && same_bounds(bounds_, o.bounds_);
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
      grads.push_back(mx::astype(sparse_conv(b, dg, rb, ra, bounds_, a.shape(0), true, -1, facts_, kernel_, stream()), a.dtype(), stream()));
    } else if (arg == 1) {  // dB[rb] += A[ra] @ dG_k
      grads.push_back(mx::astype(sparse_conv(a, dg, ra, rb, bounds_, b.shape(0), false, -1, facts_, kernel_, stream()), b.dtype(), stream()));
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
    return sparse_conv_weight_grad(a, b, ra, rb, bounds_, facts_, kernel_, stream());
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

// ---- BatchNormAct, BatchNormActGrad --------------------------------------------------------

namespace {

using Arrays = std::vector<mx::array>;

// BatchNormAct in MLX ops (inputs x, weight, bias[, residual]): its JVP.
Arrays batch_norm_act_ops(const Arrays& in, bool res, bool relu, float eps, const mx::Stream& s) {
  mx::Dtype dtype = mx::promote_types(in[0].dtype(), mx::promote_types(in[1].dtype(), in[2].dtype()));
  if (res) dtype = mx::promote_types(dtype, in[3].dtype());
  auto x = mx::astype(in[0], mx::float32, s);
  auto mean = mx::mean(x, 0, false, s);
  auto xc = mx::subtract(x, mean, s);
  auto var = mx::mean(mx::square(xc, s), 0, false, s);
  auto scale = mx::multiply(in[1], mx::rsqrt(mx::add(var, mx::array(eps), s), s), s);
  auto z = mx::add(mx::multiply(xc, scale, s), in[2], s);
  if (res) z = mx::add(z, mx::astype(in[3], mx::float32, s), s);
  if (relu) z = mx::maximum(z, mx::array(0.0f), s);
  return {mx::astype(z, dtype, s), mean, var};
}

// BatchNormActGrad in MLX ops (inputs g, x, out, weight, mean, var, g_mean, g_var): the closed
// form its native passes compute, for its own VJP and JVP.
Arrays batch_norm_act_grad_ops(const Arrays& in, bool res, bool relu, float eps, const mx::Stream& s) {
  auto g = mx::astype(in[0], mx::float32, s);
  auto x = mx::astype(in[1], mx::float32, s);
  const auto &w = in[3], &mean = in[4], &var = in[5], &g_mean = in[6], &g_var = in[7];
  auto n = mx::array(static_cast<float>(in[1].shape(0)));
  auto gm = relu ? mx::where(mx::greater(in[2], mx::array(0.0f), s), g, mx::array(0.0f), s) : g;
  auto invstd = mx::rsqrt(mx::add(var, mx::array(eps), s), s);
  auto xc = mx::subtract(x, mean, s);
  auto db = mx::sum(gm, 0, false, s);
  auto dw = mx::multiply(invstd, mx::sum(mx::multiply(gm, xc, s), 0, false, s), s);
  auto centred = mx::subtract(mx::subtract(gm, mx::divide(db, n, s), s),
                              mx::multiply(xc, mx::divide(mx::multiply(invstd, dw, s), n, s), s), s);
  auto dx = mx::add(mx::multiply(mx::multiply(invstd, w, s), centred, s),
                    mx::add(mx::divide(g_mean, n, s),
                            mx::divide(mx::multiply(mx::multiply(mx::array(2.0f), g_var, s), xc, s), n, s), s),
                    s);
  Arrays out = {mx::astype(dx, in[1].dtype(), s), dw, db};
  if (res) out.push_back(gm);
  return out;
}

// The cotangents of the differentiated inputs (argnums) of f at primals, by MLX's vjp.
Arrays vjp_of(const std::function<Arrays(const Arrays&)>& f, const Arrays& primals, const Arrays& cotangents,
              const std::vector<int>& argnums) {
  auto grads = mx::vjp(f, primals, cotangents).second;
  Arrays out;
  for (int a : argnums) out.push_back(grads[a]);
  return out;
}

// The output tangents of f at primals with the tangents of argnums (zeros elsewhere).
Arrays jvp_of(const std::function<Arrays(const Arrays&)>& f, const Arrays& primals, const Arrays& tangents,
              const std::vector<int>& argnums, const mx::Stream& s) {
  Arrays full;
  for (const auto& p : primals) full.push_back(mx::zeros_like(p, s));
  for (size_t i = 0; i < argnums.size(); ++i) full[argnums[i]] = mx::astype(tangents[i], primals[argnums[i]].dtype(), s);
  return mx::jvp(f, primals, full).second;
}

}  // namespace

std::vector<mx::Shape> BatchNormAct::output_shapes(const std::vector<mx::array>& inputs) {
  return {inputs[0].shape(), {inputs[0].shape(1)}, {inputs[0].shape(1)}};
}

bool BatchNormAct::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const BatchNormAct&>(other);
  return has_residual_ == o.has_residual_ && relu_ == o.relu_ && eps_ == o.eps_;
}

std::vector<mx::array> BatchNormAct::vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                                         const std::vector<int>& argnums, const std::vector<mx::array>& outputs) {
  const auto s = stream();
  const int C = primals[0].shape(1);
  auto cot = [&](size_t i) {
    return i < cotangents.size() ? mx::astype(cotangents[i], mx::float32, s) : mx::zeros({C}, mx::float32, s);
  };
  // The native passes read row-contiguous buffers: a cotangent may arrive strided (a slice of
  // a concatenation's cotangent) or broadcast.
  auto dense = [&](const mx::array& a) { return mx::contiguous(a, false, s); };
  Arrays inputs = {dense(cotangents[0]), primals[0], outputs[0], primals[1],
                   outputs[1],           outputs[2], dense(cot(1)), dense(cot(2))};
  std::vector<mx::Shape> shapes = {primals[0].shape(), {C}, {C}};
  std::vector<mx::Dtype> dtypes = {primals[0].dtype(), mx::float32, mx::float32};
  if (has_residual_) {
    shapes.push_back(primals[0].shape());
    dtypes.push_back(mx::float32);
  }
  auto grads = mx::array::make_arrays(std::move(shapes), dtypes,
                                      std::make_shared<BatchNormActGrad>(s, has_residual_, relu_, eps_), inputs);
  Arrays out;
  for (int a : argnums) out.push_back(mx::astype(grads[a], primals[a].dtype(), s));
  return out;
}

std::vector<mx::array> BatchNormAct::jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                                         const std::vector<int>& argnums) {
  const auto s = stream();
  auto f = [res = has_residual_, relu = relu_, eps = eps_, s](const Arrays& in) {
    return batch_norm_act_ops(in, res, relu, eps, s);
  };
  return jvp_of(f, primals, tangents, argnums, s);
}

std::vector<mx::Shape> BatchNormActGrad::output_shapes(const std::vector<mx::array>& inputs) {
  std::vector<mx::Shape> out = {inputs[1].shape(), {inputs[1].shape(1)}, {inputs[1].shape(1)}};
  if (has_residual_) out.push_back(inputs[1].shape());
  return out;
}

bool BatchNormActGrad::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const BatchNormActGrad&>(other);
  return has_residual_ == o.has_residual_ && relu_ == o.relu_ && eps_ == o.eps_;
}

std::vector<mx::array> BatchNormActGrad::vjp(const std::vector<mx::array>& primals,
                                             const std::vector<mx::array>& cotangents, const std::vector<int>& argnums,
                                             const std::vector<mx::array>&) {
  const auto s = stream();
  auto f = [res = has_residual_, relu = relu_, eps = eps_, s](const Arrays& in) {
    return batch_norm_act_grad_ops(in, res, relu, eps, s);
  };
  return vjp_of(f, primals, cotangents, argnums);
}

std::vector<mx::array> BatchNormActGrad::jvp(const std::vector<mx::array>& primals,
                                             const std::vector<mx::array>& tangents, const std::vector<int>& argnums) {
  const auto s = stream();
  auto f = [res = has_residual_, relu = relu_, eps = eps_, s](const Arrays& in) {
    return batch_norm_act_grad_ops(in, res, relu, eps, s);
  };
  return jvp_of(f, primals, tangents, argnums, s);
}

}  // namespace lattice
