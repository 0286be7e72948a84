// kernels/causal_conv/limits.h: the shapes the causal_conv fused_cuda kernels take, shared by the kernels
// (fused_cuda.cu) and the availability check of their catalog row (catalog.cpp), which is plain C++.
#pragma once

namespace ablate::kernels {

// Taps the kernels keep in registers: Griffin's width; wider convolutions stay on the reference.
inline constexpr int kMaxTaps = 4;

}  // namespace ablate::kernels
