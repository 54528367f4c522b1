// Metal entry points of the coordinate hash table (bodies: kernels/coords.inc), for
// mx.fast.metal_kernel. NEVER RUN ON APPLE HARDWARE (docs/backend.md). MLX adds the
// thread attributes a source names, so entries name thread_position_in_grid directly.

//@kernel table_insert
//@inputs coords params
//@outputs slots
//@uses coords
lt_table_insert_rows(coords, params, slots, (int)thread_position_in_grid.x);

//@kernel table_owner
//@inputs coords slots params
//@outputs owner
//@uses coords
lt_table_owner_rows(coords, slots, params, owner, (int)thread_position_in_grid.x);

//@kernel table_insert_checked
//@inputs coords params
//@outputs slots stats
//@uses coords
LT_SHARED_ARRAY(lt_uint, red, 9 * LT_CHECK_GROUP);
lt_table_insert_checked_rows(coords, params, slots, stats, red, (int)thread_position_in_grid.x,
                             (int)thread_position_in_threadgroup.x);

//@kernel downsample
//@inputs coords params
//@outputs out
//@uses coords
lt_downsample_rows(coords, params, out, (int)thread_position_in_grid.x);

//@kernel compact
//@inputs coords owner rank params
//@outputs out_coords inverse
//@uses coords
lt_compact_rows(coords, owner, rank, params, out_coords, inverse, (int)thread_position_in_grid.x);
