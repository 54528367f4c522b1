// CUDA entry points of points <-> voxels (bodies: kernels/points.inc over the hash table
// of kernels/coords.inc).

//@kernel quantize_points
//@inputs points batch params
//@outputs coords bad
//@uses coords points
lt_quantize_point(points, batch, params, coords, bad, LT_THREAD_ID);

//@kernel point_corners
//@inputs points batch coords slots params
//@outputs rows weights bad
//@uses coords points
lt_point_corners(points, batch, coords, slots, params, rows, weights, bad, LT_THREAD_ID);
