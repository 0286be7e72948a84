// receipts/store_files.h: facts about a store's file that opening it (store.cpp) and importing it as a
// source (store_import.cpp) both need. Private to receipts/.
#pragma once

#include <string>

namespace ablate::receipts {

// An existing, non-empty store whose folder this process cannot write (a read-only copy, a shared
// archive): SQLite could not create the WAL's files there, so it can be read only as immutable.
bool in_folder_nobody_writes(const std::string& path);

}  // namespace ablate::receipts
