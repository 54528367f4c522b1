// Graph-building ops for the lattice primitives: shape and dtype checks, then
// array(shape, dtype, primitive, inputs). Backends trust what passes here, except the
// values of the row indices, which their CPU tasks check (csrc/core/checks.h).
#include <cmath>
#include <stdexcept>

#include "core/checks.h"
#include "primitives.h"

namespace lattice {

namespace {

// The edge arrays and their offsets: as many in rows as out rows, as the offsets say.
void check_edges(const mx::array& a, const mx::array& b, const EdgeBounds& bounds, int64_t K, const char* op,
                 const char* name_a, const char* name_b) {
  check_index_array(a, op, name_a);
  check_index_array(b, op, name_b);
  if (a.size() != b.size()) {
    Message msg;
    msg << "[" << op << "] " << name_a << " and " << name_b << " must have one entry per edge, got " << a.size()
        << " and " << b.size();
    invalid(msg);
  }
  check_edge_offsets(bounds.get(), K, static_cast<int64_t>(a.size()), op);
}

}  // namespace

namespace {

// sparse_conv's checks; its graph inputs (x, w, in_rows, out_rows), C_out and the facts.
struct ConvOperands {
  std::vector<mx::array> inputs;
  int c_out;
  EdgeFacts facts;
};

ConvOperands conv_operands(const mx::array& x, const mx::array& w, const mx::array& in_rows,
                           const mx::array& out_rows, const EdgeBounds& bounds, int n_out, bool transpose_w,
                           int identity_k, EdgeFacts facts, gemm::Kernel kernel, mx::StreamOrDevice s) {
  const char* op = "sparse_conv";
  if (kernel != gemm::Kernel::blas) gemm::info(kernel);  // this CPU runs it, or std::invalid_argument
  check_feats(x, op, "features");
  if (w.ndim() != 3) {
    Message msg;
    msg << "[sparse_conv] weight must be (K, C_in, C_out), got ndim " << static_cast<int64_t>(w.ndim());
    invalid(msg);
  }
  require(is_float(w.dtype()), "[sparse_conv] weight must be float32, float16 or bfloat16, got " +
                                   dtype_name(w.dtype()));
  const int K = w.shape(0);
  const int c_in = transpose_w ? w.shape(2) : w.shape(1);
  const int c_out = transpose_w ? w.shape(1) : w.shape(2);
  if (x.shape(1) != c_in) {
    Message msg;
    msg << "[sparse_conv] features have " << x.shape(1) << " channels, weight expects " << c_in;
    invalid(msg);
  }
  check_edges(in_rows, out_rows, bounds, K, op, "in_rows", "out_rows");
  check_count(n_out, op, "n_out");
  if (identity_k < -1 || identity_k >= K) {
    Message msg;
    msg << "[sparse_conv] identity_k must be -1 or a kernel offset in [0, " << K << "), got " << identity_k;
    invalid(msg);
  }
  facts.checked = check_rows_now(in_rows, x.shape(0), op, "in_rows", "the features") &
                  check_rows_now(out_rows, n_out, op, "out_rows", "the output");
  return {{mx::contiguous(x, false, s), mx::astype(w, mx::float32, s),  // a weight view is read in place
           rows_i32(in_rows, op, "in_rows", s), rows_i32(out_rows, op, "out_rows", s)},
          c_out,
          facts};
}

}  // namespace

mx::array sparse_conv(const mx::array& x, const mx::array& w, const mx::array& in_rows, const mx::array& out_rows,
                      EdgeBounds bounds, int n_out, bool transpose_w, int identity_k, EdgeFacts facts,
                      gemm::Kernel kernel, mx::StreamOrDevice s) {
  auto c = conv_operands(x, w, in_rows, out_rows, bounds, n_out, transpose_w, identity_k, facts, kernel, s);
  return mx::array({n_out, c.c_out}, x.dtype(),
                   std::make_shared<SparseConv>(mx::to_stream(s), std::move(bounds), n_out, transpose_w, identity_k,
                                                c.facts, kernel),
                   std::move(c.inputs));
}

mx::array sparse_conv_affine(const mx::array& x, const mx::array& w, const mx::array& in_rows,
                             const mx::array& out_rows, EdgeBounds bounds, int n_out, bool transpose_w, int identity_k,
                             EdgeFacts facts, gemm::Kernel kernel, const mx::array& scale, const mx::array& shift,
                             const std::optional<mx::array>& residual, bool relu,
                             const std::optional<mx::array>& append, mx::StreamOrDevice s) {
  const char* op = "sparse_conv_affine";
  auto c = conv_operands(x, w, in_rows, out_rows, bounds, n_out, transpose_w, identity_k, facts, kernel, s);
  require(x.dtype() == mx::float32, std::string("[") + op + "] features must be float32 (the epilogue works on the "
                                        "float32 sums), got " + dtype_name(x.dtype()));
  for (const auto* v : {&scale, &shift}) {
    if (v->ndim() != 1 || v->shape(0) != c.c_out || !is_float(v->dtype())) {
      Message msg;
      msg << "[" << op << "] " << (v == &scale ? "scale" : "shift") << " must be a float vector of " << c.c_out
          << " channels, got ndim " << static_cast<int64_t>(v->ndim()) << " of " << dtype_name(v->dtype());
      invalid(msg);
    }
    c.inputs.push_back(mx::contiguous(mx::astype(*v, mx::float32, s), false, s));
  }
  if (residual) {
    if (residual->ndim() != 2 || residual->shape(0) != n_out || residual->shape(1) != c.c_out ||
        residual->dtype() != mx::float32) {
      Message msg;
      msg << "[" << op << "] residual must be float32 (" << n_out << ", " << c.c_out << "), got ndim "
          << static_cast<int64_t>(residual->ndim()) << " of " << dtype_name(residual->dtype());
      invalid(msg);
    }
    c.inputs.push_back(mx::contiguous(*residual, false, s));
  }
  int extra = 0;
  if (append) {
    if (append->ndim() != 2 || append->shape(0) != n_out || append->dtype() != mx::float32) {
      Message msg;
      msg << "[" << op << "] append must be float32 with " << n_out << " rows, got ndim "
          << static_cast<int64_t>(append->ndim()) << " of " << dtype_name(append->dtype());
      invalid(msg);
    }
    extra = append->shape(1);
    c.inputs.push_back(mx::contiguous(*append, false, s));
  }
  return mx::array({n_out, c.c_out + extra}, mx::float32,
                   std::make_shared<SparseConv>(mx::to_stream(s), std::move(bounds), n_out, transpose_w, identity_k,
                                                c.facts, kernel, Epilogue{true, residual.has_value(), relu, extra}),
                   std::move(c.inputs));
}

mx::array sparse_conv_weight_grad(const mx::array& a, const mx::array& b, const mx::array& rows_a,
                                  const mx::array& rows_b, EdgeBounds bounds, EdgeFacts facts, gemm::Kernel kernel,
                                  mx::StreamOrDevice s) {
  const char* op = "sparse_conv_weight_grad";
  if (kernel != gemm::Kernel::blas) gemm::info(kernel);
  check_feats(a, op, "a");
  check_feats(b, op, "b");
  check_edges(rows_a, rows_b, bounds, -1, op, "rows_a", "rows_b");
  const int K = static_cast<int>(bounds->size()) - 1;
  check_count(K, op, "the number of kernel offsets");
  facts.checked = check_rows_now(rows_a, a.shape(0), op, "rows_a", "a") &
                  check_rows_now(rows_b, b.shape(0), op, "rows_b", "b");
  auto stream = mx::to_stream(s);
  return mx::array({K, a.shape(1), b.shape(1)}, mx::float32,
                   std::make_shared<SparseConvWeightGrad>(stream, bounds, facts, kernel),
                   {mx::contiguous(a, false, s), mx::contiguous(b, false, s), rows_i32(rows_a, op, "rows_a", s),
                    rows_i32(rows_b, op, "rows_b", s)});
}

mx::array blas_gemm(const mx::array& a, const mx::array& b, bool trans_a, bool trans_b, mx::StreamOrDevice s) {
  require(a.ndim() == 2 && b.ndim() == 2, "[linear] GEMM operands must be 2-D");
  require(is_float(a.dtype()) && is_float(b.dtype()), "[linear] GEMM operands must be floating point");
  const int m = trans_a ? a.shape(1) : a.shape(0);
  const int k = trans_a ? a.shape(0) : a.shape(1);
  const int kb = trans_b ? b.shape(1) : b.shape(0);
  const int n = trans_b ? b.shape(0) : b.shape(1);
  if (k != kb) {
    lattice::Message msg;
    msg << "[linear] inner dimensions differ: " << k << " and " << kb;
    throw std::invalid_argument(msg.str());
  }
  auto stream = mx::to_stream(s);
  return mx::array({m, n}, a.dtype(), std::make_shared<BlasGemm>(stream, trans_a, trans_b),
                   {a, b});  // views read in place (blas_operand)
}

namespace {

// The row-wise passes' operands: features (N, C), two per-channel float vectors (as
// float32), a residual of the features' shape where given; out_dtype is their promoted type.
std::vector<mx::array> rowwise_operands(const char* op, const mx::array& x, const mx::array& a, const char* name_a,
                                        const mx::array& b, const char* name_b,
                                        const std::optional<mx::array>& residual, mx::Dtype& out_dtype,
                                        mx::StreamOrDevice s) {
  check_feats(x, op, "features");
  const int C = x.shape(1);
  for (const auto* v : {&a, &b}) {
    const char* name = v == &a ? name_a : name_b;
    if (v->ndim() != 1 || v->shape(0) != C || !is_float(v->dtype())) {
      Message msg;
      msg << "[" << op << "] " << name << " must be a float vector of " << C << " channels, got shape (";
      for (int i = 0; i < static_cast<int>(v->ndim()); ++i) msg << (i ? ", " : "") << v->shape(i);
      msg << ") of " << dtype_name(v->dtype());
      invalid(msg);
    }
  }
  out_dtype = mx::promote_types(x.dtype(), mx::promote_types(a.dtype(), b.dtype()));
  std::vector<mx::array> inputs = {mx::contiguous(x, false, s), mx::contiguous(mx::astype(a, mx::float32, s), false, s),
                                   mx::contiguous(mx::astype(b, mx::float32, s), false, s)};
  if (residual) {
    check_feats(*residual, op, "residual");
    if (residual->shape() != x.shape()) {
      Message msg;
      msg << "[" << op << "] residual must have the features' shape (" << x.shape(0) << ", " << C << "), got ("
          << residual->shape(0) << ", " << residual->shape(1) << ")";
      invalid(msg);
    }
    out_dtype = mx::promote_types(out_dtype, residual->dtype());
    inputs.push_back(mx::contiguous(*residual, false, s));
  }
  return inputs;
}

}  // namespace

mx::array affine_act(const mx::array& x, const mx::array& scale, const mx::array& shift,
                     const std::optional<mx::array>& residual, bool relu, mx::StreamOrDevice s) {
  mx::Dtype out_dtype = mx::float32;
  auto inputs = rowwise_operands("affine", x, scale, "scale", shift, "shift", residual, out_dtype, s);
  return mx::array(x.shape(), out_dtype, std::make_shared<AffineAct>(mx::to_stream(s), residual.has_value(), relu),
                   std::move(inputs));
}

std::vector<mx::array> batch_norm_act(const mx::array& x, const mx::array& weight, const mx::array& bias,
                                      const std::optional<mx::array>& residual, bool relu, float eps,
                                      mx::StreamOrDevice s) {
  const char* op = "batch_norm_act";
  mx::Dtype out_dtype = mx::float32;
  auto inputs = rowwise_operands(op, x, weight, "weight", bias, "bias", residual, out_dtype, s);
  if (!(eps > 0.0f) || !std::isfinite(eps)) {
    Message msg;
    msg << "[" << op << "] eps must be a positive finite number, got " << eps;
    invalid(msg);
  }
  const int C = x.shape(1);
  return mx::array::make_arrays({x.shape(), {C}, {C}}, {out_dtype, mx::float32, mx::float32},
                                std::make_shared<BatchNormAct>(mx::to_stream(s), residual.has_value(), relu, eps),
                                std::move(inputs));
}

}  // namespace lattice
