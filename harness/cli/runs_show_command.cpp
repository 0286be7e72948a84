// harness/cli/runs_show_command.cpp: `ablate runs` (a table of runs, filtered) and `ablate show RUN`
// (everything the store holds about one run, as text or --json). Read-only: a database that does
// not exist yet is not created by these commands. `show`'s text is report/run_view.h's, which the
// run pages of `ablate site` show too.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <ctime>
#include <filesystem>

#include "harness/cli/commands.h"
#include "base/clock.h"
#include "receipts/store.h"
#include "report/run_view.h"

namespace ablate::cli {
using report::human_bytes;
using report::text_or_dash;

void register_receipt_queries(CLI::App& app, Globals& g) {
  static receipts::RunFilter filter;
  static int64_t limit = 50;
  static bool runs_json = false;
  auto* runs = app.add_subcommand("runs", "List runs in the receipt store, newest first");
  runs->add_option("--status", filter.status, "running | ok | failed | killed | abandoned");
  runs->add_option("--name", filter.name, "name substring, or a glob with * ? [");
  runs->add_option("--tag", filter.tag,
                   "runs carrying this tag, as their experiment file declared it (a run made with --set says so "
                   "under its row)");
  runs->add_option("--since", filter.since, "unix seconds, ISO date/time (UTC), or an age: 90m, 12h, 7d");
  runs->add_option("--limit", limit, "at most this many rows (0: all)")->check(at_least(0));
  runs->add_flag("--json", runs_json, "print JSON");
  command_table().push_back({runs, [&g] {
    auto store = receipts::Store::open_existing(g.db);
    if (limit > 0) filter.limit = limit;
    const auto rows = store.list_runs(filter);
    if (runs_json) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& r : rows) out.push_back(store.run_json(r.id, false)["run"]);
      fmt::print("{}\n", out.dump(2));
      return kExitOk;
    }
    fmt::print("{:>5}  {:<9}  {:<24}  {:<19}  {:>5}  {:>9}  {:>10}  {:>6}  {:>8}  {:>10}  {}\n", "id", "status", "name",
               "started (UTC)", "steps", "step ms", "tokens/s", "MFU", "goodput", "peak mem", "tags");
    for (const auto& r : rows) {
      const auto& s = r.summary;
      fmt::print("{:>5}  {:<9}  {:<24}  {:<19}  {:>5}  {:>9}  {:>10}  {:>6}  {:>8}  {:>10}  {}\n", r.id,
                 receipts::to_string(r.status), r.name.size() > 24 ? r.name.substr(0, 23) + "~" : r.name,
                 base::format_utc(r.started_at), text_or_dash(s.steps),
                 text_or_dash(s.median_step_ms, "{:.2f}"), text_or_dash(s.tokens_per_s, "{:.0f}"),
                 s.mfu ? fmt::format("{:.1f}%", *s.mfu * 100) : "-",
                 s.goodput_pct ? fmt::format("{:.1f}%", *s.goodput_pct) : "-", human_bytes(s.peak_memory_bytes),
                 fmt::join(r.tags, ","));
      // The name and tags are the experiment file's: a run made with --set is not quite what they label.
      if (const auto& m = s.facts.model; m && !m->overrides.empty())
        fmt::print("       made with --set {}\n", fmt::join(m->overrides, " --set "));
      if (r.error) fmt::print("       error: {}\n", *r.error);
    }
    // At the limit there may be more: say so rather than count the shown rows as the store's.
    if (limit > 0 && static_cast<int64_t>(rows.size()) == limit)
      fmt::print("{} run(s) shown, the newest in {}; more may match (--limit 0 lists all)\n", rows.size(), g.db);
    else
      fmt::print("{} run(s) in {}\n", rows.size(), g.db);
    return kExitOk;
  }});

  static int64_t run_id = 0;
  static int64_t top_kernels = 0;
  static bool show_json = false;
  auto* show = app.add_subcommand("show", "Everything the receipt store holds about one run");
  show->add_option("run", run_id, "run id")->required();
  show->add_option("--kernels", top_kernels,
                   "with a profiled window: the N kernels that took the most GPU time a step (rank 0), each with "
                   "its phase, block and seam[backend]")
      ->check(at_least(0));
  show->add_flag("--json", show_json, "print JSON");
  command_table().push_back({show, [&g] {
    auto store = receipts::Store::open_existing(g.db);
    if (show_json) {
      fmt::print("{}\n", store.run_json(run_id).dump(2));
      return kExitOk;
    }
    fmt::print("{}", report::render_run_text(store, run_id, {.top_kernels = top_kernels}));
    return kExitOk;
  }});
}

}  // namespace ablate::cli
