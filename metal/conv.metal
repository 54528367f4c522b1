// Metal entry point of the implicit-GEMM convolution (body: kernels/conv.inc).
// NEVER RUN ON APPLE HARDWARE (docs/backend.md).

//@kernel conv_implicit_gemm
//@inputs x w map order params
//@outputs y
//@uses conv
LT_SHARED_ARRAY(float, xs, LT_CONV_TM * (LT_CONV_TC + 1));
LT_SHARED_ARRAY(float, ws, LT_CONV_TC * TN);
LT_SHARED_ARRAY(int, rows, LT_CONV_TM);
LT_SHARED_ARRAY(int, any, 3);
lt_conv_tile<T, TW, TN>(x, w, map, order, params, lt_conv_plain<T>{y}, xs, ws, rows, any, (int)thread_position_in_threadgroup.x,
                        (int)threadgroup_position_in_grid.x, (int)threadgroup_position_in_grid.y);

// Weight gradient (float32 atomics into dw). Template arguments: T, TT (32 or 64: the dW tile).
//@kernel conv_weight_grad
//@inputs x dy map order params
//@outputs dw
//@uses conv
LT_SHARED_ARRAY(float, xs, 32 * (TT + 1));
LT_SHARED_ARRAY(float, ys, 32 * (TT + 1));
LT_SHARED_ARRAY(int, any, 3);
lt_conv_wgrad_tile<T, TT>(x, dy, map, order, params, dw, xs, ys, any, (int)thread_position_in_threadgroup.x,
                      (int)threadgroup_position_in_grid.x, (int)threadgroup_position_in_grid.y);
