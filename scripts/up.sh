#!/usr/bin/env bash
# Build DualFS, install its programs, make two default image files (if absent), format them
# (if not formatted yet) and mount the file system at the default mount point.
#
#   sudo scripts/up.sh            # defaults below
#   DUALFS_DIR=/srv/dualfs DUALFS_MNT=/mnt/x DUALFS_META_SIZE=1G DUALFS_DATA_SIZE=20G sudo -E scripts/up.sh
#
# Installs (stripped; the build tree keeps its debug info): dualfs, mkfs-dualfs (and
# mkfs.dualfs), fsck-dualfs (and fsck.dualfs), dualfs-cleaner under $DUALFS_PREFIX
# (/usr/local), the mount(8) and umount(8) helpers $DUALFS_SBIN/mount.dualfs and
# umount.fuse.dualfs (/sbin: where they look),
# their manual pages in $DUALFS_PREFIX/share/man/man8, and Debian's fuse3 if mount.fuse3 is
# missing (for `mount -t fuse.dualfs`). What it installed is listed in
# $DUALFS_PREFIX/share/dualfs/installed; scripts/down.sh removes exactly that.
#
# Unmount with: dualfs umount /mnt/dualfs      Undo everything: scripts/down.sh
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=${DUALFS_DIR:-/var/lib/dualfs}
MNT=${DUALFS_MNT:-/mnt/dualfs}
META_SIZE=${DUALFS_META_SIZE:-512M}
DATA_SIZE=${DUALFS_DATA_SIZE:-8G}
PREFIX=${DUALFS_PREFIX:-/usr/local}
SBIN=${DUALFS_SBIN:-/sbin}
MANIFEST="$PREFIX/share/dualfs/installed"

if [ "$(id -u)" != 0 ]; then
    echo "up.sh: run as root (mounting and installing need it)" >&2
    exit 1
fi

cargo build --release --workspace --locked
install -d "$PREFIX/bin" "$PREFIX/sbin" "$SBIN" "$(dirname "$MANIFEST")"
# One line per installed file (and per package), added once, so down.sh can undo it.
record() {
    touch "$MANIFEST"
    grep -qxF "$1" "$MANIFEST" || echo "$1" >>"$MANIFEST"
}
install_binary() { # NAME DIR
    install -s -m 755 "target/release/$1" "$2/$1"
    record "file $2/$1"
}
link() { # TARGET LINK
    ln -sf "$1" "$2"
    record "file $2"
}

install_binary dualfs "$PREFIX/bin"
install_binary mkfs-dualfs "$PREFIX/sbin"
link mkfs-dualfs "$PREFIX/sbin/mkfs.dualfs"
install_binary fsck-dualfs "$PREFIX/sbin"
link fsck-dualfs "$PREFIX/sbin/fsck.dualfs"
install_binary dualfs-cleaner "$PREFIX/sbin"
# mount -t dualfs, and fstab lines of type dualfs: mount(8) runs /sbin/mount.dualfs.
link "$PREFIX/bin/dualfs" "$SBIN/mount.dualfs"
# umount of a DualFS: umount(8) runs /sbin/umount.fuse.dualfs, which waits for the daemon's
# final checkpoint, as umount does for a kernel file system.
link "$PREFIX/bin/dualfs" "$SBIN/umount.fuse.dualfs"
# mount -t fuse.dualfs, and fstab lines of that type: mount(8) runs mount.fuse3, which
# runs `dualfs META MNT -o OPTIONS`.
if ! command -v mount.fuse3 >/dev/null && [ ! -x /sbin/mount.fuse3 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3
    record "package fuse3"
fi

# Manual pages, which each program writes from its own option definitions.
MAN8="$PREFIX/share/man/man8"
rm -rf target/man8
for program in dualfs mkfs-dualfs fsck-dualfs dualfs-cleaner; do
    "target/release/$program" --generate-man-pages target/man8
done
install -d "$MAN8"
for page in target/man8/*.8; do
    install -m 644 "$page" "$MAN8/"
    record "file $MAN8/$(basename "$page")"
done
if command -v mandb >/dev/null; then
    mandb -q || true
fi

mkdir -p "$DIR" "$MNT"
META="$DIR/meta.img"
DATA="$DIR/data.img"
if mountpoint -q "$MNT"; then
    echo "up.sh: $MNT is already a mount point; leaving it as it is"
    echo "Unmount with: $PREFIX/bin/dualfs umount $MNT    (undo everything: scripts/down.sh)"
    exit 0
fi
if [ ! -e "$META" ] || [ ! -e "$DATA" ]; then
    "$PREFIX/sbin/mkfs.dualfs" --size-meta "$META_SIZE" --size-data "$DATA_SIZE" "$META" "$DATA"
fi
"$PREFIX/bin/dualfs" mount "$META" "$MNT"
echo "DualFS mounted at $MNT (metadata $META, data $DATA)"
df -h "$MNT"
echo "In /etc/fstab:  $META $MNT dualfs defaults 0 0"
echo "Unmount with:   umount $MNT   (or dualfs umount $MNT; both wait for the final checkpoint)"
echo "Undo all this:  scripts/down.sh      (the images in $DIR are kept; --images removes them)"
