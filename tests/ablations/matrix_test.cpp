// tests/ablations/matrix_test.cpp: matrix files. Parsing, every error with file:line:column, both
// dotted-key spellings, one-at-a-time, factorial and zip expansion (counts, names, baseline values),
// interleaved run order, seeds, the identity JSON, spec errors mapped back to matrix lines, the command
// line's changes (--set, --axis, --name) and their errors, and every example matrix in ablations/
// validating against its base experiment.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "ablations/matrix.h"
#include "spec/spec.h"
#include "base/remove_tree.h"

namespace fs = std::filesystem;
using namespace ablate::ablations;
using ablate::spec::SpecError;

namespace {

const std::string kTiny = std::string(ABLATE_SOURCE_DIR) + "/experiments/tiny.toml";

// The first issue of a failing parse as the CLI prints it ("where: error: message").
std::string first_error(const std::string& text) {
  try {
    parse_matrix_string(text, "m.toml");
  } catch (const SpecError& e) {
    return e.issues().at(0).where + ": error: " + e.issues().at(0).message;
  }
  return "(parsed without error)";
}

std::vector<std::string> names(const std::vector<Cell>& cells) {
  std::vector<std::string> out;
  for (const auto& c : cells) out.push_back(c.name);
  return out;
}

std::vector<std::string> set_args(const std::vector<Override>& overrides) {
  std::vector<std::string> out;
  for (const auto& o : overrides) out.push_back(o.set_arg());
  return out;
}

// Command-line changes (named, not designated initializers: GCC 12 warns on any member left out).
MatrixOverrides with_repeats(int64_t n) {
  MatrixOverrides o;
  o.repeats = n;
  return o;
}
MatrixOverrides with_changes(std::vector<std::string> set, std::vector<std::string> axes = {}) {
  MatrixOverrides o;
  o.set = std::move(set);
  o.axes = std::move(axes);
  return o;
}
MatrixOverrides with_name(std::string name) {
  MatrixOverrides o;
  o.name = std::move(name);
  return o;
}

class MatrixFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ablate-matrix-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { ablate::base::remove_tree(dir_); }
  std::string write(const std::string& text) {
    const fs::path p = dir_ / "m.toml";
    std::ofstream(p) << text;
    return p.string();
  }
  fs::path dir_;
};

}  // namespace

TEST(Matrix, ParsesEveryKey) {
  const auto m = parse_matrix_string(R"([matrix]
name = "t"
base = "../experiments/tiny.toml"
mode = "factorial"
repeats = 2
seeds = [7, 8]
[axes]
"backends.loss" = ["reference", "chunked"]
train.lr = [1e-3, 3.0, 2]
[set]
"train.steps" = 12
experiment.tags = ["a", "b"]
"experiment.name" = "say \"hi\""
)",
                                     "ablations/t.toml");
  EXPECT_EQ(m.name, "t");
  EXPECT_EQ(m.base_path, "experiments/tiny.toml");  // relative to the matrix file's folder
  EXPECT_EQ(m.mode, Mode::factorial);
  EXPECT_EQ(m.repeats, 2);
  ASSERT_EQ(m.seeds.size(), 2u);
  EXPECT_EQ(m.seeds[1].set_arg(), "experiment.seed=8");
  ASSERT_EQ(m.axes.size(), 2u);  // file order, whichever key spelling
  EXPECT_EQ(m.axes[0].key, "backends.loss");
  EXPECT_EQ(m.axes[0].values[1].set_arg(), "backends.loss=\"chunked\"");
  EXPECT_EQ(m.axes[0].values[1].label, "chunked");
  EXPECT_EQ(m.axes[0].values[1].where, "ablations/t.toml:8:33");
  EXPECT_EQ(m.axes[1].key, "train.lr");
  EXPECT_EQ(set_args(m.axes[1].values), (std::vector<std::string>{"train.lr=0.001", "train.lr=3.0", "train.lr=2"}));
  EXPECT_EQ(set_args(m.fixed), (std::vector<std::string>{"train.steps=12", "experiment.tags=[\"a\", \"b\"]",
                                                         "experiment.name=\"say \\\"hi\\\"\""}));
}

TEST(Matrix, DefaultsAndRepeatsOverride) {
  const std::string text = "[matrix]\nname = \"d\"\nbase = \"/abs/x.toml\"\n";
  const auto m = parse_matrix_string(text, "d.toml");
  EXPECT_EQ(m.mode, Mode::one_at_a_time);
  EXPECT_EQ(m.repeats, 3);
  EXPECT_EQ(m.base_path, "/abs/x.toml");
  EXPECT_EQ(parse_matrix_string(text, "d.toml", with_repeats(1)).repeats, 1);
  EXPECT_THROW(parse_matrix_string(text, "d.toml", with_repeats(0)), SpecError);
}

TEST(Matrix, ErrorsNameFileLineColumn) {
  const std::string head = "[matrix]\nname = \"e\"\nbase = \"b.toml\"\n";
  EXPECT_EQ(first_error(head + "reps = 3\n"),
            "m.toml:4:1: error: unknown key 'reps' in [matrix]: known keys are name, base, mode, repeats, seeds");
  EXPECT_EQ(first_error(head + "repeats = \"3\"\n"), "m.toml:4:11: error: matrix.repeats: expected an integer >= 1, got a string");
  EXPECT_EQ(first_error(head + "repeats = 0\n"), "m.toml:4:11: error: matrix.repeats: expected an integer >= 1, got 0");
  EXPECT_EQ(first_error(head + "mode = \"grid\"\n"),
            "m.toml:4:8: error: matrix.mode: expected \"one-at-a-time\", \"factorial\" or \"zip\", got \"grid\"");
  EXPECT_EQ(first_error(head + "seeds = [1, -2, 3]\n"), "m.toml:4:13: error: matrix.seeds: expected integers >= 0, got -2");
  EXPECT_EQ(first_error(head + "seeds = [1]\n"), "m.toml:4:10: error: matrix.seeds has 1 seeds for 3 repeats: give one seed per repeat");
  EXPECT_EQ(first_error(head + "[axis]\n"), "m.toml:4:2: error: unknown section [axis]: a matrix file has [matrix], [axes] and [set]");
  EXPECT_EQ(first_error(head + "[axes]\n\"train.steps\" = 5\n"),
            "m.toml:5:17: error: axes.train.steps: expected a non-empty array of values, got an integer");
  EXPECT_EQ(first_error(head + "[axes]\n\"train.steps\" = []\n"),
            "m.toml:5:17: error: axes.train.steps: expected a non-empty array of values, got []");
  EXPECT_EQ(first_error(head + "[axes]\n\"train.steps\" = [5, 6, 5]\n"), "m.toml:5:24: error: axes.train.steps: duplicate value 5");
  EXPECT_EQ(first_error(head + "[axes]\n\"train.steps\" = [[5]]\n"),
            "m.toml:5:18: error: axes.train.steps: values must be strings, numbers or booleans, got an array");
  EXPECT_EQ(first_error(head + "[axes]\nsteps = [1, 2]\n"),
            "m.toml:5:1: error: axis 'steps' is not a section.key path (for example \"backends.loss\")");
  EXPECT_EQ(first_error(head + "[set]\n\"train.steps\" = 5\n[axes]\n\"train.steps\" = [1, 2]\n"),
            "m.toml:7:18: error: 'train.steps' is already set at m.toml:5:17: set each key in one place");
  EXPECT_EQ(first_error("[matrix]\nname = \"e\"\n"), "m.toml:1:1: error: [matrix] needs a base experiment (base = \"experiments/x.toml\")");
  EXPECT_EQ(first_error("[set]\n\"a.b\" = 1\n"), "m.toml: error: missing [matrix] section (name, base, mode, repeats)");
  const auto malformed = first_error(head + "name = \"x\"");
  EXPECT_EQ(malformed.rfind("m.toml:4:8: error: ", 0), 0u) << malformed;
  EXPECT_NE(malformed.find("(malformed TOML)"), std::string::npos) << malformed;
}

TEST(Matrix, OneAtATimeIsBaselinePlusEachOtherValue) {
  const auto m = parse_matrix_string(R"([matrix]
name = "o"
base = "b.toml"
[axes]
"backends.attention" = ["reference", "sdpa_flash", "sdpa_cudnn"]
"backends.loss" = ["reference", "chunked"]
"train.steps" = [20]
)",
                                     "o.toml");
  const auto cells = expand(m);
  EXPECT_EQ(names(cells), (std::vector<std::string>{"baseline", "backends.attention=sdpa_flash", "backends.attention=sdpa_cudnn",
                                                    "backends.loss=chunked"}));
  // Every cell pins every axis: the baseline is the first values even where the base spec differs.
  EXPECT_EQ(set_args(cells[0].overrides), (std::vector<std::string>{"backends.attention=\"reference\"",
                                                                    "backends.loss=\"reference\"", "train.steps=20"}));
  EXPECT_EQ(set_args(cells[3].overrides), (std::vector<std::string>{"backends.attention=\"reference\"",
                                                                    "backends.loss=\"chunked\"", "train.steps=20"}));
}

TEST(Matrix, FactorialIsTheCartesianProductLastAxisFastest) {
  const auto m = parse_matrix_string(R"([matrix]
name = "f"
base = "b.toml"
mode = "factorial"
[axes]
"backends.attention" = ["reference", "sdpa_flash", "sdpa_cudnn"]
"backends.loss" = ["reference", "chunked"]
)",
                                     "f.toml");
  const auto cells = expand(m);
  ASSERT_EQ(cells.size(), 6u);
  EXPECT_EQ(cells[0].name, "backends.attention=reference,backends.loss=reference");
  EXPECT_EQ(cells[1].name, "backends.attention=reference,backends.loss=chunked");
  EXPECT_EQ(cells[5].name, "backends.attention=sdpa_cudnn,backends.loss=chunked");
  // No axes: one cell, the base spec with [set] only.
  const auto bare = expand(parse_matrix_string("[matrix]\nname = \"b\"\nbase = \"b.toml\"\nmode = \"factorial\"\n", "b.toml"));
  EXPECT_EQ(names(bare), std::vector<std::string>{"baseline"});
}

TEST(Matrix, ZipPairsTheAxesValueByValue) {
  const std::string text = R"([matrix]
name = "z"
base = "b.toml"
mode = "zip"
[axes]
"distributed.nproc" = [1, 2, 4]
"distributed.sharding" = ["none", "optimizer", "optimizer"]
)";
  const auto m = parse_matrix_string(text, "z.toml");
  EXPECT_EQ(to_string(m.mode), "zip");
  const auto cells = expand(m);
  EXPECT_EQ(names(cells), (std::vector<std::string>{"distributed.nproc=1,distributed.sharding=none",
                                                    "distributed.nproc=2,distributed.sharding=optimizer",
                                                    "distributed.nproc=4,distributed.sharding=optimizer"}));
  EXPECT_EQ(set_args(cells[2].overrides), (std::vector<std::string>{"distributed.nproc=4", "distributed.sharding=\"optimizer\""}));
  // The command line narrows zipped axes together; one left at its old length is an error at the argument.
  const auto narrowed = parse_matrix_string(text, "z.toml", with_changes({}, {"distributed.nproc=[1, 2]",
                                                                               "distributed.sharding=[\"none\", \"optimizer\"]"}));
  EXPECT_EQ(expand(narrowed).size(), 2u);
  try {
    parse_matrix_string(text, "z.toml", with_changes({}, {"distributed.nproc=[1, 2]"}));
    ADD_FAILURE() << "axes of different lengths cannot be zipped";
  } catch (const SpecError& e) {
    ASSERT_EQ(e.issues().size(), 1u);
    EXPECT_EQ(e.issues()[0].where, "z.toml:7:27");
    EXPECT_EQ(e.issues()[0].message, "matrix.mode = \"zip\" pairs the axes value by value, and 'distributed.sharding' has 3 values "
                                     "where 'distributed.nproc' has 2: give every axis the same number of values");
  }
}

TEST(Matrix, ZipRefusesAxesOfUnequalLengthAndCellsGivenTwice) {
  EXPECT_EQ(first_error("[matrix]\nname = \"z\"\nbase = \"b.toml\"\nmode = \"zip\"\n[axes]\n"
                        "\"distributed.nproc\" = [1, 2, 4]\n\"distributed.sharding\" = [\"none\", \"optimizer\"]\n"),
            "m.toml:7:27: error: matrix.mode = \"zip\" pairs the axes value by value, and 'distributed.sharding' has 2 values "
            "where 'distributed.nproc' has 3: give every axis the same number of values");
  EXPECT_EQ(first_error("[matrix]\nname = \"z\"\nbase = \"b.toml\"\nmode = \"zip\"\n[axes]\n"
                        "\"distributed.nproc\" = [1, 2, 2]\n\"distributed.sharding\" = [\"none\", \"full\", \"full\"]\n"),
            "m.toml:6:30: error: matrix.mode = \"zip\": cell 2 has the values of cell 1 (2, \"full\"): change or remove one");
  // One axis: a repeated value is a repeated cell.
  EXPECT_EQ(first_error("[matrix]\nname = \"z\"\nbase = \"b.toml\"\nmode = \"zip\"\n[axes]\n\"train.steps\" = [1, 1]\n"),
            "m.toml:6:21: error: matrix.mode = \"zip\": cell 1 has the values of cell 0 (1): change or remove one");
  // Outside zip a value given twice in one axis stays an error of that axis.
  EXPECT_EQ(first_error("[matrix]\nname = \"z\"\nbase = \"b.toml\"\nmode = \"factorial\"\n[axes]\n\"train.steps\" = [1, 1]\n"),
            "m.toml:6:21: error: axes.train.steps: duplicate value 1");
}

TEST(Matrix, RunOrderInterleavesRepeatsAndSeedsFollowTheRepeat) {
  Matrix m{parse_matrix_string("[matrix]\nname = \"r\"\nbase = \"b.toml\"\nrepeats = 2\nseeds = [11, 12, 13]\n"
                               "[axes]\n\"backends.loss\" = [\"reference\", \"chunked\"]\n\"train.steps\" = [1, 2]\n",
                               "r.toml"),
           {}};
  m.cells = expand(m.spec);
  ASSERT_EQ(m.cells.size(), 3u);
  EXPECT_EQ(run_order(m), (std::vector<Slot>{{0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1}, {2, 1}}));
  const auto r1 = set_args(run_overrides(m.spec, m.cells[2], 1));
  EXPECT_EQ(r1, (std::vector<std::string>{"backends.loss=\"reference\"", "train.steps=2", "experiment.seed=12"}));
}

TEST_F(MatrixFile, LoadValidatesEveryCellAndPointsAtTheMatrixLine) {
  const auto path = write("[matrix]\nname = \"v\"\nbase = \"" + kTiny +
                          "\"\n[axes]\n\"backends.loss\" = [\"reference\", \"nope\"]\n[set]\n\"train.steps\" = 20\n");
  try {
    load_matrix(path);
    FAIL() << "an unknown backend in a cell must fail the whole matrix";
  } catch (const SpecError& e) {
    ASSERT_EQ(e.issues().size(), 1u);
    EXPECT_EQ(e.issues()[0].where, path + ":5:33");
    EXPECT_NE(e.issues()[0].message.find("cell 'backends.loss=nope'"), std::string::npos) << e.issues()[0].message;
    EXPECT_NE(e.issues()[0].message.find("unknown backend \"nope\""), std::string::npos) << e.issues()[0].message;
  }
  // A bad [set] value fails every cell but is reported once.
  const auto bad_set = write("[matrix]\nname = \"v\"\nbase = \"" + kTiny +
                             "\"\n[axes]\n\"backends.loss\" = [\"reference\", \"chunked\"]\n[set]\n\"train.stpes\" = 5\n");
  try {
    load_matrix(bad_set);
    FAIL() << "an unknown key in [set] must fail";
  } catch (const SpecError& e) {
    ASSERT_EQ(e.issues().size(), 1u);
    EXPECT_EQ(e.issues()[0].where, bad_set + ":7:17");
    // The matrix line is where the value came from: no account of the internal --set that carried it.
    EXPECT_EQ(e.issues()[0].message.find("--set argument"), std::string::npos) << e.issues()[0].message;
    EXPECT_NE(e.issues()[0].message.find("unknown key 'stpes' in [train]"), std::string::npos) << e.issues()[0].message;
  }
  // An experiment file given as a matrix: one error that says which kind of file it is.
  try {
    load_matrix(kTiny);
    FAIL() << "an experiment file is not a matrix";
  } catch (const SpecError& e) {
    ASSERT_EQ(e.issues().size(), 1u);
    EXPECT_NE(e.issues()[0].message.find("this is an experiment file ([experiment]), not an ablation matrix: run it with "
                                         "`ablate run " + kTiny + "`"),
              std::string::npos)
        << e.issues()[0].message;
  }
}

TEST_F(MatrixFile, IdentityIgnoresRepeatsButNotCellsOrBase) {
  const std::string head = "[matrix]\nname = \"i\"\nbase = \"" + kTiny + "\"\n";
  const auto path = write(head + "repeats = 3\n[axes]\n\"backends.loss\" = [\"reference\", \"chunked\"]\n");
  const auto three = load_matrix(path), one = load_matrix(path, with_repeats(1));
  EXPECT_EQ(identity_json(three), identity_json(one));
  EXPECT_EQ(identity_json(three)["cells"].size(), 2u);
  EXPECT_NE(three.cells[0].spec_hash, three.cells[1].spec_hash);
  EXPECT_EQ(three.cells[0].spec_hash.size(), 64u);
  const auto other = load_matrix(write(head + "[axes]\n\"backends.loss\" = [\"chunked\", \"reference\"]\n"));
  EXPECT_NE(identity_json(three), identity_json(other));
}

// The first issue of a parse with command-line changes, as the CLI prints it.
std::string first_override_error(const MatrixOverrides& overrides) {
  const std::string text = "[matrix]\nname = \"o\"\nbase = \"b.toml\"\n[axes]\n\"backends.loss\" = [\"reference\", \"chunked\"]\n"
                           "[set]\n\"train.steps\" = 12\n";
  try {
    parse_matrix_string(text, "m.toml", overrides);
  } catch (const SpecError& e) {
    return e.issues().at(0).where + ": error: " + e.issues().at(0).message;
  }
  return "(parsed without error)";
}

TEST(Matrix, CommandLineSetsAxesAndNameChangeTheFileAndAreRecorded) {
  const std::string text = "[matrix]\nname = \"o\"\nbase = \"b.toml\"\nmode = \"factorial\"\n[axes]\n"
                           "\"distributed.expert_parallel\" = [1, 4]\n\"distributed.param_dtype\" = [\"fp32\", \"bf16\"]\n"
                           "[set]\n\"distributed.nproc\" = 4\n\"train.steps\" = 16\n\"train.memory_limit_gib\" = 77\n";
  const auto file = parse_matrix_string(text, "m.toml");
  EXPECT_TRUE(file.command_line.empty());
  // A 2-GPU variant: nproc replaced in place, a bare word read as a string, an axis narrowed, a fixed key
  // turned into an axis, a new axis appended.
  const auto m = parse_matrix_string(text, "m.toml",
                                     [] {
                                       auto o = with_changes({"distributed.nproc=2", "distributed.sharding=full"},
                                                             {"distributed.expert_parallel=[1, 2]", "train.memory_limit_gib=[0, 77]",
                                                              "model.moe.capacity_factor=[1.25]"});
                                       o.name = "o_2gpu";
                                       return o;
                                     }());
  EXPECT_EQ(m.name, "o_2gpu");
  EXPECT_EQ(set_args(m.fixed), (std::vector<std::string>{"distributed.nproc=2", "train.steps=16", "distributed.sharding=\"full\""}));
  EXPECT_EQ(m.fixed[0].where, "--set distributed.nproc=2");
  EXPECT_EQ(m.fixed[1].where, "m.toml:10:17") << "the file's own keys keep their lines";
  ASSERT_EQ(m.axes.size(), 4u);
  EXPECT_EQ(set_args(m.axes[0].values), (std::vector<std::string>{"distributed.expert_parallel=1", "distributed.expert_parallel=2"}));
  EXPECT_EQ(m.axes[0].values[1].where, "--axis distributed.expert_parallel=[1, 2]");
  EXPECT_EQ(m.axes[1].values.size(), 2u) << "an axis the command line leaves alone stays";
  EXPECT_EQ(set_args(m.axes[2].values), (std::vector<std::string>{"train.memory_limit_gib=0", "train.memory_limit_gib=77"}));
  EXPECT_EQ(set_args(m.axes[3].values), (std::vector<std::string>{"model.moe.capacity_factor=1.25"}));
  EXPECT_EQ(m.command_line, (std::vector<std::string>{"--name o_2gpu", "--axis distributed.expert_parallel=[1, 2]",
                                                      "--axis train.memory_limit_gib=[0, 77]", "--axis model.moe.capacity_factor=[1.25]",
                                                      "--set distributed.nproc=2", "--set distributed.sharding=full"}));
  EXPECT_EQ(expand(m).size(), 8u);
  EXPECT_EQ(expand(m)[1].name, "distributed.expert_parallel=1,distributed.param_dtype=fp32,train.memory_limit_gib=77,"
                               "model.moe.capacity_factor=1.25") << "a factorial cell names every axis";
}

TEST(Matrix, CommandLineChangesFailClosed) {
  EXPECT_EQ(first_override_error(with_changes({"backends.loss=\"chunked\""})),
            "--set backends.loss=\"chunked\": error: 'backends.loss' is an axis of this matrix (declared at m.toml:5:20): --set "
            "cannot fix it; run one value with --axis 'backends.loss=[VALUE]'");
  EXPECT_EQ(first_override_error(with_changes({"steps=3"})), "--set steps=3: error: expected section.key=VALUE (for example train.steps=20)");
  EXPECT_EQ(first_override_error(with_changes({"train.steps"})), "--set train.steps: error: expected section.key=VALUE (for example train.steps=20)");
  EXPECT_EQ(first_override_error(with_changes({}, {"backends.loss"})),
            "--axis backends.loss: error: expected section.key=[V1, V2, ...] (for example 'train.steps=[20, 40]')");
  EXPECT_EQ(first_override_error(with_changes({"train.steps=3", "train.steps=4"})),
            "--set train.steps=4: error: 'train.steps' is given twice on the command line: give each key once");
  EXPECT_EQ(first_override_error(with_changes({"train.steps=4"}, {"train.steps=[4, 8]"})),
            "--set train.steps=4: error: 'train.steps' is given twice on the command line: give each key once");
  EXPECT_EQ(first_override_error(with_changes({"a.b={ c = 1 }"})),
            "--set a.b={ c = 1 }: error: expected a string, number, boolean or array of them, got a table");
  EXPECT_EQ(first_override_error(with_changes({}, {"backends.loss=chunked"})),
            "--axis backends.loss=chunked: error: expected a non-empty TOML array of values, for example backends.loss=[1, 2] or "
            "backends.loss='[\"a\", \"b\"]'");
  EXPECT_EQ(first_override_error(with_changes({}, {"backends.loss=[]"})).substr(0, 46), "--axis backends.loss=[]: error: expected a non");
  EXPECT_EQ(first_override_error(with_changes({}, {"train.lr=[1, 1]"})), "--axis train.lr=[1, 1]: error: duplicate value 1");
  EXPECT_EQ(first_override_error(with_changes({}, {"train.lr=[[1], 2]"})),
            "--axis train.lr=[[1], 2]: error: values must be strings, numbers or booleans, got an array");
  EXPECT_EQ(first_override_error(with_name("")), "--name: error: expected a non-empty matrix name");
  EXPECT_EQ(first_override_error(with_changes({"train.steps=20"}, {"backends.loss=[\"chunked\"]"})), "(parsed without error)");
}

TEST_F(MatrixFile, CommandLineChangesAreValidatedAgainstTheBaseAndSplitTheIdentity) {
  const auto path = write("[matrix]\nname = \"c\"\nbase = \"" + kTiny +
                          "\"\n[axes]\n\"backends.loss\" = [\"reference\", \"chunked\"]\n[set]\n\"train.steps\" = 20\n");
  try {
    load_matrix(path, with_changes({"train.stpes=5"}));
    FAIL() << "an unknown key given on the command line must fail";
  } catch (const SpecError& e) {
    ASSERT_EQ(e.issues().size(), 1u);
    EXPECT_EQ(e.issues()[0].where, "--set train.stpes=5");
  }
  try {
    load_matrix(path, with_changes({}, {"backends.loss=[\"reference\", \"nope\"]"}));
    FAIL() << "an unknown backend given on the command line must fail";
  } catch (const SpecError& e) {
    ASSERT_EQ(e.issues().size(), 1u);
    EXPECT_EQ(e.issues()[0].where, "--axis backends.loss=[\"reference\", \"nope\"]");
    EXPECT_NE(e.issues()[0].message.find("unknown backend \"nope\""), std::string::npos) << e.issues()[0].message;
  }
  const auto file = load_matrix(path), changed = load_matrix(path, with_changes({"train.steps=10"}));
  EXPECT_FALSE(identity_json(file).contains("command_line")) << "a file run as it is keeps the identity it always had";
  EXPECT_NE(identity_json(file), identity_json(changed));
  EXPECT_EQ(identity_json(changed)["command_line"], nlohmann::json::array({"--set train.steps=10"}));
  EXPECT_NE(file.cells[0].spec_hash, changed.cells[0].spec_hash);
  EXPECT_NE(describe(changed).find("changed on the command line: --set train.steps=10\n"), std::string::npos) << describe(changed);
  // The same effective matrix written in the file is still another identity: the record says where it came from.
  const auto written = load_matrix(write("[matrix]\nname = \"c\"\nbase = \"" + kTiny +
                                         "\"\n[axes]\n\"backends.loss\" = [\"reference\", \"chunked\"]\n[set]\n\"train.steps\" = 10\n"));
  EXPECT_EQ(written.cells[0].spec_hash, changed.cells[0].spec_hash);
  EXPECT_NE(identity_json(written), identity_json(changed));
}

TEST(Matrix, EveryExampleMatrixValidates) {
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(ABLATE_SOURCE_DIR) / "ablations")) {
    if (entry.path().extension() != ".toml") continue;
    SCOPED_TRACE(entry.path().string());
    try {
      const auto m = load_matrix(entry.path().string());
      EXPECT_GE(m.cells.size(), 2u);
      EXPECT_GE(m.spec.repeats, 3) << "fewer than 3 repeats a side is reported as unreliable";
    } catch (const SpecError& e) {
      ADD_FAILURE() << e.what();
    }
    ++checked;
  }
  EXPECT_GE(checked, 2);
}

TEST(Matrix, DescribeListsCellsAndTheInterleavedOrder) {
  const auto m = load_matrix(std::string(ABLATE_SOURCE_DIR) + "/ablations/tiny_cpu.toml", with_repeats(2));
  const auto text = describe(m);
  EXPECT_NE(text.find("2 cells x 2 repeats = 4 runs"), std::string::npos) << text;
  EXPECT_NE(text.find("r0: baseline backends.loss=chunked\n  r1: baseline backends.loss=chunked\n"), std::string::npos) << text;
}
