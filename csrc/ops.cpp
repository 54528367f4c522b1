// Graph-building ops for the lattice primitives: shape and dtype checks, then
// array(shape, dtype, primitive, inputs). Backends trust what passes here.
#include "core/message.h"
#include <stdexcept>

#include "primitives.h"

namespace lattice {

namespace {

void require(bool ok, const std::string& msg) {
  if (!ok) throw std::invalid_argument(msg);
}

bool is_float(mx::Dtype t) { return t == mx::float32 || t == mx::float16 || t == mx::bfloat16; }

mx::array rows_i32(const mx::array& r, mx::StreamOrDevice s) {
  require(r.ndim() == 1, "[sparse_conv] row indices must be 1-D");
  return mx::contiguous(mx::astype(r, mx::int32, s), false, s);
}

}  // namespace

mx::array sparse_conv(const mx::array& x, const mx::array& w, const mx::array& in_rows, const mx::array& out_rows,
                      EdgeBounds bounds, int n_out, bool transpose_w, int identity_k, mx::StreamOrDevice s) {
  require(x.ndim() == 2, "[sparse_conv] features must be (N, C)");
  require(is_float(x.dtype()), "[sparse_conv] features must be float32, float16 or bfloat16");
  require(w.ndim() == 3, "[sparse_conv] weight must be (K, C_in, C_out)");
  const int K = w.shape(0);
  require(bounds && static_cast<int>(bounds->size()) == K + 1, "[sparse_conv] relation offsets do not match K");
  const int c_in = transpose_w ? w.shape(2) : w.shape(1);
  const int c_out = transpose_w ? w.shape(1) : w.shape(2);
  if (x.shape(1) != c_in) {
    lattice::Message msg;
    msg << "[sparse_conv] features have " << x.shape(1) << " channels, weight expects " << c_in;
    throw std::invalid_argument(msg.str());
  }
  require(in_rows.size() == out_rows.size() && static_cast<int64_t>(in_rows.size()) == bounds->back(),
          "[sparse_conv] edge arrays do not match the relation");
  auto xs = mx::contiguous(x, false, s);
  auto ws = mx::contiguous(mx::astype(w, mx::float32, s), false, s);
  auto stream = mx::to_stream(s);
  return mx::array({n_out, c_out}, x.dtype(),
                   std::make_shared<SparseConv>(stream, std::move(bounds), n_out, transpose_w, identity_k),
                   {xs, ws, rows_i32(in_rows, s), rows_i32(out_rows, s)});
}

mx::array sparse_conv_weight_grad(const mx::array& a, const mx::array& b, const mx::array& rows_a,
                                  const mx::array& rows_b, EdgeBounds bounds, mx::StreamOrDevice s) {
  require(a.ndim() == 2 && b.ndim() == 2, "[sparse_conv] weight gradient operands must be 2-D");
  const int K = static_cast<int>(bounds->size()) - 1;
  auto stream = mx::to_stream(s);
  return mx::array({K, a.shape(1), b.shape(1)}, mx::float32, std::make_shared<SparseConvWeightGrad>(stream, bounds),
                   {mx::contiguous(a, false, s), mx::contiguous(b, false, s), rows_i32(rows_a, s),
                    rows_i32(rows_b, s)});
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
                   {mx::contiguous(a, false, s), mx::contiguous(b, false, s)});
}

}  // namespace lattice
