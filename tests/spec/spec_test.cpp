// tests/spec/spec_test.cpp: experiment specs. Every section parses into the typed spec; every bad
// file in tests/fixtures/specs/bad/ fails with exactly the message in bad/expected.txt (file:line:col);
// overrides, canonical JSON and identity hashes behave; mutated specs parse or fail with issues.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "base/rng.h"
#include "base/temp_dir.h"
#include "spec/spec.h"

namespace fs = std::filesystem;
using namespace ablate::spec;

namespace {
const fs::path kSpecs = fs::path(ABLATE_SOURCE_DIR) / "tests/fixtures/specs";

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The first issue of a failing parse, as the CLI prints it ("where: error: message").
std::string first_error(const std::string& text, const std::string& name, const std::vector<std::string>& sets = {}) {
  try {
    parse_spec_string(text, name, sets);
  } catch (const SpecError& e) {
    return e.issues().at(0).where + ": error: " + e.issues().at(0).message;
  }
  return "(parsed without error)";
}
// The spec refused, with `says` in its message.
void expect_refused(const std::string& text, const std::vector<std::string>& sets, const std::string& says) {
  SCOPED_TRACE(::testing::PrintToString(sets));
  try {
    parse_spec_string(text, "s.toml", sets);
    ADD_FAILURE() << "accepted";
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}
}  // namespace

TEST(Spec, EverySectionParses) {
  const auto spec = parse_spec_string(R"(
[experiment]
name = "full"
description = "every section"
tags = ["a", "b"]
seed = 7
[model]
config = "nam56r-small"
pattern = "AEMD"
seq_len = 256
[model.attention]
heads = 4
[model.moe]
experts = 8
top_k = 1
capacity_factor = 1.25
[model.mamba]
chunk = 32
[model.recurrent]
width = 512
[model.dense]
ffn = 1000
[data]
source = "synthetic"
synthetic_distribution = "zipf"
zipf_exponent = 1.3
[train]
steps = 50
lr = 1e-3
device = "cpu"
dtype = "fp32"
warmup_steps = 3
checkpoint_every = 10
resume = true
[backends]
attention = "sdpa_flash"
strict = true
[compile]
cuda_graphs = true
deterministic = true
[profile]
enabled = true
start_step = 10
steps = 4
[distributed]
nproc = 2
bucket_mb = 50
)",
                                      "full.toml");
  EXPECT_EQ(spec.experiment.name, "full");
  EXPECT_EQ(spec.experiment.tags, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(spec.experiment.seed, 7);
  EXPECT_EQ(spec.model.name, "nam56r-small");
  EXPECT_EQ(spec.model.pattern, "AEMD");
  EXPECT_EQ(spec.model.d_model, 1024);  // from the named config
  EXPECT_EQ(spec.model.seq_len, 256);   // overridden
  EXPECT_EQ(spec.model.attention.heads, 4);
  EXPECT_EQ(spec.model.attention.nope_dim, 64);
  EXPECT_EQ(spec.model.moe.experts, 8);
  EXPECT_EQ(spec.model.moe.top_k, 1);
  EXPECT_DOUBLE_EQ(spec.model.moe.capacity_factor, 1.25);
  EXPECT_EQ(spec.model.mamba.chunk, 32);
  EXPECT_EQ(spec.model.recurrent.width, 512);
  EXPECT_EQ(spec.model.dense.ffn, 1000);
  EXPECT_EQ(spec.data.source, "synthetic");
  EXPECT_EQ(spec.data.synthetic_distribution, "zipf");
  EXPECT_DOUBLE_EQ(spec.data.zipf_exponent, 1.3);
  EXPECT_EQ(spec.train.steps, 50);
  EXPECT_DOUBLE_EQ(spec.train.lr, 1e-3);
  EXPECT_EQ(spec.train.device, "cpu");
  EXPECT_EQ(spec.train.checkpoint_every, 10);
  EXPECT_TRUE(spec.train.resume);
  EXPECT_EQ(spec.backends.requested.at("attention"), "sdpa_flash");
  EXPECT_EQ(spec.backends.requested.at("loss"), "reference");  // unnamed seams request the reference
  EXPECT_TRUE(spec.backends.strict);
  EXPECT_TRUE(spec.compile.cuda_graphs);
  EXPECT_TRUE(spec.compile.deterministic);
  EXPECT_TRUE(spec.profile.enabled);
  EXPECT_EQ(spec.profile.start_step, 10);
  EXPECT_EQ(spec.distributed.nproc, 2);
  EXPECT_EQ(spec.distributed.bucket_mb, 50);
}

TEST(Spec, DeclaredExperimentsAreValid) {
  for (const char* f : {"experiments/tiny.toml", "experiments/nam56r-small.toml", "experiments/nam56r-small-fast.toml"}) {
    const auto spec = parse_spec_file((fs::path(ABLATE_SOURCE_DIR) / f).string());
    EXPECT_FALSE(spec.experiment.name.empty()) << f;
  }
  const auto tiny = parse_spec_file((fs::path(ABLATE_SOURCE_DIR) / "experiments/tiny.toml").string());
  EXPECT_EQ(tiny.model.pattern, "AEMR");
  EXPECT_EQ(tiny.model.vocab, 512);
  const auto big = parse_spec_file((fs::path(ABLATE_SOURCE_DIR) / "experiments/nam56r-small.toml").string());
  EXPECT_EQ(big.model.pattern, "AEMEAEMEAEMR");
  EXPECT_EQ(big.model.vocab, 32768);
  EXPECT_EQ(big.model.seq_len, 2048);
  EXPECT_EQ(big.model.batch_size, 8);
  // The fast posture is the same model (same lane model hash), strict, every fast backend, graph-captured.
  const auto fast = parse_spec_file((fs::path(ABLATE_SOURCE_DIR) / "experiments/nam56r-small-fast.toml").string());
  EXPECT_EQ(model_hash(fast), model_hash(big));
  EXPECT_TRUE(fast.backends.strict);
  EXPECT_TRUE(fast.compile.cuda_graphs);
  EXPECT_EQ(fast.backends.requested.at("moe_dispatch"), "grouped_mm");
  // The 2 B and 8 B lanes: the pattern twice, in the fast posture; the 8 B one sharded over 4 GPUs.
  const auto medium = parse_spec_file((fs::path(ABLATE_SOURCE_DIR) / "experiments/nam56r-medium.toml").string());
  EXPECT_EQ(medium.model.pattern, "AEMEAEMEAEMRAEMEAEMEAEMR");
  EXPECT_EQ(medium.model.d_model, 2048);
  EXPECT_EQ(medium.model.seq_len, 4096);
  EXPECT_TRUE(medium.compile.cuda_graphs);
  const auto large = parse_spec_file((fs::path(ABLATE_SOURCE_DIR) / "experiments/nam56r-large.toml").string());
  EXPECT_EQ(large.model.pattern, medium.model.pattern);
  EXPECT_EQ(large.model.d_model, 4096);
  EXPECT_EQ(large.distributed.nproc, 4);
  EXPECT_EQ(large.distributed.sharding, "gradients");
  EXPECT_EQ(large.backends.requested, fast.backends.requested);
}

TEST(Spec, EveryBadFileFailsWithItsExactMessage) {
  std::map<std::string, std::string> expected;  // file -> first error line
  std::istringstream lines(slurp(kSpecs / "bad/expected.txt"));
  for (std::string line; std::getline(lines, line);) expected[line.substr(0, line.find(':'))] = line;
  size_t checked = 0;
  for (const auto& entry : fs::directory_iterator(kSpecs / "bad")) {
    if (entry.path().extension() != ".toml") continue;
    const std::string name = "bad/" + entry.path().filename().string();
    ASSERT_TRUE(expected.count(name)) << name << " has no line in bad/expected.txt";
    EXPECT_EQ(first_error(slurp(entry.path()), name), expected[name]);
    ++checked;
  }
  EXPECT_EQ(checked, expected.size()) << "expected.txt names a file that does not exist";
  EXPECT_GE(checked, 15u);
}

TEST(Spec, UnknownKeyAtLineThreeNamesFileLineColumn) {
  const std::string err = first_error("[train]\nsteps = 3\nbogus = 1\n", "x.toml");
  EXPECT_EQ(err.rfind("x.toml:3:1: error: unknown key 'bogus' in [train]", 0), 0u) << err;
}

TEST(Spec, ReportsEveryProblemNotOnlyTheFirst) {
  try {
    parse_spec_string("[train]\nsteps = -1\nlr = \"fast\"\n[nope]\n", "m.toml");
    FAIL() << "parsed";
  } catch (const SpecError& e) {
    ASSERT_EQ(e.issues().size(), 3u) << e.what();
  }
}

TEST(Spec, OverridesApplyAndFailClosed) {
  const auto spec = parse_spec_string("[train]\nsteps = 10\n", "o.toml",
                                      {"train.steps=20", "model.pattern=AMD", "model.attention.heads=4",
                                       "experiment.tags=[\"x\"]", "data.corpus_dir=/tmp"});
  EXPECT_EQ(spec.train.steps, 20);
  EXPECT_EQ(spec.model.pattern, "AMD");  // not valid TOML as a value: taken as a string
  EXPECT_EQ(spec.model.attention.heads, 4);
  EXPECT_EQ(spec.experiment.tags, std::vector<std::string>{"x"});
  EXPECT_EQ(spec.data.corpus_dir, "/tmp");
  // Kept, in order, for the receipt; a model.* override marks the named configuration as changed.
  EXPECT_EQ(spec.overrides, (std::vector<std::string>{"train.steps=20", "model.pattern=AMD", "model.attention.heads=4",
                                                      "experiment.tags=[\"x\"]", "data.corpus_dir=/tmp"}));
  EXPECT_TRUE(spec.model_overridden());
  EXPECT_FALSE(parse_spec_string("", "o.toml", {"train.steps=20"}).model_overridden());

  EXPECT_EQ(first_error("", "o.toml", {"train.lr=-1"}),
            "--set train.lr=-1: error: train.lr: value -1 is out of range: must be > 0 and <= 1e+300");
  EXPECT_EQ(first_error("", "o.toml", {"nosuch"}),
            "--set nosuch: error: expected section.key=value (for example --set train.steps=20)");
  EXPECT_EQ(first_error("", "o.toml", {"model.pattern=AZ"}),
            "--set model.pattern=AZ: error: model.pattern: unknown block letter 'Z' at position 2 of pattern \"AZ\": "
            "use A (attention), M (Mamba-3), E (MoE), R (RG-LRU) or D (dense MLP)");
}

// Names and tags are one printable line, and the name one path component (it names the checkpoint
// folder); a sub-table given as a value is a type error, never ignored; step counts are bounded so
// their sums cannot overflow. Through --set too, blamed on the argument.
TEST(Spec, NamesTagsSubTablesAndStepCountsFailClosed) {
  EXPECT_EQ(first_error("", "o.toml", {"model.attention=5"}),
            "--set model.attention=5: error: model.attention must be a table ([model.attention] with its keys), got an "
            "integer");
  EXPECT_EQ(first_error("", "o.toml", {"model.mamba=[1, 2]"}),
            "--set model.mamba=[1, 2]: error: model.mamba must be a table ([model.mamba] with its keys), got an array");
  for (const char* bad : {"experiment.name=\"../../escaped\"", "experiment.name=\"a/b\"", "experiment.name=\"..\"",
                          "experiment.name=\"\"", "experiment.name=\"x\\u001b[2J\"", "experiment.tags=[\"a\\nb\"]",
                          "train.steps=9223372036854775807", "profile.start_step=9223372036854775807"}) {
    SCOPED_TRACE(bad);
    EXPECT_NE(first_error("", "o.toml", {bad}), "");
  }
  // What stays allowed: spaces, dots inside, quotes, non-ASCII letters.
  const auto ok = parse_spec_string("", "o.toml", {"experiment.name=\"my run v1.2 \\\"quoted\\\" \u00e9t\u00e9\""});
  EXPECT_EQ(ok.experiment.name, "my run v1.2 \"quoted\" \u00e9t\u00e9");
}

// What the file or a --set gave, as opposed to a default: a launcher fills in only what was left to it.
TEST(Spec, GivenKeysAreWhatTheFileOrASetGave) {
  const auto spec = parse_spec_string("[distributed]\nnproc = 2\n", "g.toml", {"train.steps=90"});
  EXPECT_TRUE(spec.given("distributed.nproc"));
  EXPECT_TRUE(spec.given("train.steps"));
  EXPECT_FALSE(spec.given("distributed.backend"));
  EXPECT_EQ(spec.distributed.backend, "nccl");  // the default, not given
  EXPECT_TRUE(parse_spec_string("", "g.toml", {"distributed.backend=\"gloo\""}).given("distributed.backend"));
}

// Expert parallelism shards its experts over the ranks holding the same experts at whichever stage the
// rest is sharded (harness/train/step_executor.cpp): every stage is a valid spec with it.
TEST(Spec, ExpertParallelTakesEveryShardingStage) {
  for (const char* stage : {"none", "optimizer", "gradients", "full"}) {
    SCOPED_TRACE(stage);
    const auto spec = parse_spec_string("[model]\npattern = \"AEMR\"\n[distributed]\nnproc = 4\nexpert_parallel = 2\n",
                                        "ep.toml", {std::string("distributed.sharding=\"") + stage + "\""});
    EXPECT_EQ(spec.distributed.expert_parallel, 2);
    EXPECT_EQ(spec.distributed.sharding, stage);
  }
}

// The pipelined exchange is a setting of expert parallelism: without it the key fails closed, naming
// what to change, and a chunk holds at least one of a rank's experts.
TEST(Spec, ExpertExchangeChunksNeedExpertParallelismAndAnExpertAChunk) {
  const std::string moe = "[model]\npattern = \"AEMR\"\n[distributed]\nnproc = 2\n";
  const auto ok = parse_spec_string(moe, "c.toml",
                                    {"distributed.expert_parallel=2", "model.moe.capacity_factor=1.25",
                                     "distributed.expert_exchange_chunks=2"});
  EXPECT_EQ(ok.distributed.expert_exchange_chunks, 2);
  EXPECT_EQ(canonical_json(ok)["distributed"]["expert_exchange_chunks"], 2);
  const auto refused = [&](const std::vector<std::string>& sets, const std::string& says) {
    expect_refused(moe, sets, says);
  };
  refused({"distributed.expert_exchange_chunks=2", "model.moe.capacity_factor=1.25"}, "distributed.expert_parallel = 1");
  // Dropless pipelines too.
  EXPECT_EQ(parse_spec_string(moe, "c.toml", {"distributed.expert_exchange_chunks=2", "distributed.expert_parallel=2"})
                .distributed.expert_exchange_chunks,
            2);
  // tiny: 4 experts, 2 a rank at expert_parallel 2.
  refused({"distributed.expert_exchange_chunks=3", "distributed.expert_parallel=2", "model.moe.capacity_factor=1.25"},
          "exceeds the 2 experts a rank holds");
  refused({"distributed.expert_exchange_chunks=0"}, "expert_exchange_chunks");
  // Left at 1 it stays out of the identity: files without it keep their hash.
  EXPECT_FALSE(canonical_json(parse_spec_string(moe, "c.toml"))["distributed"].contains("expert_exchange_chunks"));
}

// bf16 GEMM weights keep their fp32 masters in a sharded stage's shards and compute exactly only under
// bf16 autocast: without either the key fails closed naming the fix; it joins the identity off fp32.
TEST(Spec, Bf16GemmWeightsNeedAShardedStageAndBf16Autocast) {
  const std::string dp = "[distributed]\nnproc = 2\n";
  const auto ok = parse_spec_string(dp, "p.toml", {"distributed.sharding=\"full\"", "distributed.param_dtype=\"bf16\""});
  EXPECT_EQ(ok.distributed.param_dtype, "bf16");
  EXPECT_EQ(canonical_json(ok)["distributed"]["param_dtype"], "bf16");
  EXPECT_FALSE(canonical_json(parse_spec_string(dp, "p.toml"))["distributed"].contains("param_dtype"));
  const auto refused = [&](const std::vector<std::string>& sets, const std::string& says) {
    expect_refused(dp, sets, says);
  };
  refused({"distributed.param_dtype=\"bf16\""}, "needs a sharded stage");
  refused({"distributed.sharding=\"optimizer\"", "distributed.param_dtype=\"bf16\"", "train.dtype=\"fp32\""},
          "set train.dtype = \"bf16\"");
  refused({"distributed.sharding=\"optimizer\"", "distributed.param_dtype=\"fp16\""}, "param_dtype");
}

TEST(Spec, AMemoryLimitCapsAGpuAndJoinsTheIdentityOnlyWhenSet) {
  const auto capped = parse_spec_string("[train]\nmemory_limit_gib = 74.5\n", "m.toml");
  EXPECT_EQ(capped.train.memory_limit_gib, 74.5);
  EXPECT_EQ(canonical_json(capped)["train"]["memory_limit_gib"], 74.5);
  const auto whole = parse_spec_string("[train]\n", "m.toml");
  EXPECT_FALSE(canonical_json(whole)["train"].contains("memory_limit_gib"));
  EXPECT_EQ(spec_hash(whole), spec_hash(parse_spec_string("[train]\nmemory_limit_gib = 0\n", "m.toml")));
  EXPECT_NE(spec_hash(whole), spec_hash(capped));
  // A cap on the CPU is refused at the key, with the fix; so is a negative one.
  EXPECT_EQ(first_error("[train]\ndevice = \"cpu\"\nmemory_limit_gib = 40\n", "m.toml"),
            "m.toml:3:20: error: train.memory_limit_gib = 40 caps a GPU's memory and train.device = \"cpu\": set "
            "train.device = \"cuda\" (or \"auto\" on a GPU machine) or train.memory_limit_gib = 0");
  expect_refused("", {"train.memory_limit_gib=-1"}, "must be >= 0");
  // Expandable segments the same way: off the default only, refused on the CPU.
  EXPECT_EQ(canonical_json(parse_spec_string("[train]\nexpandable_segments = true\n", "m.toml"))["train"]["expandable_segments"],
            true);
  EXPECT_FALSE(canonical_json(whole)["train"].contains("expandable_segments"));
  expect_refused("[train]\ndevice = \"cpu\"\n", {"train.expandable_segments=true"}, "or train.expandable_segments = false");
}

TEST(Spec, CanonicalJsonIsTheIdentity) {
  const auto a = parse_spec_string("[train]\nsteps = 20\nlr = 0.001\n", "a.toml");
  // Same values, other order, other spelling of the number, comments: same identity.
  const auto b = parse_spec_string("# c\n[train]\nlr = 1e-3\nsteps = 20\n", "b.toml");
  EXPECT_EQ(spec_hash(a), spec_hash(b));
  EXPECT_EQ(canonical_json(a), canonical_json(b));
  EXPECT_EQ(spec_hash(a).size(), 64u);
  // Every bound field appears in the canonical form, resolved.
  const auto j = canonical_json(a);
  EXPECT_EQ(j["model"]["config"], "tiny");
  EXPECT_EQ(j["model"]["attention"]["rope_dim"], 8);
  EXPECT_EQ(j["backends"]["ssm_scan"], "reference");
  EXPECT_EQ(j["train"]["steps"], 20);
  // A different value is a different experiment; a non-model change keeps the model hash.
  const auto c = parse_spec_string("[train]\nsteps = 21\nlr = 0.001\n", "c.toml");
  EXPECT_NE(spec_hash(a), spec_hash(c));
  EXPECT_EQ(model_hash(a), model_hash(c));
  const auto d = parse_spec_string("[model]\npattern = \"AAMR\"\n", "d.toml");
  EXPECT_NE(model_hash(a), model_hash(d));
  // Keys added after receipts existed join the identity only off their default: files that leave them
  // out keep their hash.
  for (const char* key : {"eval_every", "eval_tokens", "keep_checkpoints"}) EXPECT_FALSE(j["train"].contains(key)) << key;
  EXPECT_FALSE(j["data"].contains("validation_fraction"));
  EXPECT_FALSE(j["compile"].contains("launch_ahead"));
  const auto g = parse_spec_string("[train]\nsteps = 20\nlr = 0.001\n[compile]\nlaunch_ahead = false\n", "g.toml");
  EXPECT_EQ(canonical_json(g)["compile"]["launch_ahead"], false);
  EXPECT_NE(spec_hash(a), spec_hash(g));
  const auto e = parse_spec_string("[train]\nsteps = 20\nlr = 0.001\neval_every = 5\n", "e.toml");
  EXPECT_EQ(canonical_json(e)["train"]["eval_every"], 5);
  EXPECT_NE(spec_hash(a), spec_hash(e));
  EXPECT_EQ(spec_hash(a), spec_hash(parse_spec_string("[train]\nsteps = 20\nlr = 0.001\neval_tokens = 65536\n", "f.toml")));
}

TEST(Spec, EmbeddedDefaultsAreValid) {
  EXPECT_EQ(default_spec(false).model.name, "tiny");
  EXPECT_EQ(default_spec(true).model.name, "nam56r-small");
  EXPECT_EQ(default_spec(false, {"train.steps=7"}).train.steps, 7);
}

// An experiment file that declares nothing is refused (issue 15 item 6): it never becomes a run of the
// built-in defaults recorded under the file's name. The same text given as a string (with --set
// overrides, as the tests above do) is not a file and still parses.
TEST(Spec, AnEmptyFileIsRefusedWithTheFileAndHowToFixIt) {
  const ablate::base::TempDir tmp("ablate-spec-empty");
  const fs::path dir = tmp.path();
  const fs::path empty = dir / "empty.toml", blank = dir / "blank.toml";
  std::ofstream(empty).flush();
  std::ofstream(blank) << "\n# only a comment\n  \t\n";
  for (const auto& [file, what] : {std::pair{empty, "the experiment file is empty (0 bytes)"},
                                   std::pair{blank, "the experiment file declares nothing (only comments and whitespace)"}}) {
    try {
      parse_spec_file(file.string(), {"train.steps=3"});
      ADD_FAILURE() << file << " parsed";
    } catch (const SpecError& e) {
      ASSERT_EQ(e.issues().size(), 1u);
      EXPECT_EQ(e.issues()[0].where, file.string());
      EXPECT_EQ(e.issues()[0].message.rfind(what, 0), 0u) << e.issues()[0].message;
      EXPECT_NE(e.issues()[0].message.find("experiments/tiny.toml"), std::string::npos);
    }
  }
  std::ofstream(dir / "one.toml") << "# a comment, then a section\n[train]\nsteps = 3\nwarmup_steps = 1\n";
  EXPECT_EQ(parse_spec_file((dir / "one.toml").string()).train.steps, 3);
  EXPECT_EQ(parse_spec_string("", "o.toml", {"train.steps=40"}).train.steps, 40);
}

// An unknown section that only a --set brought in is blamed on that --set and its position (issue 15
// item 8), not on the file; one that the file has is still blamed on the file's line.
TEST(Spec, AnUnknownSetSectionIsBlamedOnTheSetArgument) {
  EXPECT_EQ(first_error("[train]\nsteps = 10\n", "o.toml", {"train.lr=0.01", "nosuch.key=1"}),
            "--set nosuch.key=1: error: unknown section [nosuch]: known sections are backends, compile, data, "
            "distributed, experiment, model, profile, train (it comes from --set argument 2 of 2, 'nosuch.key=1', "
            "not from o.toml: fix or drop that --set)");
  EXPECT_EQ(first_error("", "o.toml", {"trian.steps=1"}).rfind("--set trian.steps=1: error: unknown section [trian] (did "
                                                               "you mean 'train'?)", 0),
            0u);
  EXPECT_EQ(first_error("", "o.toml", {"model.attn.heads=2"}).rfind("--set model.attn.heads=2: error: unknown key 'attn' in "
                                                                    "[model]", 0),
            0u);
  EXPECT_EQ(first_error("[nosuch]\nkey = 1\n", "o.toml", {"nosuch.other=2"}).rfind("o.toml:1:2: error: unknown section", 0),
            0u);
}

// A constraint across keys that a --set broke is placed in the file's section, and names the --set.
TEST(Spec, ACrossKeyErrorNamesTheSetThatCausedIt) {
  const std::string text = "[model]\nconfig = \"tiny\"\n";
  EXPECT_EQ(first_error(text, "o.toml", {"model.d_model=65"}),
            "o.toml:1:1: error: model.mamba: expand * d_model = 130 must be a multiple of head_dim = 16 (with --set "
            "model.d_model=65)");
  EXPECT_EQ(first_error(text + "d_model = 65\n", "o.toml"),
            "o.toml:1:1: error: model.mamba: expand * d_model = 130 must be a multiple of head_dim = 16")
      << "the file's own value: no --set to name";
}

// A matrix file given as an experiment: one error naming the kind of file and the command that runs it,
// not an unknown-section error per section.
TEST(Spec, AMatrixFileIsNamedAsOne) {
  EXPECT_EQ(first_error("[matrix]\nname = \"m\"\nbase = \"x.toml\"\n[axes]\n\"train.steps\" = [1, 2]\n", "m.toml"),
            "m.toml:1:1: error: this is an ablation matrix file ([matrix]), not an experiment: run it with `ablate matrix "
            "run m.toml` (or list its cells with `ablate matrix expand m.toml`)");
}

// A fuzzer kept in the suite: 400 mutations of the declared experiments (a fixed seed), each byte
// flipped, deleted, duplicated, a line dropped or swapped, or a TOML-ish token inserted. Every one either
// parses or fails with SpecError issues that say where and what: no other exception, no crash, no
// hang (each parse is bounded by the text's size), no issue without a message.
TEST(Spec, MutatedSpecsParseOrFailWithIssues) {
  std::vector<std::string> seeds;
  for (const char* name : {"tiny.toml", "nam56r-small-fast.toml", "nam56r-medium.toml"})
    seeds.push_back(slurp(fs::path(ABLATE_SOURCE_DIR) / "experiments" / name));
  const std::vector<std::string> tokens = {"=", "[", "]", "[[x]]", "\"", "'", "#", "\n", "= 1e999", "= -9223372036854775808",
                                           "= [", "= {", "= true", "model.", "[model.attention]", "\\u0000", "= \"\\x\""};
  ablate::base::SplitMix64 rng(20261127);
  const auto pick = [&](size_t n) { return static_cast<size_t>(rng.next() % std::max<size_t>(n, 1)); };
  int parsed = 0, refused = 0;
  for (int i = 0; i < 400; ++i) {
    std::string text = seeds[pick(seeds.size())];
    for (int edits = 1 + static_cast<int>(pick(4)); edits > 0; --edits) {
      const size_t at = pick(text.size());
      switch (pick(6)) {
        case 0: text[at] = static_cast<char>(rng.next() & 0xff); break;
        case 1: text.erase(at, 1 + pick(8)); break;
        case 2: text.insert(at, text.substr(at, 1 + pick(16))); break;
        case 3: text.insert(at, tokens[pick(tokens.size())]); break;
        case 4: {  // drop the line at `at`
          const size_t begin = text.rfind('\n', at), end = text.find('\n', at);
          if (begin != std::string::npos && end != std::string::npos) text.erase(begin, end - begin);
          break;
        }
        default: {  // swap two halves around a newline
          const size_t nl = text.find('\n', at);
          if (nl != std::string::npos) text = text.substr(nl + 1) + "\n" + text.substr(0, nl);
        }
      }
    }
    SCOPED_TRACE("mutation " + std::to_string(i) + ":\n" + text.substr(0, 400));
    try {
      parse_spec_string(text, "fuzz.toml");
      ++parsed;
    } catch (const SpecError& e) {
      ++refused;
      ASSERT_FALSE(e.issues().empty());
      for (const auto& issue : e.issues()) {
        EXPECT_FALSE(issue.message.empty());
        EXPECT_EQ(issue.where.rfind("fuzz.toml", 0), 0u) << issue.where << ": " << issue.message;
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << "neither parsed nor a SpecError: " << e.what();
    }
  }
  EXPECT_GT(refused, 100);  // the mutations do reach the error paths
  EXPECT_GT(parsed, 0);     // and some leave a valid spec (comments, whitespace, values in range)
}
