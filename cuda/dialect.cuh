// CUDA dialect of the shared kernel bodies in kernels/*.inc (run through
// mx.fast.cuda_kernel, compiled by NVRTC). metal/dialect.metal is the same set of
// names for Metal: a kernel body written against these macros is written once.

#define LT_FN __device__ __forceinline__
#define LT_GLOBAL
#define LT_SHARED
#define LT_SHARED_ARRAY(T, name, n) __shared__ T name[n]
#define LT_BARRIER() __syncthreads()
// Index of this thread in the launch grid (x), of this thread in its block, and of the block.
#define LT_THREAD_ID ((int)(blockIdx.x * blockDim.x + threadIdx.x))
#define LT_LOCAL_ID ((int)threadIdx.x)
#define LT_GROUP_ID ((int)blockIdx.x)
#define LT_GROUP_ID_Y ((int)blockIdx.y)

typedef int lt_atomic_int;
typedef unsigned int lt_uint;

// Compare-and-swap returning the value found (== expected when it swapped).
LT_FN int lt_atomic_cas(lt_atomic_int* p, int expected, int desired) {
  return atomicCAS(p, expected, desired);
}
LT_FN void lt_atomic_min(lt_atomic_int* p, int v) { atomicMin(p, v); }
LT_FN void lt_atomic_add_f32(float* p, float v) { atomicAdd(p, v); }
