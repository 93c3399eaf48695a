#!/bin/sh
# The aarch64 build, run under qemu-aarch64: the command line end to end
# (SQLite, argon2, SHA-256, the OS RNG, the configuration file), each step
# checked. Only single-threaded commands: in this sandbox qemu-user (7.2
# and 10.0) spins for ever on the first pthread_create, even in a five-line
# C program, so the threaded test suite cannot run under emulation here.
# Usage: tests/aarch64-smoke.sh path/to/aarch64/cutout
set -eu
bin=$1
export QEMU_LD_PREFIX=/usr/aarch64-linux-gnu
run() { timeout 120 qemu-aarch64-static "$bin" "$@"; }
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT

file "$bin" | grep -q "ARM aarch64"
run --version | grep -q "^cutout "
run --data-dir "$data" account create booth --plan pro >/dev/null
key=$(run --data-dir "$data" key create booth --label "arm" 2>/dev/null | tail -n 1)
echo "$key" | grep -Eq '^ck_[0-9a-f]{40}$'
run --data-dir "$data" key list booth | grep -q "$(echo "$key" | cut -c1-12)"
run --data-dir "$data" usage set booth --count 7 >/dev/null 2>&1
run --data-dir "$data" usage booth | grep -q "7 of 500"
echo "an arm password" | run --data-dir "$data" admin set-password >/dev/null 2>&1
if grep -q "an arm password" "$data/cutout.db"; then echo "clear password stored"; exit 1; fi
printf 'listen = "x"\n[server]\nqueue_capcity = 1\n' > "$data/bad.toml"
if run --config "$data/bad.toml" account list 2>"$data/err"; then exit 1; fi
grep -q "line 3" "$data/err"
echo "aarch64 under qemu: version, accounts, keys, usage, admin password, configuration errors all work"
