# cutout: the commands README.md names. `make run` serves, `make test` tests.
.PHONY: run test models build lint clean

CARGO ?= cargo

run: models
	$(CARGO) build --release
	./target/release/cutout serve --demo

# Pinned model weights, sha256-checked (models/manifest.toml).
models:
	python3 models/fetch.py

build:
	$(CARGO) build --release

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings

test: models lint
	$(CARGO) test

clean:
	$(CARGO) clean
