// data/corpus.cpp: corpus walk, fingerprint, tokenising and the on-disk token cache (see
// corpus.h). Tested in tests/data/ (DataCorpusTest.*, DataCacheTest.*).
#include "data/corpus.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>

#include "data/errors.h"
#include "data/hash.h"
#include "base/rng.h"

namespace ablate::data {

namespace fs = std::filesystem;

namespace {

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

std::string errno_text(int err) { return std::strerror(err); }

// Closes a file descriptor on scope exit.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

// Reads exactly n bytes unless EOF comes first; returns the count read, -1 on error (errno set).
ssize_t read_full(int fd, void* buf, size_t n) {
  auto* p = static_cast<char*>(buf);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, p + got, n - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(got);
}

bool write_full(int fd, const void* buf, size_t n) {
  const auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Cache header: fixed offsets, host byte order (the endian marker rejects a foreign file).
constexpr char kMagic[8] = {'A', 'B', 'L', 'T', 'C', 'O', 'R', 'P'};
constexpr uint32_t kEndianMarker = 0x01020304;
constexpr size_t kHeaderSize = 56;

struct CacheHeader {
  uint32_t format_version = 0, tokenizer_version = 0, endian = 0, token_bytes = 0;
  uint64_t fingerprint = 0, token_count = 0, checksum = 0;
};

template <class T>
void put(unsigned char* buf, size_t off, T v) {
  std::memcpy(buf + off, &v, sizeof v);
}
template <class T>
T get(const unsigned char* buf, size_t off) {
  T v;
  std::memcpy(&v, buf + off, sizeof v);
  return v;
}

void encode_header(const CacheHeader& h, unsigned char* buf) {
  std::memcpy(buf, kMagic, 8);
  put(buf, 8, h.format_version);
  put(buf, 12, h.tokenizer_version);
  put(buf, 16, h.endian);
  put(buf, 20, h.token_bytes);
  put(buf, 24, h.fingerprint);
  put(buf, 32, h.token_count);
  put(buf, 40, h.checksum);
  put(buf, 48, fnv1a64(buf, 48));
}

}  // namespace

std::vector<std::string> default_extensions() {
  return {".h", ".hh", ".hpp", ".hxx", ".c", ".cc", ".cpp", ".cu", ".cuh"};
}

std::vector<std::string> normalise_extensions(const std::vector<std::string>& exts) {
  if (exts.empty()) {
    throw DataError("data.extensions is empty: list the file extensions of the corpus, e.g. [\".h\", \".cpp\"]");
  }
  std::vector<std::string> out;
  for (const auto& e : exts) {
    if (e.empty() || e == ".") {
      throw DataError("data.extensions has an empty entry: write extensions like \".h\" or \"cpp\"");
    }
    out.push_back(e[0] == '.' ? e : "." + e);
  }
  // Duplicates dropped, the first occurrence kept: messages list the extensions as the user wrote them.
  std::vector<std::string> unique;
  for (auto& e : out) {
    if (std::find(unique.begin(), unique.end(), e) == unique.end()) unique.push_back(std::move(e));
  }
  return unique;
}

CorpusListing list_corpus(const fs::path& dir, const std::vector<std::string>& extensions, uint64_t max_bytes) {
  CorpusListing L;
  L.extensions = normalise_extensions(extensions);
  L.max_bytes = max_bytes;
  const std::string hint = "point data.corpus_dir at a folder of C/C++ sources or use data.source = \"synthetic\"";
  if (dir.empty()) throw DataError("data.corpus_dir is empty: " + hint);
  std::error_code ec;
  L.root = fs::absolute(dir, ec);
  if (ec) L.root = dir;
  // "/x/./y/" and "/x/y" are the same corpus: the same root string in messages and receipts.
  L.root = L.root.lexically_normal();
  if (L.root.has_relative_path() && !L.root.has_filename()) L.root = L.root.parent_path();
  const fs::file_status st = fs::status(L.root, ec);
  if (!fs::exists(st)) {
    throw DataError(fmt::format("data.corpus_dir {} does not exist: {}", L.root.string(), hint));
  }
  if (!fs::is_directory(st)) {
    throw DataError(fmt::format("data.corpus_dir {} is not a folder: {}", L.root.string(), hint));
  }

  std::vector<std::string> sorted_exts = L.extensions;  // for binary_search
  std::sort(sorted_exts.begin(), sorted_exts.end());

  // The iterator does not follow directory symlinks (no follow_directory_symlink), and entries are
  // judged by symlink_status, so links of any kind are skipped: no loops, no file read twice.
  // A folder that cannot be read is an error, as an unreadable file is: skipping it would train on
  // part of the corpus the experiment names, and say nothing.
  std::vector<CorpusFile> all;
  fs::recursive_directory_iterator it(L.root, fs::directory_options::none, ec);
  if (ec) throw DataError(fmt::format("cannot read data.corpus_dir {}: {} (make it readable or point data.corpus_dir "
                                      "elsewhere)", L.root.string(), ec.message()));
  const std::string root_str = L.root.string();
  for (; it != fs::recursive_directory_iterator();) {
    const fs::directory_entry& e = *it;
    const fs::path entered = e.path();  // the folder increment() descends into, when it is one
    const fs::file_status s = e.symlink_status(ec);
    if (!ec && fs::is_regular_file(s) &&
        std::binary_search(sorted_exts.begin(), sorted_exts.end(), e.path().extension().string())) {
      struct stat sb {};
      if (::lstat(e.path().c_str(), &sb) == 0 && S_ISREG(sb.st_mode)) {
        CorpusFile f;
        f.rel_path = e.path().lexically_relative(L.root).generic_string();
        f.size = static_cast<uint64_t>(sb.st_size);
        f.mtime_ns = static_cast<int64_t>(sb.st_mtim.tv_sec) * 1000000000LL + sb.st_mtim.tv_nsec;
        all.push_back(std::move(f));
      }
    }
    it.increment(ec);
    if (ec) {
      throw DataError(fmt::format("cannot read {} under data.corpus_dir {}: {} (every folder of the corpus is read: "
                                  "make it readable, or point data.corpus_dir elsewhere)",
                                  entered.string(), root_str, ec.message()));
    }
  }
  // std::string's ordering compares as unsigned char, i.e. byte-wise: the same on every machine
  // whatever the locale.
  std::sort(all.begin(), all.end(), [](const CorpusFile& a, const CorpusFile& b) { return a.rel_path < b.rel_path; });
  L.matched_files = all.size();
  if (all.empty()) {
    throw DataError(fmt::format("no {} files under {}: {}", join(L.extensions, " "), root_str, hint));
  }
  for (auto& f : all) {
    if (max_bytes > 0 && L.total_bytes + f.size > max_bytes) break;
    L.total_bytes += f.size;
    L.files.push_back(std::move(f));
  }
  if (L.files.empty()) {
    throw DataError(fmt::format(
        "data.max_bytes = {} is smaller than the first file of the corpus ({}/{}, {} bytes) and a document is "
        "never cut: raise data.max_bytes or set it to 0 (no cap)",
        max_bytes, root_str, all.front().rel_path, all.front().size));
  }
  L.fingerprint = fingerprint_listing(L);
  return L;
}

uint64_t fingerprint_listing(const CorpusListing& L) {
  Fnv1a64 h;
  // Extensions in sorted order: listing them differently selects the same files.
  std::vector<std::string> exts = L.extensions;
  std::sort(exts.begin(), exts.end());
  h.str("ablate-corpus").u64(kTokenizerVersion).u64(exts.size());
  for (const auto& e : exts) h.str(e);
  h.u64(L.max_bytes).u64(L.files.size());
  for (const auto& f : L.files) h.str(f.rel_path).u64(f.size).u64(static_cast<uint64_t>(f.mtime_ns));
  return h.value();
}

std::vector<Token> tokenise_listing(const CorpusListing& L) {
  std::vector<Token> tokens(L.token_count());
  std::vector<unsigned char> buf;
  size_t pos = 0;
  for (const auto& f : L.files) {
    const fs::path p = L.root / f.rel_path;
    Fd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.fd < 0) {
      throw DataError(fmt::format("cannot read corpus file {}: {}", p.string(), errno_text(errno)));
    }
    buf.resize(f.size + 1);  // one spare byte detects a file that grew since it was listed
    const ssize_t got = read_full(fd.fd, buf.data(), buf.size());
    if (got < 0) throw DataError(fmt::format("cannot read corpus file {}: {}", p.string(), errno_text(errno)));
    if (static_cast<uint64_t>(got) != f.size) {
      throw DataError(fmt::format("corpus file {} changed while it was read (listed {} bytes, read {}): run again",
                                  p.string(), f.size, got));
    }
    for (uint64_t i = 0; i < f.size; ++i) tokens[pos++] = buf[i];
    tokens[pos++] = kEod;
  }
  return tokens;
}

fs::path default_cache_dir() {
  if (const char* d = std::getenv("ABLATE_CACHE_DIR"); d && *d) return fs::path(d);
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "ablate" / "corpus";
  return fs::temp_directory_path() / "ablate-cache" / "corpus";
}

fs::path cache_file_for(const fs::path& cache_dir, uint64_t fingerprint) {
  return cache_dir / ("corpus-" + hex64(fingerprint) + ".tokens");
}

CacheRead read_token_cache(const fs::path& file, uint64_t fingerprint, uint64_t expected_tokens) {
  CacheRead r;
  Fd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) {
    r.why = errno == ENOENT ? "no cache file" : "cannot open the cache file: " + errno_text(errno);
    return r;
  }
  struct stat sb {};
  if (::fstat(fd.fd, &sb) != 0) {
    r.why = "cannot stat the cache file: " + errno_text(errno);
    return r;
  }
  unsigned char hb[kHeaderSize];
  if (read_full(fd.fd, hb, kHeaderSize) != static_cast<ssize_t>(kHeaderSize)) {
    r.why = "truncated header";
    return r;
  }
  if (std::memcmp(hb, kMagic, 8) != 0) {
    r.why = "bad magic";
    return r;
  }
  if (get<uint64_t>(hb, 48) != fnv1a64(hb, 48)) {
    r.why = "header checksum mismatch";
    return r;
  }
  CacheHeader h;
  h.format_version = get<uint32_t>(hb, 8);
  h.tokenizer_version = get<uint32_t>(hb, 12);
  h.endian = get<uint32_t>(hb, 16);
  h.token_bytes = get<uint32_t>(hb, 20);
  h.fingerprint = get<uint64_t>(hb, 24);
  h.token_count = get<uint64_t>(hb, 32);
  h.checksum = get<uint64_t>(hb, 40);
  if (h.format_version != kCacheFormatVersion || h.tokenizer_version != kTokenizerVersion ||
      h.endian != kEndianMarker || h.token_bytes != sizeof(Token)) {
    r.why = "written by another cache format, tokenizer version or byte order";
    return r;
  }
  if (h.fingerprint != fingerprint) {
    r.why = "fingerprint mismatch";
    return r;
  }
  if (h.token_count != expected_tokens) {
    r.why = fmt::format("token count {} where the file list gives {}", h.token_count, expected_tokens);
    return r;
  }
  const uint64_t payload = h.token_count * sizeof(Token);
  if (static_cast<uint64_t>(sb.st_size) != kHeaderSize + payload) {
    r.why = fmt::format("file size {} where the header gives {}", sb.st_size, kHeaderSize + payload);
    return r;
  }
  r.tokens = TokenBuffer::map_file(fd.fd, kHeaderSize + payload, kHeaderSize, h.token_count, r.why);
  if (!r.why.empty()) return r;
  if (checksum64(r.tokens.data(), payload) != h.checksum) {
    r.tokens = TokenBuffer();
    r.why = "payload checksum mismatch";
    return r;
  }
  r.ok = true;
  return r;
}

void write_token_cache(const fs::path& file, uint64_t fingerprint, const std::vector<Token>& tokens) {
  const fs::path dir = file.parent_path();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error(fmt::format("cannot create cache folder {}: {}", dir.string(), ec.message()));

  // A unique temp name per writer: concurrent runs each write their own file and the last rename wins,
  // both complete.
  static std::atomic<uint64_t> counter{0};
  const uint64_t nonce =
      base::mix64((static_cast<uint64_t>(::getpid()) << 32) ^ counter++ ^
            static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  const fs::path tmp = file.string() + ".tmp-" + hex64(nonce);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(fmt::format("cannot create {}: {}", tmp.string(), errno_text(errno)));
  auto fail = [&](const std::string& what) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw std::runtime_error(fmt::format("{} {}: {}", what, tmp.string(), errno_text(err)));
  };
  CacheHeader h;
  h.format_version = kCacheFormatVersion;
  h.tokenizer_version = kTokenizerVersion;
  h.endian = kEndianMarker;
  h.token_bytes = sizeof(Token);
  h.fingerprint = fingerprint;
  h.token_count = tokens.size();
  h.checksum = checksum64(tokens.data(), tokens.size() * sizeof(Token));
  unsigned char hb[kHeaderSize];
  encode_header(h, hb);
  if (!write_full(fd, hb, kHeaderSize)) fail("cannot write");
  if (!write_full(fd, tokens.data(), tokens.size() * sizeof(Token))) fail("cannot write");
  if (::fsync(fd) != 0) fail("cannot fsync");
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error(fmt::format("cannot close {}: {}", tmp.string(), errno_text(err)));
  }
  if (::rename(tmp.c_str(), file.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error(fmt::format("cannot rename {} to {}: {}", tmp.string(), file.string(), errno_text(err)));
  }
  // Make the rename itself durable; failure here leaves a complete file either way.
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

Corpus load_corpus(const fs::path& dir, const std::vector<std::string>& extensions, uint64_t max_bytes,
                   const fs::path& cache_dir) {
  const auto t0 = std::chrono::steady_clock::now();
  Corpus c;
  c.listing = list_corpus(dir, extensions, max_bytes);
  c.cache_file = cache_file_for(cache_dir.empty() ? default_cache_dir() : cache_dir, c.listing.fingerprint);
  CacheRead r = read_token_cache(c.cache_file, c.listing.fingerprint, c.listing.token_count());
  if (r.ok) {
    c.tokens = std::move(r.tokens);
    c.cache_hit = true;
  } else {
    c.cache_note = r.why == "no cache file" ? "no cache file: tokenised" : "cache unusable (" + r.why + "): rebuilt";
    std::vector<Token> tokens = tokenise_listing(c.listing);
    try {
      write_token_cache(c.cache_file, c.listing.fingerprint, tokens);
    } catch (const std::exception& e) {
      c.cache_note += std::string("; cache not written: ") + e.what();
    }
    c.tokens = TokenBuffer(std::move(tokens));
  }
  c.prep_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return c;
}

}  // namespace ablate::data
