#!/bin/sh
# A task for the end-to-end tests. It records when it started and when its kill signal
# arrived, with the native service registrations the agent showed at that moment, in
# $NOMAD_ALLOC_DIR/$NOMAD_TASK_NAME.log, then exits cleanly. With QUIESCE_KILL_AGENT (a pid)
# and QUIESCE_KILL_FLAG (a path) set, the first task to get its signal kills the agent
# (kill -9) at once, within milliseconds of the signal, and records no services (there is no
# agent left to ask).
log="$NOMAD_ALLOC_DIR/$NOMAD_TASK_NAME.log"
echo "started $(date +%s.%N)" >> "$log"
on_signal() {
    at=$(date +%s.%N)
    if [ -n "$QUIESCE_KILL_AGENT" ] && [ ! -e "$QUIESCE_KILL_FLAG" ]; then
        : > "$QUIESCE_KILL_FLAG"
        kill -9 "$QUIESCE_KILL_AGENT"
        echo "signal $1 $at {}" >> "$log"
        exit 0
    fi
    echo "signal $1 $at $(python3 "$(dirname "$0")/services.py")" >> "$log"
    exit 0
}
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM
while :; do
    sleep 0.05
done
