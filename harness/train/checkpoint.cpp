// harness/train/checkpoint.cpp: see checkpoint.h.
#include "harness/train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/remove_tree.h"

namespace ablate::harness {
namespace fs = std::filesystem;

namespace {

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

}  // namespace

std::string save_checkpoint(const std::string& dir, torch::nn::Module& model, TrainOptimizer& optimizer,
                            const CheckpointState& state, bool writes) {
  torch::serialize::OutputArchive optim_archive;
  optimizer.save(optim_archive);  // a sharded optimizer gathers here: every rank takes part
  if (!writes) return "";
  const fs::path root(dir);
  fs::create_directories(root);
  const fs::path final_dir = root / fmt::format("step-{:08d}", state.next_step);
  const fs::path tmp = root / fmt::format(".step-{:08d}.tmp", state.next_step);
  base::remove_tree(tmp);
  fs::create_directories(tmp);

  torch::serialize::OutputArchive model_archive;
  model.save(model_archive);
  model_archive.save_to((tmp / "model.pt").string());
  fsync_path(tmp / "model.pt");
  optim_archive.save_to((tmp / "optimizer.pt").string());
  fsync_path(tmp / "optimizer.pt");
  nlohmann::json j = {{"next_step", state.next_step}, {"data", state.data}, {"model_hash", state.spec_model_hash},
                      {"data_fingerprint", state.data_fingerprint}};
  write_text(tmp / "state.json", j.dump(2));
  write_text(tmp / "COMPLETE", "ok\n");
  fsync_path(tmp);

  base::remove_tree(final_dir);  // a checkpoint of the same step from an earlier attempt
  fs::rename(tmp, final_dir);
  fsync_path(root);
  return final_dir.string();
}

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  std::optional<std::string> best;
  if (!fs::is_directory(dir)) return best;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || name.rfind("step-", 0) != 0 || !fs::exists(e.path() / "COMPLETE")) continue;
    if (!best || name > fs::path(*best).filename().string()) best = e.path().string();  // zero-padded: lexical = numeric
  }
  return best;
}

CheckpointState load_checkpoint(const std::string& folder, torch::nn::Module& model, TrainOptimizer* optimizer,
                                const std::string& expected_model_hash, const std::string& expected_data_fingerprint) {
  const fs::path f(folder);
  std::ifstream in(f / "state.json");
  if (!in) throw std::invalid_argument(fmt::format("checkpoint {} has no state.json", folder));
  const auto j = nlohmann::json::parse(in);
  CheckpointState s;
  s.next_step = j.at("next_step").get<int64_t>();
  s.data = j.at("data").get<data::DataState>();
  s.spec_model_hash = j.at("model_hash").get<std::string>();
  s.data_fingerprint = j.at("data_fingerprint").get<std::string>();
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
