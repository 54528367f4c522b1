// Metal entry points of points <-> voxels (bodies: kernels/points.inc over the hash table
// of kernels/coords.inc). NEVER RUN ON APPLE HARDWARE (docs/backend.md); voxel indices
// in float (no double in Metal: metal/dialect.metal).

//@kernel quantize_points
//@inputs points batch params
//@outputs coords bad
//@uses coords points
lt_quantize_point(points, batch, params, coords, bad, (int)thread_position_in_grid.x);

//@kernel point_corners
//@inputs points batch coords slots params
//@outputs rows weights bad
//@uses coords points
lt_point_corners(points, batch, coords, slots, params, rows, weights, bad, (int)thread_position_in_grid.x);
