#!/usr/bin/env bash
# Undo scripts/up.sh: unmount the file system at the mount point (waiting for its final
# checkpoint) and remove every file and package up.sh installed (as listed in
# $DUALFS_PREFIX/share/dualfs/installed). The images are kept unless --images is given.
#
#   sudo scripts/down.sh             # unmount, uninstall; keep /var/lib/dualfs/*.img
#   sudo scripts/down.sh --images    # ... and remove the two images too
#
# Takes the same DUALFS_DIR, DUALFS_MNT and DUALFS_PREFIX as up.sh.
set -euo pipefail

DIR=${DUALFS_DIR:-/var/lib/dualfs}
MNT=${DUALFS_MNT:-/mnt/dualfs}
PREFIX=${DUALFS_PREFIX:-/usr/local}
MANIFEST="$PREFIX/share/dualfs/installed"

remove_images=false
for arg in "$@"; do
    case "$arg" in
        --images) remove_images=true ;;
        -h | --help)
            sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "down.sh: unknown argument '$arg' (see --help)" >&2
            exit 2
            ;;
    esac
done
if [ "$(id -u)" != 0 ]; then
    echo "down.sh: run as root (unmounting and uninstalling need it)" >&2
    exit 1
fi

if mountpoint -q "$MNT"; then
    if [ -x "$PREFIX/bin/dualfs" ]; then
        "$PREFIX/bin/dualfs" umount "$MNT"
    else
        umount "$MNT"
    fi
    echo "unmounted $MNT"
fi
rmdir "$MNT" 2>/dev/null || true

if [ -f "$MANIFEST" ]; then
    while read -r kind what; do
        case "$kind" in
            file) rm -f "$what" && echo "removed $what" ;;
            package)
                DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq "$what"
                echo "removed package $what"
                ;;
        esac
    done <"$MANIFEST"
    rm -f "$MANIFEST"
    rmdir "$(dirname "$MANIFEST")" 2>/dev/null || true
    # The manual pages just removed leave man's index.
    if command -v mandb >/dev/null; then
        mandb -q || true
    fi
else
    echo "down.sh: $MANIFEST not found: nothing recorded as installed by up.sh"
fi

if $remove_images; then
    rm -f "$DIR/meta.img" "$DIR/data.img"
    rmdir "$DIR" 2>/dev/null || true
    echo "removed the images in $DIR"
elif [ -e "$DIR/meta.img" ]; then
    echo "kept the images $DIR/meta.img and $DIR/data.img (scripts/down.sh --images removes them)"
fi
