// CUDA entry point of the implicit-GEMM convolution (body: kernels/conv.inc).
// Template arguments: T (features), TW (weight), TN (32 or 64 output channels per tile).

//@kernel conv_implicit_gemm
//@inputs x w map order params
//@outputs y
//@uses conv
LT_SHARED_ARRAY(float, xs, LT_CONV_TM * (LT_CONV_TC + 1));
LT_SHARED_ARRAY(float, ws, LT_CONV_TC * TN);
LT_SHARED_ARRAY(int, rows, LT_CONV_TM);
LT_SHARED_ARRAY(int, any, 3);
lt_conv_tile<T, TW, TN>(x, w, map, order, params, lt_conv_plain<T>{y}, xs, ws, rows, any, LT_LOCAL_ID, LT_GROUP_ID,
                        LT_GROUP_ID_Y);

// Weight gradient (float32 atomics into dw). Template arguments: T, TT (32 or 64: the dW tile).
//@kernel conv_weight_grad
//@inputs x dy map order params
//@outputs dw
//@uses conv
LT_SHARED_ARRAY(float, xs, 32 * (TT + 1));
LT_SHARED_ARRAY(float, ys, 32 * (TT + 1));
LT_SHARED_ARRAY(int, any, 3);
lt_conv_wgrad_tile<T, TT>(x, dy, map, order, params, dw, xs, ys, any, LT_LOCAL_ID, LT_GROUP_ID, LT_GROUP_ID_Y);

// Tensor-core form (CUDA only): float32 through TF32, half / bfloat16 directly; C_in a
// multiple of 16 / sizeof(T); at most LT_CONV_KCAP kernel offsets. Template arguments: T,
// TM (64 or 128 rows per tile), TN, P (pipeline stages, in dynamic shared memory: the launch
// asks for P * lt_mma_shape<T, TM, TN>::STAGE elements of T). wt is W as (C_out, K, C_in)
// (MLX's dense conv layout), of type T.
//@kernel conv_implicit_gemm_mma
//@inputs x wt map order params
//@outputs y
//@uses conv
LT_SHARED_DYNAMIC(T, tiles);
LT_SHARED_ARRAY(int, orows, TM);
LT_SHARED_ARRAY(unsigned short, used, LT_CONV_KCAP);
LT_SHARED_ARRAY(unsigned, bits, LT_CONV_KCAP / 32 + 1);
lt_conv_tile_mma<T, TM, TN, P>(x, wt, map, order, params, lt_conv_plain<T>{y}, tiles, orows, used, bits, LT_LOCAL_ID,
                               LT_GROUP_ID, LT_GROUP_ID_Y);

//@kernel conv_weight_grad_mma
//@inputs x dy map order params
//@outputs dw
//@uses conv
// Weight gradient on tensor cores (CUDA only): float32 x and dy multiplied in TF32, C_in and
// C_out multiples of 4. Template arguments: T (float), TT (32 or 64: the dW tile), P (pipeline
// stages). params [n_out, K, C_in, C_out, run <= LT_WGRAD_RUN]. (The comment sits inside the
// block: one above it would become part of the previous kernel's source.)
LT_SHARED_ARRAY(float, tiles, (P * lt_wgrad_shape<TT>::STAGE));
LT_SHARED_ARRAY(int, pairs, 2 * LT_WGRAD_RUN);
LT_SHARED_ARRAY(int, counts, LT_WGRAD_RUN / 32 + 1);
lt_conv_wgrad_tile_mma<TT, P>(x, dy, map, order, params, dw, tiles, pairs, counts, LT_LOCAL_ID, LT_GROUP_ID,
                              LT_GROUP_ID_Y);

// The convolution with lattice.ops.conv_affine's epilogue (CUDA only; the cuda.fused_epilogue
// route): y (n_out, cout + cc) = [act(conv * scale + shift + res), app], the affine map applied
// to the float32 sums before they are stored (lt_conv_epilogue), app's rows written by the
// column tile 0 groups (lt_conv_append). Template arguments: those of conv_implicit_gemm, RES
// and RELU (0 or 1). scale, shift float32 (cout); res (n_out, cout) where RES and app (n_out, cc)
// where cc > 0, of type T (else any one-element array); params [n_out, K, cin, cout, cout + cc, cc].
//@kernel conv_implicit_gemm_affine
//@inputs x w map order params scale shift res app
//@outputs y
//@uses conv
LT_SHARED_ARRAY(float, xs, LT_CONV_TM * (LT_CONV_TC + 1));
LT_SHARED_ARRAY(float, ws, LT_CONV_TC * TN);
LT_SHARED_ARRAY(int, rows, LT_CONV_TM);
LT_SHARED_ARRAY(int, any, 3);
lt_conv_tile<T, TW, TN>(x, w, map, order, params, lt_conv_epilogue<T, RES, RELU>{y, scale, shift, res, params[4]}, xs,
                        ws, rows, any, LT_LOCAL_ID, LT_GROUP_ID, LT_GROUP_ID_Y);
if (params[5] > 0 && LT_GROUP_ID_Y == 0) lt_conv_append<T, LT_CONV_TM>(app, y, order, params, LT_LOCAL_ID, LT_GROUP_ID);

//@kernel conv_implicit_gemm_mma_affine
//@inputs x wt map order params scale shift res app
//@outputs y
//@uses conv
// The tensor-core convolution with the same epilogue (template arguments: those of
// conv_implicit_gemm_mma, RES, RELU; inputs as conv_implicit_gemm_affine's).
LT_SHARED_DYNAMIC(T, tiles);
LT_SHARED_ARRAY(int, orows, TM);
LT_SHARED_ARRAY(unsigned short, used, LT_CONV_KCAP);
LT_SHARED_ARRAY(unsigned, bits, LT_CONV_KCAP / 32 + 1);
lt_conv_tile_mma<T, TM, TN, P>(x, wt, map, order, params,
                               lt_conv_epilogue<T, RES, RELU>{y, scale, shift, res, params[4]}, tiles, orows, used,
                               bits, LT_LOCAL_ID, LT_GROUP_ID, LT_GROUP_ID_Y);
if (params[5] > 0 && LT_GROUP_ID_Y == 0) lt_conv_append<T, TM>(app, y, order, params, LT_LOCAL_ID, LT_GROUP_ID);
