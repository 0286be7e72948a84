// kernels/moe_router/limits.h: the shapes the moe_router fused_cuda kernels take, shared by the kernels
// (fused_cuda.cu) and the availability check of their catalog row (catalog.cpp), which is plain C++.
#pragma once

namespace ablate::kernels {

// Experts a router row scores: 64 fp32 accumulators a lane; more experts stay on the reference.
inline constexpr int kMaxExperts = 64;

}  // namespace ablate::kernels
