#!/usr/bin/env bash
# Archive transfer against a bind mount (issue 10): a container stage that reads a 100 MB input
# and writes a 100 MB output, run by `heddle run --no-cache` on the local engine with
# `transfer = "bind"` (the sandbox bind-mounted) and with `transfer = "archive"` (inputs uploaded
# through the Engine API's archive endpoint before the start, outputs downloaded after the exit,
# as for an engine that does not share heddle's filesystem). Both also against `docker run` with
# the same bind mounts, the floor for the container itself.
#
#   bash benches/transfer.sh          N=9 SIZE_MB=100 bash benches/transfer.sh
#
# Interleaved rounds; medians and the archive/bind ratio. No timing is asserted anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
N=${N:-7}
SIZE_MB=${SIZE_MB:-100}
IMAGE=heddle-test/busybox:latest

cargo build --release --quiet --bin heddle
heddle="${CARGO_TARGET_DIR:-$root/target}/release/heddle"
if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
  bash tests/images/build-busybox.sh >/dev/null
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/.heddle"
head -c "$((SIZE_MB * 1024 * 1024))" /dev/urandom >"$tmp/input.bin"
for transfer in bind archive; do
  cat >"$tmp/$transfer.toml" <<EOF
[pipeline]
name = "$transfer"
[stages.copy]
image = "$IMAGE"
transfer = "$transfer"
inputs = { data = { path = "input.bin" } }
run = "cat {{ in.data }} > {{ out.copy }}"
outputs = { copy = "copy.bin" }
EOF
done
export HEDDLE_CACHE_DIR="$tmp/cache"
cd "$tmp"
# Warm: the input is stored, the image and the input are in the page cache.
"$heddle" run bind.toml --progress quiet >/dev/null 2>&1
"$heddle" run archive.toml --progress quiet >/dev/null 2>&1
cmp input.bin out/archive/copy/copy.bin

mkdir -p m/in m/out m/work
cp input.bin m/in/data
docker_same=(--network none --init -u "$(id -u):$(id -g)" -w /heddle/work
  -v "$tmp/m/in:/heddle/in:ro" -v "$tmp/m/out:/heddle/out" -v "$tmp/m/work:/heddle/work")

# shellcheck source=benches/timing.sh
source "$root/benches/timing.sh"

declare -a bind archive docker
for ((i = 0; i < N; i++)); do
  bind+=("$(ms "$heddle" run bind.toml --no-cache --progress quiet)")
  archive+=("$(ms "$heddle" run archive.toml --no-cache --progress quiet)")
  docker+=("$(ms docker run --rm "${docker_same[@]}" "$IMAGE" sh -c 'cat /heddle/in/data > /heddle/out/copy.bin')")
done
m_bind=$(median "${bind[@]}")
m_archive=$(median "${archive[@]}")
m_docker=$(median "${docker[@]}")
echo
echo "| ${SIZE_MB} MB in and out, median of $N (ms) | time | vs bind |"
echo "|---|---:|---:|"
echo "| heddle run --no-cache, transfer = \"bind\" | $m_bind | 1.00 |"
echo "| heddle run --no-cache, transfer = \"archive\" | $m_archive | $(awk -v a="$m_archive" -v b="$m_bind" 'BEGIN { printf "%.2f", a / b }') |"
echo "| docker run with the same bind mounts | $m_docker | $(awk -v a="$m_docker" -v b="$m_bind" 'BEGIN { printf "%.2f", a / b }') |"
