// harness/goodput.cpp: see goodput.h. Only the innermost open charge accrues time, which is what
// makes nested and overlapping use sum exactly to wall time.
#include "harness/goodput.h"

#include <stdexcept>

namespace ablate::harness {

const char* goodput_name(Goodput c) {
  switch (c) {
    case Goodput::startup: return "startup";
    case Goodput::data_prep: return "data_prep";
    case Goodput::warmup: return "warmup";
    case Goodput::productive: return "productive";
    case Goodput::data_wait: return "data_wait";
    case Goodput::checkpoint: return "checkpoint";
    case Goodput::eval: return "eval";
    case Goodput::profiling: return "profiling";
    case Goodput::other: return "other";
  }
  return "other";
}

namespace {
double seconds_between(GoodputLedger::Clock::time_point a, GoodputLedger::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

GoodputLedger::GoodputLedger(Clock::time_point start) : start_(start) {}

void GoodputLedger::begin(Goodput c, Clock::time_point t) {
  if (!stack_.empty()) charge(stack_.back().c, seconds_between(stack_.back().since, t));
  stack_.push_back({c, t});
}

void GoodputLedger::end(Clock::time_point t) {
  if (stack_.empty()) throw std::logic_error("GoodputLedger::end without an open charge");
  charge(stack_.back().c, seconds_between(stack_.back().since, t));
  stack_.pop_back();
  if (!stack_.empty()) stack_.back().since = t;
}

void GoodputLedger::move_to(Goodput c, double seconds) {
  if (stack_.empty() || seconds <= 0) return;
  // The open charge has not been credited yet: shift its start so it accrues `seconds` less.
  stack_.back().since += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  charge(c, seconds);
}

void GoodputLedger::reclassify(Goodput from, Goodput to, double seconds) {
  auto& f = seconds_[static_cast<size_t>(from)];
  const double moved = std::min(seconds, f);
  f -= moved;
  charge(to, moved);
}

std::map<std::string, double> GoodputLedger::totals(Clock::time_point now) const {
  auto s = seconds_;
  if (!stack_.empty()) s[static_cast<size_t>(stack_.back().c)] += seconds_between(stack_.back().since, now);
  double charged = 0;
  for (auto c : kGoodputCategories)
    if (c != Goodput::other) charged += s[static_cast<size_t>(c)];
  s[static_cast<size_t>(Goodput::other)] += std::max(0.0, wall_seconds(now) - charged);
  std::map<std::string, double> out;
  for (auto c : kGoodputCategories) out[goodput_name(c)] = s[static_cast<size_t>(c)];
  return out;
}

double GoodputLedger::wall_seconds(Clock::time_point now) const { return seconds_between(start_, now); }

double GoodputLedger::goodput(Clock::time_point now) const {
  const double wall = wall_seconds(now);
  return wall > 0 ? totals(now).at("productive") / wall : 0.0;
}

}  // namespace ablate::harness
