// CUDA entry points of relation building (bodies: kernels/relations.inc).

//@kernel subm_map
//@inputs coords slots offsets params
//@outputs map
//@uses coords relations
lt_subm_map(coords, slots, offsets, params, map, LT_THREAD_ID);

//@kernel target_map
//@inputs in_coords slots out_coords offsets params
//@outputs map
//@uses coords relations
lt_target_map(in_coords, slots, out_coords, offsets, params, map, LT_THREAD_ID);

//@kernel cell_map_down
//@inputs fine inverse params
//@outputs map
//@uses coords relations
lt_cell_map_down(fine, inverse, params, map, LT_THREAD_ID);

//@kernel cell_map_up
//@inputs fine inverse params
//@outputs map
//@uses coords relations
lt_cell_map_up(fine, inverse, params, map, LT_THREAD_ID);

//@kernel invert_map
//@inputs map params
//@outputs inv
//@uses coords relations
lt_invert_map(map, params, inv, LT_THREAD_ID);

//@kernel row_masks
//@inputs map params
//@outputs masks
//@uses coords relations
lt_row_masks(map, params, masks, LT_THREAD_ID);
