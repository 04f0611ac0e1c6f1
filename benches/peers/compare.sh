#!/usr/bin/env bash
# Two heddle binaries side by side on the peers shapes (issue 14's budget: "benches/peers before
# and after"), with the CPU time of every sample as well as its wall time.
#
#   bash benches/peers/compare.sh --old PATH --new PATH [--n 1000] [--shapes chain,fan,matrix]
#                                 [--phases plan,full,noop] [--reps 5] [--rounds 2] [--settle 35]
#                                 [--out FILE]
#
# Each shape is measured by bench.py (heddle alone, plus the shell loop once), old and new one
# after the other and in alternating order over --rounds rounds, so a change in the machine's
# load falls on both alike. Every sample's user+sys CPU time (wait4 rusage of the process tree)
# is kept: on a shared machine it is the steadier number. The table (medians over every sample
# of every round) goes to --out, or stdout. bench.py needs only the standard library here: no
# DVC or Snakemake is installed or run. No timing is asserted anywhere.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
old="" new="" n=1000 shapes="chain,fan,matrix" phases="plan,full,noop" reps=5 rounds=2 settle=35
out=/dev/stdout
while [ $# -gt 0 ]; do
  case "$1" in
    --old) old=$(realpath "$2"); shift 2 ;;
    --new) new=$(realpath "$2"); shift 2 ;;
    --n) n="$2"; shift 2 ;;
    --shapes) shapes="$2"; shift 2 ;;
    --phases) phases="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --settle) settle="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x $old && -x $new ]] || { echo "usage: compare.sh --old HEDDLE --new HEDDLE [...]" >&2; exit 2; }
work=${COMPARE_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/heddle-compare.XXXXXX")}
mkdir -p "$work"
load0=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u '+%Y-%m-%d %H:%M UTC')

# bench WHICH BIN ROUND SHAPE TOOLS: one bench.py invocation in its own work folder.
bench() {
  local dir="$work/$1-r$3-$4"
  mkdir -p "$dir/bin"
  cp -f "$2" "$dir/bin/heddle"
  python3 "$here/bench.py" --repo "$repo" --work "$dir" --tools "$5" --only shapes \
    --shapes "$4" --n "$n" --heddle-n '' --phases "$phases" --reps "$reps" --settle "$settle" \
    --out "$dir/RESULTS.md" >"$dir/bench.out" 2>&1 ||
    { echo "bench.py failed for $1 $4 (see $dir/bench.out)" >&2; tail -5 "$dir/bench.out" >&2; exit 1; }
}

IFS=, read -r -a shape_list <<<"$shapes"
for shape in "${shape_list[@]}"; do
  bench floor "$old" 0 "$shape" floor
  for ((r = 1; r <= rounds; r++)); do
    if ((r % 2)); then order="old new"; else order="new old"; fi
    for which in $order; do
      if [[ $which == old ]]; then bin=$old; else bin=$new; fi
      echo "== $shape round $r: $which" >&2
      bench "$which" "$bin" "$r" "$shape" heddle
    done
  done
done

python3 - "$work" "$n" "$phases" "$old" "$new" "$load0" "$(cut -d' ' -f1-3 /proc/loadavg)" "$started" >"$out" <<'EOF'
import json, statistics, sys
from pathlib import Path

work, n, phases, old, new, load0, load1, started = sys.argv[1:]
phases = phases.split(",")
samples = {}  # (which, shape, phase) -> ([wall], [cpu])
for res in Path(work).glob("*/results.json"):
    which = res.parent.name.split("-r")[0]
    for key, m in json.loads(res.read_text())["results"].items():
        tool, shape, _n, phase = key.split("/")
        if m["status"] != "ok":
            continue
        w, c = samples.setdefault((which, shape, phase), ([], []))
        w.extend(m["samples"])
        c.extend(m["cpu"])


def med(xs):
    return statistics.median(xs) if xs else None


def s(x):
    return "—" if x is None else (f"{x * 1000:.1f} ms" if x < 1 else f"{x:.2f} s")


def ratio(a, b):
    return "—" if a is None or b is None or b == 0 else f"{a / b:.2f}"


print(f"old: `{old}`; new: `{new}`; N = {n}; {started}; load average (1, 5, 15 min) "
      f"{load0} at start, {load1} at end\n")
print("| shape | phase | old wall | new wall | wall new/old | old CPU | new CPU | CPU new/old | samples |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
shapes = sorted({k[1] for k in samples})
for shape in shapes:
    for phase in phases:
        (ow, oc), (nw, nc) = samples.get(("old", shape, phase), ([], [])), samples.get(("new", shape, phase), ([], []))
        print(f"| {shape} | {phase} | {s(med(ow))} | {s(med(nw))} | {ratio(med(nw), med(ow))} | "
              f"{s(med(oc))} | {s(med(nc))} | {ratio(med(nc), med(oc))} | {len(ow)}+{len(nw)} |")
    fw, fc = samples.get(("floor", shape, "full"), ([], []))
    if fw:
        hw, hc = samples.get(("new", shape, "full"), ([], []))
        ow, oc = samples.get(("old", shape, "full"), ([], []))
        print(f"| {shape} | shell loop (full) | {s(med(fw))} wall, {s(med(fc))} CPU | | "
              f"old/loop {ratio(med(ow), med(fw))}, new/loop {ratio(med(hw), med(fw))} | | | "
              f"old/loop {ratio(med(oc), med(fc))}, new/loop {ratio(med(hc), med(fc))} | {len(fw)} |")
EOF
echo "compare: samples and logs in $work" >&2
