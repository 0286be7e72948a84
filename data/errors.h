// data/errors.h: the one error type of the data pipeline. A DataError is bad input (a missing corpus,
// a seq_len the corpus cannot fill, a vocab too small), a base::InputError: the CLI maps it to exit
// code 2. Messages say what is wrong, where, and how to fix it. Tested in tests/data/.
#pragma once
#include <stdexcept>
#include <string>

#include "base/errors.h"

namespace ablate::data {

class DataError : public base::InputError {
 public:
  explicit DataError(const std::string& what) : base::InputError(what) {}
};

}  // namespace ablate::data
