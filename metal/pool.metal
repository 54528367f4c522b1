// Metal entry points of the pooling family (body: kernels/pool.inc).
// NEVER RUN ON APPLE HARDWARE (docs/backend.md).

//@kernel pool_map
//@inputs x map kw params
//@outputs y arg
//@uses pool
lt_pool_rows<T>(x, map, kw, params, y, arg, (int)thread_position_in_grid.x);

//@kernel global_sum
//@inputs x batch params
//@outputs acc
//@uses pool
lt_global_sum<T>(x, batch, params, acc, (int)thread_position_in_grid.x);

//@kernel global_max_key
//@inputs x batch params
//@outputs key
//@uses pool
lt_global_max_key<T>(x, batch, params, key, (int)thread_position_in_grid.x);

//@kernel global_argmax
//@inputs x batch key params
//@outputs winner
//@uses pool
lt_global_argmax<T>(x, batch, key, params, winner, (int)thread_position_in_grid.x);
