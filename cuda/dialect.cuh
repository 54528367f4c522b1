// CUDA dialect of the shared kernel bodies in kernels/*.inc (run through
// mx.fast.cuda_kernel, compiled by NVRTC). metal/dialect.metal is the same set of
// names for Metal: a kernel body written against these macros is written once.

#define LT_FN __device__ __forceinline__
#define LT_GLOBAL
#define LT_SHARED
#define LT_SHARED_ARRAY(T, name, n) __shared__ __align__(16) T name[n]
// The launch's dynamic shared memory as an array of T (its size: the launch's shared_memory,
// lattice.backends.cuda.launch). CUDA only: the kernels that use it have no Metal entry.
#define LT_SHARED_DYNAMIC(T, name)                  \
  extern __shared__ __align__(16) unsigned char lt_dynamic_shared[]; \
  T* name = reinterpret_cast<T*>(lt_dynamic_shared)
#define LT_BARRIER() __syncthreads()
// Index of this thread in the launch grid (x), of this thread in its block, and of the block.
#define LT_THREAD_ID ((int)(blockIdx.x * blockDim.x + threadIdx.x))
#define LT_LOCAL_ID ((int)threadIdx.x)
#define LT_GROUP_ID ((int)blockIdx.x)
#define LT_GROUP_ID_Y ((int)blockIdx.y)

typedef int lt_atomic_int;
typedef unsigned int lt_atomic_uint;
typedef float lt_atomic_float;
typedef unsigned int lt_uint;
#define LT_FLOAT_BITS(v) __float_as_uint(v)
// The wide type point coordinates are quantised in (kernels/points.inc): double, as the CPU
// core computes them (Metal has no double: float there). A double arrives as two int32
// words of a params array, high word first.
typedef double lt_wide;
LT_FN lt_wide lt_wide_from_bits(int hi, int lo) { return __hiloint2double(hi, lo); }

// Compare-and-swap returning the value found (== expected when it swapped).
LT_FN int lt_atomic_cas(lt_atomic_int* p, int expected, int desired) {
  return atomicCAS(p, expected, desired);
}
LT_FN void lt_atomic_min(lt_atomic_int* p, int v) { atomicMin(p, v); }
LT_FN void lt_atomic_max_u32(lt_atomic_uint* p, lt_uint v) { atomicMax(p, v); }
LT_FN void lt_atomic_min_u32(lt_atomic_uint* p, lt_uint v) { atomicMin(p, v); }
LT_FN void lt_atomic_add_f32(float* p, float v) { atomicAdd(p, v); }

// ---- tensor cores (CUDA only; LT_HAS_MMA guards the bodies that use them) -------------
// D = A (16x16, row) * B (16x8, col) + D, half or bfloat16 inputs, float32 accumulate.
// Fragments per lane (g = lane / 4, t = lane % 4): a[0..3] = A[g][2t..], A[g+8][2t..],
// A[g][2t+8..], A[g+8][2t+8..]; b[0..1] = B[2t..][g], B[2t+8..][g]; d[0..3] = D[g][2t..],
// D[g+8][2t..] (two values per register).
#define LT_HAS_MMA 1
LT_FN void lt_mma_16816(float* d, const unsigned* a, const unsigned* b, const __half*) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
LT_FN void lt_mma_16816(float* d, const unsigned* a, const unsigned* b, const __nv_bfloat16*) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// TF32 (float32 rounded to a 10-bit mantissa): D = A (16x8, row) * B (8x8, col) + D;
// a[0..3] = A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4]; b[0..1] = B[t][g], B[t+4][g].
LT_FN unsigned lt_tf32(float v) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(v));
  return r;
}
LT_FN void lt_mma_1688_tf32(float* d, const unsigned* a, const unsigned* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// Asynchronous 16-byte copy global -> shared (sm_80+): `bytes` (16 or 0) are read, the rest
// of the 16 zero-filled; a group commits the copies issued so far, wait<N> waits until at
// most N of this thread's groups are pending.
LT_FN void lt_cp_async16(void* smem, const void* gmem, int bytes) {
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes) : "memory");
}
LT_FN void lt_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
LT_FN void lt_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#define LT_LANE ((int)(threadIdx.x & 31))
#define LT_WARP ((int)(threadIdx.x >> 5))
