# shellcheck shell=bash
# Shared helpers for the benchmark scripts in bench/: install what they need, build DualFS and
# memfs, and set up / tear down every file system under comparison on sparse images in one
# temporary folder, which a trap always cleans up (unmounts, detaches loop devices, stops the
# FUSE daemons it started, removes the images), also on failure or Ctrl-C.
#
# Source it, then:
#   bench_init                       # root check, temp folder, cleanup trap
#   bench_install PKG...             # apt-get install the missing ones (idempotent)
#   bench_build                      # DualFS (release, workspace) and memfs
#   fs_mount FS MNT SIZE             # make a fresh FS of about SIZE bytes (sparse) mounted at MNT
#   fs_umount FS MNT                 # unmount (waiting for the daemon's last write), free images
#   fs_daemon_pid FS MNT             # pid of the FUSE daemon serving MNT (for perf)
#
# File systems (FS): dualfs, dualfs-wb (DualFS -o writeback_cache), ext2, ext3, ext4 (kernel,
# loop devices), fuse2fs (on an ext4 image file), memfs (in memory, the FUSE ceiling).
#
# Environment:
#   BENCH_TMPDIR      where the temp folder goes (default $TMPDIR or /var/tmp)
#   CARGO_TARGET_DIR  where DualFS and memfs are built (default <repo>/target)
#   MEMFS_SRC         memfs sources (default <repo>/../shared/tools/memfs); copied, never written
#   MEMFS_THREADS     memfs's thread count (default 4, as in shared/tools/README.md)
#   DUALFS_OPTS       extra -o options for both DualFS columns (comma-separated)
#   DUALFS_THREADS    --threads for the DualFS daemon (default: its own default)

BENCH_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH_ALL_FS="dualfs dualfs-wb ext2 ext3 ext4 fuse2fs memfs"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$BENCH_REPO/target}"
DUALFS_BIN="$CARGO_TARGET_DIR/release/dualfs"
MKFS_DUALFS_BIN="$CARGO_TARGET_DIR/release/mkfs-dualfs"
MEMFS_BIN="$CARGO_TARGET_DIR/memfs/release/memfs"
MEMFS_SRC="${MEMFS_SRC:-$BENCH_REPO/../shared/tools/memfs}"
MEMFS_THREADS="${MEMFS_THREADS:-4}"

BENCH_TMP=""
declare -a BENCH_MOUNTS=()   # "FS|MNT" of everything mounted and not yet unmounted
declare -A BENCH_LOOP=()     # MNT -> loop device
declare -A BENCH_PID=()      # MNT -> pid of a FUSE daemon we started in the background

bench_log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
bench_die() { printf '%s: %s\n' "$(basename "$0")" "$*" >&2; exit 1; }

bench_init() {
    [ "$(id -u)" = 0 ] || bench_die "run as root (it mounts file systems and uses loop devices)"
    [ -c /dev/fuse ] || bench_die "/dev/fuse is missing"
    local base="${BENCH_TMPDIR:-${TMPDIR:-/var/tmp}}"
    BENCH_TMP=$(mktemp -d "$base/dualfs-bench.XXXXXX")
    trap bench_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
}

# apt-get install the packages that are not installed yet (nothing to do on a second run).
bench_install() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    bench_log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -qq "${missing[@]}" >/dev/null; then
        apt-get update -qq >/dev/null
        apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

# Build DualFS and memfs (release). memfs's sources are copied next to its build output first,
# so that cargo never writes (Cargo.lock) into the shared folder, which may be read-only.
bench_build() {
    command -v cargo >/dev/null || bench_die "cargo is needed to build DualFS"
    bench_log "building DualFS (release) into $CARGO_TARGET_DIR"
    (cd "$BENCH_REPO" && cargo build --release --workspace --quiet 2>"$BENCH_TMP/build.log") ||
        { cat "$BENCH_TMP/build.log" >&2; bench_die "DualFS build failed"; }
    [ -f "$MEMFS_SRC/Cargo.toml" ] || bench_die "memfs sources not found at $MEMFS_SRC (set MEMFS_SRC)"
    local copy="$CARGO_TARGET_DIR/memfs-src"
    mkdir -p "$copy"
    rm -rf "$copy/src"
    cp -r "$MEMFS_SRC/src" "$copy/"
    # Its own workspace: the copy may sit under DualFS's (when CARGO_TARGET_DIR is <repo>/target).
    { cat "$MEMFS_SRC/Cargo.toml"; grep -q '^\[workspace\]' "$MEMFS_SRC/Cargo.toml" || printf '\n[workspace]\n'; } >"$copy/Cargo.toml"
    bench_log "building memfs into $CARGO_TARGET_DIR/memfs"
    CARGO_TARGET_DIR="$CARGO_TARGET_DIR/memfs" cargo build --release --quiet \
        --manifest-path "$copy/Cargo.toml" 2>"$BENCH_TMP/build.log" ||
        { cat "$BENCH_TMP/build.log" >&2; bench_die "memfs build failed"; }
}

bench_fs_label() {
    case "$1" in
        dualfs) echo "DualFS" ;;
        dualfs-wb) echo "DualFS wbcache" ;;
        ext2 | ext3 | ext4) echo "$1 (kernel)" ;;
        fuse2fs) echo "fuse2fs (ext4)" ;;
        memfs) echo "memfs (ceiling)" ;;
        *) echo "$1" ;;
    esac
}

bench_is_fuse() { case "$1" in dualfs | dualfs-wb | fuse2fs | memfs) return 0 ;; *) return 1 ;; esac; }

bench_check_fs_list() {
    local f
    for f in "$@"; do
        case " $BENCH_ALL_FS " in *" $f "*) ;; *) bench_die "unknown file system '$f' (known: $BENCH_ALL_FS)" ;; esac
    done
}

_bench_wait_mounted() { # MNT PID: wait until MNT is a mount point (or the daemon died)
    local i
    for i in $(seq 1 200); do
        mountpoint -q "$1" && return 0
        if [ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null; then return 1; fi
        sleep 0.05
    done
    return 1
}

_bench_wait_exit() { # PID [SECONDS]: wait for a process we started to exit
    local pid=$1 limit=$((${2:-600} * 10)) i=0
    while kill -0 "$pid" 2>/dev/null; do
        i=$((i + 1))
        [ $i -gt "$limit" ] && return 1
        sleep 0.1
    done
    wait "$pid" 2>/dev/null || true
}

_bench_forget_mount() { # MNT
    local keep=() m
    for m in "${BENCH_MOUNTS[@]}"; do [ "${m#*|}" = "$1" ] || keep+=("$m"); done
    BENCH_MOUNTS=("${keep[@]}")
}

# fs_mount FS MNT SIZE — SIZE in bytes-with-suffix as truncate takes it (e.g. 8G): the size of
# the ext images and of DualFS's data device (its metadata device gets a quarter, at least 1G).
fs_mount() {
    local fs=$1 mnt=$2 size=${3:-8G} dir="$BENCH_TMP/img-$1" loop pid opts
    mkdir -p "$dir" "$mnt"
    case "$fs" in
        dualfs | dualfs-wb)
            local bytes meta
            bytes=$(numfmt --from=iec "$size")
            meta=$((bytes / 4)); [ $meta -lt $((1 << 30)) ] && meta=$((1 << 30))
            "$MKFS_DUALFS_BIN" -q --size-meta "$meta" --size-data "$bytes" "$dir/meta.img" "$dir/data.img" >/dev/null
            opts="${DUALFS_OPTS:-}"
            [ "$fs" = dualfs-wb ] && opts="${opts:+$opts,}writeback_cache"
            local args=("$dir/meta.img" "$dir/data.img" "$mnt")
            [ -n "$opts" ] && args+=(-o "$opts")
            [ -n "${DUALFS_THREADS:-}" ] && args+=(--threads "$DUALFS_THREADS")
            BENCH_MOUNTS+=("$fs|$mnt")
            "$DUALFS_BIN" mount "${args[@]}"
            ;;
        ext2 | ext3 | ext4)
            truncate -s "$size" "$dir/fs.img"
            loop=$(losetup -f --show "$dir/fs.img")
            BENCH_LOOP[$mnt]=$loop
            local ext_opts="lazy_itable_init=0"
            [ "$fs" != ext2 ] && ext_opts="$ext_opts,lazy_journal_init=0"
            "mkfs.$fs" -q -F -E "$ext_opts" "$loop" >/dev/null
            BENCH_MOUNTS+=("$fs|$mnt")
            mount -t "$fs" "$loop" "$mnt"
            ;;
        fuse2fs)
            truncate -s "$size" "$dir/fs.img"
            mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$dir/fs.img" >/dev/null
            BENCH_MOUNTS+=("$fs|$mnt")
            fuse2fs "$dir/fs.img" "$mnt" -f >"$dir/fuse2fs.log" 2>&1 &
            pid=$!
            BENCH_PID[$mnt]=$pid
            _bench_wait_mounted "$mnt" "$pid" || { cat "$dir/fuse2fs.log" >&2; bench_die "fuse2fs did not mount"; }
            ;;
        memfs)
            BENCH_MOUNTS+=("$fs|$mnt")
            "$MEMFS_BIN" "$mnt" "$MEMFS_THREADS" >"$dir/memfs.log" 2>&1 &
            pid=$!
            BENCH_PID[$mnt]=$pid
            _bench_wait_mounted "$mnt" "$pid" || { cat "$dir/memfs.log" >&2; bench_die "memfs did not mount"; }
            ;;
        *) bench_die "unknown file system '$fs'" ;;
    esac
    mountpoint -q "$mnt" || bench_die "$fs: $mnt is not mounted"
}

# fs_umount FS MNT — unmount and wait until everything is on the images (DualFS: its final
# checkpoint; fuse2fs: its daemon's exit), detach the loop device, remove the images.
# Sets BENCH_UMOUNT_SECS to the time from the unmount call until all is written.
fs_umount() {
    local fs=$1 mnt=$2 dir="$BENCH_TMP/img-$1" rc=0 t0
    t0=$(bench_now)
    if mountpoint -q "$mnt"; then
        case "$fs" in
            dualfs | dualfs-wb) "$DUALFS_BIN" umount "$mnt" || rc=$? ;;
            *) umount "$mnt" || rc=$? ;;
        esac
    fi
    if [ -n "${BENCH_PID[$mnt]:-}" ]; then
        _bench_wait_exit "${BENCH_PID[$mnt]}" 600 || rc=1
        unset "BENCH_PID[$mnt]"
    fi
    BENCH_UMOUNT_SECS=$(bench_since "$t0")
    if [ -n "${BENCH_LOOP[$mnt]:-}" ]; then
        losetup -d "${BENCH_LOOP[$mnt]}" || rc=$?
        unset "BENCH_LOOP[$mnt]"
    fi
    [ $rc = 0 ] && _bench_forget_mount "$mnt"
    rm -rf "$dir"
    return $rc
}

# The pid of the FUSE daemon serving MNT (DualFS, fuse2fs, memfs), for perf record -p.
fs_daemon_pid() {
    local fs=$1 mnt=$2
    if [ -n "${BENCH_PID[$mnt]:-}" ]; then echo "${BENCH_PID[$mnt]}"; return; fi
    case "$fs" in
        dualfs | dualfs-wb) pgrep -n -f -- "dualfs mount .* $mnt( |\$)" ;;
    esac
}

# The trap: undo whatever is still set up, whatever state the script died in.
bench_cleanup() {
    local rc=$? i m fs mnt
    trap - EXIT INT TERM HUP
    set +e
    for ((i = ${#BENCH_MOUNTS[@]} - 1; i >= 0; i--)); do
        m=${BENCH_MOUNTS[$i]}; fs=${m%%|*}; mnt=${m#*|}
        bench_log "cleanup: unmounting $fs at $mnt"
        if mountpoint -q "$mnt"; then
            case "$fs" in
                dualfs | dualfs-wb) timeout 300 "$DUALFS_BIN" umount "$mnt" ;;
                *) umount "$mnt" ;;
            esac
            mountpoint -q "$mnt" && umount -l "$mnt"
        fi
    done
    for mnt in "${!BENCH_PID[@]}"; do
        _bench_wait_exit "${BENCH_PID[$mnt]}" 30 || kill "${BENCH_PID[$mnt]}" 2>/dev/null
    done
    for mnt in "${!BENCH_LOOP[@]}"; do losetup -d "${BENCH_LOOP[$mnt]}"; done
    [ -n "$BENCH_TMP" ] && [ -d "$BENCH_TMP" ] && rm -rf "$BENCH_TMP"
    exit $rc
}

# Seconds since the epoch with nanoseconds, and a difference in seconds with 3 decimals.
bench_now() { echo "$EPOCHREALTIME"; }
bench_since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }'; }

# The median of the numbers given (non-numbers such as "n/a" are left out; none: "n/a").
bench_median() {
    printf '%s\n' "$@" | awk '/^-?[0-9.]+$/ { v[n++] = $1 } END {
        if (n == 0) { print "n/a"; exit }
        for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
        if (n % 2) m = v[(n - 1) / 2]; else m = (v[n / 2 - 1] + v[n / 2]) / 2
        printf "%.3f\n", m }'
}

# ratio A B = A / B with two decimals ("n/a" if either is missing or B is 0).
bench_ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN { if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/ || b + 0 == 0) print "n/a"; else printf "%.2f\n", a / b }'
}

# perf record -g of the daemon serving MNT (FUSE file systems only), between bench_perf_start
# and bench_perf_stop; the profile and a text report go to $BENCH_PERF_DIR (default
# /var/tmp/dualfs-bench-perf), NAME.data and NAME.txt. BENCH_PERF_ARGS replaces perf record's
# "-g" (e.g. "-F 250 --call-graph dwarf,16384" for user-space stacks without frame pointers).
BENCH_PERF_PID=""
BENCH_PERF_NAME=""
bench_perf_start() { # FS MNT NAME
    local dpid dir=${BENCH_PERF_DIR:-/var/tmp/dualfs-bench-perf}
    dpid=$(fs_daemon_pid "$1" "$2")
    if [ -z "$dpid" ]; then bench_log "perf: no daemon to profile for $1"; return 0; fi
    mkdir -p "$dir"
    BENCH_PERF_NAME="$dir/$3"
    # shellcheck disable=SC2086
    perf record -q ${BENCH_PERF_ARGS:--g} -p "$dpid" -o "$BENCH_PERF_NAME.data" >/dev/null 2>&1 &
    BENCH_PERF_PID=$!
    sleep 0.5
}
bench_perf_stop() {
    [ -n "$BENCH_PERF_PID" ] || return 0
    kill -INT "$BENCH_PERF_PID" 2>/dev/null
    wait "$BENCH_PERF_PID" 2>/dev/null || true
    BENCH_PERF_PID=""
    perf report -i "$BENCH_PERF_NAME.data" --stdio --no-children --percent-limit 1 \
        >"$BENCH_PERF_NAME.txt" 2>/dev/null || true
    bench_log "perf: profile $BENCH_PERF_NAME.data, report $BENCH_PERF_NAME.txt"
}
# bench_perf_wanted FS "LIST": is FS in the space-separated list given to --perf?
bench_perf_wanted() { case " $2 " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# Count the FUSE requests the kernel sends to the file system mounted at MNT, by opcode, between
# bench_fuseops_start and bench_fuseops_stop (perf and the fuse:fuse_request_send tracepoint;
# other FUSE mounts on the machine are filtered out by their connection number).
# bench_fuseops_stop sets BENCH_FUSEOPS to "TOTAL OP=N OP=N ..." (most frequent first).
BENCH_FUSEOPS_PID=""
BENCH_FUSEOPS_CONN=""
bench_fuseops_start() { # MNT
    local dev
    dev=$(mountpoint -d "$1") || return 0
    # The kernel's dev_t: major << 20 | minor.
    BENCH_FUSEOPS_CONN=$(( (${dev%%:*} << 20) | ${dev#*:} ))
    perf record -q -e fuse:fuse_request_send -a -o "$BENCH_TMP/fuseops.data" >/dev/null 2>&1 &
    BENCH_FUSEOPS_PID=$!
    sleep 0.5
}
bench_fuseops_stop() {
    BENCH_FUSEOPS="n/a"
    [ -n "$BENCH_FUSEOPS_PID" ] || return 0
    kill -INT "$BENCH_FUSEOPS_PID" 2>/dev/null
    wait "$BENCH_FUSEOPS_PID" 2>/dev/null || true
    BENCH_FUSEOPS_PID=""
    local counts
    counts=$(perf script -i "$BENCH_TMP/fuseops.data" -F trace 2>/dev/null | awk -v conn="$BENCH_FUSEOPS_CONN" '
        { c = ""; op = ""
          for (i = 1; i < NF; i++) { if ($i == "connection") c = $(i + 1); if ($i == "opcode") op = $(i + 2) }
          if (c != conn) next
          gsub(/[()]/, "", op); sub(/^FUSE_/, "", op); n[op]++ }
        END { for (o in n) print n[o], o }' | sort -k1,1nr)
    BENCH_FUSEOPS=$(awk 'NF == 2 { t += $1; s = s " " $2 "=" $1 } END { printf "%d%s\n", t, s }' <<<"$counts")
    rm -f "$BENCH_TMP/fuseops.data"
}

# CPU seconds (user + system, all threads) a process has used so far; "" if it is gone.
bench_proc_cpu() { # PID
    local stat
    [ -n "$1" ] && stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    stat=${stat##*) }   # the fields after "(comm) "; utime and stime are the 12th and 13th
    awk -v s="$stat" -v hz="$(getconf CLK_TCK)" 'BEGIN { split(s, f, " "); printf "%.2f\n", (f[12] + f[13]) / hz }'
}
