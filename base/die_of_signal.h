// base/die_of_signal.h: ending the process by a signal it caught, as if it had not caught it: the
// default action restored, the signal unblocked in this thread and raised, so the exit status (128 +
// signal in a shell) says what ended it. The run lifecycle (receipts/lifecycle.cpp) and the matrix
// runner (ablations/matrix_run.cpp) end this way after recording what the signal did.
// Tested through tests/receipts/lifecycle_test.cpp and tests/ablations/matrix_cli_test.cpp.
#pragma once

namespace ablate::base {

[[noreturn]] void die_of_signal(int sig);

}  // namespace ablate::base
