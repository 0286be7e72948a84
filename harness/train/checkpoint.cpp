// harness/train/checkpoint.cpp: see checkpoint.h.
#include "harness/train/checkpoint.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/remove_tree.h"
#include "base/sha256.h"
#include "harness/train/expert_parallel.h"

namespace ablate::harness {
namespace fs = std::filesystem;

namespace {

// The files a checkpoint's manifest lists.
constexpr const char* kCheckpointFiles[] = {"model.pt", "optimizer.pt"};

void fsync_path(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) throw std::runtime_error(fmt::format("checkpoint: cannot open {} to fsync", p.string()));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw std::runtime_error(fmt::format("checkpoint: fsync of {} failed", p.string()));
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw std::runtime_error(fmt::format("checkpoint: cannot write {}", p.string()));
  fsync_path(p);
}

// What a save writes in place of a parameter: its fp32 master, each expert weight whole (every rank of
// its group's rows), by the parameter it replaces.
using SavedValues = std::unordered_map<const c10::TensorImpl*, torch::Tensor>;

SavedValues values_to_save(const ExpertWeights& experts, const MasterValues& masters) {
  SavedValues saved;
  for (const auto& [p, value] : masters) {
    auto v = value.detach();
    v.set_requires_grad(p.requires_grad());  // as Module::save stores the parameter
    saved[p.unsafeGetTensorImpl()] = std::move(v);
  }
  for (const auto& p : experts.params) {
    const auto master = saved.find(p.unsafeGetTensorImpl());
    auto w = experts.group->gather_experts(master == saved.end() ? p : master->second.to(p.device()));
    w.set_requires_grad(p.requires_grad());
    saved[p.unsafeGetTensorImpl()] = std::move(w);
  }
  return saved;
}

// Module::save's layout (parameters, buffers, then each serializable child's archive under its name)
// with the saved values in place, so the file is what a run without expert parallelism or bf16 weights
// writes.
void save_module(const torch::nn::Module& module, torch::serialize::OutputArchive& archive, const SavedValues& whole) {
  for (const auto& p : module.named_parameters(/*recurse=*/false)) {
    const auto it = whole.find(p.value().unsafeGetTensorImpl());
    archive.write(p.key(), it == whole.end() ? p.value() : it->second);
  }
  for (const auto& b : module.named_buffers(/*recurse=*/false)) archive.write(b.key(), b.value(), /*is_buffer=*/true);
  for (const auto& child : module.named_children()) {
    if (!child.value()->is_serializable()) continue;
    torch::serialize::OutputArchive child_archive(archive.compilation_unit());
    save_module(*child.value(), child_archive, whole);
    archive.write(child.key(), child_archive);
  }
}

// Module::load's walk, each expert weight taking this rank's rows of the whole one saved.
void load_module(torch::nn::Module& module, torch::serialize::InputArchive& archive, const ExpertWeights& experts) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.named_parameters(/*recurse=*/false)) {
    if (std::none_of(experts.params.begin(), experts.params.end(), [&](const auto& e) { return e.is_same(p.value()); })) {
      archive.read(p.key(), p.value());
      continue;
    }
    torch::Tensor whole;
    archive.read(p.key(), whole);
    p.value().copy_(experts.group->own_experts(whole, p.value()));
  }
  for (auto& b : module.named_buffers(/*recurse=*/false)) archive.read(b.key(), b.value(), /*is_buffer=*/true);
  for (const auto& child : module.named_children()) {
    if (!child.value()->is_serializable()) continue;
    torch::serialize::InputArchive child_archive;
    archive.read(child.key(), child_archive);
    load_module(*child.value(), child_archive, experts);
  }
}

}  // namespace

std::string save_checkpoint(const std::string& dir, torch::nn::Module& model, TrainOptimizer& optimizer,
                            const CheckpointState& state, bool writes, const ExpertWeights& experts,
                            const MasterValues& masters) {
  torch::serialize::OutputArchive optim_archive;
  optimizer.save(optim_archive);  // a sharded or expert-parallel optimizer gathers here (a collective)
  const SavedValues saved = values_to_save(experts, masters);
  if (!writes) return "";
  const fs::path root(dir);
  fs::create_directories(root);
  const fs::path final_dir = root / fmt::format("step-{:08d}", state.next_step);
  const fs::path tmp = root / fmt::format(".step-{:08d}.tmp", state.next_step);
  base::remove_tree(tmp);
  fs::create_directories(tmp);

  torch::serialize::OutputArchive model_archive;
  if (!saved.empty())
    save_module(model, model_archive, saved);
  else
    model.save(model_archive);
  model_archive.save_to((tmp / "model.pt").string());
  fsync_path(tmp / "model.pt");
  optim_archive.save_to((tmp / "optimizer.pt").string());
  fsync_path(tmp / "optimizer.pt");
  nlohmann::json manifest = nlohmann::json::object();
  for (const char* file : kCheckpointFiles)
    manifest[file] = {{"bytes", static_cast<int64_t>(fs::file_size(tmp / file))},
                      {"sha256", base::sha256_file((tmp / file).string())}};
  nlohmann::json j = {{"next_step", state.next_step}, {"data", state.data}, {"model_hash", state.spec_model_hash},
                      {"data_fingerprint", state.data_fingerprint}, {"files", manifest}};
  write_text(tmp / "state.json", j.dump(2));
  write_text(tmp / "COMPLETE", "ok\n");
  fsync_path(tmp);

  base::remove_tree(final_dir);  // a checkpoint of the same step from an earlier attempt
  fs::rename(tmp, final_dir);
  fsync_path(root);
  return final_dir.string();
}

namespace {

// The complete checkpoint folders under `dir`, newest first (zero-padded names: lexical = numeric).
std::vector<fs::path> complete_checkpoints(const std::string& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.rfind("step-", 0) == 0 && fs::exists(e.path() / "COMPLETE")) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end(), [](const fs::path& a, const fs::path& b) { return a.filename() > b.filename(); });
  return out;
}

}  // namespace

std::string checkpoint_problem(const std::string& folder) {
  const fs::path f(folder);
  if (!fs::exists(f / "COMPLETE")) return "no COMPLETE marker (its save did not finish)";
  std::ifstream in(f / "state.json");
  if (!in) return "no readable state.json";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
    if (j.at("next_step").get<int64_t>() < 1) return fmt::format("state.json says next_step {}", j.at("next_step").dump());
    for (const char* key : {"model_hash", "data_fingerprint"})
      if (!j.at(key).is_string()) return fmt::format("state.json's {} is not a string", key);
    (void)j.at("data").get<data::DataState>();
  } catch (const std::exception& e) {
    return fmt::format("state.json is malformed ({})", e.what());
  }
  for (const char* file : kCheckpointFiles) {
    std::error_code ec;
    const auto bytes = fs::file_size(f / file, ec);
    if (ec) return fmt::format("{} is missing", file);
    if (!j.contains("files")) continue;  // written before manifests: present is all that can be checked
    try {
      const auto& listed = j.at("files").at(file);
      if (static_cast<int64_t>(bytes) != listed.at("bytes").get<int64_t>())
        return fmt::format("{} is {} bytes, its manifest says {}", file, bytes, listed.at("bytes").get<int64_t>());
      if (base::sha256_file((f / file).string()) != listed.at("sha256").get<std::string>())
        return fmt::format("{} does not match its manifest's SHA-256", file);
    } catch (const nlohmann::json::exception& e) {
      return fmt::format("state.json's manifest is malformed ({})", e.what());
    }
  }
  return "";
}

LatestCheckpoint latest_checkpoint(const std::string& dir) {
  LatestCheckpoint out;
  for (const auto& folder : complete_checkpoints(dir)) {
    const std::string problem = checkpoint_problem(folder.string());
    if (problem.empty()) {
      out.folder = folder.string();
      break;
    }
    out.skipped.push_back(fmt::format("{}: {}", folder.filename().string(), problem));
  }
  return out;
}

void prune_checkpoints(const std::string& dir, int64_t keep) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(".step-", 0) == 0 && name.size() > 4 && name.substr(name.size() - 4) == ".tmp")
      base::remove_tree(e.path());
  }
  if (keep <= 0) return;
  const auto complete = complete_checkpoints(dir);
  for (size_t i = static_cast<size_t>(keep); i < complete.size(); ++i) base::remove_tree(complete[i]);
}

CheckpointFolderLock::CheckpointFolderLock(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  const std::string path = (fs::path(dir) / ".lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw std::invalid_argument(fmt::format("cannot open the checkpoint folder's lock {}: {} (set train.checkpoint_dir "
                                            "to a writable folder)",
                                            path, std::strerror(errno)));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(fd_);
    fd_ = -1;
    if (error == EWOULDBLOCK)
      throw std::invalid_argument(fmt::format(
          "the checkpoint folder {} is in use by another run writing checkpoints (it holds {}): give this run its own "
          "train.checkpoint_dir or experiment.name, or wait for that run to end",
          dir, path));
    throw std::invalid_argument(fmt::format("cannot lock the checkpoint folder {}: {}", dir, std::strerror(error)));
  }
}

CheckpointFolderLock::~CheckpointFolderLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

CheckpointState load_checkpoint(const std::string& folder, torch::nn::Module& model, TrainOptimizer* optimizer,
                                const std::string& expected_model_hash, const std::string& expected_data_fingerprint,
                                const ExpertWeights& experts) {
  // latest_checkpoint() verified the folder; a state.json that still does not read is refused, not thrown raw.
  const fs::path f(folder);
  std::ifstream in(f / "state.json");
  CheckpointState s;
  try {
    const auto j = nlohmann::json::parse(in);
    s.next_step = j.at("next_step").get<int64_t>();
    s.data = j.at("data").get<data::DataState>();
    s.spec_model_hash = j.at("model_hash").get<std::string>();
    s.data_fingerprint = j.at("data_fingerprint").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(fmt::format("checkpoint {}: state.json is malformed ({})", folder, e.what()));
  }
  if (s.spec_model_hash != expected_model_hash)
    throw std::invalid_argument(fmt::format("checkpoint {} belongs to another model (model hash {} vs this spec's {}): "
                                            "point train.checkpoint_dir elsewhere or set train.resume = false",
                                            folder, s.spec_model_hash.substr(0, 12), expected_model_hash.substr(0, 12)));
  if (s.data_fingerprint != expected_data_fingerprint)
    throw std::invalid_argument(fmt::format("checkpoint {} was taken on other data (fingerprint {} vs {}): resuming would "
                                            "not continue the same data order; point train.checkpoint_dir elsewhere",
                                            folder, s.data_fingerprint, expected_data_fingerprint));
  // Onto the model's own device: the file names the writer's (rank 0's cuda:0), and Module::load moves
  // a parameter to the loaded tensor's device when they differ (another rank's model would end up on
  // rank 0's GPU).
  const auto params = model.parameters();
  const std::optional<torch::Device> device =
      params.empty() ? std::nullopt : std::optional<torch::Device>(params.front().device());
  torch::serialize::InputArchive model_archive;
  model_archive.load_from((f / "model.pt").string(), device);
  if (experts.group)
    load_module(model, model_archive, experts);
  else
    model.load(model_archive);
  if (optimizer) load_optimizer_state(folder, *optimizer, device);
  return s;
}

void load_optimizer_state(const std::string& folder, TrainOptimizer& optimizer, std::optional<torch::Device> device) {
  torch::serialize::InputArchive archive;
  archive.load_from((fs::path(folder) / "optimizer.pt").string(), device);
  optimizer.load(archive);
}

}  // namespace ablate::harness
