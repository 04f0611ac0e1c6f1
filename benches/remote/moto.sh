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

# start_nginx NAME   the same for a WebDAV server: nginx (Debian's, with the dav-ext module) on a
#                    free 127.0.0.1 port serving $work/dav; sets $work and $port. nginx sends a
#                    file with sendfile and spends almost no CPU, so on this 2-core machine a
#                    client does not share its cores with the server the way it does with moto.
start_nginx() {
  bash remote/tests/servers.sh >/dev/null
  work=$(mktemp -d "$PWD/target/$1.XXXXXX")
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  mkdir -p "$work/dav" "$work/logs"
  cat >"$work/nginx.conf" <<CONF
$([[ $(id -u) -eq 0 ]] && echo "user root;")
load_module /usr/lib/nginx/modules/ngx_http_dav_ext_module.so;
daemon off;
master_process off;
worker_processes 1;
pid $work/nginx.pid;
error_log $work/logs/error.log;
events { worker_connections 64; }
http {
  access_log off;
  sendfile on;
  client_body_temp_path $work/body;
  client_max_body_size 0;
  server {
    listen 127.0.0.1:$port;
    root $work/dav;
    location / {
      dav_methods PUT DELETE MKCOL COPY MOVE;
      dav_ext_methods PROPFIND OPTIONS;
      create_full_put_path on;
    }
  }
}
CONF
  "$(command -v nginx || echo /usr/sbin/nginx)" -p "$work" -c "$work/nginx.conf" -e "$work/logs/error.log" &
  local nginx=$!
  # shellcheck disable=SC2064  # expand now: the trap must remove this run's folder
  trap "kill $nginx 2>/dev/null; rm -rf '$work'" EXIT
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.2; done
}
