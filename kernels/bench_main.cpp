// kernels/bench_main.cpp: main() of build/bench/kernels_bench, the one benchmark program of kernels/:
// every seam's cases (kernels/<seam>/bench.cpp, ABLATE_BENCHMARKS) are registered, then Google
// Benchmark parses the command line and runs what --benchmark_filter selects.
// Run: build/bench/kernels_bench --benchmark_filter=rope   (CUDA cases need a GPU; see each bench.cpp)
#include <cstdio>
#include <vector>

#include "kernels/bench_util.h"

namespace ablate::kernels::bench {
namespace {

std::vector<void (*)()>& registrars() {
  static std::vector<void (*)()> all;
  return all;
}

}  // namespace

bool add_registrar(void (*register_cases)()) {
  registrars().push_back(register_cases);
  return true;
}

}  // namespace ablate::kernels::bench

int main(int argc, char** argv) {
#if !defined(ABLATE_HAVE_CUDA)
  std::fprintf(stderr, "kernels_bench: built without CUDA: only CPU cases are registered\n");
#endif
  for (auto* register_cases : ablate::kernels::bench::registrars()) register_cases();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
