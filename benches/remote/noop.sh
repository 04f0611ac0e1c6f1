#!/usr/bin/env bash
# A no-op run of an N-instance pipeline (default 1,000) against a remote-only cache: the local
# cache is empty, every instance is on an S3 server (moto on 127.0.0.1). Compared with
#   - the same no-op with everything in the local cache, and
#   - the transfer alone: curl fetching the same objects (entries and blobs) from the same
#     server over one connection, the least any client must spend to move them.
# Goal (issue 10): remote-only no-op <= 2 x (local no-op + transfer).
#   bash benches/remote/noop.sh            N=1000 ROUNDS=3 bash benches/remote/noop.sh
# Wall time on a shared machine is noisy: rounds are interleaved and medians reported.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
N=${N:-1000}
ROUNDS=${ROUNDS:-3}
cargo build --release --quiet --bin heddle
bin="${CARGO_TARGET_DIR:-$root/target}/release/heddle"
# shellcheck source=benches/remote/moto.sh
source benches/remote/moto.sh
start_moto remote-noop
export HEDDLE_REMOTE_CACHE=s3://bench/noop

proj="$work/p"
mkdir -p "$proj/.heddle"
echo hi >"$proj/src.txt"
python3 benches/scale/gen.py matrix "$N" 0 "$proj"
# The full run writes (readwrite, entries signed with a bench key); every run trusts that key,
# so the remote-only no-op pays for checking every signature.
export HEDDLE_SIGNING_KEY_FILE="$work/signing.key"
rm -f "$HEDDLE_SIGNING_KEY_FILE"
"$bin" cache keygen --name bench | tail -n 1 >"$proj/.heddle/trusted-writers"
# The full run fills the local cache and uploads every action (write-back).
(cd "$proj" && HEDDLE_REMOTE_CACHE_MODE=readwrite "$bin" --cache-dir "$work/full-cache" run -j 2 p.toml >/dev/null 2>"$work/full.log")
grep -q "0 fetched, $((N + 1)) uploaded" "$work/full.log" || { cat "$work/full.log" >&2; exit 1; }

# Every object under the prefix, for curl's transfer-only baseline.
"$venv/bin/python" - "$work/urls.txt" <<EOF
import sys, boto3
s3 = boto3.client('s3', endpoint_url='$AWS_ENDPOINT_URL')
keys = [o['Key'] for page in s3.get_paginator('list_objects_v2').paginate(Bucket='bench', Prefix='noop/') for o in page.get('Contents', [])]
with open(sys.argv[1], 'w') as f:
    for i, k in enumerate(keys):
        f.write(f'url = "http://127.0.0.1:$port/bench/{k}"\noutput = "$work/curl/{i}"\n')
print(f"{len(keys)} objects under s3://bench/noop/", file=sys.stderr)
EOF

local_t=() remote_t=() curl_t=()
for i in $(seq "$ROUNDS"); do
  rm -rf "$proj/out"
  t0=$(now); (cd "$proj" && "$bin" --cache-dir "$work/full-cache" run -j 2 p.toml >/dev/null 2>&1); t1=$(now)
  local_t+=("$(echo "$t1 - $t0" | bc)")
  rm -rf "$proj/out" "$work/empty-cache"
  t0=$(now); (cd "$proj" && "$bin" --cache-dir "$work/empty-cache" run -j 2 p.toml >/dev/null 2>"$work/remote.log"); t1=$(now)
  remote_t+=("$(echo "$t1 - $t0" | bc)")
  grep -q "$((N + 1)) fetched" "$work/remote.log" || { cat "$work/remote.log" >&2; exit 1; }
  rm -rf "$work/curl"; mkdir -p "$work/curl"
  # Signed as heddle's requests are (moto refuses anonymous reads of some objects).
  t0=$(now); curl -sSf --aws-sigv4 "aws:amz:$AWS_REGION:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" --config "$work/urls.txt"; t1=$(now)
  curl_t+=("$(echo "$t1 - $t0" | bc)")
  echo "round $i: local no-op ${local_t[-1]} s, remote-only no-op ${remote_t[-1]} s, curl transfer ${curl_t[-1]} s" >&2
done
l=$(median "${local_t[@]}"); r=$(median "${remote_t[@]}"); c=$(median "${curl_t[@]}")
echo "no-op of $((N + 1)) instances, median of $ROUNDS; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-44s %8.2f s\n' "local cache, every instance cached" "$l"
printf '%-44s %8.2f s\n' "remote-only cache (empty local)" "$r"
printf '%-44s %8.2f s\n' "curl, the same objects, one connection" "$c"
printf 'remote-only / (local + transfer): %.2fx (goal <= 2x)\n' "$(echo "$r / ($l + $c)" | bc -l)"
