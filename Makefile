# cutout: the commands README.md names. `make run` serves, `make test` tests.
.PHONY: planned-gains test-clients test-integrations test-unit check lint-sources test-models binfmt test-board test-tiny-http run test models onnxruntime quantize bench bench-store eval build lint e2e unit-check aarch64 aarch64-tests test-aarch64 deb deb-arm64 test-deb deny soak fuzz clean test-vm

CARGO ?= cargo
# Cargo for the x86 builds of the tests: the workspace's own crates compiled
# by clippy's driver (.ci/clippy-driver), which lints them as `cargo clippy`
# does, warnings denied, as it compiles them; so the dependencies are built
# once for lints and tests, not also checked (cold here: 510 s and 1,001
# CPU-s, against 580 s and 1,126 for clippy's check build and the test build).
# Cargo keeps these artifacts apart from a plain build's. The driver leaves
# out MIR optimisations and the debug build's alignment and null checks on
# raw pointers (the workspace dereferences one, in a test; the aarch64 tests
# keep those checks).
LINTED := env RUSTC_WORKSPACE_WRAPPER=$(CURDIR)/.ci/clippy-driver $(CARGO)
# 64-bit Raspberry Pi OS, built without Docker: Debian's rustc-web has an
# aarch64 std (rustup's toolchain here cannot add one); the linker and the
# qemu test runner are set in .cargo/config.toml. Its own target dir keeps
# the two compilers' artifacts apart.
AARCH64 := aarch64-unknown-linux-gnu
ARM := RUSTC=/usr/bin/rustc CARGO_TARGET_DIR=target/aarch64

run: models
	$(CARGO) build --release
	./target/release/cutout serve --demo

# Pinned model weights, sha256-checked, and each prepared for each engine
# by models/prepare.py (models/manifest.toml).
models:
	python3 models/fetch.py

# ONNX Runtime's library for `engine = "onnxruntime"`, from its pinned PyPI
# wheel, sha256-checked (models/manifest.toml [onnxruntime]).
onnxruntime:
	python3 models/fetch.py onnxruntime

# IS-Net and MODNet in int8 (`--model isnet-int8`, `modnet-int8`), made by
# models/quantize.py with pinned tools and checked against the manifest's
# sha256. About a minute and 6 GB of memory: make them on a build machine and
# copy them to the appliance's models directory.
quantize: models
	python3 models/fetch.py isnet-int8 modnet-int8

build:
	$(CARGO) build --release

# cutout against rembg and photobooth-app on the same models and images,
# side by side (bench/bench.py; about 40 minutes). Results: target/bench/.
bench: models onnxruntime quantize
	$(CARGO) build --release
	python3 bench/bench.py $(BENCH_ARGS)

# Each of crates/tract-planned's passes' gain on each model on tract: a run
# with all of them against one with each left out (bench/planned_gains.py;
# BENCHMARKS.md, "tract-planned: each operator's gain"). About 15 minutes.
planned-gains: models quantize
	$(CARGO) build --release
	python3 bench/planned_gains.py $(GAINS_ARGS)

# The shared store's part of a call (admit + charge), SQLite against
# PostgreSQL on loopback, side by side (examples/store_bench.rs; BENCHMARKS.md).
bench-store:
	$(CARGO) run --release --example store_bench

# Cut-out quality on the four sets of ../shared/eval/dev next to the peers'
# reference figures, sets worse than the best peer flagged (bench/eval.py;
# about 40 minutes, 12 for EVAL_ARGS="--models default"). Cut-outs: target/eval/.
eval: models onnxruntime quantize
	$(CARGO) build --release
	python3 bench/eval.py $(EVAL_ARGS)

# Formatting, clippy's lints on every target (the x86 test build runs them:
# LINTED) and fuzz's lock.
lint: lint-sources
	$(TEST_BUILD)

# What make lint checks without compiling; make test's build phase compiles
# with the lints. fuzz/ is a workspace of its own, with its own Cargo.lock: it
# must give cutout the versions it ships with (a fresh copy: cp Cargo.lock
# fuzz/, then `cargo metadata --manifest-path fuzz/Cargo.toml`).
lint-sources:
	@mkdir -p target
	$(CARGO) fmt --all -- --check
	$(CARGO) tree --locked -p cutout -e normal --prefix none > target/cutout-deps.txt
	$(CARGO) tree --locked --manifest-path fuzz/Cargo.toml -p cutout -e normal --prefix none | \
		diff -u target/cutout-deps.txt - || { echo "fuzz/Cargo.lock differs from Cargo.lock (above)"; exit 1; }

# The quick loop while changing code: formatting, lints, the unit tests and
# the API tests, less those that need root (disk.rs mounts a filesystem); the
# two that run for minutes by design run shorter: the soak for 30 s, the two
# engines compared on every 7th dev photo; and four API tests at a time, as
# most of their time is waiting on the servers they start. `make test` runs
# everything, two at a time.
check: models onnxruntime lint
	$(LINTED) test --workspace --lib
	SOAK_SECS=30 PARITY_EVERY_NTH=7 $(LINTED) test --workspace --test api -- --skip disk:: \
		--test-threads=4
	$(MAKE) test-models

# What it needs is installed first where missing (.ci/install: as root;
# another user is told what to install; tests/ci-install.sh checks both).
# Each phase's seconds and the cores it kept busy are printed as it ends,
# and all of them at the end (target/phases.txt). Each artifact is built
# once, in a phase of its own: the x86 test build (its binary also goes
# into the package and the e2e tests) and the aarch64 test build (its
# binary also runs on the emulated boards); tiny_http's own tests are the
# other.
# The aarch64 test build and the package's test run beside the x86 tests
# (.ci/beside), at the lowest priority: those wait on their servers and the
# booths' countdowns and leave about a fifth of the cores idle. The booth
# integrations leave most of them idle: they run while the aarch64 build
# goes on, or, where it has ended, beside the emulated boards.
PHASE := .ci/phase
BESIDE := .ci/beside
# The x86 test build: the unit and integration tests, the binary and the
# examples, linted as they compile.
TEST_BUILD = $(LINTED) test --workspace --no-run
test:
	@mkdir -p target && rm -f target/phases.txt
	@[ -z "$$CI_INSTALL_SECONDS" ] || printf '%-14s %5d s\n' install "$$CI_INSTALL_SECONDS" > target/phases.txt
	@[ -n "$$CI_INSTALL_SECONDS" ] || $(PHASE) install .ci/install
	$(PHASE) install-test sh tests/ci-install.sh
	$(PHASE) models $(MAKE) models onnxruntime quantize
	$(PHASE) lint $(MAKE) lint-sources
	$(PHASE) deny $(MAKE) deny
	$(BESIDE) aarch64-build $(MAKE) aarch64-tests
	$(PHASE) build $(TEST_BUILD)
	$(BESIDE) package $(MAKE) test-deb
	$(PHASE) unit $(MAKE) test-unit
	$(PHASE) api $(LINTED) test --workspace --test api
	$(PHASE) test-models $(MAKE) test-models
	$(PHASE) tiny_http $(MAKE) test-tiny-http
	$(PHASE) e2e $(MAKE) e2e
	$(PHASE) unit-check $(MAKE) unit-check
	test -e target/aarch64-build.status || $(PHASE) integrations $(MAKE) test-integrations
	$(BESIDE) --wait aarch64-build
	$(PHASE) aarch64 $(MAKE) test-aarch64
	$(BESIDE) boards $(MAKE) test-board
	grep -q '^integrations ' target/phases.txt || $(PHASE) integrations $(MAKE) test-integrations
	$(BESIDE) --wait boards
	$(BESIDE) --wait package
	@echo "seconds per phase (aarch64-build, boards and package ran beside the others):"; cat target/phases.txt

# The workspace crates' unit tests and doc tests (the API tests are `make test`'s
# next phase; tests/board.rs is `make test-board`).
test-unit:
	$(LINTED) test --workspace --lib --bins
	$(LINTED) test --workspace --doc

# models/prepare.py's rewrites on small graphs, in the pinned tools' venv;
# models/fetch.py's cache of what it made.
test-models:
	python3 models/test_prepare.py
	python3 models/test_fetch.py

# The vendored tiny_http's own tests (vendor/tiny_http/PATCHES.md), TLS on;
# its own target dir, as it is not a workspace member.
test-tiny-http:
	CARGO_TARGET_DIR=target/tiny-http $(CARGO) test --locked \
		--manifest-path vendor/tiny_http/Cargo.toml --features ssl-rustls --lib --tests

# The dashboard in headless Chromium (Debian's `chromium`); screenshots of
# every page land in target/e2e-artifacts. Then remove.bg's published Node
# client (npm `remove.bg`) and Python clients against the appliance.
# `cargo test --no-run` builds the same binary the API tests run (with the
# test build's features), so no second build of the dependencies.
e2e: models
	$(TEST_BUILD)
	cd tests/e2e && npm ci --no-audit --no-fund
	node tests/e2e/dashboard.mjs target/debug/cutout
	node tests/e2e/removebg-client.mjs target/debug/cutout
	$(MAKE) test-clients

# $(call pinned_venv,REQUIREMENTS,VENV): VENV made from REQUIREMENTS (exact
# versions, --no-deps), and made again only when the list changes.
pinned_venv = cmp -s $(1) $(2)/requirements.txt || { rm -rf $(2) && python3 -m venv $(2) && \
	$(2)/bin/pip install -q --disable-pip-version-check --no-deps -r $(1) && cp $(1) $(2)/; }

# Where the test venvs live: .ci/run keeps them outside the clone, at a path
# that stays (a venv's scripts name the path it was made at).
VENVS ?= target

# remove.bg's published Python clients from PyPI (tests/clients/requirements.txt,
# exact versions, --no-deps) against the appliance, unchanged but for its
# address: their calls, their typed errors, image_url from a server allowed.
# The venv in $(VENVS)/clients is made again when the list changes.
CLIENTS_VENV := $(VENVS)/clients
test-clients:
	@test -x $(TEST_APPLIANCE_BINARY) || $(TEST_BUILD)
	$(call pinned_venv,tests/clients/requirements.txt,$(CLIENTS_VENV))
	TEST_APPLIANCE_BINARY=$(TEST_APPLIANCE_BINARY) $(CLIENTS_VENV)/bin/python -P tests/clients/test_removebg_clients.py

# The booth programs' plugins (integrations/README.md) in the real programs
# from PyPI, photobooth-app 9.0.0 and pibooth 2.1.1, against the appliance
# over HTTPS with its fingerprint pinned, and pairing from discovery (DNS-SD
# on a port of the tests' own) to the first cut-out, with cutout-booth (the
# two plugins' shared discovery and pairing) and its own tests. Each
# program has its own venv in
# $(VENVS)/integrations/, made again when its integrations/*/requirements.txt
# (exact versions, installed with --no-deps) changes; about 45 s from none.
# `python -P`: the tests load the installed plugin, not the one beside them.
# The appliance is TEST_APPLIANCE_BINARY, the test build's binary (`make
# test` builds it in its build phase; built here only if missing).
TEST_APPLIANCE_BINARY ?= target/debug/cutout
test-integrations: models
	@test -x $(TEST_APPLIANCE_BINARY) || $(TEST_BUILD)
	for program in photobooth-app pibooth; do \
		venv=$(VENVS)/integrations/$$program; \
		$(call pinned_venv,integrations/$$program/requirements.txt,$$venv) || exit 1; \
		$$venv/bin/pip install -q --disable-pip-version-check --no-deps --no-build-isolation \
			--force-reinstall ./integrations/cutout-booth ./integrations/$$program && \
		$$venv/bin/python -P integrations/cutout-booth/test_cutout_booth.py && \
		TEST_APPLIANCE_BINARY=$(TEST_APPLIANCE_BINARY) $$venv/bin/python -P integrations/$$program/test_*.py || exit 1; \
	done

# systemd accepts the unit (with ExecStart pointed at a binary that exists
# here) and rates its hardening "OK" or better: exposure under 5.0.
unit-check:
	mkdir -p target
	sed 's#/usr/bin/cutout#$(CURDIR)/target/debug/cutout#' systemd/cutout.service > target/cutout.service
	systemd-analyze verify target/cutout.service
	systemd-analyze security --offline=yes --threshold=49 target/cutout.service \
		> target/unit-security.txt || { cat target/unit-security.txt; exit 1; }
	tail -1 target/unit-security.txt

aarch64:
	$(ARM) $(CARGO) build --release --target $(AARCH64)
	@echo "built target/aarch64/$(AARCH64)/release/cutout"

# What runs on aarch64, built once: the library's unit tests, which run
# under qemu-aarch64, and the binary (its commands and the threaded server
# without a model: tests/aarch64-smoke.sh, and the x86 API tests that start
# it), which test-board also runs with the models, both in Cargo.toml's
# `emulated` profile. The unit tests at its opt-level 2: at 0 a throttle
# flood ran 219 s emulated, against 18 optimised. The binary at opt-level 0
# (ARM_BINARY), so that the crate is optimised only once (at 0: 14.5 s
# against the unit tests' 92 at 2), and its own pixel passes on the boards'
# photos add about 2 s of emulated time; model work and resizing are in its
# dependencies, optimised as in the release but for tract's graph and
# loaders.
# `--test board` is what builds that binary (an integration test's build
# does), with the test build's features: a plain `cargo build` of it would
# compile tract-core, image and six more again without them. The API test
# crate, the largest, is not built for aarch64.
EMULATED := --target $(AARCH64) --profile emulated
ARM_TESTS := target/aarch64/$(AARCH64)/emulated
ARM_BINARY := --config 'profile.emulated.package.cutout.opt-level=0'
aarch64-tests: models
	$(ARM) $(CARGO) test --workspace --no-run $(EMULATED) --lib
	$(ARM) $(CARGO) $(ARM_BINARY) test --workspace --no-run $(EMULATED) --test board

test-aarch64: aarch64-tests binfmt
	@echo "not run under qemu-user: a_large_block_asks_for_huge_pages (qemu writes its own" \
		"/proc/self/smaps, whose VmFlags never show the huge-page advice);" \
		"the_test_photo_is_12_megapixels_under_the_upload_limit (it encodes 12 MP JPEGs" \
		"until one fits, SIMD emulated; the x86 run checks the same code)"
	$(ARM) $(CARGO) test --workspace --lib $(EMULATED) -- \
		--skip a_large_block_asks_for_huge_pages \
		--skip the_test_photo_is_12_megapixels_under_the_upload_limit
	sh tests/aarch64-smoke.sh $(ARM_TESTS)/cutout
	@echo "the int8 convolution's tests on the Pi cores: the A53 has no int8 dot" \
		"product (tract's SMLAL kernel, rows packed side by side), the A76 has SDOT" \
		"(four rows of a column side by side); qemu's default CPU ran both above"
	for cpu in cortex-a53 cortex-a76; do \
		CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64-static -cpu $$cpu" \
		$(ARM) $(CARGO) test --workspace --lib $(EMULATED) qconv || exit 1; \
	done
	@echo "the x86 API tests of connections against the aarch64 server (qemu's binfmt" \
		"handler runs it); TEST_UNDER_QEMU: the server's memory under 2,000" \
		"connections is not checked, as its RSS is qemu's"
	TEST_UNDER_QEMU=1 TEST_CUTOUT_BINARY=$(ARM_TESTS)/cutout $(LINTED) test --workspace --test api -- connections

# Tests that start an aarch64 program as a child process need the kernel to
# hand it to qemu: its binfmt handler, registered here (as root) if missing.
binfmt:
	@test -e /proc/sys/fs/binfmt_misc/qemu-aarch64 || { \
		mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc; \
		cat /usr/lib/binfmt.d/qemu-aarch64.conf > /proc/sys/fs/binfmt_misc/register; }

# The appliance on emulated Raspberry Pi boards (tests/board.rs): Cortex-A53
# with 512 MiB, A72 with 2 GiB, A76 with 4 GiB, each a qemu CPU model and a
# cgroup memory limit; the aarch64 binary with the packaged cutout.toml
# serves cut-outs with each board's defaults, matched against the x86
# build's. The binary is the aarch64 test build's: the package's code, its
# dependencies optimised as in the release build but for tract's graph and
# loaders (the `emulated` profile), the crate itself at opt-level 0
# (ARM_BINARY). Measuring a board's rungs when idle
# is the same code natively (tests/api/ladder.rs). Needs root and qemu 10.
BOARD_MODELS := target/board/models
test-board: models quantize aarch64-tests binfmt
	python3 models/fetch.py onnxruntime --arch aarch64 --models-dir $(BOARD_MODELS)
	for f in models/*.tract.onnx models/*.onnxruntime.onnx; do ln -sf $(CURDIR)/$$f $(BOARD_MODELS)/; done
	TEST_BOARD_BINARY=$(ARM_TESTS)/cutout TEST_BOARD_MODELS=$(BOARD_MODELS) \
		$(LINTED) test --workspace --test board -- --ignored --test-threads=1 --nocapture

# Debian packages (cargo-deb): binary, unit, cutout.toml, models, ONNX
# Runtime's library for the package's architecture, postinst.
# DEB_PROFILE: the binary's cargo profile. cargo-deb reads the binary and the
# library from that profile's directory (target/debug for the dev profile).
DEB_PROFILE ?= release
deb: models
	python3 models/fetch.py onnxruntime --models-dir target/$(if $(filter dev,$(DEB_PROFILE)),debug,$(DEB_PROFILE))
	$(CARGO) deb --profile $(DEB_PROFILE) $(DEB_FLAGS)
deb-arm64: models
	python3 models/fetch.py onnxruntime --arch aarch64 --models-dir target/aarch64/$(AARCH64)/release
	$(ARM) $(CARGO) deb --target $(AARCH64)
	@ls target/aarch64/debian/*_arm64.deb

# The amd64 package installed in a fresh Debian 12 chroot and used there:
# the files of `make deb`, but the binary is the test build's, packaged as
# built (the same code at the tests' optimisation, not a second build;
# cargo-deb warns about the dev profile), and the compression faster (325 MB
# of models). With PREVIOUS_DEB (.ci/run's: the package of its last passing
# run), that one is installed and used first, and this one over it.
test-deb:
	$(TEST_BUILD)
	$(MAKE) deb DEB_PROFILE=dev DEB_FLAGS="--fast --no-build"
	sh packaging/test-install.sh target/debian/cutout_*_amd64.deb ../shared/eval/dev/grabcut/images/106024.jpg

# RustSec advisories, banned crates and licences (deny.toml), against the
# advisory database bundled beside the checkout, which is never fetched. The
# directory name is the one cargo-deny derives from its default database URL.
ADVISORY_DB := target/advisory-dbs/advisory-db-3157b0e258782691
deny:
	command -v cargo-deny >/dev/null || $(FAST_INSTALL) cargo install cargo-deny --locked --version 0.20.2
	rm -rf $(ADVISORY_DB)
	git -c advice.detachedHead=false -c init.defaultBranch=main clone -q ../shared/rustsec-advisory-db.bundle $(ADVISORY_DB)
	# cargo-deny reads the metadata of every platform's crates (Windows
	# ones too), which a build for this one never downloads.
	$(CARGO) fetch --locked
	$(CARGO) deny --offline check advisories bans licenses

# A checker's speed does not matter; its build time does (3 min, not 10).
FAST_INSTALL := CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_OPT_LEVEL=1 \
	CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_DEBUG=0

# 30 minutes of 4 clients over 3 accounts and all three sizes against the
# binary: only 200s, memory and open files flat (tests/api/soak.rs; `make
# test` runs it for 1 minute). SOAK_ENGINE=tract soaks tract.
soak: models onnxruntime
	SOAK_SECS=1800 $(LINTED) test --workspace --test api soak -- --nocapture

# cargo-fuzz (nightly) on the multipart parser and the decoder, FUZZ_SECS
# each, from the seed corpus examples/fuzz_seeds.rs writes. A crash is saved
# under fuzz/artifacts/; make it a regression test.
FUZZ_SECS ?= 600
fuzz:
	command -v cargo-fuzz >/dev/null || cargo +nightly install cargo-fuzz --locked
	$(CARGO) run --example fuzz_seeds -- fuzz/corpus
	for target in multipart decode; do \
		cargo +nightly fuzz run $$target fuzz/corpus/$$target -- \
			-max_total_time=$(FUZZ_SECS) -timeout=10 -rss_limit_mb=2048 || exit 1; \
	done

clean:
	$(CARGO) clean

# The .deb on Debian 12 with systemd as PID 1, in qemu (tests/vm/): the unit
# under its hardening lines, READY=1, the setup code on the console, a
# scheduled backup to a stick mounted under /media while it runs, that
# backup restored on a new card's setup page (the exec under the watchdog), a
# SIGKILL restarted, a stop within TimeoutStopSec, a reboot, three power cuts
# with cut-outs in flight (database intact, every 200 counted, same engine),
# purge. Not part of `make test`, for its time: all of it runs under TCG
# (software emulation; a PVM /dev/kvm cannot boot a stock kernel): half an
# hour to two, by the host's CPU (tests/vm/test_vm.py says which). Making
# the image (once a week, in $(VM_CACHE)/image) adds 6 minutes.
# Needs root, debootstrap and qemu-system-x86 (from bookworm-backports
# where qemu-utils is).
# Log: $(VM_CACHE)/run/test-vm.log.
VM_CACHE ?= target/vm
test-vm:
	$(TEST_BUILD)
	$(MAKE) deb DEB_PROFILE=dev DEB_FLAGS="--fast --no-build"
	VM_CACHE=$(VM_CACHE) sh tests/vm/build-image.sh
	VM_CACHE=$(VM_CACHE) python3 tests/vm/test_vm.py "$$(ls -t target/debian/cutout_*_amd64.deb | head -n 1)" \
		../shared/eval/dev/grabcut/images/106024.jpg
