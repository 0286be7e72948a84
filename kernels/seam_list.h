// kernels/seam_list.h: the one list of seams, in model order, each with the type of its function
// (declared in kernels/seams.h). Plain preprocessor data, so that both the LibTorch-free catalog
// (kernels/catalog.cpp: seams()) and the registry (kernels/registry.h: one table per seam) expand it.
// Adding a seam: one line here, its function type in seams.h, a Dispatcher method, parity cases.
#pragma once

// X(seam, FunctionType) for every seam.
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
