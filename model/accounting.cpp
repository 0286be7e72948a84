// model/accounting.cpp: parameter count and forward FLOPs per token (docs/model.md "FLOPs and MFU",
// version `flops-v1`) from a ModelConfig, in plain arithmetic (no LibTorch). The parameter count
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

// Weights of the projections of MLA, in the order of docs/model.md: W_dq + W_uq (or W_q), W_dkv, W_ukv, W_o.
int64_t attention_projection_weights(const ModelConfig& c) {
  const auto& a = c.attention;
  const int64_t d = c.d_model, qk = a.nope_dim + a.rope_dim;
  const int64_t q_proj = a.q_lora > 0 ? d * a.q_lora + a.q_lora * a.heads * qk : d * a.heads * qk;
  return q_proj + d * (a.kv_lora + a.rope_dim) + a.kv_lora * a.heads * (a.nope_dim + a.v_dim) + a.heads * a.v_dim * d;
}

BlockParams block_params(char letter, const ModelConfig& c) {
  const int64_t d = c.d_model;
  BlockParams p;
  switch (letter) {
    case 'A': {
      const auto& a = c.attention;
      const int64_t norms = (a.q_lora > 0 ? a.q_lora : 0) + a.kv_lora;  // RMSNorm_q, RMSNorm_kv weights
      p.total = p.active = attention_projection_weights(c) + norms;
      break;
    }
    case 'M': {
      const auto m = mamba_dims(c);
      p.total = p.active = d * m.in_proj_out        // W_in
                           + m.heads                // dt_bias
                           + 2 * m.state            // RMSNorm_B, RMSNorm_C weights
                           + 2 * m.heads * m.state  // b_B, b_C
                           + m.heads                // D
                           + m.d_inner * d;         // W_out
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
      p.total = p.active = d * 2 * w                           // W_in -> [g ; u]
                           + (c.recurrent.conv_width + 1) * w  // depthwise conv weights + bias
                           + 2 * (w * w + w)                   // W_a, b_a, W_x, b_x
                           + w                                 // Lambda
                           + w * d;                            // W_out
      break;
    }
    case 'D':
      p.total = p.active = 3 * d * c.dense.ffn;
      break;
    default:
      break;  // pattern_error() rejects everything else before this is reached
  }
  // Every layer is pre-norm: one RMSNorm weight of d.
  p.total += d;
  p.active += d;
  return p;
}

double block_forward_flops(char letter, const ModelConfig& c) {
  const double d = static_cast<double>(c.d_model);
  switch (letter) {
    case 'A': {
      const auto& a = c.attention;
      const double half_context = static_cast<double>(c.seq_len) / 2.0;  // causal: T/2 keys per query on average
      return 2.0 * static_cast<double>(attention_projection_weights(c)) +
             2.0 * static_cast<double>(a.heads) * half_context * static_cast<double>(a.nope_dim + a.rope_dim + a.v_dim);
    }
    case 'M': {
      const auto m = mamba_dims(c);
      return 2.0 * d * static_cast<double>(m.in_proj_out) + 2.0 * static_cast<double>(m.d_inner) * d +
             7.0 * static_cast<double>(m.d_inner) * static_cast<double>(m.state);
    }
    case 'E': {
      const auto& e = c.moe;
      return 2.0 * d * static_cast<double>(e.experts) +
             static_cast<double>(e.top_k) * 3.0 * 2.0 * d * static_cast<double>(e.ffn);
    }
    case 'R': {
      const double w = static_cast<double>(c.recurrent.width);
      return 2.0 * d * 2.0 * w + 2.0 * 2.0 * w * w + 2.0 * w * d;
    }
    case 'D':
      return 3.0 * 2.0 * d * static_cast<double>(c.dense.ffn);
    default:
      return 0.0;
  }
}

}  // namespace

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

}  // namespace ablate::model
