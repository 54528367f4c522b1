// Metal entry points of relation building (bodies: kernels/relations.inc).
// NEVER RUN ON APPLE HARDWARE (docs/backend.md).

//@kernel subm_map
//@inputs coords slots offsets params
//@outputs map
//@uses coords relations
lt_subm_map(coords, slots, offsets, params, map, (int)thread_position_in_grid.x);

//@kernel target_map
//@inputs in_coords slots out_coords offsets params
//@outputs map
//@uses coords relations
lt_target_map(in_coords, slots, out_coords, offsets, params, map, (int)thread_position_in_grid.x);

//@kernel cell_map_down
//@inputs fine inverse params
//@outputs map
//@uses coords relations
lt_cell_map_down(fine, inverse, params, map, (int)thread_position_in_grid.x);

//@kernel cell_map_up
//@inputs fine inverse params
//@outputs map
//@uses coords relations
lt_cell_map_up(fine, inverse, params, map, (int)thread_position_in_grid.x);

//@kernel invert_map
//@inputs map params
//@outputs inv
//@uses coords relations
lt_invert_map(map, params, inv, (int)thread_position_in_grid.x);

// row_keys and key_order are launched with atomic outputs (kernels._METAL_ATOMIC: all or
// none), so their plain outputs are cast back to the plain type.
//@kernel row_keys
//@inputs map params
//@outputs masks counts
//@uses coords relations
LT_SHARED_ARRAY(lt_atomic_uint, h, LT_ORDER_KEYS);
lt_row_keys(map, params, reinterpret_cast<device uint*>(masks), counts, h, (int)threadgroup_position_in_grid.x,
            (int)thread_position_in_threadgroup.x);

//@kernel key_order
//@inputs masks counts params
//@outputs order taken
//@uses coords relations
LT_SHARED_ARRAY(lt_atomic_uint, h, LT_ORDER_KEYS);
LT_SHARED_ARRAY(lt_atomic_uint, at, LT_ORDER_KEYS);
LT_SHARED_ARRAY(lt_uint, part, LT_ORDER_THREADS);
lt_key_order(masks, counts, params, reinterpret_cast<device int*>(order), taken, h, at, part,
             (int)threadgroup_position_in_grid.x, (int)thread_position_in_threadgroup.x);
