#pragma once
// KILN_WIDE_LOOP marks a function holding one of the simulator's hot integer loops (a 64-bit
// multiply per element, tens of millions of elements a run): GCC builds it for AVX-512 and
// AVX2 as well as the baseline, the loader picks the best one the CPU has, and each is
// vectorized whatever the build type. The results are the same integers on every path. Other
// compilers get the loop as it is.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define KILN_WIDE_LOOP __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), optimize("O3")))
#else
#define KILN_WIDE_LOOP
#endif
