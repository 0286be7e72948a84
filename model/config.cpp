// model/config.cpp: named configurations of docs/model.md and structural validation of a ModelConfig.
#include "model/config.h"

#include <fmt/format.h>

namespace ablate::model {

std::optional<ModelConfig> named_config(const std::string& name) {
  if (name == "tiny") return ModelConfig{};  // the defaults of config.h are `tiny`
  if (name == "nam56r-small") {
    ModelConfig c;
    c.name = name;
    c.pattern = "AEMEAEMEAEMR";
    c.vocab = 32768;
    c.d_model = 1024;
    c.seq_len = 2048;
    c.batch_size = 8;
    c.attention = {.heads = 16, .nope_dim = 64, .rope_dim = 32, .v_dim = 64, .q_lora = 384, .kv_lora = 256};
    c.moe = {.experts = 16, .top_k = 2, .ffn = 768};
    c.mamba = {.expand = 2, .head_dim = 64, .state = 128, .chunk = 64};
    c.recurrent = {.width = 1024};
    c.dense = {.ffn = 2816};  // for dense baselines (D): about the active FFN width of E (2 x 768 x 3/2 rounded)
    return c;
  }
  return std::nullopt;
}

std::vector<std::string> named_config_names() { return {"tiny", "nam56r-small"}; }

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
