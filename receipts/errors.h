// receipts/errors.h: the two exception types of the receipt store.
//   StoreError  - the caller's input is wrong (bad path, unknown run, finished run, bad filter): a
//                 base::InputError, which the CLI maps to exit code 2.
//   SqliteError - SQLite itself failed (I/O, lock timeout, a schema trigger fired); carries the SQLite
//                 result code, sqlite3_errmsg and the statement text.
//   StoreFileError - a SqliteError that says the store FILE is unusable as given: damaged (corrupt,
//                 truncated, not a database) or not writable (read-only file or folder, full disk).
//                 Its text says what is wrong and how to fix it, without SQL; the CLI maps it to exit 2.
// Tested through tests/receipts/*_test.cpp (receipts_tests).
#pragma once

#include <stdexcept>
#include <string>

#include "base/errors.h"

namespace ablate::receipts {

class StoreError : public base::InputError {
 public:
  using base::InputError::InputError;
};

class SqliteError : public std::runtime_error {
 public:
  SqliteError(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  // Extended result code (extended codes are enabled on every connection), e.g. SQLITE_CONSTRAINT_PRIMARYKEY.
  int code() const noexcept { return code_; }

 private:
  int code_;
};

class StoreFileError : public SqliteError {
 public:
  using SqliteError::SqliteError;
};

}  // namespace ablate::receipts
