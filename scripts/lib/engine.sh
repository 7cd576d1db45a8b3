# Starting a Docker engine safely, for scripts/setup.d/20-docker.sh and 25-docker-remote.sh: sourced, not run.
# Safe to run twice at once and next to an engine someone else started:
#   - one starter at a time per engine (flock on a lock file);
#   - an engine that does not answer `docker info` at once is given a bounded wait before it is called down
#     (a loaded machine makes it slow, not dead);
#   - never a second dockerd on a pid file that names a live process, or on a data-root a running dockerd uses:
#     the setup fails and says which process holds it instead;
#   - the daemon is started in a session of its own (setsid), so that whatever ends the starter's process group
#     (a runner's timeout, a job stopped with `kill -- -PGID`) does not end the engine with it;
#   - what a run started is written to $DESKCTL_STARTED (when set; scripts/test stops those at its end).

# engine_answers WAIT_SECONDS: whether `docker info` (DOCKER_HOST and TLS as exported) answers within the wait.
# Each call is cut at what is left of the wait (at least 2 s, at most 30 s): a daemon that hangs (stopped, or
# overloaded) must not stretch a 5 s wait into 30.
engine_answers() {
  local deadline=$((SECONDS + $1)) left
  while :; do
    left=$((deadline - SECONDS)); ((left >= 2)) || left=2; ((left <= 30)) || left=30
    timeout "$left" docker info >/dev/null 2>&1 && return 0
    ((SECONDS < deadline)) || return 1
    sleep 1
  done
}

# dockerd_pids_on_data_root DIR: the dockerd processes whose --data-root is DIR (/var/lib/docker when none given)
dockerd_pids_on_data_root() {
  local proc args root next
  for proc in /proc/[0-9]*; do
    [[ "$(cat "$proc/comm" 2>/dev/null)" == dockerd ]] || continue
    args=$(tr '\0' '\n' <"$proc/cmdline" 2>/dev/null) || continue
    root=/var/lib/docker; next=""
    while IFS= read -r arg; do
      if [[ -n "$next" ]]; then root="$arg"; next=""; continue; fi
      case "$arg" in
        --data-root|-g|--graph) next=1 ;;
        --data-root=*|--graph=*) root="${arg#*=}" ;;
      esac
    done <<<"$args"
    [[ "$(realpath -m "$root")" == "$(realpath -m "$1")" ]] && printf '%s\n' "${proc#/proc/}"
  done
  return 0
}

# live_pid_in FILE: the pid FILE names when that process runs
live_pid_in() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && printf '%s\n' "$pid"
}

# record_started KIND ARGS...: note something this run started (scripts/test stops it at the end)
record_started() {
  [[ -n "${DESKCTL_STARTED:-}" ]] || return 0
  printf '%s\n' "$*" >>"$DESKCTL_STARTED"
}

# ensure_engine NAME LOCKFILE PIDFILE DATA_ROOT WAIT START_FUNCTION
# Makes the engine that `docker info` reaches (DOCKER_HOST etc. as exported) answer: returns 0 when it already
# does (after up to WAIT seconds when a daemon of it exists but is slow), else calls START_FUNCTION under the
# lock, which starts the daemon and returns 0 once it answers. Fails (1) rather than start a second daemon.
# START_FUNCTION must close the lock's descriptor for the daemon (`dockerd ... {ENGINE_LOCK_FD}>&-`): a daemon that
# inherited it would hold the lock for as long as it runs.
ensure_engine() {
  local name="$1" lockfile="$2" pidfile="$3" data_root="$4" wait="$5" start="$6" fd pid holders
  engine_answers 5 && return 0
  mkdir -p "$(dirname "$lockfile")"
  exec {fd}>"$lockfile"
  ENGINE_LOCK_FD=$fd
  if ! flock -n "$fd"; then
    log "$name: another setup is starting this engine; waiting for it (up to ${wait}s)"
    flock -w "$wait" "$fd" || { log "$name: the other setup still holds $lockfile after ${wait}s"; return 1; }
  fi
  # under the lock: the other starter may have finished, or a daemon may be there and slow
  if ! engine_answers 5; then
    pid=$(live_pid_in "$pidfile" || true)
    holders=$(dockerd_pids_on_data_root "$data_root" | tr '\n' ' ')
    if [[ -n "$pid" || -n "${holders// /}" ]]; then
      log "$name: a dockerd runs (pid ${pid:-${holders% }}) but does not answer yet; waiting up to ${wait}s"
      if ! engine_answers "$wait"; then
        log "$name: dockerd (pid ${pid:-${holders% }}) did not answer in ${wait}s; not starting a second daemon" \
            "on $data_root: look at its log, or stop it yourself"
        exec {fd}>&-; return 1
      fi
    elif ! "$start"; then
      exec {fd}>&-; return 1
    fi
  fi
  exec {fd}>&-
  return 0
}

# stop_started FILE: stop, newest first, what record_started noted (dockerd PID | systemd UNIT |
# bridge NAME | path PATH, removed); bounded waits, SIGKILL after 120 s (a daemon stops its containers first).
stop_started() {
  local file="$1" kind a b sudo=""
  [[ -s "$file" ]] || return 0
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  tac "$file" | while read -r kind a b; do
    case "$kind" in
      dockerd)
        # only the process we started, and only while it still is that dockerd
        if [[ "$(cat "/proc/$a/comm" 2>/dev/null)" == dockerd ]]; then
          log "stopping the dockerd this run started (pid $a)"
          $sudo kill "$a" 2>/dev/null || true
          for _ in $(seq 1 120); do $sudo kill -0 "$a" 2>/dev/null || break; sleep 1; done
          if $sudo kill -0 "$a" 2>/dev/null; then
            log "dockerd $a did not stop in 120 s; SIGKILL"; $sudo kill -9 "$a" || true
          fi
        fi ;;
      systemd)
        log "stopping $a, which this run started"; $sudo systemctl stop "$a" 2>/dev/null || true ;;
      bridge)
        ip link show "$a" >/dev/null 2>&1 && { ip link set "$a" down; ip link delete "$a" type bridge; } || true ;;
      path)
        rm -rf -- "$a" ;;
    esac
  done
  : >"$file"
}
