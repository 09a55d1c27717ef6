# Sourced by the scripts that run long commands (quickstart.sh, launch_sft.sh), so that Ctrl-C,
# SIGTERM and SIGHUP stop them within seconds, whatever runs. Each long command runs as a stage:
# in the background, waited for, so a trapped signal interrupts `wait` at once (a foreground
# command would run to its end first). The trap sends SIGTERM to the stage (a script's
# background commands ignore SIGINT; `timeout` and torchrun pass SIGTERM on to all of theirs),
# prints one line on the script's own stderr (a stage may be redirected to a log) and exits
# 128 + the signal.
# Usage (in a script): source scripts/stages.sh; stop_on_signals NAME; stage COMMAND...
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then  # run, not sourced: say what it is for
    awk '!/^#/ { exit } { sub(/^# ?/, ""); print }' "$0"
    exit 0
fi
STAGE_PID=""
STAGE_STARTING=""  # set from just before a stage starts until STAGE_PID names it
STAGE_BEFORE=""    # $! before it started
STOP_NOTE=""  # appended to the stop line, e.g. where the outputs so far are
exec 3>&2
stop_stage() {  # SCRIPT SIGNAL
    local pid="$STAGE_PID"
    # A signal between `&` and `STAGE_PID=$!` (bash runs traps between commands): the stage
    # has started, and $! already names it; without this it would outlive the script.
    if [[ -z "$pid" && -n "$STAGE_STARTING" && "${!:-}" != "$STAGE_BEFORE" ]]; then
        pid="$!"
    fi
    if [[ -n "$pid" ]]; then
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" || true
    fi
    echo "$1: SIG$2: stopped the running stage${STOP_NOTE:+; $STOP_NOTE}" >&3
    exit $((128 + $(kill -l "$2")))
}
stop_on_signals() {  # SCRIPT: the name the stop line starts with
    local name
    for name in INT TERM HUP; do
        # shellcheck disable=SC2064  # the name is fixed now, on purpose
        trap "stop_stage '$1' $name" "$name"
    done
}
stage() {  # COMMAND...: run it as a stage; its exit status is the stage's
    STAGE_BEFORE="${!:-}"
    STAGE_STARTING=1
    "$@" &
    STAGE_PID=$!
    STAGE_STARTING=""
    local status=0
    wait "$STAGE_PID" || status=$?
    STAGE_PID=""
    return "$status"
}
