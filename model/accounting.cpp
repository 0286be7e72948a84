// model/accounting.cpp: parameter count and forward FLOPs per token (docs/model.md "FLOPs and MFU",
// version `flops-v2`: flops-v1's total, split by precision) from a ModelConfig, in plain arithmetic (no LibTorch). The parameter count
// mirrors exactly the parameters that model/blocks.cpp creates; model_tests checks both the hand-computed
// numbers for `tiny` and `nam56r-small` and that sum(numel) of a built model equals parameter_count().
#include "model/config.h"

namespace ablate::model {
namespace {

// Parameters of one block, and how many of them one token uses.
struct BlockParams {
  int64_t total = 0, active = 0;
};

// Sizes the Mamba-3 block derives from its config (docs/model.md "M").
struct MambaDims {
  int64_t d_inner, heads, state, angles, in_proj_out;
};

MambaDims mamba_dims(const ModelConfig& c) {
  const auto& m = c.mamba;
  MambaDims dims{};
  dims.d_inner = m.expand * c.d_model;
  dims.heads = dims.d_inner / m.head_dim;
  dims.state = m.state;
  dims.angles = m.state / 4;
  // [z, x, B, C, dd_dt, dd_A, trap, theta]
  dims.in_proj_out = 2 * dims.d_inner + 2 * dims.state + 3 * dims.heads + dims.angles;
  return dims;
}

// Weights of a block's dense projections: the sum of out x in over projection_shapes().
int64_t projection_weights(char letter, const ModelConfig& c) {
  int64_t sum = 0;
  for (const auto& p : projection_shapes(letter, c)) sum += p.out * p.in;
  return sum;
}

BlockParams block_params(char letter, const ModelConfig& c) {
  const int64_t d = c.d_model;
  BlockParams p;
  p.total = p.active = projection_weights(letter, c);
  switch (letter) {
    case 'A': {
      const auto& a = c.attention;
      p.total = p.active += (a.q_lora > 0 ? a.q_lora : 0) + a.kv_lora;  // RMSNorm_q, RMSNorm_kv weights
      break;
    }
    case 'M': {
      const auto m = mamba_dims(c);
      p.total = p.active += m.heads                // dt_bias
                            + 2 * m.state            // RMSNorm_B, RMSNorm_C weights
                            + 2 * m.heads * m.state  // b_B, b_C
                            + m.heads;               // D
      break;
    }
    case 'E': {
      const auto& e = c.moe;
      const int64_t router = d * e.experts, expert = 3 * d * e.ffn;  // W1, W3 [f, d] and W2 [d, f]
      p.total = router + e.experts * expert;
      p.active = router + e.top_k * expert;
      break;
    }
    case 'R': {
      const int64_t w = c.recurrent.width;
      p.total = p.active += (c.recurrent.conv_width + 1) * w  // depthwise conv weights + bias
                            + 2 * w                           // b_a, b_x
                            + w;                              // Lambda
      break;
    }
    default:
      break;  // D: its projections only; pattern_error() rejects unknown letters before this is reached
  }
  // Every layer is pre-norm: one RMSNorm weight of d.
  p.total += d;
  p.active += d;
  return p;
}

double block_forward_flops(char letter, const ModelConfig& c) {
  const double d = static_cast<double>(c.d_model);
  const double projections = 2.0 * static_cast<double>(projection_weights(letter, c));
  switch (letter) {
    case 'A': {
      const auto& a = c.attention;
      const double half_context = static_cast<double>(c.seq_len) / 2.0;  // causal: T/2 keys per query on average
      return projections +
             2.0 * static_cast<double>(a.heads) * half_context * static_cast<double>(a.nope_dim + a.rope_dim + a.v_dim);
    }
    case 'M': {
      const auto m = mamba_dims(c);
      return projections + 7.0 * static_cast<double>(m.d_inner) * static_cast<double>(m.state);
    }
    case 'E': {
      const auto& e = c.moe;
      return 2.0 * d * static_cast<double>(e.experts) +
             static_cast<double>(e.top_k) * 3.0 * 2.0 * d * static_cast<double>(e.ffn);
    }
    default:
      return projections;  // R, D: their projections
  }
}

}  // namespace

std::vector<ProjectionShape> projection_shapes(char letter, const ModelConfig& c) {
  const int64_t d = c.d_model;
  switch (letter) {
    case 'A': {  // MLA, in the order of docs/model.md: W_dq + W_uq (or W_q), W_dkv, W_ukv, W_o
      const auto& a = c.attention;
      const int64_t qk = a.nope_dim + a.rope_dim;
      std::vector<ProjectionShape> p;
      if (a.q_lora > 0)
        p = {{a.q_lora, d}, {a.heads * qk, a.q_lora}};
      else
        p = {{a.heads * qk, d}};
      p.push_back({a.kv_lora + a.rope_dim, d});
      p.push_back({a.heads * (a.nope_dim + a.v_dim), a.kv_lora});
      p.push_back({d, a.heads * a.v_dim});
      return p;
    }
    case 'M': {
      const auto m = mamba_dims(c);
      return {{m.in_proj_out, d}, {d, m.d_inner}};  // W_in, W_out
    }
    case 'R': {
      const int64_t w = c.recurrent.width;
      return {{2 * w, d}, {w, w}, {w, w}, {d, w}};  // W_in -> [g ; u], W_a, W_x, W_out
    }
    case 'D':
      return {{c.dense.ffn, d}, {c.dense.ffn, d}, {d, c.dense.ffn}};  // W1, W3, W2
    default:
      return {};  // E: the router and the experts have seams of their own
  }
}

ParameterCount parameter_count(const ModelConfig& c) {
  ParameterCount count;
  const int64_t embedding_and_head = 2 * c.vocab * c.d_model;             // untied
  count.total = count.active_per_token = embedding_and_head + c.d_model;  // + final RMSNorm
  for (const char letter : c.pattern) {
    const auto p = block_params(letter, c);
    count.total += p.total;
    count.active_per_token += p.active;
  }
  return count;
}

double forward_flops_per_token(const ModelConfig& c) {
  double flops = 2.0 * static_cast<double>(c.d_model) * static_cast<double>(c.vocab);  // LM head; embedding is free
  for (const char letter : c.pattern) flops += block_forward_flops(letter, c);
  return flops;
}

FlopsByPrecision training_flops_by_precision(const ModelConfig& c, Fp8Families fp8) {
  // Each term is one of forward_flops_per_token's (2 FLOPs a weight a token, x 3 for training).
  FlopsByPrecision f;
  for (const char letter : c.pattern) {
    if (fp8.projections) f.fp8 += 3.0 * 2.0 * static_cast<double>(projection_weights(letter, c));
    if (fp8.experts && letter == 'E')
      f.fp8 += 3.0 * 2.0 * static_cast<double>(c.moe.top_k) * 3.0 * static_cast<double>(c.d_model * c.moe.ffn);
  }
  if (fp8.head) f.fp8 += 3.0 * 2.0 * static_cast<double>(c.d_model) * static_cast<double>(c.vocab);
  f.run_dtype = training_flops_per_token(c) - f.fp8;
  return f;
}

}  // namespace ablate::model
