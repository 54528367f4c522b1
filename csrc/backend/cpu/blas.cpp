#include "backend/cpu/blas.h"

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
