// CUDA entry points of the coordinate hash table (bodies: kernels/coords.inc).
// Each block below is one mx.fast.cuda_kernel: its name, inputs, outputs, the shared
// bodies it needs, and its source (the body of the generated __global__ function).

//@kernel table_insert
//@inputs coords params
//@outputs slots
//@uses coords
lt_table_insert_rows(coords, params, slots, LT_THREAD_ID);

//@kernel table_owner
//@inputs coords slots params
//@outputs owner
//@uses coords
lt_table_owner_rows(coords, slots, params, owner, LT_THREAD_ID);

//@kernel table_insert_checked
//@inputs coords params
//@outputs slots stats
//@uses coords
LT_SHARED_ARRAY(lt_uint, red, 9 * LT_CHECK_GROUP);
lt_table_insert_checked_rows(coords, params, slots, stats, red, LT_THREAD_ID, LT_LOCAL_ID);

//@kernel downsample
//@inputs coords params
//@outputs out
//@uses coords
lt_downsample_rows(coords, params, out, LT_THREAD_ID);

//@kernel compact
//@inputs coords owner rank params
//@outputs out_coords inverse
//@uses coords
lt_compact_rows(coords, owner, rank, params, out_coords, inverse, LT_THREAD_ID);
