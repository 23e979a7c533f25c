// Google Benchmark micro-benchmarks of the kernels (filled in below).
#include <benchmark/benchmark.h>

BENCHMARK_MAIN();
