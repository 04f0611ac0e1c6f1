# Sourced by the shell benches: time one command, take a median.
#   ms CMD...        milliseconds (3 decimals) CMD takes; its output is discarded, a failure aborts
#   median X...      the median of the numbers given

ms() {
  local t0 t1
  t0=$(date +%s%N)
  "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }
  t1=$(date +%s%N)
  echo "$(((t1 - t0) / 1000))" | awk '{ printf "%.3f\n", $1 / 1000 }'
}

median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else printf "%.3f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
