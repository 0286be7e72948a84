// harness/goodput.h: the goodput ledger (docs/architecture.md "Goodput ledger"). Every second of a run's wall
// time is charged to exactly one category. Charges nest: an inner charge (a checkpoint inside the
// training loop) takes its interval away from the outer one, so the categories always sum to wall
// time; whatever no charge covers lands in `other`, shown, never hidden.
// Tests: tests/harness/goodput_test.cpp.
#pragma once
#include <array>
#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace ablate::harness {

enum class Goodput { startup, data_prep, warmup, productive, data_wait, checkpoint, eval, profiling, other };
inline constexpr std::array kGoodputCategories = {Goodput::startup,    Goodput::data_prep, Goodput::warmup,
                                                  Goodput::productive, Goodput::data_wait, Goodput::checkpoint,
                                                  Goodput::eval,       Goodput::profiling, Goodput::other};
const char* goodput_name(Goodput c);

class GoodputLedger {
 public:
  using Clock = std::chrono::steady_clock;
  explicit GoodputLedger(Clock::time_point start = Clock::now());

  // Opens a charge to `c` at `t`; it stays open until end(). Charges must close in LIFO order
  // (use Scope); the innermost open charge owns the time.
  void begin(Goodput c, Clock::time_point t = Clock::now());
  void end(Clock::time_point t = Clock::now());
  // Charges an interval that was measured elsewhere (e.g. time blocked on the loader inside a step)
  // and moves it out of the currently open charge, so nothing is counted twice.
  void move_to(Goodput c, double seconds);
  // Re-labels the time charged to the open charge since `from` (e.g. a step that turned out to be a
  // warm-up step): moves it from `from_category` to `to`.
  void reclassify(Goodput from_category, Goodput to, double seconds);

  class Scope {
   public:
    Scope(GoodputLedger& l, Goodput c) : l_(l) { l_.begin(c); }
    ~Scope() { l_.end(); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    GoodputLedger& l_;
  };

  // Seconds per category, with `other` = wall - charged. `now` closes nothing: open charges are
  // counted up to `now`.
  std::map<std::string, double> totals(Clock::time_point now = Clock::now()) const;
  double wall_seconds(Clock::time_point now = Clock::now()) const;
  // productive / wall, in [0, 1].
  double goodput(Clock::time_point now = Clock::now()) const;

 private:
  Clock::time_point start_;
  std::array<double, kGoodputCategories.size()> seconds_{};
  struct Open {
    Goodput c;
    Clock::time_point since;  // when this charge last became the innermost one
  };
  std::vector<Open> stack_;
  void charge(Goodput c, double s) { seconds_[static_cast<size_t>(c)] += s; }
};

}  // namespace ablate::harness
