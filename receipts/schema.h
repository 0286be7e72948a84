// receipts/schema.h: the receipt store's schema as forward-only numbered migrations compiled into the binary.
// migrations()[i] takes a database from schema version i to i+1 (version 0 = empty file); the version
// lives in PRAGMA user_version, the file's owner in PRAGMA application_id.
// Rule: a released migration is never edited; a change is a new migration appended at the end, plus a
// fixture tests/fixtures/receipts/schema_vN.sql dumped from the previous version (see migration tests).
// Tested by tests/receipts/schema_test.cpp (receipts_tests).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

struct sqlite3;

namespace ablate::receipts::schema {

// PRAGMA application_id of an ablate receipt store ("ablt" in ASCII), so a foreign SQLite file is refused.
inline constexpr std::int32_t kApplicationId = 0x61626c74;

const std::vector<std::string>& migrations();
int latest_version();

// SQL functions the migrations call, on the connection `db`: whatever applies migrations() registers them
// first (Store::open does). v7's derived_run_uid(id, name, started_at, host, pid): 32 lowercase hex digits
// of the sha256 of its arguments, each written with its type (a REAL as the shortest text that reads back
// as the same double), so every copy of an older store gives a run the same uid.
void register_functions(sqlite3* db);

}  // namespace ablate::receipts::schema
