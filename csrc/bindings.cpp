// The nanobind module lattice._ext: thin bindings over the backend functions.
// Arguments are validated by the Python semantic layer; the bindings and the ops
// behind them check again whatever would otherwise be memory-unsafe or crash (row
// indices, edge offsets, counts, strides: csrc/core/checks.h), since every function
// here is reachable from Python as lattice._ext.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <iterator>
#include <string>

#if defined(__GLIBC__)
#include <malloc.h>
#include <unistd.h>
#endif

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include "backend/cpu/blas.h"
#include "backend/cpu/coords.h"
#include "backend/cpu/neighbors.h"
#include "backend/cpu/relations.h"
#include "backend/cpu/voxel_accumulator.h"
#include "core/checks.h"
#include "core/settings.h"
#include "primitives.h"

namespace nb = nanobind;
using namespace nb::literals;
using lattice::CoordTable;
using lattice::CoordTablePtr;
using lattice::Int3;
namespace mx = mlx::core;

namespace lattice {
void bind_pool(nb::module_& m);  // csrc/bindings_pool.cpp

// glibc serves allocations above its mmap threshold with fresh pages each time, and gives
// the heap's free top back to the kernel past its trim threshold (128 KiB by default): a
// buffer freed and allocated again is page-faulted in (and zeroed by the kernel) again on
// every call. Measured: a 36 MB sgemm output 16.4 -> 9.5 ms, a fresh max-pool 13 -> 9 ms;
// a MinkUNet14 training step (KITTI scan, 2 threads) faulted 1.25 GiB per step with a
// 512 MiB trim threshold (a quarter of its time in the kernel's clear_page), 0.07 GiB with
// the threshold below, at the same peak RSS (3.5 GiB). Large buffers are kept on the heap
// and the heap keeps up to a quarter of physical memory free for the next call (at least
// 512 MiB, at most 2 GiB - 1: mallopt takes an int), unless lattice/settings.py says not
// to (LATTICE_MALLOC_TUNING=0, or glibc's own MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_).
#if defined(__GLIBC__)
int trim_threshold_bytes() {
  constexpr int64_t lo = int64_t{512} << 20, hi = std::numeric_limits<int>::max();
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) return static_cast<int>(std::clamp(int64_t{pages} * page / 4, lo, hi));
#endif
  return static_cast<int>(lo);
}
#endif

void tune_malloc(bool mmap_threshold, bool trim_threshold) {
#if defined(__GLIBC__)
  if (mmap_threshold) mallopt(M_MMAP_THRESHOLD, 256 << 20);
  if (trim_threshold) mallopt(M_TRIM_THRESHOLD, trim_threshold_bytes());
#else
  (void)mmap_threshold;
  (void)trim_threshold;
#endif
}
}  // namespace lattice

namespace {

std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t> bounds_tuple(
    const CoordTable& t) {
  const auto& b = t.bounds;
  return {b.lo[0], b.hi[0], b.lo[1], b.hi[1], b.lo[2], b.hi[2], b.lo[3], b.hi[3]};
}

// A GEMM kernel by name ("blas", or one of lattice's: "avx2", "avx512").
lattice::gemm::Kernel gemm_kernel(const std::string& name) {
  using lattice::gemm::Kernel;
  constexpr Kernel all[] = {Kernel::blas, Kernel::avx2, Kernel::avx512, Kernel::avx512_bf16, Kernel::amx_bf16};
  std::string names;
  for (size_t i = 0; i < std::size(all); ++i) {
    if (name == lattice::gemm::name(all[i])) return all[i];
    names += std::string(i == 0 ? "" : i + 1 < std::size(all) ? ", " : " or ") + "'" + lattice::gemm::name(all[i]) + "'";
  }
  throw std::invalid_argument("[sparse_conv] kernel must be " + names + ", got '" + name + "'");
}

nb::tuple relation_tuple(lattice::RelationArrays r) {
  if (r.out_table) return nb::make_tuple(r.in_rows, r.out_rows, r.counts, r.out_table);
  return nb::make_tuple(r.in_rows, r.out_rows, r.counts, nb::none());
}

// A PageArray handed to NumPy without a copy: the array owns it through a capsule.
template <class T>
nb::object page_array_to_numpy(lattice::PageArray<T>&& buf, std::initializer_list<size_t> shape) {
  if (!buf.data()) buf.grow(1);  // NumPy wants a valid pointer even for empty arrays
  auto* owned = new lattice::PageArray<T>(std::move(buf));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<lattice::PageArray<T>*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, T>(owned->data(), shape, owner));
}

using RowMatrix = nb::ndarray<nb::ro, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

std::string dtype_name(nb::dlpack::dtype d) {
  const char* kind = d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float)  ? "float"
                     : d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Int)  ? "int"
                     : d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::UInt) ? "uint"
                                                                                     : "other";
  return std::string(kind) + std::to_string(d.bits);
}

// The NumPy chunk is borrowed (no copy into MLX): checked here, read in place without the GIL.
void accumulator_add(lattice::VoxelAccumulator& a, const RowMatrix& points, std::optional<RowMatrix> feats) {
  const bool f64 = points.dtype() == nb::dtype<double>();
  if (points.shape(1) != 3 || (!f64 && points.dtype() != nb::dtype<float>())) {
    throw std::invalid_argument("[voxelize] points must be a float32 or float64 (N, 3) array, got " +
                                dtype_name(points.dtype()) + " with " + std::to_string(points.shape(1)) +
                                " columns");
  }
  lattice::PointRows rows;
  rows.n = static_cast<int64_t>(points.shape(0));
  if (f64) rows.f64 = static_cast<const double*>(points.data());
  else rows.f32 = static_cast<const float*>(points.data());
  const double* f = nullptr;
  if (feats) {
    if (feats->dtype() != nb::dtype<double>() || static_cast<int64_t>(feats->shape(0)) != rows.n ||
        static_cast<int64_t>(feats->shape(1)) != a.channels()) {
      throw std::invalid_argument("[voxelize] features must be a float64 (" + std::to_string(rows.n) + ", " +
                                  std::to_string(a.channels()) + ") array, got " + dtype_name(feats->dtype()) +
                                  " (" + std::to_string(feats->shape(0)) + ", " +
                                  std::to_string(feats->shape(1)) + ")");
    }
    f = static_cast<const double*>(feats->data());
  } else if (a.channels() > 0 && rows.n > 0) {
    throw std::invalid_argument("[voxelize] features are required for the " + std::to_string(a.channels()) +
                                " feature columns");
  }
  nb::gil_scoped_release release;
  a.add(rows, f);
}

// "sum" with channels C (one reduction for every column; "count" means no columns), or a
// list of reductions, one per column.
std::vector<lattice::VoxelReduce> accumulator_reduces(const std::variant<std::string, std::vector<std::string>>& r,
                                                      int64_t channels) {
  std::vector<lattice::VoxelReduce> out;
  if (const auto* one = std::get_if<std::string>(&r)) {
    const lattice::VoxelReduce code = lattice::parse_voxel_reduce(*one);
    if (code == lattice::VoxelReduce::kCount) return out;
    if (channels < 1) {
      throw std::invalid_argument("[voxelize] a feature reduction needs at least one channel, got " +
                                  std::to_string(channels));
    }
    out.assign(static_cast<size_t>(channels), code);
    return out;
  }
  for (const auto& name : std::get<std::vector<std::string>>(r)) out.push_back(lattice::parse_voxel_reduce(name));
  if (channels >= 0 && static_cast<int64_t>(out.size()) != channels) {
    throw std::invalid_argument("[voxelize] " + std::to_string(out.size()) + " reductions for " +
                                std::to_string(channels) + " channels");
  }
  return out;
}

mx::array blas_sgemm(const mx::array& a_in, const mx::array& b_in) {
  if (a_in.ndim() != 2 || b_in.ndim() != 2 || a_in.shape(1) != b_in.shape(0)) {
    throw std::invalid_argument("[blas_sgemm] expected 2-D operands with matching inner dimension");
  }
  mx::array a = lattice::materialize(mx::astype(a_in, mx::float32));
  mx::array b = lattice::materialize(mx::astype(b_in, mx::float32));
  const int m = a.shape(0), k = a.shape(1), n = b.shape(1);
  lattice::OutArray<float> c({m, n}, mx::float32);
  if (m > 0 && n > 0) {
    if (k == 0) std::fill(c.data(), c.data() + size_t(m) * n, 0.0f);
    else lattice::blas::sgemm_parallel(false, false, m, n, k, 1.0f, a.data<float>(), k, b.data<float>(), n, 0.0f, c.data(), n);
  }
  return std::move(c).finish();
}

}  // namespace

NB_MODULE(_ext, m) {
  m.doc() = "lattice native core (CPU backend)";
  nb::module_::import_("mlx.core");  // mx.array's nanobind type, whichever module imports lattice._ext first
  lattice::blas::init();
  m.def(
      "configure",
      [](int num_threads, int64_t conv_tile_floats, bool mmap_threshold, bool trim_threshold) {
        lattice::settings().num_threads = num_threads;
        lattice::settings().conv_tile_floats = conv_tile_floats;
        lattice::tune_malloc(mmap_threshold, trim_threshold);
      },
      "num_threads"_a, "conv_tile_floats"_a, "mmap_threshold"_a, "trim_threshold"_a,
      "Settings read from the environment by lattice/settings.py, once, at import.");

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const std::overflow_error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  nb::class_<CoordTable>(m, "CoordTable", "A coordinate set with its hash table (opaque).")
      .def_prop_ro("coords", [](const CoordTable& t) { return t.coords; })
      .def_prop_ro("size", [](const CoordTable& t) { return t.n; })
      .def_prop_ro("capacity", [](const CoordTable& t) { return t.hashed().capacity(); })
      .def_prop_ro("hashed", &CoordTable::is_hashed,
                   "Whether the hash table is built (strictly sorted rows defer it to the first lookup).")
      .def_prop_ro("bounds", &bounds_tuple);

  auto release = nb::call_guard<nb::gil_scoped_release>();

  m.def("build_table", &lattice::build_coord_table, "coords"_a, "op"_a = "SparseTensor", release,
        "Hash table of unique (batch, x, y, z) rows; rejects duplicates and negative batches.");
  m.def("lookup", [](const CoordTable& t, const mx::array& q) { return lattice::lookup_rows(t, q); },
        "table"_a, "queries"_a, release);
  m.def("downsample",
        [](const CoordTable& t, const Int3& stride) {
          lattice::check_axes(stride, INT32_MAX, "downsample_coords", "stride");
          auto u = lattice::downsample(t, stride);
          std::optional<mx::array> rows, out;
          if (u.grouped) {
            rows = std::move(u.group_rows).finish();
            out = std::move(u.group_out).finish();
          }
          return std::make_tuple(u.table, std::move(u.inverse).finish(), rows, out);
        },
        "table"_a, "stride"_a, release,
        "(coarse table, inverse, window rows, window output rows): unique(floor(coords / stride)) in "
        "first-occurrence order, each row's cell, and (cell volume <= 32, else None) the rows grouped by cell, "
        "ascending kernel offset within a cell.");
  m.def("union", [](const CoordTable& a, const CoordTable& b) { return lattice::union_coords(a, b).table; },
        "lhs"_a, "rhs"_a, release);
  m.def("unique_coords",
        [](const mx::array& coords) {
          auto u = lattice::unique_coords(coords);
          return std::make_tuple(u.table, std::move(u.inverse).finish(), std::move(u.counts).finish());
        },
        "coords"_a, release);
  m.def("intersection_rows", &lattice::intersection_rows, "lhs"_a, "rhs"_a, release);
  m.def("segment_sum",
        [](const mx::array& feats, const mx::array& inverse, int64_t m, std::optional<mx::array> counts) {
          return lattice::segment_sum(feats, inverse, m, counts ? &*counts : nullptr);
        },
        "feats"_a, "inverse"_a, "m"_a, "counts"_a = nb::none(), release);
  m.def("morton_codes", &lattice::morton_codes, "coords"_a, release);
  m.def("morton_order", &lattice::morton_order, "coords"_a, release);
  m.def("sparse_quantize",
        [](const mx::array& points, const std::array<double, 3>& voxel_size,
           const std::array<double, 3>& origin, std::optional<mx::array> batch) {
          auto u = lattice::quantize_points(points, voxel_size, origin, batch ? &*batch : nullptr);
          return std::make_tuple(u.table, std::move(u.inverse).finish(), std::move(u.counts).finish());
        },
        "points"_a, "voxel_size"_a, "origin"_a, "batch_indices"_a = nb::none(), release);

  nb::class_<lattice::VoxelAccumulator>(
      m, "VoxelAccumulator",
      "Voxels of points added chunk by chunk, reduced in place (first-occurrence order). Not thread-safe.")
      .def("__init__",
           [](lattice::VoxelAccumulator* self, const std::array<double, 3>& voxel_size,
              const std::array<double, 3>& origin, const std::variant<std::string, std::vector<std::string>>& reduction,
              int64_t channels) {
             new (self) lattice::VoxelAccumulator(voxel_size, origin, accumulator_reduces(reduction, channels));
           },
           "voxel_size"_a, "origin"_a, "reduction"_a, "channels"_a = -1,
           "reduction: one of count, sum, mean, max, min, first for every one of `channels` columns "
           "(count: no columns), or a list of them, one per column.")
      .def("add", &accumulator_add, "points"_a, "feats"_a = nb::none(),
           "Adds points (N, 3) float32/float64 and features (N, C) float64 (None without columns), "
           "read in place (C-contiguous NumPy arrays).")
      .def_prop_ro("size", &lattice::VoxelAccumulator::size)
      .def_prop_ro("channels", &lattice::VoxelAccumulator::channels)
      .def_prop_ro("table_capacity", &lattice::VoxelAccumulator::table_capacity)
      .def("last_rows",
           [](const lattice::VoxelAccumulator& a) {
             const auto& rows = a.last_rows();
             auto* owned = new std::vector<int32_t>(rows);
             nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<int32_t>*>(p); });
             return nb::ndarray<nb::numpy, int32_t>(owned->data(), {owned->size()}, owner);
           },
           "The voxel row (int32) of every point of the last chunk added, in point order (a copy).")
      .def("finish",
           [](lattice::VoxelAccumulator& a) {
             lattice::VoxelResult r;
             {
               nb::gil_scoped_release g;
               r = a.finish();
             }
             const size_t n = static_cast<size_t>(r.n), c = static_cast<size_t>(r.channels);
             return nb::make_tuple(page_array_to_numpy(std::move(r.coords), {n, 4}),
                                   page_array_to_numpy(std::move(r.feats), {n, c}),
                                   page_array_to_numpy(std::move(r.counts), {n}));
           },
           "(coords (M, 4) int32, feats (M, C) float64, counts (M,) int64) as NumPy arrays that own "
           "the accumulator's buffers (no copies); the accumulator is left empty.");

  m.def("kernel_offsets", &lattice::kernel_offsets, "size"_a, "dilation"_a);
  m.def("relation_submanifold",
        [](const CoordTable& in, const Int3& size, const Int3& dilation, bool merge) {
          lattice::check_axes(dilation, INT32_MAX, "submanifold_kernel_relation", "dilation");
          nb::gil_scoped_release g;
          auto r = lattice::relation_submanifold(in, size, dilation, merge);
          nb::gil_scoped_acquire a;
          return relation_tuple(std::move(r));
        },
        "table"_a, "size"_a, "dilation"_a, "merge"_a = false,
        "The submanifold relation: half the offsets probed in the table (merge=False), or the rows "
        "sorted once and each shifted column merged (merge=True; the route decides): the same arrays.");
  m.def("relation_forward",
        [](const CoordTable& in, const CoordTable& out, const Int3& size, const Int3& stride,
           const Int3& padding, const Int3& dilation) {
          lattice::check_axes(stride, INT32_MAX, "kernel_relation", "stride");
          lattice::check_axes(dilation, INT32_MAX, "kernel_relation", "dilation");
          nb::gil_scoped_release g;
          auto r = lattice::relation_forward(in, out, size, stride, padding, dilation);
          nb::gil_scoped_acquire a;
          return relation_tuple(std::move(r));
        },
        "table"_a, "target"_a, "size"_a, "stride"_a, "padding"_a, "dilation"_a);
  m.def("relation_exclusive",
        [](const CoordTable& in, const mx::array& inverse, const Int3& stride) {
          // kernel == stride windows: at most 64 per axis, as every kernel size
          lattice::check_axes(stride, 64, "kernel_relation", "stride");
          mx::array inv = lattice::materialize(inverse);
          if (inv.dtype() != mx::int32 || inv.ndim() != 1 || inv.shape(0) != in.n) {
            throw std::invalid_argument("[kernel_relation] inverse must be int32 (N,) of the input rows");
          }
          // the downsampled row of every input row: a downsample has at most N rows
          lattice::check_rows(inv.data<int32_t>(), in.n, in.n, "kernel_relation", "inverse", "the downsample");
          nb::gil_scoped_release g;
          auto r = lattice::relation_exclusive(in, inv.data<int32_t>(), stride);
          nb::gil_scoped_acquire a;
          return relation_tuple(std::move(r));
        },
        "table"_a, "inverse"_a, "stride"_a);
  m.def("relation_transposed",
        [](const CoordTable& in, const CoordTable* out, const Int3& size, const Int3& stride,
           const Int3& padding, const Int3& dilation) {
          lattice::check_axes(stride, INT32_MAX, "transposed_kernel_relation", "stride");
          lattice::check_axes(dilation, INT32_MAX, "transposed_kernel_relation", "dilation");
          nb::gil_scoped_release g;
          auto r = lattice::relation_transposed(in, out, size, stride, padding, dilation);
          nb::gil_scoped_acquire a;
          return relation_tuple(std::move(r));
        },
        "table"_a, "target"_a.none(), "size"_a, "stride"_a, "padding"_a, "dilation"_a);

  m.def("radius_neighbors",
        [](const mx::array& s, const mx::array& sb, const mx::array& q, const mx::array& qb,
           double radius, int64_t max_neighbors) {
          if (!(radius > 0.0) || !std::isfinite(radius)) {
            lattice::Message msg;
            msg << "[radius_relation] radius must be positive and finite, got " << radius;
            lattice::invalid(msg);
          }
          auto r = lattice::radius_neighbors(s, sb, q, qb, radius, max_neighbors);
          return std::make_tuple(r.offsets, r.source_rows, r.distances);
        },
        "source"_a, "source_batch"_a, "query"_a, "query_batch"_a, "radius"_a, "max_neighbors"_a,
        release);
  m.def("knn_neighbors",
        [](const mx::array& s, const mx::array& sb, const mx::array& q, const mx::array& qb, int64_t k) {
          if (k < 1) throw std::invalid_argument("[knn_relation] k must be positive, got " + std::to_string(k));
          auto r = lattice::knn_neighbors(s, sb, q, qb, k);
          return std::make_tuple(r.offsets, r.source_rows, r.distances);
        },
        "source"_a, "source_batch"_a, "query"_a, "query_batch"_a, "k"_a, release);

  m.def("sparse_conv",
        [](const mx::array& x, const mx::array& w, const mx::array& in_rows, const mx::array& out_rows,
           const std::vector<int64_t>& bounds, int n_out, bool transpose_w, int identity_k, bool distinct,
           const std::string& kernel, bool mirrored, mx::StreamOrDevice s) {
          return lattice::sparse_conv(x, w, in_rows, out_rows, std::make_shared<const std::vector<int64_t>>(bounds),
                                      n_out, transpose_w, identity_k, lattice::EdgeFacts{distinct, false, mirrored},
                                      gemm_kernel(kernel), s);
        },
        "x"_a, "w"_a, "in_rows"_a, "out_rows"_a, "bounds"_a, "n_out"_a, "transpose_w"_a = false,
        "identity_k"_a = -1, "distinct"_a = false, "kernel"_a = "blas", "mirrored"_a = false, "stream"_a = nb::none(),
        "Y[out_rows] += X[in_rows] @ op(W[k]) per kernel offset: gather -> BLAS GEMM -> scatter-add (kernel "
        "'blas'), or lattice's register-tiled kernel that reads the gathered rows and adds into the scattered "
        "ones directly ('avx2', 'avx512'; 'avx512_bf16' and 'amx_bf16' round the operands to bfloat16: see "
        "conv_kernels()). "
        "Row indices, offsets and counts are checked (ValueError). `distinct`: the caller vouches that within each kernel offset no two edges share an "
        "input row or an output row (lattice's relations do); without it the kernel checks that itself and "
        "scatters serially where it does not hold. `mirrored`: the caller vouches that offset K-1-k's edges are "
        "offset k's reversed (lattice's submanifold relations): the input gradient then runs over the same "
        "edges with W's offsets reversed.");
  m.def("sparse_conv_affine",
        [](const mx::array& x, const mx::array& w, const mx::array& in_rows, const mx::array& out_rows,
           const std::vector<int64_t>& bounds, int n_out, bool transpose_w, int identity_k, bool distinct,
           const std::string& kernel, const mx::array& scale, const mx::array& shift,
           const std::optional<mx::array>& residual, bool relu, const std::optional<mx::array>& append,
           bool mirrored, mx::StreamOrDevice s) {
          return lattice::sparse_conv_affine(x, w, in_rows, out_rows,
                                             std::make_shared<const std::vector<int64_t>>(bounds), n_out, transpose_w,
                                             identity_k, lattice::EdgeFacts{distinct, false, mirrored},
                                             gemm_kernel(kernel), scale, shift, residual, relu, append, s);
        },
        "x"_a, "w"_a, "in_rows"_a, "out_rows"_a, "bounds"_a, "n_out"_a, "transpose_w"_a = false,
        "identity_k"_a = -1, "distinct"_a = false, "kernel"_a = "blas", "scale"_a, "shift"_a,
        "residual"_a = nb::none(), "relu"_a = false, "append"_a = nb::none(), "mirrored"_a = false,
        "stream"_a = nb::none(),
        "sparse_conv followed by affine_act's map, fused: act(Y * scale + shift + residual) applied to the "
        "output rows as the convolution finishes them (in output-row blocks, while they are in cache). "
        "float32 features; scale and shift (C_out,), residual (n_out, C_out) float32 or None; append "
        "(n_out, C_a) float32 or None: its columns follow each row's C_out (a channel concatenation); "
        "`mirrored` as sparse_conv's; differentiable (as the two ops one after the other).");
  m.def("sparse_conv_weight_grad",
        [](const mx::array& a, const mx::array& b, const mx::array& ra, const mx::array& rb,
           const std::vector<int64_t>& bounds, bool distinct, const std::string& kernel, mx::StreamOrDevice s) {
          return lattice::sparse_conv_weight_grad(a, b, ra, rb, std::make_shared<const std::vector<int64_t>>(bounds),
                                                  lattice::EdgeFacts{distinct}, gemm_kernel(kernel), s);
        },
        "a"_a, "b"_a, "rows_a"_a, "rows_b"_a, "bounds"_a, "distinct"_a = false, "kernel"_a = "blas",
        "stream"_a = nb::none(),
        "G[k] = A[rows_a]^T @ B[rows_b] over the edges of offset k (checked as sparse_conv; `distinct` and "
        "`kernel` are handed on to the convolutions of its gradient).");
  m.def("conv_kernels",
        [] {
          std::vector<std::string> names;
          for (const auto& k : lattice::gemm::available()) names.push_back(k.name);
          return names;
        },
        "lattice's GEMM kernels this CPU runs, the float32 ones best first, then 'avx512_bf16' and 'amx_bf16' "
        "where they run (products of bfloat16-rounded operands; empty: the convolutions take the BLAS).");
  m.def("blas_gemm", &lattice::blas_gemm, "a"_a, "b"_a, "trans_a"_a = false, "trans_b"_a = false,
        "stream"_a = nb::none(), "op(A) @ op(B) through the linked BLAS, differentiable.");
  m.def("blas_sgemm", &blas_sgemm, "a"_a, "b"_a, release,
        "C = A @ B through the linked optimised BLAS (float32).");
  m.def("affine_act", &lattice::affine_act, "x"_a, "scale"_a, "shift"_a, "residual"_a = nb::none(), "relu"_a = false,
        "stream"_a = nb::none(),
        "act(x * scale + shift + residual) per row in one pass (float32 arithmetic; ReLU when `relu`); "
        "scale and shift (C,), residual (N, C) or None; differentiable.");
  m.def("batch_norm_act", &lattice::batch_norm_act, "x"_a, "weight"_a, "bias"_a, "residual"_a = nb::none(),
        "relu"_a = false, "eps"_a = 1e-5f, "stream"_a = nb::none(),
        "(out, mean, var): training-mode BatchNorm of x's rows (batch mean, biased variance, float32), "
        "then act(x * scale + shift + residual) as affine_act; weight and bias (C,), residual (N, C) or "
        "None; differentiable (the backward in two native passes).");
  m.def("blas_vendor", &lattice::blas::vendor);
  m.def("blas_threads", &lattice::blas::num_threads);
  m.def("num_threads", &lattice::num_threads);

  lattice::bind_pool(m);

  // The native settings from the environment, read in one place (lattice/settings.py), as
  // the module loads: before any op runs, however lattice._ext was first imported.
  nb::module_::import_("lattice.settings").attr("configure_native")(m);
}
