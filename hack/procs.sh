# Sourced by hack/cluster.sh and hack/node.sh: the processes they start, each tracked by
# its pid file DIR/NAME.pid.
#   pid_alive DIR NAME           the process runs
#   pid_stop DIR NAME [SECONDS]  SIGTERM, up to SECONDS (default 5) to exit, then SIGKILL;
#                                the pid file is removed

pid_alive() { [[ -f "$1/$2.pid" ]] && kill -0 "$(cat "$1/$2.pid")" 2>/dev/null; }

pid_stop() {
  local dir=$1 name=$2 seconds=${3:-5} pid
  [[ -f "$dir/$name.pid" ]] || return 0
  pid=$(cat "$dir/$name.pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 $((seconds * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/$name.pid"
}
