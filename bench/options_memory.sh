#!/bin/bash
# Peak RSS (VmHWM) of a fresh release server after one plain 12 MP call,
# then after one call with each set of output options (BENCHMARKS.md,
# "Formats"). Needs `make build` and the 12 MP images `make bench` makes.
#
#     bench/options_memory.sh
set -e
cd "$(dirname "$0")/.."
BIN=./target/release/cutout
IMG=target/bench/images/large
run() {
  local name="$1"; shift
  local d=$(mktemp -d)
  $BIN --data-dir $d account create m --plan business >/dev/null 2>&1
  local key=$($BIN --data-dir $d key create m 2>/dev/null | tail -1)
  RUST_LOG=warn $BIN --data-dir $d --models-dir models serve --listen 127.0.0.1:18080 2>/dev/null &
  local pid=$!
  for i in $(seq 1 600); do curl -sf http://127.0.0.1:18080/readyz >/dev/null && break; sleep 0.1; done
  # warm: one plain request, so the model's memory is in both figures
  curl -sf -H "X-Api-Key: $key" -F image_file=@$IMG/GT05.jpg -o /dev/null http://127.0.0.1:18080/api/remove-bg
  local before=$(grep VmHWM /proc/$pid/status | awk '{print $2}')
  local out=$(curl -sf -H "X-Api-Key: $key" -F image_file=@$IMG/GT01.jpg "$@" -o /tmp/mem.out -w '%{http_code} %{size_download} %{time_total}' http://127.0.0.1:18080/api/remove-bg)
  local after=$(grep VmHWM /proc/$pid/status | awk '{print $2}')
  echo "| $name | $((before/1024)) | $((after/1024)) | $out |"
  kill $pid; wait $pid 2>/dev/null || true
  rm -rf $d
}
echo "| options | peak MiB after a plain 12 MP call | peak MiB after this call | status, bytes, s |"
echo "|---|---|---|---|"
run "none (PNG)"
run "format=jpg" -F format=jpg
run "format=webp" -F format=webp
run "format=zip" -F format=zip
run "crop=true, bg_color=white" -F crop=true -F bg_color=white
run "bg_image_file (12 MP), format=jpg" -F bg_image_file=@$IMG/153077.jpg -F format=jpg
