// MLX primitives of the lattice core. Each has an eval_cpu in backend/cpu/ (same
// file stem as its op family) and an eval_gpu in backend/no_gpu/ (GPU routes run
// through MLX's own kernels and mx.fast kernels, chosen by the routing layer).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "backend/cpu/gemm.h"
#include "mlx/array.h"
#include "mlx/ops.h"  // StreamOrDevice and the ops the VJPs build
#include "mlx/primitives.h"

namespace lattice {

namespace mx = mlx::core;

// Per-offset edge ranges of a relation: offset k owns [bounds[k], bounds[k+1]).
using EdgeBounds = std::shared_ptr<const std::vector<int64_t>>;

// What the kernels may assume about a relation's edges. `distinct` (vouched for by the
// caller): within one kernel offset no two edges share an input row and no two share an
// output row -- true of every kernel relation (for a fixed offset the input row is a
// one-to-one function of the output row), so lattice's own relation builders vouch for
// it, and the scatter of one offset runs in parallel tiles without atomics. Anyone else
// (a raw `_ext` call) leaves it false: the kernel then checks the rows it scatters into
// (one pass, csrc/core/checks.h), scatters serially, in edge order, where they repeat,
// and checks the identity offset's edges before it uses them as the identity. A false
// `distinct` vouched for can make sums race, never read or write out of bounds: the
// ranges of the row indices are always checked. `checked` (set by the op, not the
// caller): the op found the row indices computed and checked their values when it built
// the graph, so the CPU task need not read them again. `mirrored` (lattice's submanifold
// relations, KernelRelation.mirrored): offset K-1-k's edges are offset k's reversed, so the
// input gradient runs over the same edges with W's offsets reversed (SparseConv::vjp), in
// their output-row order, rather than over the edges swapped.
struct EdgeFacts {
  bool distinct = false;
  bool checked = false;
  bool mirrored = false;
  bool operator==(const EdgeFacts&) const = default;
};

// A convolution's fused epilogue: out = act(Y * scale + shift [+ residual]) applied to the
// output rows as the convolution finishes them (AffineAct's arithmetic, the same function),
// then `append` more columns copied from another array after each row's C_out (a channel
// concatenation: out = [act(...), appended]).
struct Epilogue {
  bool affine = false;  // false: none (the plain convolution)
  bool residual = false;
  bool relu = false;
  int append = 0;  // columns appended after C_out
  bool operator==(const Epilogue&) const = default;
};

// Y[out_rows[e]] += X[in_rows[e]] @ op(W[k(e)]) with op = identity or transpose.
// Inputs: x (N_in, C_in), w (K, P, Q) float32, in_rows (E,), out_rows (E,) int32; with an
// affine epilogue also scale, shift (C_out,) float32, where it has one residual (n_out, C_out)
// float32, and where it appends columns the appended (n_out, append) float32 (x is then float32).
// Output: (n_out, C_out [+ append]) of x's dtype, accumulated in float32. `identity_k` names an
// offset whose edges are exactly (r, r) for every row (the submanifold centre), or -1.
// The VJP and JVP of a fused epilogue are those of the plain convolution followed by
// AffineAct (the convolution recomputed without it).
class SparseConv : public mx::Primitive {
 public:
  SparseConv(mx::Stream s, EdgeBounds bounds, int n_out, bool transpose_w, int identity_k, EdgeFacts facts,
             gemm::Kernel kernel, Epilogue epilogue = {})
      : mx::Primitive(s), bounds_(std::move(bounds)), n_out_(n_out), transpose_w_(transpose_w),
        identity_k_(identity_k), facts_(facts), kernel_(kernel), epilogue_(epilogue) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>& outputs) override;
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>& argnums) override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;
  const char* name() const override { return "SparseConv"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  EdgeBounds bounds_;
  int n_out_;
  bool transpose_w_;
  int identity_k_;
  EdgeFacts facts_;
  gemm::Kernel kernel_;  // the BLAS or one of lattice's kernels (gemm.h), for the VJP's convolutions too
  Epilogue epilogue_;

  // The plain convolution of the first four primals (this one without its epilogue).
  mx::array plain(const std::vector<mx::array>& primals);
  // The convolution's output channels: W's (K, C_in, C_out), or (K, C_out, C_in) transposed.
  int c_out(const mx::array& w) const { return transpose_w_ ? w.shape(1) : w.shape(2); }
};

// G[k] = A[rows_a[e]]^T @ B[rows_b[e]] summed over the edges of offset k.
// Inputs: a (N_a, C_a), b (N_b, C_b), rows_a (E,), rows_b (E,). Output (K, C_a, C_b) float32.
class SparseConvWeightGrad : public mx::Primitive {
 public:
  SparseConvWeightGrad(mx::Stream s, EdgeBounds bounds, EdgeFacts facts, gemm::Kernel kernel)
      : mx::Primitive(s), bounds_(std::move(bounds)), facts_(facts), kernel_(kernel) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>& outputs) override;
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>& argnums) override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;
  const char* name() const override { return "SparseConvWeightGrad"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  EdgeBounds bounds_;
  EdgeFacts facts_;      // handed on to the convolutions of its VJP
  gemm::Kernel kernel_;  // likewise
};

// C = op(A) @ op(B) through the linked BLAS (float32 accumulation, output in A's dtype).
class BlasGemm : public mx::Primitive {
 public:
  BlasGemm(mx::Stream s, bool trans_a, bool trans_b) : mx::Primitive(s), trans_a_(trans_a), trans_b_(trans_b) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>& outputs) override;
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>& argnums) override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;
  const char* name() const override { return "BlasGemm"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  bool trans_a_, trans_b_;
};

// out = act(x * scale + shift [+ residual]) per row: x (N, C), scale and shift (C,) float32,
// residual (N, C) (present when has_residual), act = ReLU when relu (NaN kept). Float32
// arithmetic; the output dtype is the operands' promoted float type. The row-wise pass an
// eval-mode BatchNorm (folded to scale / shift), a residual add and a ReLU become.
class AffineAct : public mx::Primitive {
 public:
  AffineAct(mx::Stream s, bool has_residual, bool relu)
      : mx::Primitive(s), has_residual_(has_residual), relu_(relu) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>& outputs) override;
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>& argnums) override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;
  const char* name() const override { return "AffineAct"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  bool has_residual_;
  bool relu_;
};

// Training-mode BatchNorm over the rows with the residual add and the ReLU after it:
// mean, var = the per-channel mean and biased variance of x's rows (float64 sums, float32
// results); out = act((x - mean) * scale + bias [+ residual]) with scale = weight *
// rsqrt(var + eps) (float32 arithmetic, no FMA contraction). Inputs: x (N, C),
// weight and bias (C,) float32, residual (N, C) when has_residual. Outputs: out (N, C) of
// the operands' promoted dtype, mean (C,) and var (C,) float32. Its VJP is BatchNormActGrad.
class BatchNormAct : public mx::Primitive {
 public:
  BatchNormAct(mx::Stream s, bool has_residual, bool relu, float eps)
      : mx::Primitive(s), has_residual_(has_residual), relu_(relu), eps_(eps) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>& outputs) override;
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>& argnums) override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;
  const char* name() const override { return "BatchNormAct"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  bool has_residual_;
  bool relu_;
  float eps_;
};

// The VJP of BatchNormAct in two passes over the rows. Inputs: g (N, C) the output's
// cotangent, x, out (N, C) (its sign is the ReLU's mask), weight, mean, var, g_mean, g_var
// (C,) float32. Outputs: dx (N, C) of x's dtype, dweight and dbias (C,) float32, and
// dresidual (N, C) float32 when has_residual. Its own VJP and JVP are those of the same
// closed form in MLX ops, so higher derivatives follow.
class BatchNormActGrad : public mx::Primitive {
 public:
  BatchNormActGrad(mx::Stream s, bool has_residual, bool relu, float eps)
      : mx::Primitive(s), has_residual_(has_residual), relu_(relu), eps_(eps) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>& outputs) override;
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>& argnums) override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;
  const char* name() const override { return "BatchNormActGrad"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  bool has_residual_;
  bool relu_;
  float eps_;
};

// The JVP of a primitive: the sum over the differentiated inputs of term(arg, tangent)
// (nullopt where an input does not move the output: row indices, a piecewise-constant
// argument), or zeros() where none does.
template <class Term, class Zeros>
mx::array tangent_sum(const std::vector<int>& argnums, const std::vector<mx::array>& tangents, Term&& term,
                      Zeros&& zeros, const mx::Stream& s) {
  std::optional<mx::array> out;
  for (size_t i = 0; i < argnums.size(); ++i) {
    std::optional<mx::array> t = term(argnums[i], tangents[i]);
    if (t) out = out ? mx::add(*out, *t, s) : *t;
  }
  return out ? *out : zeros();
}

// ---- ops building the graph (csrc/ops.cpp) ------------------------------------

// Both check shapes, dtypes, the edge offsets and the row counts here (std::invalid_argument);
// the row indices' values are checked by the primitive's CPU task.
// `kernel`: the BLAS or one of lattice's GEMM kernels (gemm.h; checked: this CPU must run it).
mx::array sparse_conv(const mx::array& x, const mx::array& w, const mx::array& in_rows, const mx::array& out_rows,
                      EdgeBounds bounds, int n_out, bool transpose_w, int identity_k, EdgeFacts facts = {},
                      gemm::Kernel kernel = gemm::Kernel::blas, mx::StreamOrDevice s = {});

// sparse_conv with a fused affine epilogue (Epilogue): act(conv * scale + shift + residual),
// x float32, scale / shift float vectors of C_out, residual (n_out, C_out) float32 or absent;
// `append` (n_out, C_a) float32 or absent: its columns follow each output row's C_out.
mx::array sparse_conv_affine(const mx::array& x, const mx::array& w, const mx::array& in_rows,
                             const mx::array& out_rows, EdgeBounds bounds, int n_out, bool transpose_w, int identity_k,
                             EdgeFacts facts, gemm::Kernel kernel, const mx::array& scale, const mx::array& shift,
                             const std::optional<mx::array>& residual, bool relu,
                             const std::optional<mx::array>& append = std::nullopt, mx::StreamOrDevice s = {});

mx::array sparse_conv_weight_grad(const mx::array& a, const mx::array& b, const mx::array& rows_a,
                                  const mx::array& rows_b, EdgeBounds bounds, EdgeFacts facts = {},
                                  gemm::Kernel kernel = gemm::Kernel::blas, mx::StreamOrDevice s = {});

mx::array blas_gemm(const mx::array& a, const mx::array& b, bool trans_a, bool trans_b, mx::StreamOrDevice s = {});

// (out, mean, var) of BatchNormAct; residual may be absent.
std::vector<mx::array> batch_norm_act(const mx::array& x, const mx::array& weight, const mx::array& bias,
                                      const std::optional<mx::array>& residual, bool relu, float eps,
                                      mx::StreamOrDevice s = {});

// act(x * scale + shift + residual) (AffineAct); residual may be absent (std::nullopt).
mx::array affine_act(const mx::array& x, const mx::array& scale, const mx::array& shift,
                     const std::optional<mx::array>& residual, bool relu, mx::StreamOrDevice s = {});

}  // namespace lattice
