// model/config.cpp: named configurations of docs/model.md and structural validation of a ModelConfig.
#include "model/config.h"

#include <fmt/format.h>

namespace ablate::model {
namespace {

// The nam56r family: the 12-layer pattern AEMEAEMEAEMR `repeats` times at width d, 16 experts (top 2),
// Mamba-3 heads of 64 with N 128, the RG-LRU as wide as the model.
ModelConfig nam56r(const std::string& name, int64_t d, int repeats, int64_t seq_len, int64_t batch) {
  ModelConfig c;
  c.name = name;
  c.pattern.clear();
  for (int i = 0; i < repeats; ++i) c.pattern += "AEMEAEMEAEMR";
  c.vocab = 32768;
  c.d_model = d;
  c.seq_len = seq_len;
  c.batch_size = batch;
  c.moe = {.experts = 16, .top_k = 2, .ffn = 768};
  c.mamba = {.expand = 2, .head_dim = 64, .state = 128, .chunk = 64};
  c.recurrent = {.width = d};
  return c;
}

}  // namespace

std::optional<ModelConfig> named_config(const std::string& name) {
  if (name == "tiny") return ModelConfig{};  // the defaults of config.h are `tiny`
  if (name == "nam56r-small") {  // 290 M parameters, 125 M active
    auto c = nam56r(name, 1024, 1, 2048, 8);
    c.attention = {.heads = 16, .nope_dim = 64, .rope_dim = 32, .v_dim = 64, .q_lora = 384, .kv_lora = 256};
    c.dense = {.ffn = 2816};  // for dense baselines (D): about the active FFN width of E (2 x 768 x 3/2 rounded)
    return c;
  }
  if (name == "nam56r-medium") {  // 1.91 B parameters, 591 M active: twice the width and depth, T 4096
    auto c = nam56r(name, 2048, 2, 4096, 4);
    c.attention = {.heads = 16, .nope_dim = 128, .rope_dim = 64, .v_dim = 128, .q_lora = 768, .kv_lora = 512};
    c.moe.ffn = 1536;
    c.dense = {.ffn = 5632};
    return c;
  }
  if (name == "nam56r-large") {  // 8.34 B parameters, 2.17 B active: d 4096, 24 layers, T 4096
    auto c = nam56r(name, 4096, 2, 4096, 2);
    c.attention = {.heads = 32, .nope_dim = 128, .rope_dim = 64, .v_dim = 128, .q_lora = 1536, .kv_lora = 512};
    c.moe.ffn = 3584;
    c.dense = {.ffn = 10752};
    return c;
  }
  return std::nullopt;
}

std::vector<std::string> named_config_names() { return {"tiny", "nam56r-small", "nam56r-medium", "nam56r-large"}; }

std::string pattern_error(const std::string& pattern) {
  if (pattern.empty()) return "the pattern is empty: give one letter per layer from A, M, E, R, D";
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char ch = pattern[i];
    if (ch == 'A' || ch == 'M' || ch == 'E' || ch == 'R' || ch == 'D') continue;
    if (ch == '|')
      return fmt::format("pipeline stage mark '|' at position {} is not supported yet: remove it", i + 1);
    const bool printable = ch >= 0x20 && ch < 0x7f;
    return fmt::format("unknown block letter '{}' at position {} of pattern \"{}\": use A (attention), "
                       "M (Mamba-3), E (MoE), R (RG-LRU) or D (dense MLP)",
                       printable ? std::string(1, ch) : fmt::format("\\x{:02x}", static_cast<unsigned char>(ch)),
                       i + 1, pattern);
  }
  return "";
}

std::vector<std::string> config_errors(const ModelConfig& c) {
  std::vector<std::string> errs;
  auto need = [&](bool ok, std::string msg) {
    if (!ok) errs.push_back(std::move(msg));
  };
  if (auto e = pattern_error(c.pattern); !e.empty()) errs.push_back("model.pattern: " + e);
  need(c.vocab >= 258, fmt::format("model.vocab = {} is too small: the byte tokenizer needs at least 258 ids", c.vocab));
  need(c.d_model > 0, "model.d_model must be positive");
  need(c.seq_len > 0, "model.seq_len must be positive");
  need(c.batch_size > 0, "model.batch_size must be positive");
  need(c.norm_eps > 0, "model.norm_eps must be positive");
  need(c.init_std > 0, "model.init_std must be positive");
  const auto& a = c.attention;
  need(a.heads > 0 && a.nope_dim >= 0 && a.v_dim > 0 && a.kv_lora > 0 && a.q_lora >= 0,
       "model.attention: heads, v_dim and kv_lora must be positive; nope_dim and q_lora non-negative");
  need(a.rope_dim > 0 && a.rope_dim % 2 == 0, fmt::format("model.attention.rope_dim = {} must be positive and even", a.rope_dim));
  need(a.rope_base > 1, "model.attention.rope_base must be greater than 1");
  const auto& e = c.moe;
  need(e.experts > 0 && e.top_k > 0 && e.top_k <= e.experts,
       fmt::format("model.moe: need 0 < top_k <= experts (got top_k {} of {} experts)", e.top_k, e.experts));
  need(e.ffn > 0, "model.moe.ffn must be positive");
  need(e.capacity_factor >= 0, "model.moe.capacity_factor must be >= 0 (0 = dropless)");
  need(e.aux_coef >= 0, "model.moe.aux_coef must be >= 0");
  const auto& m = c.mamba;
  need(m.expand > 0 && m.head_dim > 0 && (m.expand * c.d_model) % m.head_dim == 0,
       fmt::format("model.mamba: expand * d_model = {} must be a multiple of head_dim = {}", m.expand * c.d_model, m.head_dim));
  need(m.state > 0 && m.state % 4 == 0, fmt::format("model.mamba.state = {} must be a positive multiple of 4 (angles S = N/4)", m.state));
  need(m.chunk > 0, "model.mamba.chunk must be positive");
  need(m.dt_min > 0 && m.dt_min <= m.dt_max && m.dt_floor > 0, "model.mamba: need 0 < dt_min <= dt_max and dt_floor > 0");
  need(c.recurrent.width > 0 && c.recurrent.conv_width > 0, "model.recurrent: width and conv_width must be positive");
  need(c.dense.ffn > 0, "model.dense.ffn must be positive");
  return errs;
}

}  // namespace ablate::model
