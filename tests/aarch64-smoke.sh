#!/bin/sh
# The aarch64 build, run under qemu-aarch64: the command line end to end
# (SQLite, argon2, SHA-256, the OS RNG, the configuration file), then the
# threaded server (accept loop, connection threads, request workers, the
# model loader) with plain HTTP and HTTPS (ring's aarch64 code) side by
# side, each step checked. No model runs: the build's dependencies are
# unoptimised, so the server is started without one and answers degraded.
# qemu runs without `-L`/QEMU_LD_PREFIX: with it, the cross package's
# loader met libc6:arm64's libc and the first pthread_create spun for ever.
# Usage: tests/aarch64-smoke.sh path/to/aarch64/cutout
set -eu
bin=$1
run() { timeout 120 qemu-aarch64-static "$bin" "$@"; }
data=$(mktemp -d)
server=""
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$data"' EXIT

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

port=$((20000 + $$ % 20000))
tls=$((port + 1))
CUTOUT_TLS_LISTEN=127.0.0.1:$tls CUTOUT_MDNS_ENABLED=false \
    timeout 120 qemu-aarch64-static "$bin" --data-dir "$data" --models-dir "$data/no-models" \
    serve --listen 127.0.0.1:$port 2>"$data/serve.log" &
server=$!
i=0
until curl -sf "http://127.0.0.1:$port/healthz" >/dev/null; do
    i=$((i + 1)); [ $i -lt 300 ] || { cat "$data/serve.log"; exit 1; }
    sleep 0.2
done
test "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz")" = 503
# A keyed call reaches the pipeline, which says it has no model.
test "$(curl -s -H "X-Api-Key: $key" -F "image_file=@$data/bad.toml" \
    "http://127.0.0.1:$port/api/remove-bg" -o "$data/reply" -w '%{http_code}')" = 503
grep -q service_unavailable "$data/reply"
curl -sfk "https://127.0.0.1:$tls/healthz" | grep -q '"ok"'
grep -q "fingerprint $(run --data-dir "$data" tls fingerprint)" "$data/serve.log"
# Twenty at once, through as many connection threads.
pids=""
for n in $(seq 20); do
    curl -sf -o /dev/null "http://127.0.0.1:$port/healthz" & pids="$pids $!"
done
for p in $pids; do wait "$p"; done
kill -TERM "$server"
wait "$server"
server=""
grep -q "stopped" "$data/serve.log"
echo "aarch64 under qemu: version, accounts, keys, usage, admin password, configuration errors," \
     "and the threaded server over HTTP and HTTPS all work"
