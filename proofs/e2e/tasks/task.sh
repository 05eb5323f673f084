#!/bin/sh
# A task for the end-to-end tests. It records when it started and when its kill signal
# arrived, with the native service registrations the agent showed at that moment, in
# $NOMAD_ALLOC_DIR/$NOMAD_TASK_NAME.log, then exits cleanly.
log="$NOMAD_ALLOC_DIR/$NOMAD_TASK_NAME.log"
echo "started $(date +%s.%N)" >> "$log"
on_signal() {
    at=$(date +%s.%N)
    echo "signal $1 $at $(python3 "$(dirname "$0")/services.py")" >> "$log"
    exit 0
}
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM
while :; do
    sleep 0.05
done
