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
#   docker run, heddle's settings   --network none --init -u UID:GID -w and the three bind mounts
#                              heddle gives a stage: the same container, without heddle around it
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

# shellcheck source=benches/timing.sh
source "$root/benches/timing.sh"

mkdir -p "$tmp/m/in" "$tmp/m/out" "$tmp/m/work"
same=(--network none --init -u "$(id -u):$(id -g)" -w /heddle/work
  -v "$tmp/m/in:/heddle/in:ro" -v "$tmp/m/out:/heddle/out" -v "$tmp/m/work:/heddle/work")

declare -a heddle_run docker_none docker_plain docker_same heddle_plan heddle_hit
for ((i = 0; i < N; i++)); do
  # Interleaved, so drift in machine load hits every row alike.
  heddle_run+=("$(ms "$heddle" run bench.toml --no-cache --progress quiet)")
  docker_none+=("$(ms docker run --rm --network none "$IMAGE" true)")
  docker_plain+=("$(ms docker run --rm "$IMAGE" true)")
  docker_same+=("$(ms docker run --rm "${same[@]}" "$IMAGE" true)")
  heddle_plan+=("$(ms "$heddle" plan bench.toml)")
  heddle_hit+=("$(ms "$heddle" run bench.toml --progress quiet)")
done


m_run=$(median "${heddle_run[@]}")
m_none=$(median "${docker_none[@]}")
m_plain=$(median "${docker_plain[@]}")
m_same=$(median "${docker_same[@]}")
m_plan=$(median "${heddle_plan[@]}")
m_hit=$(median "${heddle_hit[@]}")

echo
echo "container-stage overhead, median of $N (ms); $(nproc) cores, docker $(docker version --format '{{.Server.Version}}' 2>/dev/null)"
printf '  %-38s %9s\n' \
  "heddle run --no-cache" "$m_run" \
  "docker run --rm --network none" "$m_none" \
  "docker run --rm" "$m_plain" \
  "docker run --rm, heddle's settings" "$m_same" \
  "heddle plan (no container)" "$m_plan" \
  "heddle run, cache hit (no container)" "$m_hit"
awk -v r="$m_run" -v n="$m_none" -v p="$m_plain" -v s="$m_same" 'BEGIN {
  printf "  ratio heddle / docker run --rm --network none: %.2fx (target <= 1.0)\n", r / n
  printf "  ratio heddle / docker run --rm:                %.2fx\n", r / p
  printf "  ratio heddle / docker run, heddle'"'"'s settings: %.2fx\n", r / s
}'

# Where heddle's time goes: one traced run at a time (bollard logs each request as it sends it);
# a phase runs from one request to the next. Medians over 5 runs.
echo
echo "heddle run --no-cache by phase, median of 5 traced runs (ms):"
for ((i = 0; i < 5; i++)); do
  t0=$(date -u +%H:%M:%S.%N)
  HEDDLE_LOG=bollard=debug "$heddle" run bench.toml --no-cache --progress quiet 2>&1 >/dev/null |
    sed 's/\x1b\[[0-9;]*m//g' | grep -o '^[^ ]*Z .*unix://[0-9a-f]*/[^ ]*' |
    sed -E 's|^[^T]*T([^ ]*)Z .*unix://[0-9a-f]*/|\1 |' >"$tmp/trace"
  t1=$(date -u +%H:%M:%S.%N)
  awk -v t0="$t0" -v t1="$t1" '
    function ms(t,  a) { split(t, a, ":"); return (a[1] * 3600 + a[2] * 60 + a[3]) * 1000 }
    function name(p) {
      if (p ~ /^version/) return "connect (GET /version)"
      if (p ~ /^images\//) return "resolve the image (inspect)"
      if (p ~ /^containers\/create/) return "create"
      if (p ~ /\/attach/) return "attach"
      if (p ~ /\/start/) return "start"
      if (p ~ /\/wait/) return "wait (the command runs and exits)"
      if (p ~ /^containers\/[0-9a-f]+\?/) return "remove"
      return p
    }
    { at[NR] = ms($1); what[NR] = name($2) }
    END {
      printf "process start, parse, plan, hash\t%.1f\n", at[1] - ms(t0)
      for (i = 1; i < NR; i++) printf "%s\t%.1f\n", what[i], at[i + 1] - at[i]
      printf "%s, store outputs, run record, exit\t%.1f\n", what[NR], ms(t1) - at[NR]
    }' "$tmp/trace" >"$tmp/phases.$i"
done
cut -f1 "$tmp/phases.0" | while IFS= read -r phase; do
  # shellcheck disable=SC2046
  printf '  %-38s %9s\n' "$phase" "$(median $(cat "$tmp"/phases.* | awk -F'\t' -v p="$phase" '$1 == p { print $2 }'))"
done
