// Bindings of the pooling family: differentiable local and global pooling primitives.
// Arguments are validated by the Python semantic layer (lattice/ops/pool.py); the ops
// behind these bindings check again whatever the kernels index with (csrc/core/checks.h).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include "pool.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace lattice {

namespace {

PoolMode parse_mode(const std::string& mode, bool allow_select) {
  if (mode == "sum") return PoolMode::Sum;
  if (mode == "avg") return PoolMode::Avg;
  if (mode == "max") return PoolMode::Max;
  if (allow_select && mode == "select") return PoolMode::Select;
  throw std::invalid_argument("[pool] mode must be 'sum', 'avg' or 'max', got '" + mode + "'");
}

PoolBackward parse_backward(const std::string& backward) {
  if (backward == "input_exclusive_gather") return PoolBackward::Exclusive;
  if (backward == "scatter_general") return PoolBackward::General;
  throw std::invalid_argument("[pool] backward must be 'input_exclusive_gather' or 'scatter_general', got '" +
                              backward + "'");
}

OffsetWeights offset_weights(const std::optional<std::vector<float>>& w) {
  return w ? std::make_shared<const std::vector<float>>(*w) : nullptr;
}

}  // namespace

void bind_pool(nb::module_& m) {
  m.def("sparse_pool",
        [](const mx::array& x, const mx::array& in_rows, const mx::array& out_rows, const std::vector<int64_t>& bounds,
           int n_out, const std::string& mode, const std::string& backward,
           const std::optional<std::vector<float>>& weights, const std::optional<mx::array>& values, bool distinct,
           mx::StreamOrDevice s) {
          return sparse_pool(x, in_rows, out_rows, std::make_shared<const std::vector<int64_t>>(bounds),
                             offset_weights(weights), n_out, parse_mode(mode, true), parse_backward(backward), values,
                             EdgeFacts{distinct}, s);
        },
        "x"_a, "in_rows"_a, "out_rows"_a, "bounds"_a, "n_out"_a, "mode"_a, "backward"_a = "scatter_general",
        "weights"_a = nb::none(), "values"_a = nb::none(), "distinct"_a = false, "stream"_a = nb::none(),
        "Y[o] = reduce over the relation edges (i, o) of X[i]: sum / avg (optionally weighted per kernel "
        "offset) / max (ties to the smallest input row); differentiable, with the backward walk named by "
        "`backward`. Row indices, offsets, weights and counts are checked (ValueError). `distinct`: the caller "
        "vouches that within each kernel offset no input row repeats, and no output row unless the edges are "
        "grouped by output row (lattice's relations and window maps); without it the backward kernels check "
        "that themselves and scatter serially where it does not hold.");
  m.def("sparse_pool_grad",
        [](const mx::array& dy, const mx::array& in_rows, const mx::array& out_rows,
           const std::vector<int64_t>& bounds, int n_in, const std::string& mode, const std::string& backward,
           const std::optional<std::vector<float>>& weights, const std::optional<mx::array>& x, bool distinct,
           mx::StreamOrDevice s) {
          return sparse_pool_grad(dy, in_rows, out_rows, std::make_shared<const std::vector<int64_t>>(bounds),
                                  offset_weights(weights), n_in, parse_mode(mode, false), parse_backward(backward), x,
                                  EdgeFacts{distinct}, s);
        },
        "dy"_a, "in_rows"_a, "out_rows"_a, "bounds"_a, "n_in"_a, "mode"_a, "backward"_a = "scatter_general",
        "weights"_a = nb::none(), "x"_a = nb::none(), "distinct"_a = false, "stream"_a = nb::none(),
        "dX of sparse_pool (x is required for max); checked as sparse_pool.");
  m.def("global_pool",
        [](const mx::array& x, const mx::array& batch, int batch_size, const std::string& mode,
           const std::optional<mx::array>& values, mx::StreamOrDevice s) {
          return global_pool(x, batch, batch_size, parse_mode(mode, true), values, s);
        },
        "x"_a, "batch"_a, "batch_size"_a, "mode"_a, "values"_a = nb::none(), "stream"_a = nb::none(),
        "Dense (batch_size, C) sum / avg / max of the rows of each batch member; differentiable. Batch "
        "indices must lie in [0, batch_size) (ValueError).");
}

}  // namespace lattice
