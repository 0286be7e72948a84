// kernels/registry.h: how a backend's function joins its catalog row. The row (role, fallback, CUPTI
// kernel-name patterns, availability, capture) is plain data in the seam's kernels/<seam>/catalog.cpp;
// the function registers itself ONCE, under the row's name, from the backend's own file in the seam's
// folder (kernels/<seam>/<backend>.cpp or .cu):
//
//   ABLATE_REGISTER_BACKENDS(swiglu_fused_cuda) {          // a name unique in the program
//     registry.swiglu("fused_cuda", ABLATE_CUDA_ONLY(&swiglu_fused));
//   }
//
// There is one method per seam (kernels/seam_list.h), typed by the seam's contract (kernels/seams.h).
// The catalog, the Dispatcher, `ablate catalog`, the spec's backend check and the parity driver
// (tests/kernels/parity_test.cpp) all read the rows and these functions: adding a backend is adding its
// row and its file (kernels/CMakeLists.txt globs the seam folders) plus, for new shapes, a parity case.
// A .cu backend built where there is no CUDA compiler is compiled as C++ with its kernels left out
// (ABLATE_CUDA_ONLY gives no function); its row (needs_nvcc) stays listed as "built without CUDA".
// The registrations run lazily, the first time the functions are read; a function without its row, a
// row registered twice, a function for a row this build cannot build, or a row this build should have
// built without a function is a std::logic_error then.
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

// What a registration function adds its functions to: registry.<seam>(row name, function).
class BackendRegistry {
 public:
  explicit BackendRegistry(Implementations& tables) : tables_(tables) {}
#define ABLATE_SEAM_ADD(seam, Fn, lane_key) \
  void seam(const std::string& name, Fn fn) { add(#seam, name, std::move(fn), tables_.seam); }
  ABLATE_SEAMS(ABLATE_SEAM_ADD)
#undef ABLATE_SEAM_ADD

 private:
  // The row (seam, name) must be in the catalog, registered once, and given a function exactly when
  // this build builds it (its not_built is empty). Throws std::logic_error.
  static void check(const char* seam, const std::string& name, bool has_function, bool registered_before);
  template <typename Fn>
  void add(const char* seam, const std::string& name, Fn fn, std::map<std::string, Fn>& table) {
    check(seam, name, static_cast<bool>(fn), table.count(name) > 0);
    if (fn) table.emplace(name, std::move(fn));
  }
  Implementations& tables_;
};

// Throws std::logic_error naming the first catalog row this build builds that has no function in
// `tables` (its backend file is missing or registers another name).
void check_every_built_row_implemented(const Implementations& tables);

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

// A function of a CUDA backend: itself when nvcc compiles the file, none (its row not built) otherwise.
#if defined(__CUDACC__)
#define ABLATE_CUDA_ONLY(fn) (fn)
#else
#define ABLATE_CUDA_ONLY(fn) (nullptr)
#endif
