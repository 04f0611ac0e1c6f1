#!/usr/bin/env bash
# What a SLURM job costs through heddle (docs/scale-out.md, "Clusters"): an N-wide matrix of a
# trivial host stage (a) run locally, (b) run with `heddle run --cluster`, (c) the same N
# commands submitted with `sbatch --wrap` by hand and waited for with one squeue per 200 ms.
# Also the submit-to-start latency SLURM reports (scontrol's SubmitTime/StartTime, 1 s steps)
# and heddle's status queries. Root only (the cluster is tests/support/slurm.sh's).
#
#   bash benches/cluster.sh [N=200] [HEDDLE=target/debug/heddle]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200}
HEDDLE=$(realpath "${2:-target/debug/heddle}")
work=$(mktemp -d)
trap 'bash tests/support/slurm.sh stop "$work/slurm" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
bash tests/support/slurm.sh start "$work/slurm" 16950
export SLURM_CONF=$work/slurm/etc/slurm.conf

values=$(seq -s, 1 "$N")
mkproject() {
  mkdir -p "$1/.heddle"
  cat > "$1/p.toml" <<EOF
[pipeline]
name = "wide"
[stages.one]
matrix = { i = [$values] }
run = "echo {{ matrix.i }} > {{ out.o }}"
outputs = { o = "o.txt" }
EOF
  cat > "$1/.heddle/hosts.toml" <<EOF
[clusters.bench]
kind = "slurm"
poll_interval = "200ms"
worker_cache = "$work/worker-cache"
EOF
}
now() { date +%s.%N; }

mkproject "$work/local"
t0=$(now)
(cd "$work/local" && HEDDLE_CACHE_DIR=$work/local-cache "$HEDDLE" run p.toml --progress plain > /dev/null 2>&1)
t_local=$(echo "$(now) - $t0" | bc)

mkproject "$work/cluster"
t0=$(now)
(cd "$work/cluster" && HEDDLE_CACHE_DIR=$work/driver-cache HEDDLE_REMOTE_CACHE=file://$work/shared \
   "$HEDDLE" run p.toml --progress plain --cluster bench 2> "$work/cluster.err" > /dev/null)
t_cluster=$(echo "$(now) - $t0" | bc)
summary=$(grep '^cluster bench' "$work/cluster.err")

# Submit-to-start of the cluster run's jobs, from SLURM's own clock (1 s resolution).
lat=$(scontrol -o show job | grep -o 'SubmitTime=[^ ]* .*StartTime=[^ ]*' |
  sed -E 's/SubmitTime=([^ ]*).*StartTime=([^ ]*)/\1 \2/' |
  while read -r s e; do echo $(( $(date -d "$e" +%s) - $(date -d "$s" +%s) )); done |
  sort -n | awk '{a[NR]=$1} END {print "median", a[int((NR+1)/2)], "s, max", a[NR], "s"}')

t0=$(now)
for i in $(seq 1 "$N"); do
  sbatch --parsable --job-name=byhand --output=/dev/null --wrap "echo $i > $work/byhand-$i.txt" > /dev/null
done
while [ -n "$(squeue -h --name=byhand -t PD,R,CG -o %i)" ]; do sleep 0.2; done
t_hand=$(echo "$(now) - $t0" | bc)

echo "N=$N on $(nproc) cores"
echo "local run:              ${t_local} s"
echo "heddle run --cluster:   ${t_cluster} s   ($summary)"
echo "sbatch --wrap by hand:  ${t_hand} s"
echo "submit-to-start (heddle's jobs): $lat"
