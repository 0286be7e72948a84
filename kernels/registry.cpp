// kernels/registry.cpp: the registrations of every backend file (kernels/registry.h), run once on first
// use, in the order of their files' paths, into the catalog's rows and the per-seam function tables.
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

struct Registered {
  std::vector<BackendInfo> rows;
  Implementations tables;
};

const Registered& registered() {
  static const Registered kRegistered = [] {
    auto ordered = registrations();
    std::stable_sort(ordered.begin(), ordered.end(),
                     [](const Registration& a, const Registration& b) { return a.file < b.file; });
    Registered out;
    BackendRegistry registry(out.rows, out.tables);
    for (const auto& r : ordered) r.fn(registry);
    return out;
  }();
  return kRegistered;
}

}  // namespace

namespace detail {

bool add_registration(const char* file, RegisterBackends fn) {
  registrations().push_back({from_kernels_folder(file), fn});
  return true;
}

std::vector<BackendInfo> registered_rows() { return registered().rows; }

}  // namespace detail

void BackendRegistry::check_and_record(const char* seam, BackendInfo& row, bool built) {
  if (!row.seam.empty() && row.seam != seam)
    throw std::logic_error(fmt::format("backend '{}' registered for seam '{}' names seam '{}'", row.name, seam, row.seam));
  row.seam = seam;
  if (row.name.empty()) throw std::logic_error(fmt::format("a backend of seam '{}' was registered without a name", seam));
  if (row.description.empty() || row.unavailable_reason == nullptr)
    throw std::logic_error(fmt::format("backend {}/{} needs a description and an availability check", seam, row.name));
  if ((row.name == "reference") != (row.role == Role::reference) || (row.name == "reference") != row.fallback.empty())
    throw std::logic_error(fmt::format(
        "backend {}/{}: the reference (and only it) has role reference and no fallback", seam, row.name));
  if ((row.capture == Capture::always) != row.capture_reason.empty())
    throw std::logic_error(fmt::format("backend {}/{}: a capture reason is given exactly when capture is not always",
                                       seam, row.name));
  if (!built) row.not_built = "built without CUDA";
  rows_.push_back(std::move(row));
}

const Implementations& implementations() { return registered().tables; }

bool has_implementation(const std::string& seam, const std::string& name) {
  const auto& t = implementations();
#define ABLATE_SEAM_HAS(s, Fn, lane_key) \
  if (seam == #s) return t.s.count(name) > 0;
  ABLATE_SEAMS(ABLATE_SEAM_HAS)
#undef ABLATE_SEAM_HAS
  return false;
}

}  // namespace ablate::kernels
