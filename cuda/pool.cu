// CUDA entry point of local pooling (body: kernels/pool.inc). Template argument: T.

//@kernel pool_map
//@inputs x map params
//@outputs y arg
//@uses pool
lt_pool_rows<T>(x, map, params, y, arg, LT_THREAD_ID);
