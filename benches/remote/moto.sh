# Sourced by the remote benches: start moto (the S3 test server) on a free 127.0.0.1 port with
# bucket `bench`, killed (and $work removed) when the bench exits.
#   start_moto WORK_DIR      sets $port and $moto; exports the AWS_* variables that reach it
# Needs $venv (target/remote-venv, made by remote/tests/servers.sh).
start_moto() {
  local work=$1
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$work/moto.log" 2>&1 &
  moto=$!
  # shellcheck disable=SC2064  # expand now: the trap must remove this run's folder
  trap "kill $moto 2>/dev/null; rm -rf '$work'" EXIT
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.2; done
  export AWS_ENDPOINT_URL="http://127.0.0.1:$port" AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench
  "$venv/bin/python" -c "import boto3; boto3.client('s3', endpoint_url='$AWS_ENDPOINT_URL').create_bucket(Bucket='bench')"
}
