// MLX primitives of the pooling family: local relation pooling (sum / avg / max,
// optionally with per-offset weights: pool transpose and trilinear upsampling are
// weighted averages over a transposed relation) and batch-wise global pooling.
// eval_cpu lives in backend/cpu/pool.cpp, eval_gpu in backend/no_gpu/pool.cpp.
//
// Relations built by lattice have the property of every kernel relation: the edges of
// one kernel offset never share an input row and never share an output row. The
// backward scatter walks one offset at a time on that property (as the convolution
// does), so it needs no atomics. The one other edge list lattice hands them is a
// downsample's window map: unit weights, one offset group, every input row once, and
// the edges grouped by output row (out_rows non-decreasing). The kernels detect that
// grouping (a linear check) and then neither sort the edges nor walk them per offset.
// For these primitives EdgeFacts::distinct (primitives.h) vouches for exactly that: within
// each offset no input row repeats, and no output row repeats unless the edges come
// grouped by output row. Without it the backward kernels check the rows they scatter
// into and scatter serially where they repeat. Row indices (and global pooling's batch
// indices) are always range-checked.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "mlx/array.h"
#include "mlx/primitives.h"
#include "primitives.h"

namespace lattice {

namespace mx = mlx::core;

// Per-offset edge weights (K entries), or null for unit weights.
using OffsetWeights = std::shared_ptr<const std::vector<float>>;

// sum: Y[o] = sum_e w_k(e) X[i_e]; avg: that sum / sum_e w_k(e) (0 without contributors);
// max: per channel the largest contributor (NaN counts as largest; 0 without contributors).
// select (autodiff only): Y[o, c] = V[argmax_X(o, c), c].
enum class PoolMode : int { Sum = 0, Avg = 1, Max = 2, Select = 3 };

// How the backward pass walks the relation, fixed by the routing layer at forward time.
// Exclusive: every input row has at most one edge, so dX is a pure gather from dY.
// General: per kernel offset, scatter-add into dX.
enum class PoolBackward : int { Exclusive = 0, General = 1 };

const char* pool_mode_name(PoolMode m);

// Local pooling. Inputs: x (N_in, C), in_rows (E,), out_rows (E,) int32, plus v (N_in, C)
// for Select. Output (n_out, C) in x's dtype (v's for Select), accumulated in float32.
class SparsePool : public mx::Primitive {
 public:
  SparsePool(mx::Stream s, EdgeBounds bounds, OffsetWeights weights, int n_out, PoolMode mode,
             PoolBackward backward, EdgeFacts facts)
      : mx::Primitive(s), bounds_(std::move(bounds)), weights_(std::move(weights)), n_out_(n_out), mode_(mode),
        backward_(backward), facts_(facts) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>& outputs) override;
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>& argnums) override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;
  const char* name() const override { return "SparsePool"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  EdgeBounds bounds_;
  OffsetWeights weights_;
  int n_out_;
  PoolMode mode_;
  PoolBackward backward_;
  EdgeFacts facts_;
};

// dX of SparsePool (mode sum, avg or max). Inputs: dy (n_out, C), in_rows, out_rows, plus
// x (N_in, C) for max (the argmax is recomputed: the forward pass stores none).
// Output (n_in, C) in dy's dtype.
class SparsePoolGrad : public mx::Primitive {
 public:
  SparsePoolGrad(mx::Stream s, EdgeBounds bounds, OffsetWeights weights, int n_in, int n_out, PoolMode mode,
                 PoolBackward backward, EdgeFacts facts)
      : mx::Primitive(s), bounds_(std::move(bounds)), weights_(std::move(weights)), n_in_(n_in), n_out_(n_out),
        mode_(mode), backward_(backward), facts_(facts) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>& outputs) override;
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>& argnums) override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;
  const char* name() const override { return "SparsePoolGrad"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  EdgeBounds bounds_;
  OffsetWeights weights_;
  int n_in_, n_out_;
  PoolMode mode_;
  PoolBackward backward_;
  EdgeFacts facts_;
};

// Global pooling to dense (batch_size, C) rows. Inputs: x (N, C), batch (N,) int32, plus
// v (N, C) for Select. avg divides by max(count, 1); empty members give 0.
class GlobalPool : public mx::Primitive {
 public:
  GlobalPool(mx::Stream s, int batch_size, PoolMode mode, bool checked)
      : mx::Primitive(s), batch_size_(batch_size), mode_(mode), checked_(checked) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>& outputs) override;
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>& argnums) override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;
  const char* name() const override { return "GlobalPool"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  int batch_size_;
  PoolMode mode_;
  bool checked_;  // the op checked the batch indices when it built the graph
};

// dX of GlobalPool: every row belongs to one batch member, so always a pure gather.
// Inputs: dy (B, C), batch (N,), plus x (N, C) for max. Output (N, C) in dy's dtype.
class GlobalPoolGrad : public mx::Primitive {
 public:
  GlobalPoolGrad(mx::Stream s, int batch_size, PoolMode mode, bool checked)
      : mx::Primitive(s), batch_size_(batch_size), mode_(mode), checked_(checked) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  std::vector<mx::array> vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<mx::array>& outputs) override;
  std::vector<mx::array> jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                             const std::vector<int>& argnums) override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;
  const char* name() const override { return "GlobalPoolGrad"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  int batch_size_;
  PoolMode mode_;
  bool checked_;  // the op checked the batch indices when it built the graph
};

// ---- ops building the graph (csrc/pool.cpp) ------------------------------------

// Each op checks shapes, dtypes, the edge offsets, the weights and the row counts
// (std::invalid_argument); the values of the row and batch indices are checked there when
// they are computed already, else by the primitive's CPU task (csrc/core/checks.h).

// x pooled over the relation edges; `v` only for PoolMode::Select.
mx::array sparse_pool(const mx::array& x, const mx::array& in_rows, const mx::array& out_rows, EdgeBounds bounds,
                      OffsetWeights weights, int n_out, PoolMode mode, PoolBackward backward,
                      const std::optional<mx::array>& v = std::nullopt, EdgeFacts facts = {},
                      mx::StreamOrDevice s = {});

// dX of sparse_pool; `x` is required for max.
mx::array sparse_pool_grad(const mx::array& dy, const mx::array& in_rows, const mx::array& out_rows,
                           EdgeBounds bounds, OffsetWeights weights, int n_in, PoolMode mode, PoolBackward backward,
                           const std::optional<mx::array>& x = std::nullopt, EdgeFacts facts = {},
                           mx::StreamOrDevice s = {});

mx::array global_pool(const mx::array& x, const mx::array& batch, int batch_size, PoolMode mode,
                      const std::optional<mx::array>& v = std::nullopt, mx::StreamOrDevice s = {});

mx::array global_pool_grad(const mx::array& dy, const mx::array& batch, int batch_size, PoolMode mode,
                           const std::optional<mx::array>& x = std::nullopt, mx::StreamOrDevice s = {});

}  // namespace lattice
