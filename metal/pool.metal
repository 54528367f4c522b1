// Metal entry point of local pooling (body: kernels/pool.inc).
// NEVER RUN ON APPLE HARDWARE (docs/backend.md).

//@kernel pool_map
//@inputs x map params
//@outputs y arg
//@uses pool
lt_pool_rows<T>(x, map, params, y, arg, (int)thread_position_in_grid.x);
