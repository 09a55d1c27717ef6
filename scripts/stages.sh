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
# With STAGE_TIMES set to a file, each stage that ends appends a JSON line {"stage": LABEL,
# "seconds": wall seconds, "status": its exit status} (the quickstart's report reads them).
# LABEL: the first script (*.py, *.sh) or `-m` module the command runs, and the last folder
# given to --output, if any (eval runs differ only there); quotes and backslashes become _.
stage_label() {  # COMMAND...
    local arg prev="" name="" output=""
    for arg in "$@"; do
        if [[ -z "$name" && ( "$arg" == *.py || "$arg" == *.sh || "$prev" == -m ) ]]; then
            name="${arg##*/}"
            name="${name%.py}"
            name="${name%.sh}"
        fi
        [[ "$prev" != --output ]] || output="${arg%/}"
        prev="$arg"
    done
    local label="${name:-${1##*/}}${output:+ ${output##*/}}"
    label="${label//\"/_}"
    echo "${label//\\/_}"
}
stage() {  # COMMAND...: run it as a stage; its exit status is the stage's
    local started="${EPOCHREALTIME/./}"  # microseconds (bash 5)
    STAGE_BEFORE="${!:-}"
    STAGE_STARTING=1
    "$@" &
    STAGE_PID=$!
    STAGE_STARTING=""
    local status=0
    wait "$STAGE_PID" || status=$?
    STAGE_PID=""
    if [[ -n "${STAGE_TIMES:-}" ]]; then  # a stage stopped by a signal is not recorded
        local us=$(( ${EPOCHREALTIME/./} - started ))
        # A failed write only warns: a run is not stopped for its timing.
        printf '{"stage": "%s", "seconds": %d.%06d, "status": %d}\n' "$(stage_label "$@")" \
            $((us / 1000000)) $((us % 1000000)) "$status" >> "$STAGE_TIMES" \
            || echo "stage: could not record its time in $STAGE_TIMES" >&3
    fi
    return "$status"
}
