// report/run_view.h: one run as `ablate show RUN` prints it: identity, status and error, summary,
// model, precision, data parallel, MoE, held-out evaluations, CUDA graphs, backend mismatches with
// the kernels that show them, the remaining sections as compact JSON, and optionally the kernels that
// took the most GPU time a step. One renderer for the terminal and for the run pages of `ablate site`
// (report/site.h), so the two cannot disagree.
// Tests: tests/harness/cli_receipts_test.cpp (`show`, harness_tests), tests/report/site_test.cpp.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <optional>
#include <string>

#include "receipts/store.h"

namespace ablate::report {

struct RunViewOptions {
  std::int64_t top_kernels = 0;  // with a profiled window: the N kernels with the most GPU time a step
  // The hint after the step count names the command that prints every step.
  bool mention_show_json = true;
};

// A value as the run listings show it, "-" when unknown.
template <typename T>
std::string text_or_dash(const std::optional<T>& v, const char* format = "{}") {
  return v ? fmt::format(fmt::runtime(format), *v) : "-";
}
// Bytes as GiB with two decimals, "-" when unknown.
std::string human_bytes(const std::optional<std::int64_t>& bytes);

// Throws StoreError for an unknown run.
std::string render_run_text(receipts::Store& store, std::int64_t run_id, const RunViewOptions& options = {});

}  // namespace ablate::report
