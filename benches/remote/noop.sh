#!/usr/bin/env bash
# A no-op run of an N-instance pipeline (default 1,000) against a remote-only cache: the local
# cache is empty, every instance is on an S3 server (moto on 127.0.0.1). Compared with
#   - the same no-op with everything in the local cache, and
#   - the transfer alone: curl fetching the same objects (entries and blobs) from the same
#     server over one connection, the least any client must spend to move them.
# Goals: remote-only no-op <= 2 x (local no-op + transfer) (issue 10); <= 0.5 x the transfer
# (issue 28).
#   bash benches/remote/noop.sh            N=1000 ROUNDS=3 bash benches/remote/noop.sh
# SERVER=nginx runs against nginx over WebDAV instead of moto over S3 (nginx spends almost no
# CPU per request; moto, in Python, spends milliseconds). BEFORE=/path/to/an/older/heddle adds
# its remote-only no-op to every round, interleaved, for a before/after in one run. TRACE=DIR
# runs two more remote-only no-ops at the end, under `strace -f -c -w` and under `strace -f -tt
# -T` of the syncs and renames (files in DIR), for where a hit's time goes; they are not timed.
# Wall time on a shared machine is noisy: rounds are interleaved and medians reported.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
N=${N:-1000}
ROUNDS=${ROUNDS:-3}
# HEDDLE=/path/to/heddle measures that binary instead of building this checkout's.
if [[ -n ${HEDDLE:-} ]]; then
  bin=$(realpath "$HEDDLE")
else
  cargo build --release --quiet --bin heddle
  bin="${CARGO_TARGET_DIR:-$root/target}/release/heddle"
fi
# shellcheck source=benches/remote/moto.sh
source benches/remote/moto.sh
SERVER=${SERVER:-moto}
case $SERVER in
  moto) start_moto remote-noop; export HEDDLE_REMOTE_CACHE=s3://bench/noop ;;
  nginx) start_nginx remote-noop; export HEDDLE_REMOTE_CACHE="webdav+http://127.0.0.1:$port/noop" ;;
  *) echo "SERVER is moto or nginx" >&2; exit 2 ;;
esac

proj="$work/p"
mkdir -p "$proj/.heddle"
echo hi >"$proj/src.txt"
python3 benches/scale/gen.py matrix "$N" 0 "$proj"
# The full run writes (readwrite, entries signed with a bench key); every run trusts that key,
# so the remote-only no-op pays for checking every signature.
export HEDDLE_SIGNING_KEY_FILE="$work/signing.key"
rm -f "$HEDDLE_SIGNING_KEY_FILE"
"$bin" cache keygen --name bench | tail -n 1 >"$proj/.heddle/trusted-writers"
# A project's trust file counts only once the project is trusted (docs/scale-out.md); the
# record goes to this run's own config folder.
export HEDDLE_CONFIG_DIR="$work/config"
(cd "$proj" && "$bin" trust >/dev/null)
# The full run fills the local cache and uploads every action (write-back).
(cd "$proj" && HEDDLE_REMOTE_CACHE_MODE=readwrite "$bin" --cache-dir "$work/full-cache" run -j 2 p.toml >/dev/null 2>"$work/full.log")
grep -q "0 fetched, $((N + 1)) uploaded" "$work/full.log" || { cat "$work/full.log" >&2; exit 1; }

# Every object under the prefix, for curl's transfer-only baseline.
if [[ $SERVER == moto ]]; then
"$venv/bin/python" - "$work/urls.txt" <<EOF
import sys, boto3
s3 = boto3.client('s3', endpoint_url='$AWS_ENDPOINT_URL')
keys = [o['Key'] for page in s3.get_paginator('list_objects_v2').paginate(Bucket='bench', Prefix='noop/') for o in page.get('Contents', [])]
with open(sys.argv[1], 'w') as f:
    for i, k in enumerate(keys):
        f.write(f'url = "http://127.0.0.1:$port/bench/{k}"\noutput = "$work/curl/{i}"\n')
print(f"{len(keys)} objects under s3://bench/noop/", file=sys.stderr)
EOF
  # Signed as heddle's requests are (moto refuses anonymous reads of some objects).
  curl_auth=(--aws-sigv4 "aws:amz:$AWS_REGION:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY")
else
  (cd "$work/dav" && find noop/ac noop/cas -type f) | awk -v p="$port" -v w="$work" \
    '{printf "url = \"http://127.0.0.1:%s/%s\"\noutput = \"%s/curl/%d\"\n", p, $0, w, NR}' >"$work/urls.txt"
  echo "$(grep -c '^url' "$work/urls.txt") objects under $HEDDLE_REMOTE_CACHE" >&2
  curl_auth=()
fi

local_t=() remote_t=() curl_t=() before_t=()
for i in $(seq "$ROUNDS"); do
  rm -rf "$proj/out"
  t0=$(now); (cd "$proj" && "$bin" --cache-dir "$work/full-cache" run -j 2 p.toml >/dev/null 2>&1); t1=$(now)
  local_t+=("$(echo "$t1 - $t0" | bc)")
  rm -rf "$proj/out" "$work/empty-cache"
  t0=$(now); (cd "$proj" && "$bin" --cache-dir "$work/empty-cache" run -j 2 p.toml >/dev/null 2>"$work/remote.log"); t1=$(now)
  remote_t+=("$(echo "$t1 - $t0" | bc)")
  grep -q "$((N + 1)) fetched" "$work/remote.log" || { cat "$work/remote.log" >&2; exit 1; }
  if [[ -n ${BEFORE:-} ]]; then
    rm -rf "$proj/out" "$work/empty-cache"
    t0=$(now); (cd "$proj" && "$BEFORE" --cache-dir "$work/empty-cache" run -j 2 p.toml >/dev/null 2>"$work/remote.log"); t1=$(now)
    before_t+=("$(echo "$t1 - $t0" | bc)")
    grep -q "$((N + 1)) fetched" "$work/remote.log" || { cat "$work/remote.log" >&2; exit 1; }
  fi
  rm -rf "$work/curl"; mkdir -p "$work/curl"
  t0=$(now); curl -sSf "${curl_auth[@]}" --config "$work/urls.txt"; t1=$(now)
  curl_t+=("$(echo "$t1 - $t0" | bc)")
  echo "round $i: local no-op ${local_t[-1]} s, remote-only no-op ${remote_t[-1]} s${BEFORE:+, before ${before_t[-1]} s}, curl transfer ${curl_t[-1]} s" >&2
done
if [[ -n ${TRACE:-} ]]; then
  mkdir -p "$TRACE"
  rm -rf "$proj/out" "$work/empty-cache"
  (cd "$proj" && strace -f -c -w -o "$TRACE/summary.txt" "$bin" --cache-dir "$work/empty-cache" run -j 2 p.toml >/dev/null 2>&1)
  rm -rf "$proj/out" "$work/empty-cache"
  (cd "$proj" && strace -f -tt -T -e trace=fdatasync,fsync,renameat2,rename -o "$TRACE/syncs.txt" "$bin" --cache-dir "$work/empty-cache" run -j 2 p.toml >/dev/null 2>&1)
  echo "strace output in $TRACE" >&2
fi
l=$(median "${local_t[@]}"); r=$(median "${remote_t[@]}"); c=$(median "${curl_t[@]}")
echo "no-op of $((N + 1)) instances against $SERVER, median of $ROUNDS; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-44s %8.2f s\n' "local cache, every instance cached" "$l"
printf '%-44s %8.2f s\n' "remote-only cache (empty local)" "$r"
if [[ -n ${BEFORE:-} ]]; then
  b=$(median "${before_t[@]}")
  printf '%-44s %8.2f s\n' "remote-only, BEFORE ($BEFORE)" "$b"
fi
printf '%-44s %8.2f s\n' "curl, the same objects, one connection" "$c"
printf 'remote-only / (local + transfer): %.2fx (goal <= 2x)\n' "$(echo "$r / ($l + $c)" | bc -l)"
printf 'remote-only / transfer: %.2fx (goal <= 0.5x)\n' "$(echo "$r / $c" | bc -l)"
if [[ -n ${BEFORE:-} ]]; then
  printf 'BEFORE remote-only / transfer: %.2fx\n' "$(echo "$b / $c" | bc -l)"
fi
