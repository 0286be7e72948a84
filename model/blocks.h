// model/blocks.h: the residual-layer blocks of the hybrid model (docs/model.md): A (MLA),
// M (Mamba-3 SISO), E (MoE), R (RG-LRU), D (dense SwiGLU), and the seeded initialiser they draw
// their weights from. Each block owns its layer's pre-norm weight and computes Block(x) for an
// already-normalised x; HybridModel (model/hybrid_model.h) adds the residual. Every replaceable
// computation goes through a seam of kernels::Dispatcher. Weights are public members so tests can
// write the obviously-correct slow forms against them.
// Tests: model_tests (tests/model/blocks_test.cpp: each block vs a slow form in fp64, gradients by
// central differences).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "kernels/dispatch.h"
#include "model/config.h"

namespace ablate::model {

// Draws every initial weight on the CPU, in construction order: draw i fills its tensor in chunks of
// kChunkElements, chunk c from its own generator seeded with derive_seed(derive_seed(seed, init, i),
// init, c) (base/rng.h), so the same seed gives the same weights on every machine and at any thread
// count, and the chunks are drawn in parallel (one generator for the whole model drew 290 M
// parameters in ~1.4 s, single-threaded, at the start of every run). Tensors are fp32 on the CPU;
// move the finished model with ->to().
class SeededInit {
 public:
  static constexpr int64_t kChunkElements = int64_t{1} << 20;
  SeededInit(uint64_t seed, double init_std);
  torch::Tensor normal(at::IntArrayRef sizes);  // N(0, init_std): linear weights, embedding, head
  // Rows [first_row, first_row + rows) of dim 0 of what normal(sizes) would draw, the same numbers,
  // drawing only the chunks they lie in (one rank's experts of an expert-parallel E layer). One draw.
  torch::Tensor normal_rows(at::IntArrayRef sizes, int64_t first_row, int64_t rows);
  torch::Tensor uniform(at::IntArrayRef sizes, double low, double high);
  static torch::Tensor constant(at::IntArrayRef sizes, double value);

 private:
  // rows < 0: the whole tensor; else rows [first_row, first_row + rows) of its first dimension.
  torch::Tensor draw(at::IntArrayRef sizes, const std::function<void(torch::Tensor, at::Generator&)>& fill,
                     int64_t first_row = 0, int64_t rows = -1);
  uint64_t seed_;
  uint64_t draws_ = 0;
  double init_std_;
};

// What one block returns. aux and dropped are set by E blocks only (undefined otherwise).
struct BlockOutput {
  torch::Tensor y;        // [B, T, d]
  torch::Tensor aux;      // 0-dim load-balancing loss L_aux (fp32; fp64 for an fp64 model)
  torch::Tensor dropped;  // 0-dim int64: slots dropped by the capacity factor (0 when dropless)
};

class Block : public torch::nn::Module {
 public:
  Block(char letter, const ModelConfig& config, std::shared_ptr<const kernels::Dispatcher> dispatcher);
  // x [B, T, d], already normalised by the layer's pre-norm.
  virtual BlockOutput forward(const torch::Tensor& x) = 0;
  // The block's weights that only GEMMs read (through the dense_gemm and moe_dispatch seams), each
  // in the autocast dtype when autocast is on: kept in bf16 they compute exactly as their fp32 masters
  // cast by autocast (distributed.param_dtype). Norm weights, biases, the router, convolution and
  // recurrence parameters are read in fp32 and are not among them.
  virtual std::vector<torch::Tensor> gemm_weights() const = 0;
  char letter() const { return letter_; }

  torch::Tensor norm;  // [d] weight of the pre-norm RMSNorm of this residual layer (applied by HybridModel)

 protected:
  // RMSNorm over the last dim through the residual_norm seam (no residual).
  torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) const;

  const ModelConfig config_;
  std::shared_ptr<const kernels::Dispatcher> dispatcher_;

 private:
  char letter_;
};

// A: Multi-head Latent Attention (docs/model.md "A").
class AttentionBlock : public Block {
 public:
  AttentionBlock(const ModelConfig& config, std::shared_ptr<const kernels::Dispatcher> dispatcher, SeededInit& init);
  BlockOutput forward(const torch::Tensor& x) override;
  std::vector<torch::Tensor> gemm_weights() const override;

  torch::Tensor w_dq, q_norm, w_uq;          // q_lora > 0: [q_lora, d], [q_lora], [H(dn+dr), q_lora]
  torch::Tensor w_q;                         // q_lora == 0: [H(dn+dr), d]
  torch::Tensor w_dkv, kv_norm, w_ukv, w_o;  // [kv_lora+dr, d], [kv_lora], [H(dn+dv), kv_lora], [d, H dv]
};

// cos/sin tables [T, dim/2] of RoPE angles pos * base^(-2i/dim), in `dtype`, on `device`.
std::pair<torch::Tensor, torch::Tensor> rope_tables(int64_t seq_len, int64_t dim, double base, torch::Dtype dtype,
                                                    const torch::Device& device);

// M: Mamba-3 SISO mixer (docs/model.md "M"); the recurrence runs in the ssm_scan seam.
class MambaBlock : public Block {
 public:
  MambaBlock(const ModelConfig& config, std::shared_ptr<const kernels::Dispatcher> dispatcher, SeededInit& init);
  BlockOutput forward(const torch::Tensor& x) override;
  std::vector<torch::Tensor> gemm_weights() const override { return {w_in, w_out}; }

  int64_t d_inner, heads, head_dim, state, angles;
  torch::Tensor w_in;            // [2 d_inner + 2N + 3H + S, d] -> [z, x, B, C, dd_dt, dd_A, trap, theta]
  torch::Tensor dt_bias;         // [H] softplus^-1(dt), dt log-uniform in [dt_min, dt_max]
  torch::Tensor b_norm, c_norm;  // [N] RMSNorm_B, RMSNorm_C weights (eps 1e-5)
  torch::Tensor b_bias, c_bias;  // [H, N], init 1
  torch::Tensor skip;            // D [H], init 1
  torch::Tensor w_out;           // [d, d_inner]
};

// Which of an E layer's experts this process holds: under expert parallelism (distributed.expert_parallel
// = ranks) place `rank` of the expert group holds experts [rank E/ranks, (rank+1) E/ranks), drawn as the
// same numbers a single process draws for them (SeededInit::normal_rows).
struct ExpertPlacement {
  int64_t ranks = 1;
  int64_t rank = 0;
};

// How E layers reach the other ranks of a multi-process job (the harness sets it; default: alone).
struct MoeCollectives {
  // Expert parallel: the ranks holding the other experts (kernels/moe_dispatch/expert_exchange.h).
  const kernels::ExpertExchange* experts = nullptr;
  // Data parallel: sums a device tensor over every rank of the job in place, in stream order: the
  // load-balancing loss's f_e counts the job's whole batch (global-batch balancing), as one process
  // running that batch would.
  std::function<void(torch::Tensor&)> sum_over_job;
};

// E: mixture of SwiGLU experts with a top-k fp32 router (docs/model.md "E"); experts run in moe_dispatch.
class MoeBlock : public Block {
 public:
  MoeBlock(const ModelConfig& config, std::shared_ptr<const kernels::Dispatcher> dispatcher, SeededInit& init,
           const ExpertPlacement& placement = {});
  BlockOutput forward(const torch::Tensor& x) override;
  std::vector<torch::Tensor> gemm_weights() const override { return {w1, w3, w2}; }
  // The caller keeps `collectives` alive while the block runs; null: alone.
  void set_collectives(const MoeCollectives* collectives) { collectives_ = collectives; }

  torch::Tensor router;      // [E, d]
  torch::Tensor w1, w3, w2;  // [E/ranks, f, d], [E/ranks, f, d], [E/ranks, d, f]: this rank's experts

 private:
  ExpertPlacement placement_;
  const MoeCollectives* collectives_ = nullptr;
};

// R: RG-LRU recurrent block (docs/model.md "R"); the recurrence runs in the recurrent_scan seam.
class RecurrentBlock : public Block {
 public:
  RecurrentBlock(const ModelConfig& config, std::shared_ptr<const kernels::Dispatcher> dispatcher, SeededInit& init);
  BlockOutput forward(const torch::Tensor& x) override;
  std::vector<torch::Tensor> gemm_weights() const override { return {w_in, w_a, w_x, w_out}; }

  torch::Tensor w_in;                    // [2w, d] -> [g ; u]
  torch::Tensor conv_weight, conv_bias;  // [w, K] (tap K-1 is the current step), [w]
  torch::Tensor w_a, b_a, w_x, b_x;      // [w, w], [w]: recurrence and input gates
  torch::Tensor lambda;                  // [w], sigmoid(lambda) ~ U[0.9, 0.999] at init
  torch::Tensor w_out;                   // [d, w]
};

// D: dense SwiGLU MLP (docs/model.md "D").
class DenseBlock : public Block {
 public:
  DenseBlock(const ModelConfig& config, std::shared_ptr<const kernels::Dispatcher> dispatcher, SeededInit& init);
  BlockOutput forward(const torch::Tensor& x) override;
  std::vector<torch::Tensor> gemm_weights() const override { return {w1, w3, w2}; }

  torch::Tensor w1, w3, w2;  // [f, d], [f, d], [d, f]
};

// The block for a pattern letter; throws std::invalid_argument for a letter pattern_error() rejects.
std::shared_ptr<Block> make_block(char letter, const ModelConfig& config,
                                  std::shared_ptr<const kernels::Dispatcher> dispatcher, SeededInit& init,
                                  const ExpertPlacement& placement = {});

}  // namespace ablate::model
