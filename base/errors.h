// base/errors.h: the one error type of the project's floor. An InputError says the caller's input is
// wrong (a path that cannot be read, a time or duration that does not parse, a bad environment
// variable): the CLI maps it, and every type derived from it (receipts::StoreError, data::DataError),
// to exit code 2. Messages say what is wrong, where, and how to fix it.
// Tested through tests/base/ (base_tests) and the suites of the folders that derive from it.
#pragma once
#include <stdexcept>
#include <string>

namespace ablate::base {

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace ablate::base
