// CUDA entry points of the pooling family (bodies: kernels/pool.inc). Template argument: T.

//@kernel pool_map
//@inputs x map kw params
//@outputs y arg
//@uses pool
lt_pool_rows<T>(x, map, kw, params, y, arg, LT_THREAD_ID);

//@kernel global_sum
//@inputs x batch params
//@outputs acc
//@uses pool
lt_global_sum<T>(x, batch, params, acc, LT_THREAD_ID);

//@kernel global_max_key
//@inputs x batch params
//@outputs key
//@uses pool
lt_global_max_key<T>(x, batch, params, key, LT_THREAD_ID);

//@kernel global_argmax
//@inputs x batch key params
//@outputs winner
//@uses pool
lt_global_argmax<T>(x, batch, key, params, winner, LT_THREAD_ID);
