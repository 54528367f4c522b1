// The optimised BLAS that CPU GEMM routes call (OpenBLAS from scipy-openblas32 on
// Linux, Accelerate on macOS). Never MLX's CPU matmul: on Linux it runs a
// reference BLAS at about 1 GFLOP/s.
#pragma once

#include <string>

namespace lattice::blas {

// Row-major C[m, n] = alpha * op(A) @ op(B) + beta * C.
void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc);

// The same product split over lattice's threads, each calling single-threaded BLAS.
void sgemm_parallel(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                    const float* b, int ldb, float beta, float* c, int ldc);

// Called once at module load: BLAS itself runs single-threaded.
void init();

std::string vendor();
int num_threads();
void set_num_threads(int n);

}  // namespace lattice::blas
