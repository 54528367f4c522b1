// The kernels of gemm.h on x86-64: AVX-512F where the CPU has it and the OS saves the zmm
// state, AVX2 + FMA where it has those, the bfloat16-product kernel where it has AVX-512 BF16
// and BW (GCC's __builtin_cpu_supports checks both the CPUID bits and XGETBV's OS-enabled
// state), and the same products on AMX tiles where the CPU has AMX-BF16 and Linux grants the
// tiles (built where the compiler takes -mamx-tile: LATTICE_AMX).
#include <cstdint>
#include <vector>

#if defined(LATTICE_AMX)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "backend/cpu/gemm.h"

namespace lattice::gemm {

// Each shape's entry points, defined in its ISA's file (tile_entries there).
#define LATTICE_TILE_DECLS(isa, mr, nv)                                                                            \
  void gather_gemm_scatter_##isa##_##mr##x##nv(const float* x, int64_t ldx, const int32_t* in_rows,                \
                                               const int32_t* out_rows, int64_t m, const float* wp, int c_in,     \
                                               int c_out, float* y, int64_t ldy, bool accumulate);                \
  int64_t gather_at_b_scratch_##isa##_##mr##x##nv(int ca, int cb);                                               \
  void gather_at_b_##isa##_##mr##x##nv(const float* a, int64_t lda, const int32_t* ra, const float* b, int64_t ldb, \
                                       const int32_t* rb, int64_t m, int ca, int cb, float* g, bool accumulate,   \
                                       float* scratch);
LATTICE_TILE_DECLS(avx512, 12, 2)
LATTICE_TILE_DECLS(avx512, 8, 3)
LATTICE_TILE_DECLS(avx512, 6, 4)
LATTICE_TILE_DECLS(avx2, 6, 2)
LATTICE_TILE_DECLS(avx512_bf16, 12, 2)
LATTICE_TILE_DECLS(avx512_bf16, 8, 3)
LATTICE_TILE_DECLS(avx512_bf16, 6, 4)
void round_rows_avx512_bf16(const float* x, int64_t ld, int64_t n, int c, float* out);
#if defined(LATTICE_AMX)
LATTICE_TILE_DECLS(amx_bf16, 16, 2)
LATTICE_TILE_DECLS(amx_bf16, 16, 3)
LATTICE_TILE_DECLS(amx_bf16, 16, 4)

// Whether this process may use AMX tiles: the CPU has AMX-BF16 (and the AVX-512 the kernel's
// staging uses), and Linux grants the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM for
// XTILEDATA, Linux 5.16 and later: it fails where the OS does not enable the tile state, and
// a refusal or an older kernel means no AMX here).
static bool amx_usable() {
  // CPUID leaf 7: EDX bit 22 AMX-BF16, bit 24 AMX-TILE (read directly: not every compiler's
  // __builtin_cpu_supports knows the AMX names)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24))) return false;
  if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512bf16")))
    return false;
  constexpr long kReqXcompPerm = 0x1023, kXtiledata = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXtiledata) == 0;
}
#endif
#undef LATTICE_TILE_DECLS

#define LATTICE_TILE(isa, mr, nv, width)                                                                     \
  TileKernel {                                                                                               \
    (nv) * (width), (mr), gather_gemm_scatter_##isa##_##mr##x##nv, gather_at_b_##isa##_##mr##x##nv,          \
        gather_at_b_scratch_##isa##_##mr##x##nv                                                              \
  }

const std::vector<KernelInfo>& available() {
  static const std::vector<KernelInfo> kernels = [] {
    std::vector<KernelInfo> k;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
      k.push_back({Kernel::avx512, "avx512",
                   {LATTICE_TILE(avx512, 12, 2, 16), LATTICE_TILE(avx512, 8, 3, 16), LATTICE_TILE(avx512, 6, 4, 16)}});
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      k.push_back({Kernel::avx2, "avx2", {LATTICE_TILE(avx2, 6, 2, 8)}});
    // Last: it rounds, so it is never the best float32 kernel, only the one asked for.
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512bf16"))
      k.push_back({Kernel::avx512_bf16,
                   "avx512_bf16",
                   {LATTICE_TILE(avx512_bf16, 12, 2, 16), LATTICE_TILE(avx512_bf16, 8, 3, 16),
                    LATTICE_TILE(avx512_bf16, 6, 4, 16)},
                   true,
                   round_rows_avx512_bf16});
#if defined(LATTICE_AMX)
    // The AMX forward and weight gradient (panels of 32, 48 or 64 columns: 2 to 4 accumulator
    // tiles), W's pair rows padded to whole tiles.
    if (amx_usable())
      k.push_back({Kernel::amx_bf16,
                   "amx_bf16",
                   {LATTICE_TILE(amx_bf16, 16, 2, 16), LATTICE_TILE(amx_bf16, 16, 3, 16),
                    LATTICE_TILE(amx_bf16, 16, 4, 16)},
                   true,
                   round_rows_avx512_bf16,
                   16});
#endif
    return k;
  }();
  return kernels;
}

#undef LATTICE_TILE

}  // namespace lattice::gemm
