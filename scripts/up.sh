#!/usr/bin/env bash
# Build DualFS, install its programs, make two default image files (if absent), format them
# (if not formatted yet) and mount the file system at the default mount point.
#
#   sudo scripts/up.sh            # defaults below
#   DUALFS_DIR=/srv/dualfs DUALFS_MNT=/mnt/x DUALFS_META_SIZE=1G DUALFS_DATA_SIZE=20G sudo -E scripts/up.sh
#
# Unmount with: dualfs umount /mnt/dualfs
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=${DUALFS_DIR:-/var/lib/dualfs}
MNT=${DUALFS_MNT:-/mnt/dualfs}
META_SIZE=${DUALFS_META_SIZE:-512M}
DATA_SIZE=${DUALFS_DATA_SIZE:-8G}
PREFIX=${DUALFS_PREFIX:-/usr/local}

if [ "$(id -u)" != 0 ]; then
    echo "up.sh: run as root (mounting and installing need it)" >&2
    exit 1
fi

cargo build --release --workspace --locked
install -d "$PREFIX/bin" "$PREFIX/sbin"
install -m 755 target/release/dualfs "$PREFIX/bin/dualfs"
install -m 755 target/release/mkfs-dualfs "$PREFIX/sbin/mkfs-dualfs"
ln -sf mkfs-dualfs "$PREFIX/sbin/mkfs.dualfs"
for tool in fsck-dualfs dualfs-cleaner; do
    if [ -x "target/release/$tool" ]; then
        install -m 755 "target/release/$tool" "$PREFIX/sbin/$tool"
    fi
done
if [ -x target/release/fsck-dualfs ]; then
    ln -sf fsck-dualfs "$PREFIX/sbin/fsck.dualfs"
fi

mkdir -p "$DIR" "$MNT"
META="$DIR/meta.img"
DATA="$DIR/data.img"
if mountpoint -q "$MNT"; then
    echo "up.sh: $MNT is already a mount point; leaving it as it is"
    exit 0
fi
if [ ! -e "$META" ] || [ ! -e "$DATA" ]; then
    "$PREFIX/sbin/mkfs.dualfs" --size-meta "$META_SIZE" --size-data "$DATA_SIZE" "$META" "$DATA"
fi
"$PREFIX/bin/dualfs" mount "$META" "$MNT"
echo "DualFS mounted at $MNT (metadata $META, data $DATA)"
df -h "$MNT"
