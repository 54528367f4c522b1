// Graph-building ops, autodiff and metadata of the pooling primitives (device independent).
//
// Every backward map here is linear in the cotangent, so the VJP of a gradient
// primitive is the forward primitive again: sum / avg transpose to themselves, and
// the max gradient (a routing of dY by the argmax of X) transposes to Select.
#include "pool.h"

#include <algorithm>
#include <stdexcept>

#include "core/checks.h"

namespace lattice {

namespace {

bool same_bounds(const EdgeBounds& a, const EdgeBounds& b) { return a == b || (a && b && *a == *b); }

bool same_weights(const OffsetWeights& a, const OffsetWeights& b) {
  return a == b || (a && b && *a == *b);
}

mx::array feats(const mx::array& x, const char* op, const char* name, mx::StreamOrDevice s) {
  check_feats(x, op, name);
  return mx::contiguous(x, false, s);
}

void check_relation(const mx::array& in_rows, const mx::array& out_rows, const EdgeBounds& bounds,
                    const OffsetWeights& weights, const char* op) {
  check_index_array(in_rows, op, "in_rows");
  check_index_array(out_rows, op, "out_rows");
  if (in_rows.size() != out_rows.size()) {
    Message msg;
    msg << "[" << op << "] in_rows and out_rows must have one entry per edge, got " << in_rows.size() << " and "
        << out_rows.size();
    invalid(msg);
  }
  check_edge_offsets(bounds.get(), -1, static_cast<int64_t>(in_rows.size()), op);
  if (weights && weights->size() + 1 != bounds->size()) {
    Message msg;
    msg << "[" << op << "] " << weights->size() << " offset weights for " << bounds->size() - 1 << " offsets";
    invalid(msg);
  }
}

void check_same_shape(const mx::array& a, const mx::array& b, const char* op, const char* what) {
  if (a.shape() != b.shape()) {
    Message msg;
    msg << "[" << op << "] " << what << " must have the features' shape (" << b.shape(0) << ", " << b.shape(1)
        << "), got (";
    for (int i = 0; i < static_cast<int>(a.ndim()); ++i) msg << (i ? ", " : "") << a.shape(i);
    msg << ")";
    invalid(msg);
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
                      const std::optional<mx::array>& v, EdgeFacts facts, mx::StreamOrDevice s) {
  const char* op = "sparse_pool";
  std::vector<mx::array> inputs = {feats(x, op, "features", s)};
  check_relation(in_rows, out_rows, bounds, weights, op);
  check_count(n_out, op, "n_out");
  mx::Dtype dtype = x.dtype();
  int channels = x.shape(1);
  if (mode == PoolMode::Select) {
    require(v.has_value(), "[sparse_pool] select needs the values to select from");
    check_same_shape(*v, x, op, "select values");
  }
  facts.checked = check_rows_now(in_rows, x.shape(0), op, "in_rows", "the features") &
                  check_rows_now(out_rows, n_out, op, "out_rows", "the output");
  inputs.push_back(rows_i32(in_rows, op, "in_rows", s));
  inputs.push_back(rows_i32(out_rows, op, "out_rows", s));
  if (mode == PoolMode::Select) {
    inputs.push_back(feats(*v, op, "values", s));
    dtype = v->dtype();
  }
  auto stream = mx::to_stream(s);
  return mx::array(
      {n_out, channels}, dtype,
      std::make_shared<SparsePool>(stream, std::move(bounds), std::move(weights), n_out, mode, backward, facts),
      std::move(inputs));
}

mx::array sparse_pool_grad(const mx::array& dy, const mx::array& in_rows, const mx::array& out_rows,
                           EdgeBounds bounds, OffsetWeights weights, int n_in, PoolMode mode, PoolBackward backward,
                           const std::optional<mx::array>& x, EdgeFacts facts, mx::StreamOrDevice s) {
  const char* op = "sparse_pool_grad";
  std::vector<mx::array> inputs = {feats(dy, op, "cotangent", s)};
  check_relation(in_rows, out_rows, bounds, weights, op);
  check_count(n_in, op, "n_in");
  require(mode != PoolMode::Select, "[sparse_pool_grad] select has no gradient primitive");
  if (mode == PoolMode::Max) {
    require(x.has_value(), "[sparse_pool_grad] max needs the forward features");
    feats(*x, op, "features", s);
    if (x->shape(0) != n_in || x->shape(1) != dy.shape(1)) {
      Message msg;
      msg << "[sparse_pool_grad] features must be (n_in, C) = (" << n_in << ", " << dy.shape(1) << "), got ("
          << x->shape(0) << ", " << x->shape(1) << ")";
      invalid(msg);
    }
  }
  const int n_out = dy.shape(0);
  facts.checked = check_rows_now(in_rows, n_in, op, "in_rows", "the input") &
                  check_rows_now(out_rows, n_out, op, "out_rows", "the cotangent");
  inputs.push_back(rows_i32(in_rows, op, "in_rows", s));
  inputs.push_back(rows_i32(out_rows, op, "out_rows", s));
  if (mode == PoolMode::Max) inputs.push_back(feats(*x, op, "features", s));
  auto stream = mx::to_stream(s);
  return mx::array({n_in, dy.shape(1)}, dy.dtype(),
                   std::make_shared<SparsePoolGrad>(stream, std::move(bounds), std::move(weights), n_in, n_out, mode,
                                                    backward, facts),
                   std::move(inputs));
}

mx::array global_pool(const mx::array& x, const mx::array& batch, int batch_size, PoolMode mode,
                      const std::optional<mx::array>& v, mx::StreamOrDevice s) {
  const char* op = "global_pool";
  std::vector<mx::array> inputs = {feats(x, op, "features", s)};
  check_count(batch_size, op, "batch_size");
  check_index_array(batch, op, "batch indices");
  if (batch.shape(0) != x.shape(0)) {
    Message msg;
    msg << "[global_pool] batch indices must be (N,) = (" << x.shape(0) << ",), got (" << batch.shape(0) << ",)";
    invalid(msg);
  }
  mx::Dtype dtype = x.dtype();
  if (mode == PoolMode::Select) {
    require(v.has_value(), "[global_pool] select needs the values to select from");
    check_same_shape(*v, x, op, "select values");
  }
  const bool checked = check_rows_now(batch, batch_size, op, "batch indices", "the batch, batch_size");
  inputs.push_back(rows_i32(batch, op, "batch indices", s));
  if (mode == PoolMode::Select) {
    inputs.push_back(feats(*v, op, "values", s));
    dtype = v->dtype();
  }
  auto stream = mx::to_stream(s);
  return mx::array({batch_size, x.shape(1)}, dtype, std::make_shared<GlobalPool>(stream, batch_size, mode, checked),
                   std::move(inputs));
}

mx::array global_pool_grad(const mx::array& dy, const mx::array& batch, int batch_size, PoolMode mode,
                           const std::optional<mx::array>& x, mx::StreamOrDevice s) {
  const char* op = "global_pool_grad";
  std::vector<mx::array> inputs = {feats(dy, op, "cotangent", s)};
  check_count(batch_size, op, "batch_size");
  require(dy.shape(0) == batch_size, "[global_pool_grad] cotangent must be (batch_size, C)");
  require(mode != PoolMode::Select, "[global_pool_grad] select has no gradient primitive");
  check_index_array(batch, op, "batch indices");
  if (mode == PoolMode::Max) {
    require(x.has_value(), "[global_pool_grad] max needs the forward features");
    feats(*x, op, "features", s);
    if (x->shape(0) != batch.shape(0) || x->shape(1) != dy.shape(1)) {
      Message msg;
      msg << "[global_pool_grad] features must be (N, C) = (" << batch.shape(0) << ", " << dy.shape(1)
          << "), got (" << x->shape(0) << ", " << x->shape(1) << ")";
      invalid(msg);
    }
  }
  const bool checked = check_rows_now(batch, batch_size, op, "batch indices", "the batch, batch_size");
  inputs.push_back(rows_i32(batch, op, "batch indices", s));
  if (mode == PoolMode::Max) inputs.push_back(feats(*x, op, "features", s));
  auto stream = mx::to_stream(s);
  return mx::array({static_cast<int>(batch.shape(0)), dy.shape(1)}, dy.dtype(),
                   std::make_shared<GlobalPoolGrad>(stream, batch_size, mode, checked), std::move(inputs));
}

// The tangent term of a pooling primitive for input `arg`: sum and avg are linear in X,
// max selects the tangent at the argmax of X, select is linear in its values (input
// `value_arg`) and constant in X; other inputs (row indices) do not move the output.
template <class Pool>
std::optional<mx::array> pool_tangent(PoolMode mode, int arg, int value_arg, const mx::array& t, const mx::array& x,
                                      Pool&& pool, const mx::Stream& s) {
  if (mode == PoolMode::Select && arg == value_arg) return pool(x, PoolMode::Select, t);
  if (arg != 0 || mode == PoolMode::Select) return std::nullopt;
  const mx::array tx = mx::astype(t, x.dtype(), s);
  return mode == PoolMode::Max ? pool(x, PoolMode::Select, tx) : pool(tx, mode, std::nullopt);
}

// The JVP of a gradient primitive, linear in its first input (dY; for max at the argmax
// of X, which X's tangent does not move): grad of the tangent, or zeros of `shape`.
template <class Grad>
mx::array linear_in_first(const std::vector<int>& argnums, const std::vector<mx::array>& tangents, mx::Dtype dtype,
                          Grad&& grad, const mx::Shape& shape, const mx::Stream& s) {
  auto term = [&](int arg, const mx::array& t) -> std::optional<mx::array> {
    if (arg != 0) return std::nullopt;
    return grad(mx::astype(t, dtype, s));
  };
  return tangent_sum(argnums, tangents, term, [&] { return mx::zeros(shape, dtype, s); }, s);
}

// ---- SparsePool --------------------------------------------------------------------

std::vector<mx::Shape> SparsePool::output_shapes(const std::vector<mx::array>& inputs) {
  return {{n_out_, inputs[0].shape(1)}};
}

bool SparsePool::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const SparsePool&>(other);
  return n_out_ == o.n_out_ && mode_ == o.mode_ && backward_ == o.backward_ && facts_ == o.facts_ &&
         same_bounds(bounds_, o.bounds_) && same_weights(weights_, o.weights_);
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
                                                  backward_, x, facts_, stream()),
                                 primals[3].dtype(), stream()));
    } else if (arg == 0 && mode_ != PoolMode::Select) {
      std::optional<mx::array> fx;
      if (mode_ == PoolMode::Max) fx = x;
      grads.push_back(mx::astype(
          sparse_pool_grad(dy, in_rows, out_rows, bounds_, weights_, n_in, mode_, backward_, fx, facts_, stream()),
          x.dtype(),
          stream()));
    } else {
      grads.push_back(zeros_for(primals[arg], stream()));  // row indices; X of Select (piecewise constant)
    }
  }
  return grads;
}

std::vector<mx::array> SparsePool::jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                                       const std::vector<int>& argnums) {
  const auto& x = primals[0];
  auto pool = [&](const mx::array& f, PoolMode mode, const std::optional<mx::array>& v) {
    return sparse_pool(f, primals[1], primals[2], bounds_, weights_, n_out_, mode, backward_, v, facts_, stream());
  };
  auto term = [&](int arg, const mx::array& t) { return pool_tangent(mode_, arg, 3, t, x, pool, stream()); };
  const mx::Dtype dtype = mode_ == PoolMode::Select ? primals[3].dtype() : x.dtype();
  return {tangent_sum(argnums, tangents, term, [&] { return mx::zeros({n_out_, x.shape(1)}, dtype, stream()); },
                      stream())};
}

// ---- SparsePoolGrad ------------------------------------------------------------------

std::vector<mx::Shape> SparsePoolGrad::output_shapes(const std::vector<mx::array>& inputs) {
  return {{n_in_, inputs[0].shape(1)}};
}

bool SparsePoolGrad::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const SparsePoolGrad&>(other);
  return n_in_ == o.n_in_ && n_out_ == o.n_out_ && mode_ == o.mode_ && backward_ == o.backward_ &&
         facts_ == o.facts_ && same_bounds(bounds_, o.bounds_) && same_weights(weights_, o.weights_);
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
                                      backward_, ddx, facts_, stream())
                        : sparse_pool(ddx, in_rows, out_rows, bounds_, weights_, n_out_, mode_, backward_,
                                      std::nullopt, facts_, stream());
      grads.push_back(mx::astype(g, dy.dtype(), stream()));
    } else {
      grads.push_back(zeros_for(primals[arg], stream()));
    }
  }
  return grads;
}

std::vector<mx::array> SparsePoolGrad::jvp(const std::vector<mx::array>& primals,
                                           const std::vector<mx::array>& tangents, const std::vector<int>& argnums) {
  const auto& dy = primals[0];
  std::optional<mx::array> fx;
  if (mode_ == PoolMode::Max) fx = primals[3];
  auto grad = [&](const mx::array& t) {
    return sparse_pool_grad(t, primals[1], primals[2], bounds_, weights_, n_in_, mode_, backward_, fx, facts_,
                            stream());
  };
  return {linear_in_first(argnums, tangents, dy.dtype(), grad, {n_in_, dy.shape(1)}, stream())};
}

// ---- GlobalPool ------------------------------------------------------------------------

std::vector<mx::Shape> GlobalPool::output_shapes(const std::vector<mx::array>& inputs) {
  return {{batch_size_, inputs[0].shape(1)}};
}

bool GlobalPool::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const GlobalPool&>(other);
  return batch_size_ == o.batch_size_ && mode_ == o.mode_ && checked_ == o.checked_;
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

std::vector<mx::array> GlobalPool::jvp(const std::vector<mx::array>& primals, const std::vector<mx::array>& tangents,
                                       const std::vector<int>& argnums) {
  const auto& x = primals[0];
  auto pool = [&](const mx::array& f, PoolMode mode, const std::optional<mx::array>& v) {
    return global_pool(f, primals[1], batch_size_, mode, v, stream());
  };
  auto term = [&](int arg, const mx::array& t) { return pool_tangent(mode_, arg, 2, t, x, pool, stream()); };
  const mx::Dtype dtype = mode_ == PoolMode::Select ? primals[2].dtype() : x.dtype();
  return {tangent_sum(argnums, tangents, term,
                      [&] { return mx::zeros({batch_size_, x.shape(1)}, dtype, stream()); }, stream())};
}

// ---- GlobalPoolGrad --------------------------------------------------------------------

std::vector<mx::Shape> GlobalPoolGrad::output_shapes(const std::vector<mx::array>& inputs) {
  return {{inputs[1].shape(0), inputs[0].shape(1)}};
}

bool GlobalPoolGrad::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const GlobalPoolGrad&>(other);
  return batch_size_ == o.batch_size_ && mode_ == o.mode_ && checked_ == o.checked_;
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

std::vector<mx::array> GlobalPoolGrad::jvp(const std::vector<mx::array>& primals,
                                           const std::vector<mx::array>& tangents, const std::vector<int>& argnums) {
  const auto& dy = primals[0];
  std::optional<mx::array> fx;
  if (mode_ == PoolMode::Max) fx = primals[2];
  auto grad = [&](const mx::array& t) { return global_pool_grad(t, primals[1], batch_size_, mode_, fx, stream()); };
  return {linear_in_first(argnums, tangents, dy.dtype(), grad, {primals[1].shape(0), dy.shape(1)}, stream())};
}

}  // namespace lattice
