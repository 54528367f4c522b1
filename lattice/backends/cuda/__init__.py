"""lattice's own GPU kernels (``cuda/*.cu`` entry points over the shared bodies in
``kernels/*.inc``) run through ``mx.fast.cuda_kernel`` on MLX's GPU stream: the ``cuda.*``
routes. The same functions serve the ``metal.*`` routes with the Metal entry points
(``metal/*.metal``, ``mx.fast.metal_kernel``) where the routing layer opts into them
(``LATTICE_METAL_KERNELS=1``; never run on Apple hardware): ``lattice.backends.metal``
registers them, ``kernels.dialect`` picks the entry points.

One module per family, the stems of ``kernels/`` (``launch`` holds what they share):

- Coordinate sets (``coords``): a GPU hash table of row indices keyed by full (b, x, y, z) rows
  (``build_table``), first-occurrence deduplication (``unique_rows``, ``downsample``,
  ``generated_support``). Only set sizes are read back to the host.
- Points <-> voxels (``points``): voxelize's quantisation (``quantize``: the CPU core's voxels, inverse
  and counts, and the table of the voxels) and devoxelize's corner lookup
  (``point_voxel_map``).
- Relations (``relations``): dense out-major neighbour maps (``submanifold_map``, ``probe_map``) and
  their inverse (``invert_map``).
- Convolution (``conv``): an implicit GEMM over the map (``implicit_gemm``), float32 accumulation,
  no atomics; its VJP runs the same kernel over the inverse map with W transposed per
  offset (input gradient) and a weight-gradient kernel over the map (float32 atomics).
- Pooling (``pool``): sum / max / avg over the map, and the weighted contributor average of pool
  transpose / trilinear upsampling (``pool``; differentiable: ``map_pool``); global
  pooling per batch member (``global_pool``).

Sizes travel as small int32 ``params`` arrays, never as template arguments (each
template value is a new NVRTC compile); templates carry only dtypes and the tile width.
"""

from lattice.backends.cuda import conv, coords, points, pool, relations

__all__ = ["conv", "coords", "points", "pool", "relations"]
