// kernels/seam_list.h: the one list of seams, in model order, each with the type of its function
// (declared in kernels/seams.h) and how its chosen backend enters a run's lane key. Plain preprocessor
// data, so that the LibTorch-free catalog (kernels/catalog.cpp: seams(), lane_key_of()), the registry
// (kernels/registry.h: one table per seam) and the Dispatcher (kernels/dispatch.h: one bound function
// per seam) expand it, and CMake (kernels/CMakeLists.txt: one folder per seam) reads it from the lines
// below.
// Adding a seam: one line here, its function type in seams.h, its folder with a reference backend, a
// Dispatcher method, parity cases.
#pragma once

// X(seam, FunctionType, lane_key) for every seam, one a line. lane_key (kernels/catalog.h LaneKey):
// `always`, or `off_reference` for a seam added after lanes were first recorded whose reference computes
// what ran in its place before (the optimizer's AdamW; the rotation, convolution and router split out of
// the M, R and E blocks; the blocks' dense projections): it joins the key only off its reference, so the runs recorded before the seam
// existed stay in their lane.
#define ABLATE_SEAMS(X)                             \
  X(dense_gemm, DenseGemmFn, off_reference)         \
  X(attention, AttentionFn, always)                 \
  X(rope, RopeFn, always)                           \
  X(residual_norm, ResidualNormFn, always)          \
  X(swiglu, SwigluFn, always)                       \
  X(moe_router, MoeRouterFn, off_reference)         \
  X(moe_dispatch, MoeDispatchFn, always)            \
  X(ssm_rotary, SsmRotaryFn, off_reference)         \
  X(ssm_scan, SsmScanFn, always)                    \
  X(causal_conv, CausalConvFn, off_reference)       \
  X(recurrent_scan, RecurrentScanFn, always)        \
  X(loss, LossFn, always)                           \
  X(optimizer, OptimizerFn, off_reference)
