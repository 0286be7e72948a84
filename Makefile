# The two commands of README.md. Everything is idempotent: a second `make test` rebuilds nothing.
#   make demo   install what is missing, build, run the default experiment, write a receipt and a report
#   make test   install what is missing, build, run the whole test suite
#   make build  install what is missing and build
BUILD ?= build
DB ?= receipts.db
JOBS ?= $(shell nproc)
export CCACHE_DIR ?= $(HOME)/.cache/ablate/ccache
# Fresh clones at other paths hit the same cache entries.
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := true

.PHONY: all build test demo bootstrap clean
all: build

$(BUILD)/.torch-prefix: scripts/bootstrap.sh scripts/hta-venv.sh scripts/hta-requirements.txt
	@mkdir -p $(BUILD)
	@scripts/bootstrap.sh > $(BUILD)/.torch-prefix.tmp && mv $(BUILD)/.torch-prefix.tmp $(BUILD)/.torch-prefix

bootstrap: $(BUILD)/.torch-prefix

$(BUILD)/build.ninja: $(BUILD)/.torch-prefix
	cmake -G Ninja -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$$(cat $(BUILD)/.torch-prefix)" > $(BUILD)/configure.log 2>&1 || (cat $(BUILD)/configure.log; exit 1)

build: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

demo: build
	scripts/demo.sh $(BUILD) $(DB)

clean:
	rm -rf $(BUILD)
