// tests/site_fixture_store.cpp: writes tests/report/site_fixture.h's store to the path given, for
// tests/scripts/site_browser_test.sh to build a site from with the real `ablate site`.
// Usage: site_fixture_store DB
#include <cstdio>
#include <exception>

#include "tests/report/site_fixture.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: site_fixture_store DB\n");
    return 2;
  }
  try {
    ablate::report::testing::FixtureStore fixture(argv[1]);
    ablate::report::testing::populate_site_fixture(fixture);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "site_fixture_store: %s\n", e.what());
    return 1;
  }
  return 0;
}
