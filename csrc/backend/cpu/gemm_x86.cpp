// The kernels of gemm.h on x86-64: AVX-512F where the CPU has it and the OS saves the zmm
// state, AVX2 + FMA where it has those (GCC's __builtin_cpu_supports checks both the CPUID
// bits and XGETBV's OS-enabled state).
#include <cstdint>
#include <vector>

#include "backend/cpu/gemm.h"

namespace lattice::gemm {

void gather_gemm_scatter_avx512(const float* x, int64_t ldx, const int32_t* in_rows, const int32_t* out_rows,
                                int64_t m, const float* wp, int c_in, int c_out, float* y, int64_t ldy);
void gather_gemm_scatter_avx2(const float* x, int64_t ldx, const int32_t* in_rows, const int32_t* out_rows,
                              int64_t m, const float* wp, int c_in, int c_out, float* y, int64_t ldy);
int64_t gather_at_b_scratch_avx512(int ca, int cb);
int64_t gather_at_b_scratch_avx2(int ca, int cb);
void gather_at_b_avx512(const float* a, int64_t lda, const int32_t* ra, const float* b, int64_t ldb,
                        const int32_t* rb, int64_t m, int ca, int cb, float* g, bool accumulate, float* scratch);
void gather_at_b_avx2(const float* a, int64_t lda, const int32_t* ra, const float* b, int64_t ldb, const int32_t* rb,
                      int64_t m, int ca, int cb, float* g, bool accumulate, float* scratch);

const std::vector<KernelInfo>& available() {
  static const std::vector<KernelInfo> kernels = [] {
    std::vector<KernelInfo> k;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) k.push_back({Kernel::avx512, "avx512", 32, 12, gather_gemm_scatter_avx512, gather_at_b_avx512,
                   gather_at_b_scratch_avx512});
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      k.push_back({Kernel::avx2, "avx2", 16, 6, gather_gemm_scatter_avx2, gather_at_b_avx2, gather_at_b_scratch_avx2});
    return k;
  }();
  return kernels;
}

}  // namespace lattice::gemm
