// spec/toml_types.h: how a TOML value's type is named in error messages ("expected an integer,
// got a string"), shared by the experiment spec (spec/spec.cpp) and matrix files (ablations/).
#pragma once
#ifndef TOML_HEADER_ONLY
#define TOML_HEADER_ONLY 1
#endif
#include <toml++/toml.h>

#include <string>

namespace ablate::spec {

inline std::string toml_type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date/time";
  }
}

}  // namespace ablate::spec
