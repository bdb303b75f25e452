#!/usr/bin/env bash
# Clean up after a test run that was killed before its Drop guards ran: lazily unmount every
# mount under the suite's temporary directories (their daemons then exit), detach their loop devices
# and remove the directories. Touches nothing else.
set -u
tmp="${TMPDIR:-/tmp}"
# Mounts first (deepest first), then loop devices, then the directories.
awk '{print $2}' /proc/self/mounts | grep -E "^$tmp/dualfs-(test|src|bad|harness|fuse-tools|diskmodel)-" | sort -r |
  while read -r m; do
    umount -l "$m" && echo "unmounted $m"
  done
losetup -ln -O NAME,BACK-FILE 2>/dev/null | while read -r dev back; do
  case "$back" in "$tmp"/dualfs-*) losetup -d "$dev" && echo "detached $dev ($back)" ;; esac
done
for d in "$tmp"/dualfs-test-* "$tmp"/dualfs-src-* "$tmp"/dualfs-bad-* "$tmp"/dualfs-harness-* \
  "$tmp"/dualfs-fuse-tools-* "$tmp"/dualfs-diskmodel-*; do
  [ -e "$d" ] && rm -rf -- "$d" && echo "removed $d"
done
exit 0
