// profiling/cupti_names.cpp: see cupti_names.h.
// Tests: tests/profiling/cupti_names_test.cpp (profiling_tests).
#include "profiling/cupti_names.h"

#include <cxxabi.h>

#include <cstdlib>
#include <cstring>

#if defined(ABLATE_HAVE_LIBIBERTY)
// demangle.h includes libiberty.h, whose own basename() declaration clashes with glibc's unless told
// that one is declared already.
#define HAVE_DECL_BASENAME 1
#include <libiberty/demangle.h>
#endif

namespace ablate::profiling {

std::string demangle_kernel_name(const char* raw) {
  if (raw == nullptr) return "";
  // Only Itanium-mangled symbols: __cxa_demangle also reads a bare type ("f" -> "float").
  constexpr size_t kMaxMangled = 16 << 10;  // bounds the demangler's work on a pathological name
  if (std::strncmp(raw, "_Z", 2) != 0 || std::strlen(raw) > kMaxMangled) return raw;
  int status = 0;
  char* demangled = abi::__cxa_demangle(raw, nullptr, nullptr, &status);
#if defined(ABLATE_HAVE_LIBIBERTY)
  // libstdc++'s demangler stops at a fixed nesting depth (libiberty's DEMANGLE_RECURSION_LIMIT, which
  // __cxa_demangle cannot lift) and calls deeper names invalid: CUTLASS 3 kernels (cute::tuple of
  // layouts of tuples) are such names. The same demangler without the limit reads them; the length
  // cap above bounds its work and stack.
  if (status == -2) {
    std::free(demangled);
    demangled = cplus_demangle_v3(raw, DMGL_PARAMS | DMGL_TYPES | DMGL_NO_RECURSE_LIMIT);
    status = demangled == nullptr ? -2 : 0;
  }
#endif
  if (status != 0 || demangled == nullptr) {
    std::free(demangled);
    return raw;
  }
  std::string out(demangled);
  std::free(demangled);
  return out;
}

bool deep_demangling_available() {
#if defined(ABLATE_HAVE_LIBIBERTY)
  return true;
#else
  return false;
#endif
}

std::string api_name_without_version(std::string_view name) {
  for (;;) {
    const size_t at = name.rfind("_v");
    if (at == std::string_view::npos || at == 0 || at + 2 == name.size()) break;
    bool digits = true;
    for (size_t i = at + 2; i < name.size(); ++i) digits = digits && name[i] >= '0' && name[i] <= '9';
    if (!digits) break;
    name = name.substr(0, at);
  }
  return std::string(name);
}

}  // namespace ablate::profiling
