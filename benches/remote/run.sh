#!/usr/bin/env bash
# A remote cache hit of a 1 GiB artefact through heddle-remote (S3 read, sha256 verify, adopt
# into an empty local store) against curl fetching the same object from the same moto server
# to a file on the same disk. Interleaved, N rounds; prints medians and the throughput ratio
# (goal: heddle >= 0.9x curl). On Linux heddle does not fsync a large fetched blob (its digest
# goes to the store's imports journal, and a reboot re-hashes it: cache/src/store/imports_journal.rs),
# so `curl -o FILE` is the like-for-like row; `curl -o FILE; sync` is what a durable copy costs.
# SERVER=nginx serves the same object from nginx over WebDAV instead: nginx spends almost no
# CPU, so the two cores are the client's, as they would be with the server on another machine.
#   bash benches/remote/run.sh          N=5 bash benches/remote/run.sh      SERVER=nginx bash benches/remote/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
N=${N:-3}
SIZE_MIB=${SIZE_MIB:-1024}
cargo build --release --quiet -p heddle-remote --example remote_bench
bench="${CARGO_TARGET_DIR:-$root/target}/release/examples/remote_bench"
# shellcheck source=benches/remote/moto.sh
source benches/remote/moto.sh
case ${SERVER:-moto} in
  moto) start_moto remote-bench; remote=s3://bench/p; http="http://127.0.0.1:$port/bench/p" ;;
  nginx) start_nginx remote-bench; remote="webdav+http://127.0.0.1:$port/p"; http="http://127.0.0.1:$port/p" ;;
  *) echo "SERVER is moto or nginx" >&2; exit 2 ;;
esac

head -c $((SIZE_MIB * 1024 * 1024)) /dev/urandom >"$work/big.bin"
digest=$("$bench" push "$remote" "$work/push-store" "$work/big.bin")
rm -rf "$work/push-store"
echo "object: $remote/cas/$digest ($SIZE_MIB MiB), ${SERVER:-moto} on 127.0.0.1:$port" >&2

heddle_times=() curl_times=() verify_times=() durable_times=()
for i in $(seq "$N"); do
  rm -rf "$work/store" "$work/curl.out"; sync
  t0=$(now); "$bench" fetch "$remote" "$work/store"; t1=$(now)
  heddle_times+=("$(echo "$t1 - $t0" | bc)")
  rm -rf "$work/store"; sync
  t0=$(now); curl -sf -o "$work/curl.out" "$http/cas/$digest"; t1=$(now)
  curl_times+=("$(echo "$t1 - $t0" | bc)")
  rm -f "$work/curl.out"; sync
  # What a durable copy costs (heddle's hit paid this before the imports journal): curl's file, synced.
  t0=$(now); curl -sf -o "$work/curl.out" "$http/cas/$digest"; sync; t1=$(now)
  durable_times+=("$(echo "$t1 - $t0" | bc)")
  rm -f "$work/curl.out"; sync
  # What a user who checks what they downloaded runs: curl's bytes to the file and to sha256sum.
  t0=$(now); curl -sf "$http/cas/$digest" | tee "$work/curl.out" | sha256sum >/dev/null; t1=$(now)
  verify_times+=("$(echo "$t1 - $t0" | bc)")
  echo "round $i: heddle ${heddle_times[-1]} s, curl ${curl_times[-1]} s, curl | tee | sha256sum ${verify_times[-1]} s" >&2
done
h=$(median "${heddle_times[@]}"); c=$(median "${curl_times[@]}"); v=$(median "${verify_times[@]}")
d=$(median "${durable_times[@]}")
printf '%-34s %8s %10s\n' "1 GiB remote hit (median of $N)" "seconds" "MiB/s"
printf '%-34s %8.2f %10.0f\n' "heddle-remote fetch_action" "$h" "$(echo "$SIZE_MIB / $h" | bc -l)"
printf '%-34s %8.2f %10.0f\n' "curl -o FILE" "$c" "$(echo "$SIZE_MIB / $c" | bc -l)"
printf '%-34s %8.2f %10.0f\n' "curl -o FILE; sync" "$d" "$(echo "$SIZE_MIB / $d" | bc -l)"
printf '%-34s %8.2f %10.0f\n' "curl | tee FILE | sha256sum" "$v" "$(echo "$SIZE_MIB / $v" | bc -l)"
printf 'throughput ratio heddle/(curl | tee | sha256sum): %.2fx\n' "$(echo "$v / $h" | bc -l)"
printf 'throughput ratio heddle/(curl -o FILE; sync): %.2fx\n' "$(echo "$d / $h" | bc -l)"
printf 'throughput ratio heddle/curl: %.2fx (goal >= 0.9x)\n' "$(echo "$c / $h" | bc -l)"
