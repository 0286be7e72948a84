// base/die_of_signal.cpp: see die_of_signal.h.
#include "base/die_of_signal.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

namespace ablate::base {

void die_of_signal(int sig) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  raise(sig);
  _exit(128 + sig);  // not reached for a signal whose default action terminates
}

}  // namespace ablate::base
