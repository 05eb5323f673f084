#!/bin/sh
# A poststop task for the end-to-end tests: records that it ran.
echo "ran $(date +%s.%N)" >> "$NOMAD_ALLOC_DIR/$NOMAD_TASK_NAME.log"
