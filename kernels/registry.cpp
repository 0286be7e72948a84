// kernels/registry.cpp: the registrations of every backend file (kernels/registry.h), run once on first
// use, in the order of their files' paths, into the per-seam function tables, checked against the
// catalog's rows.
// Tests: kernels_tests --gtest_filter='Catalog*:Registry*' (tests/kernels/catalog_test.cpp).
#include "kernels/registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace ablate::kernels {
namespace {

struct Registration {
  std::string file;  // from "kernels/" on: compilers and ccache give __FILE__ absolute or relative
  detail::RegisterBackends fn;
};

std::string from_kernels_folder(const std::string& path) {
  const auto at = path.rfind("kernels/");
  return at == std::string::npos ? path : path.substr(at);
}

// Filled during static initialisation (function-local, so it exists before the first registration).
std::vector<Registration>& registrations() {
  static std::vector<Registration> all;
  return all;
}

const Implementations& registered() {
  static const Implementations kRegistered = [] {
    auto ordered = registrations();
    std::stable_sort(ordered.begin(), ordered.end(),
                     [](const Registration& a, const Registration& b) { return a.file < b.file; });
    Implementations tables;
    BackendRegistry registry(tables);
    for (const auto& r : ordered) r.fn(registry);
    check_every_built_row_implemented(tables);
    return tables;
  }();
  return kRegistered;
}

bool has_function(const Implementations& t, const std::string& seam, const std::string& name) {
#define ABLATE_SEAM_HAS(s, Fn, lane_key) \
  if (seam == #s) return t.s.count(name) > 0;
  ABLATE_SEAMS(ABLATE_SEAM_HAS)
#undef ABLATE_SEAM_HAS
  return false;
}

}  // namespace

namespace detail {

bool add_registration(const char* file, RegisterBackends fn) {
  registrations().push_back({from_kernels_folder(file), fn});
  return true;
}

}  // namespace detail

void BackendRegistry::check(const char* seam, const std::string& name, bool has_function, bool registered_before) {
  const BackendInfo* row = find_backend(seam, name);
  if (row == nullptr)
    throw std::logic_error(fmt::format("a function was registered for {}/{}, which has no row in kernels/{}/catalog.cpp",
                                       seam, name, seam));
  if (registered_before) throw std::logic_error(fmt::format("backend {}/{} registered its function twice", seam, name));
  if (has_function != row->not_built.empty())
    throw std::logic_error(has_function ? fmt::format("backend {}/{} registered a function, but its row says this build "
                                                      "does not build it ({})",
                                                      seam, name, row->not_built)
                                        : fmt::format("backend {}/{} registered no function, but its row says this "
                                                      "build builds it (needs_nvcc is {})",
                                                      seam, name, row->needs_nvcc));
}

void check_every_built_row_implemented(const Implementations& tables) {
  for (const auto& row : catalog())
    if (row.not_built.empty() && !has_function(tables, row.seam, row.name))
      throw std::logic_error(fmt::format("backend {}/{} has a row in kernels/{}/catalog.cpp but no registered function "
                                         "(its file in kernels/{}/ is missing or registers another name)",
                                         row.seam, row.name, row.seam, row.seam));
}

const Implementations& implementations() { return registered(); }

bool has_implementation(const std::string& seam, const std::string& name) {
  return has_function(implementations(), seam, name);
}

}  // namespace ablate::kernels
