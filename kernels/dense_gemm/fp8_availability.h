// kernels/dense_gemm/fp8_availability.h: when the FP8 GEMM backends can run (every row with fp8_gemms:
// dense_gemm's fp8_tensorwise and fp8_rowwise, loss's fused_cuda_fp8_rowwise); defined in
// kernels/dense_gemm/catalog.cpp, plain C++. Tests: kernels_tests --gtest_filter='Fp8Catalog*'.
#pragma once
#include <string>

#include "kernels/catalog.h"

namespace ablate::kernels::availability {

// FP8 GEMMs replace the bf16 autocast GEMMs of a bf16 run on Hopper's FP8 tensor cores, and cuBLASLt takes
// FP8 operands only with every leading dimension a multiple of 16 (ModelDims::projection_alignment).
std::string fp8_gemms(const DeviceInfo& dev);

}  // namespace ablate::kernels::availability
