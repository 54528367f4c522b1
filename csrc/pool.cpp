// Graph-building ops, autodiff and metadata of the pooling primitives (device independent).
//
// Every backward map here is linear in the cotangent, so the VJP of a gradient
// primitive is the forward primitive again: sum / avg transpose to themselves, and
// the max gradient (a routing of dY by the argmax of X) transposes to Select.
#include "pool.h"

#include <algorithm>
#include "core/message.h"
#include <stdexcept>

namespace lattice {

namespace {

void require(bool ok, const std::string& msg) {
  if (!ok) throw std::invalid_argument(msg);
}

bool is_float(mx::Dtype t) { return t == mx::float32 || t == mx::float16 || t == mx::bfloat16; }

bool same_bounds(const EdgeBounds& a, const EdgeBounds& b) { return a == b || (a && b && *a == *b); }

bool same_weights(const OffsetWeights& a, const OffsetWeights& b) {
  return a == b || (a && b && *a == *b);
}

mx::array rows_i32(const mx::array& r, const char* op, mx::StreamOrDevice s) {
  require(r.ndim() == 1, std::string("[") + op + "] row indices must be 1-D");
  return mx::contiguous(mx::astype(r, mx::int32, s), false, s);
}

mx::array feats(const mx::array& x, const char* op, const char* name, mx::StreamOrDevice s) {
  require(x.ndim() == 2, std::string("[") + op + "] " + name + " must be (N, C)");
  require(is_float(x.dtype()), std::string("[") + op + "] " + name + " must be float32, float16 or bfloat16");
  return mx::contiguous(x, false, s);
}

void check_relation(const mx::array& in_rows, const mx::array& out_rows, const EdgeBounds& bounds,
                    const OffsetWeights& weights, const char* op) {
  require(bounds && !bounds->empty() && bounds->front() == 0 &&
              std::is_sorted(bounds->begin(), bounds->end()),
          std::string("[") + op + "] relation offsets must start at 0 and never decrease");
  require(in_rows.size() == out_rows.size() && static_cast<int64_t>(in_rows.size()) == bounds->back(),
          std::string("[") + op + "] edge arrays do not match the relation");
  if (weights) {
    lattice::Message msg;
    msg << "[" << op << "] " << weights->size() << " offset weights for " << bounds->size() - 1 << " offsets";
    require(weights->size() + 1 == bounds->size(), msg.str());
  }
}

mx::array zeros_for(const mx::array& a, mx::Stream s) { return mx::zeros_like(a, s); }

}  // namespace

const char* pool_mode_name(PoolMode m) {
  switch (m) {
    case PoolMode::Sum: return "sum";
    case PoolMode::Avg: return "avg";
    case PoolMode::Max: return "max";
    case PoolMode::Select: return "select";
  }
  return "?";
}

// ---- ops -------------------------------------------------------------------------

mx::array sparse_pool(const mx::array& x, const mx::array& in_rows, const mx::array& out_rows, EdgeBounds bounds,
                      OffsetWeights weights, int n_out, PoolMode mode, PoolBackward backward,
                      const std::optional<mx::array>& v, mx::StreamOrDevice s) {
  const char* op = "sparse_pool";
  check_relation(in_rows, out_rows, bounds, weights, op);
  require(n_out >= 0, "[sparse_pool] n_out must be non-negative");
  std::vector<mx::array> inputs = {feats(x, op, "features", s), rows_i32(in_rows, op, s), rows_i32(out_rows, op, s)};
  mx::Dtype dtype = x.dtype();
  int channels = x.shape(1);
  if (mode == PoolMode::Select) {
    require(v.has_value(), "[sparse_pool] select needs the values to select from");
    require(v->shape() == x.shape(), "[sparse_pool] select values must match the features' shape");
    inputs.push_back(feats(*v, op, "values", s));
    dtype = v->dtype();
  }
  auto stream = mx::to_stream(s);
  return mx::array({n_out, channels}, dtype,
                   std::make_shared<SparsePool>(stream, std::move(bounds), std::move(weights), n_out, mode, backward),
                   std::move(inputs));
}

mx::array sparse_pool_grad(const mx::array& dy, const mx::array& in_rows, const mx::array& out_rows,
                           EdgeBounds bounds, OffsetWeights weights, int n_in, PoolMode mode, PoolBackward backward,
                           const std::optional<mx::array>& x, mx::StreamOrDevice s) {
  const char* op = "sparse_pool_grad";
  check_relation(in_rows, out_rows, bounds, weights, op);
  require(n_in >= 0, "[sparse_pool_grad] n_in must be non-negative");
  require(mode != PoolMode::Select, "[sparse_pool_grad] select has no gradient primitive");
  std::vector<mx::array> inputs = {feats(dy, op, "cotangent", s), rows_i32(in_rows, op, s),
                                   rows_i32(out_rows, op, s)};
  if (mode == PoolMode::Max) {
    require(x.has_value(), "[sparse_pool_grad] max needs the forward features");
    require(x->shape(0) == n_in && x->shape(1) == dy.shape(1), "[sparse_pool_grad] features do not match n_in");
    inputs.push_back(feats(*x, op, "features", s));
  }
  auto stream = mx::to_stream(s);
  const int n_out = dy.shape(0);
  return mx::array({n_in, dy.shape(1)}, dy.dtype(),
                   std::make_shared<SparsePoolGrad>(stream, std::move(bounds), std::move(weights), n_in, n_out, mode,
                                                    backward),
                   std::move(inputs));
}

mx::array global_pool(const mx::array& x, const mx::array& batch, int batch_size, PoolMode mode,
                      const std::optional<mx::array>& v, mx::StreamOrDevice s) {
  const char* op = "global_pool";
  require(batch_size >= 0, "[global_pool] batch_size must be non-negative");
  require(batch.ndim() == 1 && batch.shape(0) == x.shape(0), "[global_pool] batch indices must be (N,)");
  std::vector<mx::array> inputs = {feats(x, op, "features", s), rows_i32(batch, op, s)};
  mx::Dtype dtype = x.dtype();
  if (mode == PoolMode::Select) {
    require(v.has_value() && v->shape() == x.shape(), "[global_pool] select values must match the features");
    inputs.push_back(feats(*v, op, "values", s));
    dtype = v->dtype();
  }
  auto stream = mx::to_stream(s);
  return mx::array({batch_size, x.shape(1)}, dtype, std::make_shared<GlobalPool>(stream, batch_size, mode),
                   std::move(inputs));
}

mx::array global_pool_grad(const mx::array& dy, const mx::array& batch, int batch_size, PoolMode mode,
                           const std::optional<mx::array>& x, mx::StreamOrDevice s) {
  const char* op = "global_pool_grad";
  require(dy.ndim() == 2 && dy.shape(0) == batch_size, "[global_pool_grad] cotangent must be (batch_size, C)");
  require(mode != PoolMode::Select, "[global_pool_grad] select has no gradient primitive");
  std::vector<mx::array> inputs = {feats(dy, op, "cotangent", s), rows_i32(batch, op, s)};
  if (mode == PoolMode::Max) {
    require(x.has_value() && x->shape(0) == batch.shape(0), "[global_pool_grad] max needs the forward features");
    inputs.push_back(feats(*x, op, "features", s));
  }
  auto stream = mx::to_stream(s);
  return mx::array({static_cast<int>(batch.shape(0)), dy.shape(1)}, dy.dtype(),
                   std::make_shared<GlobalPoolGrad>(stream, batch_size, mode), std::move(inputs));
}

// ---- SparsePool --------------------------------------------------------------------

std::vector<mx::Shape> SparsePool::output_shapes(const std::vector<mx::array>& inputs) {
  return {{n_out_, inputs[0].shape(1)}};
}

bool SparsePool::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const SparsePool&>(other);
  return n_out_ == o.n_out_ && mode_ == o.mode_ && backward_ == o.backward_ && same_bounds(bounds_, o.bounds_) &&
         same_weights(weights_, o.weights_);
}

std::vector<mx::array> SparsePool::vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                                       const std::vector<int>& argnums, const std::vector<mx::array>&) {
  const auto& x = primals[0];
  const auto& in_rows = primals[1];
  const auto& out_rows = primals[2];
  const auto& dy = cotangents[0];
  const int n_in = x.shape(0);
  std::vector<mx::array> grads;
  for (int arg : argnums) {
    if (mode_ == PoolMode::Select && arg == 3) {
      // Select(V) routes V by the argmax of X: its transpose is the max gradient.
      grads.push_back(mx::astype(sparse_pool_grad(dy, in_rows, out_rows, bounds_, weights_, n_in, PoolMode::Max,
                                                  backward_, x, stream()),
                                 primals[3].dtype(), stream()));
    } else if (arg == 0 && mode_ != PoolMode::Select) {
      std::optional<mx::array> fx;
      if (mode_ == PoolMode::Max) fx = x;
      grads.push_back(mx::astype(
          sparse_pool_grad(dy, in_rows, out_rows, bounds_, weights_, n_in, mode_, backward_, fx, stream()), x.dtype(),
          stream()));
    } else {
      grads.push_back(zeros_for(primals[arg], stream()));  // row indices; X of Select (piecewise constant)
    }
  }
  return grads;
}

// ---- SparsePoolGrad ------------------------------------------------------------------

std::vector<mx::Shape> SparsePoolGrad::output_shapes(const std::vector<mx::array>& inputs) {
  return {{n_in_, inputs[0].shape(1)}};
}

bool SparsePoolGrad::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const SparsePoolGrad&>(other);
  return n_in_ == o.n_in_ && n_out_ == o.n_out_ && mode_ == o.mode_ && backward_ == o.backward_ &&
         same_bounds(bounds_, o.bounds_) && same_weights(weights_, o.weights_);
}

std::vector<mx::array> SparsePoolGrad::vjp(const std::vector<mx::array>& primals,
                                           const std::vector<mx::array>& cotangents, const std::vector<int>& argnums,
                                           const std::vector<mx::array>&) {
  const auto& dy = primals[0];
  const auto& in_rows = primals[1];
  const auto& out_rows = primals[2];
  const auto& ddx = cotangents[0];
  std::vector<mx::array> grads;
  for (int arg : argnums) {
    if (arg == 0) {
      mx::array g = mode_ == PoolMode::Max
                        ? sparse_pool(primals[3], in_rows, out_rows, bounds_, weights_, n_out_, PoolMode::Select,
                                      backward_, ddx, stream())
                        : sparse_pool(ddx, in_rows, out_rows, bounds_, weights_, n_out_, mode_, backward_,
                                      std::nullopt, stream());
      grads.push_back(mx::astype(g, dy.dtype(), stream()));
    } else {
      grads.push_back(zeros_for(primals[arg], stream()));
    }
  }
  return grads;
}

// ---- GlobalPool ------------------------------------------------------------------------

std::vector<mx::Shape> GlobalPool::output_shapes(const std::vector<mx::array>& inputs) {
  return {{batch_size_, inputs[0].shape(1)}};
}

bool GlobalPool::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const GlobalPool&>(other);
  return batch_size_ == o.batch_size_ && mode_ == o.mode_;
}

std::vector<mx::array> GlobalPool::vjp(const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                                       const std::vector<int>& argnums, const std::vector<mx::array>&) {
  const auto& x = primals[0];
  const auto& batch = primals[1];
  const auto& dy = cotangents[0];
  std::vector<mx::array> grads;
  for (int arg : argnums) {
    if (mode_ == PoolMode::Select && arg == 2) {
      grads.push_back(mx::astype(global_pool_grad(dy, batch, batch_size_, PoolMode::Max, x, stream()),
                                 primals[2].dtype(), stream()));
    } else if (arg == 0 && mode_ != PoolMode::Select) {
      std::optional<mx::array> fx;
      if (mode_ == PoolMode::Max) fx = x;
      grads.push_back(mx::astype(global_pool_grad(dy, batch, batch_size_, mode_, fx, stream()), x.dtype(), stream()));
    } else {
      grads.push_back(zeros_for(primals[arg], stream()));
    }
  }
  return grads;
}

// ---- GlobalPoolGrad --------------------------------------------------------------------

std::vector<mx::Shape> GlobalPoolGrad::output_shapes(const std::vector<mx::array>& inputs) {
  return {{inputs[1].shape(0), inputs[0].shape(1)}};
}

bool GlobalPoolGrad::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const GlobalPoolGrad&>(other);
  return batch_size_ == o.batch_size_ && mode_ == o.mode_;
}

std::vector<mx::array> GlobalPoolGrad::vjp(const std::vector<mx::array>& primals,
                                           const std::vector<mx::array>& cotangents, const std::vector<int>& argnums,
                                           const std::vector<mx::array>&) {
  const auto& dy = primals[0];
  const auto& batch = primals[1];
  const auto& ddx = cotangents[0];
  std::vector<mx::array> grads;
  for (int arg : argnums) {
    if (arg == 0) {
      mx::array g = mode_ == PoolMode::Max
                        ? global_pool(primals[2], batch, batch_size_, PoolMode::Select, ddx, stream())
                        : global_pool(ddx, batch, batch_size_, mode_, std::nullopt, stream());
      grads.push_back(mx::astype(g, dy.dtype(), stream()));
    } else {
      grads.push_back(zeros_for(primals[arg], stream()));
    }
  }
  return grads;
}

}  // namespace lattice
