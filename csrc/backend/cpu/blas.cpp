#include "backend/cpu/blas.h"

#include <algorithm>
#include <vector>

#include "core/parallel.h"

#if defined(LATTICE_BLAS_ACCELERATE)
#include <Accelerate/Accelerate.h>
#define LATTICE_CBLAS(name) cblas_##name
#else
#include <cblas.h>
#define LATTICE_CBLAS(name) scipy_cblas_##name
extern "C" {
char* scipy_openblas_get_config(void);
int scipy_openblas_get_num_threads(void);
void scipy_openblas_set_num_threads(int);
}
#endif

namespace lattice::blas {

void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc) {
  LATTICE_CBLAS(sgemm)(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                       trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
                       ldc);
}

void sgemm_parallel(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                    const float* b, int ldb, float beta, float* c, int ldc) {
  const int threads = lattice::num_threads();
  const double flops = 2.0 * m * n * k;
  if (threads <= 1 || flops < 4e6) {
    sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // Rows of C, else columns of C, else slices of K reduced at the end.
  if (m >= 64 * threads) {
    const int64_t chunks = std::min<int64_t>(threads * 4, (m + 63) / 64);
    parallel_chunks(m, chunks, [&](int64_t, int64_t r0, int64_t r1) {
      const float* ar = trans_a ? a + r0 : a + r0 * lda;
      sgemm(trans_a, trans_b, int(r1 - r0), n, k, alpha, ar, lda, b, ldb, beta, c + r0 * ldc, ldc);
    });
  } else if (n >= 64 * threads) {
    const int64_t chunks = std::min<int64_t>(threads * 4, (n + 63) / 64);
    parallel_chunks(n, chunks, [&](int64_t, int64_t c0, int64_t c1) {
      const float* bc = trans_b ? b + c0 * ldb : b + c0;
      sgemm(trans_a, trans_b, m, int(c1 - c0), k, alpha, a, lda, bc, ldb, beta, c + c0, ldc);
    });
  } else {
    const int64_t chunks = std::min<int64_t>(threads * 2, std::max(1, k / 256));
    std::vector<float> partial(static_cast<size_t>(chunks) * m * n);
    parallel_chunks(k, chunks, [&](int64_t ci, int64_t k0, int64_t k1) {
      const float* ak = trans_a ? a + k0 * lda : a + k0;
      const float* bk = trans_b ? b + k0 : b + k0 * ldb;
      sgemm(trans_a, trans_b, m, n, int(k1 - k0), 1.0f, ak, lda, bk, ldb, 0.0f,
            partial.data() + static_cast<size_t>(ci) * m * n, n);
    });
    for (int i = 0; i < m; ++i) {
      float* row = c + static_cast<int64_t>(i) * ldc;
      for (int j = 0; j < n; ++j) {
        float acc = 0.0f;
        for (int64_t ci = 0; ci < chunks; ++ci) acc += partial[(static_cast<size_t>(ci) * m + i) * n + j];
        row[j] = alpha * acc + (beta == 0.0f ? 0.0f : beta * row[j]);
      }
    }
  }
}

void init() {
#if !defined(LATTICE_BLAS_ACCELERATE)
  // OpenBLAS's own worker threads spin after each call and take the cores that
  // lattice's threads need; lattice splits GEMMs itself (sgemm_parallel).
  scipy_openblas_set_num_threads(1);
#endif
}

std::string vendor() {
#if defined(LATTICE_BLAS_ACCELERATE)
  return "Accelerate";
#else
  return std::string("OpenBLAS (scipy-openblas32) ") + scipy_openblas_get_config();
#endif
}

int num_threads() {
#if defined(LATTICE_BLAS_ACCELERATE)
  return 0;
#else
  return scipy_openblas_get_num_threads();
#endif
}

void set_num_threads(int n) {
#if !defined(LATTICE_BLAS_ACCELERATE)
  scipy_openblas_set_num_threads(n);
#else
  (void)n;
#endif
}

}  // namespace lattice::blas
