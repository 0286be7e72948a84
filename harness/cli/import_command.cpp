// harness/cli/import_command.cpp: `ablate import SRC.db... [--copy-artifacts] [--db DEST]`: other stores'
// receipts (runs, steps, evaluations, profiles, artifacts' records, matrices, decisions, annotations)
// merged into DEST in one transaction (receipts::Store::import_stores; docs/receipts.md "Import").
// Sources are only read. Exit 2 when a source cannot be read, is newer or foreign, or holds a run whose
// uid DEST has with other content; DEST is then as it was.
// Tests: tests/harness/cli_import_test.cpp (harness_tests); the merge: tests/receipts/import_test.cpp.
#include <fmt/format.h>

#include "harness/cli/commands.h"
#include "receipts/store.h"

namespace ablate::cli {
namespace {

std::string counted(std::int64_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

}  // namespace

void register_import(CLI::App& app, Globals& g) {
  static std::vector<std::string> sources;
  static receipts::ImportOptions options;
  auto* cmd = app.add_subcommand(
      "import", "Merge other receipt stores into --db (runs matched by uid, ids renumbered; sources only read)");
  cmd->add_option("sources", sources, "receipt stores to import (SRC.db ...)")->required();
  cmd->add_flag("--copy-artifacts", options.copy_artifacts,
                "copy the artifacts' files (traces) into DEST.artifacts/<sha256>/ and point their records there "
                "(default: the records keep the sources' paths and sha256)");
  command_table().push_back({cmd, [&g] {
    for (const auto& source : receipts::Store::import_stores(g.db, sources, options)) {
      const std::string left =
          source.runs_left_running > 0 ? fmt::format(", {} still running there (left out)", source.runs_left_running) : "";
      if (source.import_id == 0) {
        fmt::print("ablate import: {}: nothing new ({} here already{})\n", source.path,
                   counted(source.runs_present, "run", "runs"), left);
      } else {
        fmt::print("ablate import: {} (schema {}, sha256 {}): {} added ({} here already{}), {}, {}, {}, {}{}; import {} "
                   "in {}\n",
                   source.path, source.schema_version, source.sha256.substr(0, 12),
                   counted(source.runs_added, "run", "runs"), source.runs_present, left,
                   counted(source.step_rows_added, "step row", "step rows"),
                   counted(source.matrices_added, "matrix", "matrices"),
                   counted(source.decisions_added, "decision", "decisions"),
                   counted(source.annotations_added, "annotation", "annotations"),
                   options.copy_artifacts ? ", " + counted(source.artifacts_copied, "artifact copied", "artifacts copied")
                                          : "",
                   source.import_id, g.db);
      }
      for (const auto& note : source.notes) fmt::print("  note: {}\n", note);
    }
    return kExitOk;
  }});
}

}  // namespace ablate::cli
