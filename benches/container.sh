#!/usr/bin/env bash
# Container-stage overhead: a one-stage container pipeline through `heddle run --no-cache`
# (process start, parse, plan, image resolution, sandbox, create → attach → start → wait →
# remove, store, run record) against the docker CLI running the same image and command.
#
#   bash benches/container.sh            # N=20 runs of each, interleaved; medians and ratios
#   N=50 bash benches/container.sh
#
# Rows:
#   heddle run --no-cache      the number that matters (target: ≤ 1.0 × docker run --rm --network none)
#   docker run --rm --network none   the same isolation heddle gives a stage by default
#   docker run --rm            plain, with the default bridge network
#   heddle plan                heddle's fixed part without a container: start, parse, plan, connect, resolve
#   heddle run (cache hit)     the same plus the restore check and the run record, no container
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
N=${N:-20}
IMAGE=heddle-test/busybox:latest

echo "== cargo build --release" >&2
cargo build --release --quiet --bin heddle
heddle="$root/target/release/heddle"

if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "== building test images" >&2
  bash tests/images/build-busybox.sh >/dev/null
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/.heddle"
cat >"$tmp/bench.toml" <<EOF
[pipeline]
name = "bench"

[stages.one]
image = "$IMAGE"
run = ["true"]
EOF
export HEDDLE_CACHE_DIR="$tmp/cache"
cd "$tmp"
"$heddle" run bench.toml --progress quiet >/dev/null 2>&1 # warm: the cache exists, the image is in the page cache

# Milliseconds (3 decimals) one command takes; its output is discarded, a failure aborts.
ms() {
  local t0 t1
  t0=$(date +%s%N)
  "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }
  t1=$(date +%s%N)
  echo "$(((t1 - t0) / 1000))" | awk '{ printf "%.3f\n", $1 / 1000 }'
}

declare -a heddle_run docker_none docker_plain heddle_plan heddle_hit
for ((i = 0; i < N; i++)); do
  # Interleaved, so drift in machine load hits every row alike.
  heddle_run+=("$(ms "$heddle" run bench.toml --no-cache --progress quiet)")
  docker_none+=("$(ms docker run --rm --network none "$IMAGE" true)")
  docker_plain+=("$(ms docker run --rm "$IMAGE" true)")
  heddle_plan+=("$(ms "$heddle" plan bench.toml)")
  heddle_hit+=("$(ms "$heddle" run bench.toml --progress quiet)")
done

median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else printf "%.3f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

m_run=$(median "${heddle_run[@]}")
m_none=$(median "${docker_none[@]}")
m_plain=$(median "${docker_plain[@]}")
m_plan=$(median "${heddle_plan[@]}")
m_hit=$(median "${heddle_hit[@]}")

echo
echo "container-stage overhead, median of $N (ms); $(nproc) cores, docker $(docker version --format '{{.Server.Version}}' 2>/dev/null)"
printf '  %-38s %9s\n' \
  "heddle run --no-cache" "$m_run" \
  "docker run --rm --network none" "$m_none" \
  "docker run --rm" "$m_plain" \
  "heddle plan (no container)" "$m_plan" \
  "heddle run, cache hit (no container)" "$m_hit"
awk -v r="$m_run" -v n="$m_none" -v p="$m_plain" 'BEGIN {
  printf "  ratio heddle / docker run --rm --network none: %.2fx (target <= 1.0)\n", r / n
  printf "  ratio heddle / docker run --rm:                %.2fx\n", r / p
}'
