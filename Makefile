# Tessera: the two commands are `make run` (the app) and `make test`; see README.md.
# Everything here wraps CMake + Ninja; scripts/install-deps.sh brings the Debian packages.

BUILD_DIR      ?= build
ASAN_BUILD_DIR ?= build-asan
FUZZ_BUILD_DIR ?= build-fuzz
FUZZ_SECONDS   ?= 60
BUILD_TYPE     ?= Release
JOBS           ?= $(shell nproc)

CCACHE := $(shell command -v ccache 2>/dev/null)
ifneq ($(CCACHE),)
  LAUNCHER := -DCMAKE_CXX_COMPILER_LAUNCHER=$(CCACHE)
  # Clones in other folders (CI) hit the same cache.
  export CCACHE_BASEDIR := $(CURDIR)
  export CCACHE_NOHASHDIR := true
endif

# Installed under /usr (make package), so the binaries look for their helper in /usr/libexec/tessera.
CMAKE_FLAGS := -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DCMAKE_INSTALL_PREFIX=/usr $(LAUNCHER) $(EXTRA_CMAKE_FLAGS)
DEPS_STAMP  := $(BUILD_DIR)/.deps-installed

.PHONY: all deps build test test-asan test-package package fuzz chaos bench train-local demo demo-lm run screenshots format check-format tidy clean

all: build

# Runs the idempotent installer once per build folder (and again when it changes).
$(DEPS_STAMP): scripts/install-deps.sh tests/browser/package-lock.json
	./scripts/install-deps.sh
	@mkdir -p $(BUILD_DIR) && touch $@

deps:
	./scripts/install-deps.sh

$(BUILD_DIR)/build.ninja: $(DEPS_STAMP) CMakeLists.txt
	cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS)

build: $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

# Builds with warnings as errors, runs every test (the layering check is one of them), the
# format check, and the core and net tests again under the sanitizers.
test: $(DEPS_STAMP)
	cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS) -DTESSERA_WERROR=ON
	cmake --build $(BUILD_DIR) -j $(JOBS)
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)
	./scripts/check-format.sh
	$(MAKE) --no-print-directory test-package
	$(MAKE) --no-print-directory test-asan
	$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=10

# The libFuzzer targets (fuzz/), built with clang and the sanitizers, each run FUZZ_SECONDS.
fuzz: $(DEPS_STAMP)
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(LAUNCHER) \
	    -DTESSERA_FUZZ=ON -DTESSERA_WITH_TORCH=OFF -DTESSERA_WITH_GUI=OFF -DTESSERA_BUILD_TESTS=OFF
	cmake --build $(FUZZ_BUILD_DIR) -j $(JOBS) --target fuzz_decoder fuzz_jobspec fuzz_settings fuzz_blobchunks fuzz_modelarchive fuzz_codedrange fuzz_manifest fuzz_inferencelines fuzz_stageinputs fuzz_httprequest fuzz_tensorpickle fuzz_tensorfile fuzz_blobtorrent
	./scripts/fuzz.sh $(FUZZ_BUILD_DIR) $(FUZZ_SECONDS)

# A job on a broker and three nodes through 20 random kill -9s (scripts/chaos.sh); a short run
# of it is a test.
chaos: build
	./scripts/chaos.sh $(BUILD_DIR) 20

# tessera_<version>_amd64.deb in the build folder (installer/).
package: build
	cd $(BUILD_DIR) && cpack -G DEB

# Builds the package, checks it (contents, lintian), installs it on this machine, runs what it
# installed, verifies its systemd units and purges it, leaving nothing behind.
test-package: package
	./tests/installer/test-package.sh $(BUILD_DIR)

# AddressSanitizer + UndefinedBehaviorSanitizer over the core and net tests (LibTorch is not
# built with sanitizers, so compute and the GUI are left out of this build).
test-asan: $(DEPS_STAMP)
	cmake -S . -B $(ASAN_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Debug $(LAUNCHER) \
	    -DTESSERA_SANITIZE=ON -DTESSERA_WERROR=ON -DTESSERA_WITH_TORCH=OFF -DTESSERA_WITH_GUI=OFF
	cmake --build $(ASAN_BUILD_DIR) -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    ctest --test-dir $(ASAN_BUILD_DIR) --output-on-failure -j $(JOBS)

# Trains the example Fashion-MNIST job on this machine (the single-machine baseline).
train-local: build
	$(BUILD_DIR)/app/tessera-node train-local examples/jobs/fashion-mnist-mlp.json --out $(BUILD_DIR)/train-local

# The desktop app: a tray icon and its dashboard; with no broker configured it starts a local one.
run: build
	$(BUILD_DIR)/app/tessera --show

# Every tab of the dashboard, with live data, as PNG files (docs/screenshots/).
# A fresh install of its own each time (settings and data under $(BUILD_DIR)/screenshots/), so
# the pictures show a first run and nothing of yours.
screenshots: build
	rm -rf $(BUILD_DIR)/screenshots && mkdir -p $(BUILD_DIR)/screenshots
	printf '[Node]\nDataDirectory=%s\n' "$(abspath $(BUILD_DIR))/screenshots/data" > $(BUILD_DIR)/screenshots/tessera.ini
	$(BUILD_DIR)/app/tessera --screenshot docs/screenshots --screenshot-after 6 \
		--config $(BUILD_DIR)/screenshots/tessera.ini
	# The web dashboard (docs/CONTROL.md) of a node paused mid-shard, in Chromium, wide and phone-sized.
	QT_QPA_PLATFORM=offscreen TESSERA_SCREENSHOT_DIR=$(abspath docs/screenshots) \
		$(BUILD_DIR)/tests/e2e/tst_control aDashboardInChromiumShowsAndDrivesTheNode
	# The app's Machines tab with three nodes (under Xvfb, as tst_desktop runs).
	TESSERA_SCREENSHOT_DIR=$(abspath docs/screenshots) TESSERA_COMPUTE_WORKER=$(abspath $(BUILD_DIR))/app/tessera-compute \
		TESSERA_BROKER_PROGRAM=$(abspath $(BUILD_DIR))/app/tessera-broker \
		tests/app/under-x.sh $(BUILD_DIR)/tests/app/tst_desktop theMachinesTabWatchesAndDrivesOtherNodes

# A broker and two nodes on this machine train the example job over ZeroMQ, then stop.
demo: build
	./scripts/demo.sh $(BUILD_DIR)

demo-lm: build
	./scripts/demo-lm.sh $(BUILD_DIR)

# Every benchmark, each a ratio against a baseline measured in the same run, and the example job's
# accuracy on one machine and on a broker with three nodes; writes docs/PERFORMANCE.md and
# docs/accuracy-per-round.svg (bench/run.sh, bench/report.py). About 10 minutes.
bench: build
	./bench/run.sh $(BUILD_DIR)

format:
	./scripts/check-format.sh --fix

check-format:
	./scripts/check-format.sh

tidy: build
	run-clang-tidy -p $(BUILD_DIR) -quiet '(core|compute|net|ui|app)/'

clean:
	rm -rf $(BUILD_DIR) $(ASAN_BUILD_DIR)
