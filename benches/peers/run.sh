#!/usr/bin/env bash
# heddle side by side with DVC and Snakemake (issue 6). One command:
#
#   bash benches/peers/run.sh                 # full run: N = 100,1000 (+10000 heddle alone) -> benches/RESULTS.md
#   bash benches/peers/run.sh --smoke         # CI: N = 100, one repetition, short limits; prints "smoke: N passed, M failed"
#   bash benches/peers/run.sh --quick         # N = 100 only, 3 repetitions
#   bash benches/peers/run.sh --n 100,1000 --heddle-n 10000 --reps 5 --limit 300 --only shapes,large,hash,containers
#
# It builds heddle and the two examples it needs (cargo build --release), installs the pinned
# DVC and Snakemake (requirements.txt, constraints.txt) into benches/peers/work/venv, and runs
# bench.py there. Everything it creates lives under benches/peers/work/ (gitignored), or under
# $PEERS_WORK. Set HEDDLE_BIN to benchmark an already built heddle binary instead of building one
# (the examples are still built from this checkout).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=${PEERS_WORK:-$here/work}
python=${PYTHON:-python3}
mkdir -p "$work/bin"

if ! "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
    echo "error: Snakemake 9 needs Python >= 3.11; $python is $("$python" -V 2>&1). Set PYTHON=..." >&2
    exit 2
fi

# 1. The private venv with the pinned peers (reinstalled when the pins change).
stamp=$(cat "$here/requirements.txt" "$here/constraints.txt" | sha256sum | cut -c1-16)
if [[ ! -x $work/venv/bin/python || "$(cat "$work/venv/.pins" 2>/dev/null)" != "$stamp" ]]; then
    echo "peers: installing $(tr '\n' ' ' <"$here/requirements.txt")into $work/venv" >&2
    rm -rf "$work/venv"
    "$python" -m venv "$work/venv"
    "$work/venv/bin/pip" install -q --disable-pip-version-check \
        -r "$here/requirements.txt" -c "$here/constraints.txt"
    echo "$stamp" >"$work/venv/.pins"
fi

# 2. heddle and the examples (hash_bench: heddle's hasher; overhead: the container engine wrapper).
# Copied into work/bin so a rebuild elsewhere in the checkout cannot swap them mid-run.
# PEERS_NO_BUILD=1 skips cargo and uses what work/bin already holds (e.g. while another build
# holds cargo's lock).
if [[ ${PEERS_NO_BUILD:-} == 1 ]]; then
    for b in heddle hash_bench overhead; do
        [[ -x $work/bin/$b ]] || { echo "error: PEERS_NO_BUILD=1 but $work/bin/$b is missing" >&2; exit 2; }
    done
    exec "$work/venv/bin/python" "$here/bench.py" --repo "$repo" --work "$work" "$@"
fi
# One cargo call over the workspace: features resolve as for `cargo test --workspace`, so CI
# reuses what the tests built instead of compiling crates again under other feature sets.
targets=(--example hash_bench --example overhead)
if [[ -z ${HEDDLE_BIN:-} ]]; then
    targets+=(--bin heddle)
    HEDDLE_BIN=$repo/target/release/heddle
fi
(cd "$repo" && cargo build --release --quiet --workspace "${targets[@]}")
cp -f "$HEDDLE_BIN" "$work/bin/heddle.new" && mv -f "$work/bin/heddle.new" "$work/bin/heddle"
for ex in hash_bench overhead; do
    cp -f "$repo/target/release/examples/$ex" "$work/bin/$ex.new" && mv -f "$work/bin/$ex.new" "$work/bin/$ex"
done

exec "$work/venv/bin/python" "$here/bench.py" --repo "$repo" --work "$work" "$@"
