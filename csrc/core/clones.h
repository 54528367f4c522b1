// LATTICE_X86_CLONES: a function compiled twice on x86-64 with GCC and glibc (the ifunc picks
// one at load): for x86-64-v3 machines (AVX2, FMA: 8-wide float loops, one-instruction floor)
// and for the baseline the wheel targets. Nothing elsewhere.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__GLIBC__)
#define LATTICE_X86_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define LATTICE_X86_CLONES
#endif
