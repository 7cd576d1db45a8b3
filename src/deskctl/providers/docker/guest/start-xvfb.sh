# run by ``docker exec`` in a task-image container (as the desktop's entrypoint does in deskctl's image): Xvfb on
# display $1 at $2, only on the unix socket /tmp/.X11-unix/X$1 (the host's bind mount), demanding the cookie of the
# bind-mounted Xauthority, keeping its framebuffer in the host's tmpfs without a pointer drawn into it (-nocursor:
# captures read that file, and GetImage leaves the pointer out too); exits 0 once the server answers
set -u
d=$1; g=$2; log=/tmp/.deskctl-xvfb-$d.log; ready=/tmp/.deskctl-xready-$d
start() {
    rm -f "$ready"; mkfifo "$ready" || exit 97
    Xvfb ":$d" -screen 0 "$g" -nolisten tcp -nolisten local -auth /run/deskctl/xauth/Xauthority -noreset -dpi 96 \
        -fbdir /run/deskctl/fb "$@" -displayfd 3 3>"$ready" </dev/null >"$log" 2>&1 &
    x=$!
    if read -r _ <"$ready"; then rm -f "$ready"; exit 0; fi
    rm -f "$ready"; wait "$x"; status=$?
}
start -nocursor
# an Xvfb older than the option refuses it: start it without (its captures may show a window's pointer)
if grep -q "^Unrecognized option: -nocursor" "$log"; then start; fi
echo "Xvfb exited with $status:"; tail -n 15 "$log"
exit 1
