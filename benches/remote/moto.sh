# Sourced by the remote benches, from the repository root: the S3 test server they run against
# and the timing helpers they share.
#   start_moto NAME   makes $work (target/NAME.XXXXXX) and starts moto on a free 127.0.0.1 port
#                     with bucket `bench`; sets $work, $port, $moto and $venv, exports the AWS_*
#                     variables that reach it. moto is killed and $work removed when the bench
#                     exits.
#   now               the time in seconds, to subtract
#   median X...       the median of the numbers
# moto comes from target/remote-venv, which remote/tests/servers.sh makes (run here: it skips
# what is already installed).
start_moto() {
  bash remote/tests/servers.sh >/dev/null
  venv="$PWD/target/remote-venv"
  work=$(mktemp -d "$PWD/target/$1.XXXXXX")
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$work/moto.log" 2>&1 &
  moto=$!
  # shellcheck disable=SC2064  # expand now: the trap must remove this run's folder
  trap "kill $moto 2>/dev/null; rm -rf '$work'" EXIT
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.2; done
  export AWS_ENDPOINT_URL="http://127.0.0.1:$port" AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench
  "$venv/bin/python" -c "import boto3; boto3.client('s3', endpoint_url='$AWS_ENDPOINT_URL').create_bucket(Bucket='bench')"
}

now() { date +%s.%N; }

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
