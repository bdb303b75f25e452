#!/usr/bin/env bash
# How long a mount has no daemon when its worker dies (not part of the test suite): a
# supervised DualFS (-o transport=dev) gets N files created in it without sync, its worker is
# killed with SIGKILL, and the time from the kill to the first answered request (a create
# that has to reach the daemon) is measured: the successor's recovery (roll-forward, the
# intent log's replay, its write-back and checkpoint) and takeover. Beside it, in the same
# run, what an unsupervised mount costs for the same death: kill, unmount the dead mount,
# mount again, first answer. Medians of --rounds rounds.
#
#   bench/takeover.sh                      # N = 0, 1000, 10000 files of 4 KiB; 3 rounds
#   bench/takeover.sh --files 0,20000 --rounds 5
#
# Images (1 GiB + 4 GiB, sparse) go to $TMPDIR (or /tmp).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
files_list="0,1000,10000"
rounds=3
while [ $# -gt 0 ]; do
    case "$1" in
        --files) files_list=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
        *) echo "takeover.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "takeover.sh: needs root (mount)" >&2; exit 1; }
cd "$repo"
cargo build --release --quiet --bin dualfs && cargo build --release --quiet -p dualfs-mkfs
bin=${CARGO_TARGET_DIR:-$repo/target}/release
work=$(mktemp -d "${TMPDIR:-/tmp}/dualfs-takeover.XXXXXX")
mnt=$work/mnt
mkdir -p "$mnt"
cleanup() {
    umount -l "$mnt" 2>/dev/null || true
    pkill -f "dualfs mount $work/" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# mount OPTS: a fresh file system on $mnt.
mount_fresh() {
    rm -f "$work/meta.img" "$work/data.img"
    truncate -s 1G "$work/meta.img"
    truncate -s 4G "$work/data.img"
    "$bin/mkfs-dualfs" -q "$work/meta.img" "$work/data.img" >/dev/null
    "$bin/dualfs" mount "$work/meta.img" "$work/data.img" "$mnt" -o "$1" --log-file "$work/log"
}

# The process serving the mount: the supervisor's child, or the daemon itself.
serving_pid() {
    local daemon child
    daemon=$(pgrep -f "dualfs mount $work/meta.img" | head -1)
    child=$(cat "/proc/$daemon/task/$daemon/children" 2>/dev/null | awk '{print $1}')
    echo "${child:-$daemon}"
}

fill() {
    local n=$1 i
    mkdir -p "$mnt/d"
    for ((i = 0; i < n; i++)); do head -c 4096 /dev/zero > "$mnt/d/f$i"; done
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# Is process $1 alive (a zombie is not: where PID 1 does not reap, a dead daemon stays one)?
alive() { [ -e "/proc/$1" ] && ! grep -q '^[0-9]* (.*) Z' "/proc/$1/stat" 2>/dev/null; }

printf '%-8s %22s %26s %8s\n' files "takeover (supervised)" "remount (supervise=off)" ratio
for n in ${files_list//,/ }; do
    sup=() rem=()
    for ((r = 0; r < rounds; r++)); do
        mount_fresh transport=dev
        fill "$n"
        pid=$(serving_pid)
        t0=$(now_ms)
        kill -9 "$pid"
        touch "$mnt/probe"
        sup+=($(( $(now_ms) - t0 )))
        umount "$mnt"
        while pgrep -f "dualfs mount $work/meta.img" >/dev/null; do sleep 0.05; done

        mount_fresh transport=dev,supervise=off
        fill "$n"
        pid=$(serving_pid)
        t0=$(now_ms)
        kill -9 "$pid"
        while alive "$pid"; do sleep 0.001; done
        umount -l "$mnt"
        "$bin/dualfs" mount "$work/meta.img" "$work/data.img" "$mnt" -o transport=dev,supervise=off \
            --log-file "$work/log"
        touch "$mnt/probe"
        rem+=($(( $(now_ms) - t0 )))
        umount "$mnt"
        while pgrep -f "dualfs mount $work/meta.img" >/dev/null; do sleep 0.05; done
    done
    s=$(printf '%s\n' "${sup[@]}" | median)
    m=$(printf '%s\n' "${rem[@]}" | median)
    printf '%-8s %19s ms %23s ms %8s\n' "$n" "$s" "$m" "$(awk -v a="$s" -v b="$m" 'BEGIN {printf "%.2fx", (b > 0 ? a / b : 0)}')"
done
echo "(median of $rounds rounds; takeover: kill -9 of the worker to the first answered create;"
echo " remount: kill -9 of the daemon, umount -l, mount, first answered create)"
