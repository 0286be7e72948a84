// model/config.h: the typed configuration of the hybrid model (docs/model.md), the named
// configurations `tiny` and `nam56r-small`, and the plain-arithmetic accounting (parameter count,
// FLOPs per token, version `flops-v1`). No LibTorch here: the spec parser and reports use it too.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ablate::model {

struct AttentionConfig {  // A: Multi-head Latent Attention
  int64_t heads = 2;
  int64_t nope_dim = 16;   // dn
  int64_t rope_dim = 8;    // dr
  int64_t v_dim = 16;      // dv
  int64_t q_lora = 32;     // 0: q = W_q x
  int64_t kv_lora = 32;
  double rope_base = 10000.0;
};

struct MoeConfig {  // E: mixture of experts with SwiGLU experts
  int64_t experts = 4;
  int64_t top_k = 2;
  int64_t ffn = 64;               // f
  double capacity_factor = 0.0;   // 0: dropless
  double aux_coef = 0.01;
};

struct MambaConfig {  // M: Mamba-3 SISO mixer
  int64_t expand = 2;
  int64_t head_dim = 16;  // P
  int64_t state = 16;     // N (angles S = N/4)
  int64_t chunk = 16;     // L
  double dt_min = 1e-3, dt_max = 1e-1, dt_floor = 1e-4;
};

struct RecurrentConfig {  // R: RG-LRU
  int64_t width = 64;      // w
  int64_t conv_width = 4;
};

struct DenseConfig {  // D: dense SwiGLU MLP
  int64_t ffn = 64;
};

struct ModelConfig {
  std::string name = "tiny";        // the named configuration it started from
  std::string pattern = "AEMR";
  int64_t vocab = 512;
  int64_t d_model = 64;
  int64_t seq_len = 128;           // T
  int64_t batch_size = 4;
  double norm_eps = 1e-6;
  double init_std = 0.02;
  AttentionConfig attention;
  MoeConfig moe;
  MambaConfig mamba;
  RecurrentConfig recurrent;
  DenseConfig dense;
};

// The named configurations of docs/model.md; std::nullopt for an unknown name.
std::optional<ModelConfig> named_config(const std::string& name);
std::vector<std::string> named_config_names();

// Checks the pattern letter by letter (fails closed): returns "" when valid, else a message that
// names the bad letter and its 1-based position ("unknown block letter 'X' at position 3 ...").
std::string pattern_error(const std::string& pattern);

// Every structural constraint (divisibility, ranges); one message per problem, empty when valid.
std::vector<std::string> config_errors(const ModelConfig& c);

struct ParameterCount {
  int64_t total = 0;
  int64_t active_per_token = 0;  // experts counted top_k of E
};
ParameterCount parameter_count(const ModelConfig& c);

// One dense projection (the dense_gemm seam): a weight [out, in].
struct ProjectionShape {
  int64_t out = 0, in = 0;
};
// The dense projections of one block of kind `letter`, in the order the block applies them (none for E,
// whose router and experts are seams of their own; none for an unknown letter).
std::vector<ProjectionShape> projection_shapes(char letter, const ModelConfig& c);

inline constexpr const char* kFlopsVersion = "flops-v2";
// Forward FLOPs per token by docs/model.md's `flops-v2` (training = 3x forward; the total is flops-v1's).
double forward_flops_per_token(const ModelConfig& c);
inline double training_flops_per_token(const ModelConfig& c) { return 3.0 * forward_flops_per_token(c); }
// Which GEMM families run in FP8 (the chosen backend's catalog fp8_gemms of each family's seam).
struct Fp8Families {
  bool projections = false;  // the blocks' dense projections (seam dense_gemm)
  bool head = false;         // the LM head (seam loss)
  bool experts = false;      // the MoE experts' GEMMs (seam moe_dispatch); the router stays in the run dtype
};
// Training FLOPs per token split by the precision their GEMMs run in (flops-v2): each family's GEMMs in
// FP8 when it runs FP8, everything else in the run's dtype. MFU divides each part by its own peak
// (harness/step_stats.h).
struct FlopsByPrecision {
  double run_dtype = 0.0;  // bf16 (or fp32) tensor-core work
  double fp8 = 0.0;
  double total() const { return run_dtype + fp8; }
};
FlopsByPrecision training_flops_by_precision(const ModelConfig& c, Fp8Families fp8);

}  // namespace ablate::model
