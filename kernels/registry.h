// kernels/registry.h: how a backend joins the catalog. Each backend registers itself ONCE, from its own
// file in its seam's folder (kernels/<seam>/<backend>.cpp or .cu): its catalog row (role, fallback,
// CUPTI kernel-name patterns, availability check) and its function, together:
//
//   ABLATE_REGISTER_BACKENDS(swiglu_fused_cuda) {          // a name unique in the program
//     registry.swiglu({.name = "fused_cuda", .role = Role::experimental, .fallback = "reference",
//                      .kernel_patterns = {"ablate_swiglu_fwd", "ablate_swiglu_bwd"},
//                      .description = "...", .unavailable_reason = &availability::hopper_fp32_or_bf16},
//                     ABLATE_CUDA_ONLY(&swiglu_fused));
//   }
//
// There is one method per seam (kernels/seam_list.h), typed by the seam's contract (kernels/seams.h), and
// it sets the row's seam. The catalog, the Dispatcher, `ablate catalog`, the spec's backend check and
// the parity driver (tests/kernels/parity_test.cpp) all read what was registered: adding a backend is
// adding its file (kernels/CMakeLists.txt globs the seam folders) plus, for new shapes, a parity case.
// A .cu backend built where there is no CUDA compiler is compiled as C++ with its kernels left out
// (ABLATE_CUDA_ONLY gives no function): its row stays listed, unavailable as "built without CUDA".
// The registered functions run lazily, the first time the catalog or the registry is read.
// Tests: kernels_tests --gtest_filter='Catalog*:Registry*' (tests/kernels/catalog_test.cpp).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "kernels/catalog.h"
#include "kernels/seam_list.h"
#include "kernels/seams.h"

namespace ablate::kernels {

// One table per seam: backend name -> implementation (only rows that this build implements).
struct Implementations {
#define ABLATE_SEAM_TABLE(seam, Fn, lane_key) std::map<std::string, Fn> seam;
  ABLATE_SEAMS(ABLATE_SEAM_TABLE)
#undef ABLATE_SEAM_TABLE
};
const Implementations& implementations();
// Whether this build implements (seam, backend name).
bool has_implementation(const std::string& seam, const std::string& name);

// What a registration function adds its rows to: registry.<seam>(row, function).
class BackendRegistry {
 public:
  BackendRegistry(std::vector<BackendInfo>& rows, Implementations& tables) : rows_(rows), tables_(tables) {}
#define ABLATE_SEAM_ADD(seam, Fn, lane_key) \
  void seam(BackendInfo row, Fn fn) { add(#seam, std::move(row), std::move(fn), tables_.seam); }
  ABLATE_SEAMS(ABLATE_SEAM_ADD)
#undef ABLATE_SEAM_ADD

 private:
  // Checks the row (a name, a description, an availability check, a capture reason exactly when it is
  // not always capturable; the seam given by the method) and records it; an empty function leaves the row listed but not built. Throws std::logic_error.
  void check_and_record(const char* seam, BackendInfo& row, bool built);
  template <typename Fn>
  void add(const char* seam, BackendInfo row, Fn fn, std::map<std::string, Fn>& table) {
    const bool built = static_cast<bool>(fn);
    const std::string name = row.name;  // check_and_record moves the row into the catalog
    check_and_record(seam, row, built);
    if (built) table.emplace(name, std::move(fn));
  }
  std::vector<BackendInfo>& rows_;
  Implementations& tables_;
};

namespace detail {
using RegisterBackends = void (*)(BackendRegistry&);
// Called by ABLATE_REGISTER_BACKENDS during static initialisation; `file` orders the registrations.
bool add_registration(const char* file, RegisterBackends fn);
}  // namespace detail

}  // namespace ablate::kernels

// Defines the registration function of a backend file; its body adds rows through `registry`.
#define ABLATE_REGISTER_BACKENDS(id)                                                                  \
  static void ablate_register_backends_##id(::ablate::kernels::BackendRegistry& registry);            \
  [[maybe_unused]] static const bool ablate_backends_registered_##id =                                \
      ::ablate::kernels::detail::add_registration(__FILE__, &ablate_register_backends_##id);          \
  static void ablate_register_backends_##id([[maybe_unused]] ::ablate::kernels::BackendRegistry& registry)

// A function of a CUDA backend: itself when nvcc compiles the file, none (row not built) otherwise.
#if defined(__CUDACC__)
#define ABLATE_CUDA_ONLY(fn) (fn)
#else
#define ABLATE_CUDA_ONLY(fn) (nullptr)
#endif
