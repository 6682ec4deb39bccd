#!/bin/sh
# Runs a test under a real X server (xvfb-run) with a tray host (trayer), as a desktop session
# would have: tests/app/CMakeLists.txt registers tst_desktop through it.
set -e
if [ -z "$TESSERA_UNDER_X" ]; then
    export TESSERA_UNDER_X=1
    exec xvfb-run -a -s "-screen 0 1280x800x24" "$0" "$@"
fi
unset QT_QPA_PLATFORM
trayer --edge top --align right --widthtype request --height 24 >/dev/null 2>&1 &
tray=$!
sleep 1
status=0
"$@" || status=$?
kill "$tray" 2>/dev/null || true
exit "$status"
