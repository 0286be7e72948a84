// tests/corpus_folder.h: a folder of generated C sources for CLI tests that need documents on both
// sides of the held-out split (train.eval_every). The tiny lane reads /usr/include, whose size differs
// by machine (a GPU machine may hold a dozen large headers: 5 % of them is no document at all), so such
// a test writes its own corpus and points data.corpus_dir at it.
#pragma once
#include <filesystem>
#include <fstream>
#include <string>

namespace ablate::testing {

// `files` headers of ~1.6 KB each (distinct text, so distinct document hashes) under `dir`.
inline void write_corpus(const std::filesystem::path& dir, int files = 240) {
  std::filesystem::create_directories(dir);
  for (int f = 0; f < files; ++f) {
    std::ofstream out(dir / ("unit_" + std::to_string(f) + ".h"));
    out << "// unit " << f << ": generated for a test\n#pragma once\n";
    for (int line = 0; line < 48; ++line)
      out << "static const int unit" << f << "_value" << line << " = " << (f * 131 + line * 17) % 1000 << ";\n";
  }
}

}  // namespace ablate::testing
