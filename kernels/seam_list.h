// kernels/seam_list.h: the one list of seams, in model order, each with the type of its function
// (declared in kernels/seams.h). Plain preprocessor data, so that the LibTorch-free catalog
// (kernels/catalog.cpp: seams()) and the registry (kernels/registry.h: one table per seam) expand it,
// and CMake (kernels/CMakeLists.txt: one folder per seam) reads it from the lines below.
// Adding a seam: one line here, its function type in seams.h, its folder with a reference backend, a
// Dispatcher method, parity cases.
#pragma once

// X(seam, FunctionType) for every seam, one a line.
#define ABLATE_SEAMS(X)              \
  X(attention, AttentionFn)          \
  X(rope, RopeFn)                    \
  X(residual_norm, ResidualNormFn)   \
  X(swiglu, SwigluFn)                \
  X(moe_router, MoeRouterFn)         \
  X(moe_dispatch, MoeDispatchFn)     \
  X(ssm_rotary, SsmRotaryFn)         \
  X(ssm_scan, SsmScanFn)             \
  X(causal_conv, CausalConvFn)       \
  X(recurrent_scan, RecurrentScanFn) \
  X(loss, LossFn)                    \
  X(optimizer, OptimizerFn)
