# shellcheck shell=bash
# Shared helpers for the benchmark scripts in bench/: install what they need, build DualFS and
# the FUSE tools of bench/fuse-tools (memfs, the in-memory FUSE ceiling; delayfs, a slow
# device), and set up / tear down every file system under comparison on sparse images in one
# temporary folder, which a trap always cleans up (unmounts, detaches loop devices, stops the
# FUSE daemons it started, removes the images), also on failure or Ctrl-C. Also: --out (a CSV
# of every figure and a PNG chart in the DualFS paper's style) and --help for every script.
#
# Source it, then:
#   bench_usage SCRIPT [EXIT]        # print the script's header comment (its usage) and exit
#   bench_init                       # root check, temp folder, cleanup trap
#   bench_install PKG...             # apt-get install the missing ones (idempotent)
#   bench_build                      # DualFS (release, workspace), memfs, delayfs, diskmodel
#   bench_available FS...            # the ones that can be set up here (others: a note why not)
#   bench_fs_threads_list "FS..." LIST  # each DualFS of FS... once per thread count of LIST
#   fs_mount FS MNT SIZE             # make a fresh FS of about SIZE bytes (sparse) mounted at MNT
#   fs_umount FS MNT                 # unmount (waiting for the daemon's last write), free images
#   fs_daemon_pid FS MNT             # pid of the FUSE daemon serving MNT (for perf)
#   bench_out_init DIR NAME          # with --out DIR: DIR/NAME.csv gets every figure
#   bench_row FS PHASE METRIC VALUE UNIT   # one figure (kept only with --out; n/a skipped)
#   bench_chart METRIC TITLE [WHAT]  # DIR/NAME.png from the rows of METRIC (see there)
#
# File systems (FS): dualfs, dualfs-wb (DualFS -o writeback_cache), ext2, ext3, ext4 (kernel,
# loop devices), fuse2fs (on an ext4 image file), memfs (in memory, the FUSE ceiling); for the
# latency benchmark also dualfs-slow (DualFS whose metadata image sits on delayfs: every
# metadata-device I/O waits BENCH_DELAY_MS) and ext4-slow (kernel ext4 on a loop device over a
# delayfs file: every I/O waits). A DualFS name with -tN after it (dualfs-t4, dualfs-wb-t8) is
# that DualFS mounted with --threads N (bench_fs_threads_list makes them from --threads LIST).
# The FUSE transport (README, `transport=`): dualfs-ring is DualFS over FUSE over io_uring (the
# kernel's enable_uring is switched on for the run and put back at its end), dualfs-dev over
# read() and write() on /dev/fuse; plain dualfs takes the kernel's default. memfs-ll and
# memfs-ll-ring are libfuse's own in-memory example (memfs_ll -o no_timeout) over /dev/fuse and
# over io_uring: the ceiling of each transport, from a libfuse build named by BENCH_LIBFUSE
# (never a dependency: without it they are skipped with a note).
#
# Environment:
#   BENCH_TMPDIR      where the temp folder goes (default $TMPDIR or /var/tmp)
#   CARGO_TARGET_DIR  where DualFS and the FUSE tools are built (default <repo>/target)
#   MEMFS_THREADS     memfs's thread count (default 4)
#   DUALFS_OPTS       extra -o options for both DualFS columns (comma-separated)
#   DUALFS_THREADS    --threads for the DualFS daemon (default: its own default)
#   BENCH_DUALFS_LOOP 1: DualFS's two images sit behind loop devices, as the ext file systems'
#                     do (the write-economy benchmark reads what each device was sent)
#   BENCH_META_SIZE   DualFS's metadata device size (default: a quarter of SIZE, at least 1G)
#   BENCH_DELAY_MS    delayfs's delay per I/O for the *-slow file systems (default 5)
#   BENCH_LIBFUSE     a libfuse (3.18 or later) build folder holding example/memfs_ll, for
#                     memfs-ll and memfs-ll-ring (e.g. meson setup B -Denable-io-uring=true
#                     -Dexamples=true && ninja -C B, from libfuse's sources)

BENCH_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH_ALL_FS="dualfs dualfs-wb ext2 ext3 ext4 fuse2fs memfs"
BENCH_EXTRA_FS="dualfs-slow dualfs-nointent dualfs-nosup dualfs-ring dualfs-dev ext4-slow memfs-ll memfs-ll-ring"
BENCH_DUALFS_BASES="dualfs dualfs-wb dualfs-slow dualfs-nointent dualfs-nosup dualfs-ring dualfs-dev"
URING_PARAM=/sys/module/fuse/parameters/enable_uring
# enable_uring as this run found it, read here in the script's own shell: the file systems
# that switch it on may be mounted in a subshell, whose variables the cleanup never sees.
BENCH_URING_WAS=$(cat "$URING_PARAM" 2>/dev/null || true)
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$BENCH_REPO/target}"
DUALFS_BIN="$CARGO_TARGET_DIR/release/dualfs"
MKFS_DUALFS_BIN="$CARGO_TARGET_DIR/release/mkfs-dualfs"
CLEANER_BIN="$CARGO_TARGET_DIR/release/dualfs-cleaner"
MEMFS_BIN="$CARGO_TARGET_DIR/release/memfs"
DELAYFS_BIN="$CARGO_TARGET_DIR/release/delayfs"
MEMFS_THREADS="${MEMFS_THREADS:-4}"
BENCH_DELAY_MS="${BENCH_DELAY_MS:-5}"

BENCH_TMP=""
declare -a BENCH_MOUNTS=()   # "FS|MNT" of everything mounted and not yet unmounted
declare -A BENCH_LOOP=()     # MNT -> loop devices (space-separated) behind it
declare -A BENCH_PID=()      # MNT -> pid of a FUSE daemon we started in the background
declare -A BENCH_DEV=()      # MNT -> "ROLE=DEVICE ..." (all=, or meta= and data= for DualFS)
declare -A BENCH_SKIP=()     # FS -> why it cannot be set up here
BENCH_FUSE_TOOLS_ERR=""      # why bench/fuse-tools did not build (memfs/delayfs skipped)

bench_log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
bench_die() { printf '%s: %s\n' "$(basename "$0")" "$*" >&2; exit 1; }

# The usage of a script is its header comment: every line after the shebang up to the first
# line that is not a comment, without the "# ". Printed before anything is built or installed.
bench_usage() { # SCRIPT [EXIT]: to stdout with 0, to stderr otherwise
    local text
    text=$(awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$1")
    if [ "${2:-0}" = 0 ]; then printf '%s\n' "$text"; else printf '%s\n' "$text" >&2; fi
    exit "${2:-0}"
}

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

# Build DualFS (release, the workspace's programs), then the FUSE tools of bench/fuse-tools
# (a workspace member too, built on their own so that a failure there only drops the memfs
# column, with a note, instead of the whole benchmark).
bench_build() {
    command -v cargo >/dev/null || bench_die "cargo is needed to build DualFS"
    bench_log "building DualFS (release) into $CARGO_TARGET_DIR"
    (cd "$BENCH_REPO" && cargo build --release --workspace --exclude dualfs-bench-fuse --quiet 2>"$BENCH_TMP/build.log") ||
        { cat "$BENCH_TMP/build.log" >&2; bench_die "DualFS build failed"; }
    bench_log "building memfs, delayfs and diskmodel (bench/fuse-tools)"
    if ! (cd "$BENCH_REPO" && cargo build --release -p dualfs-bench-fuse --quiet 2>"$BENCH_TMP/build-fuse.log"); then
        BENCH_FUSE_TOOLS_ERR="bench/fuse-tools did not build: $(grep -m1 -E '^error' "$BENCH_TMP/build-fuse.log" || tail -n 1 "$BENCH_TMP/build-fuse.log")"
        bench_log "$BENCH_FUSE_TOOLS_ERR"
    fi
}

# bench_example NAME: build examples/NAME.rs (release); its path in BENCH_EXAMPLE.
bench_example() {
    (cd "$BENCH_REPO" && cargo build --release --quiet --example "$1" 2>"$BENCH_TMP/build-$1.log") ||
        { cat "$BENCH_TMP/build-$1.log" >&2; bench_die "examples/$1.rs did not build"; }
    BENCH_EXAMPLE="$CARGO_TARGET_DIR/release/examples/$1"
}

# Why FS cannot be set up on this machine (empty: it can), after bench_install and bench_build.
bench_unavailable() {
    case "$(bench_fs_base "$1")" in
        memfs | dualfs-slow | ext4-slow)
            [ -n "$BENCH_FUSE_TOOLS_ERR" ] && { echo "$BENCH_FUSE_TOOLS_ERR"; return; }
            [ "$1" = memfs ] && [ ! -x "$MEMFS_BIN" ] && { echo "$MEMFS_BIN was not built"; return; }
            [ "$1" != memfs ] && [ ! -x "$DELAYFS_BIN" ] && { echo "$DELAYFS_BIN was not built"; return; } ;;
        fuse2fs) command -v fuse2fs >/dev/null || { echo "fuse2fs is not installed"; return; } ;;
        memfs-ll | memfs-ll-ring)
            [ -x "${BENCH_LIBFUSE:-}/example/memfs_ll" ] ||
                { echo "libfuse's memfs_ll: set BENCH_LIBFUSE to a libfuse 3.18+ build folder"; return; }
            [ "$1" = memfs-ll-ring ] && [ ! -w "$URING_PARAM" ] && { echo "this kernel has no FUSE over io_uring"; return; } ;;
        dualfs-ring) [ -w "$URING_PARAM" ] || { echo "this kernel has no FUSE over io_uring"; return; } ;;
        ext2 | ext3 | ext4) command -v "mkfs.$1" >/dev/null || { echo "mkfs.$1 is not installed"; return; } ;;
    esac
    return 0
}

# bench_available FS...: print the ones that can run here; for the others a note on stderr and
# in BENCH_SKIP (the scripts print it under their tables and put it in the CSV).
bench_available() {
    local f why out=()
    for f in "$@"; do
        why=$(bench_unavailable "$f")
        if [ -n "$why" ]; then
            BENCH_SKIP[$f]=$why
            bench_log "$(bench_fs_label "$f"): skipped ($why)"
        else
            out+=("$f")
        fi
    done
    echo "${out[*]}"
}

# The skip notes, one line each, for under a table.
bench_print_skipped() {
    local f
    for f in "${!BENCH_SKIP[@]}"; do
        printf '%s: skipped: %s\n' "$(bench_fs_label "$f")" "${BENCH_SKIP[$f]}"
        bench_row "$f" all skipped 1 note
    done
}

# A DualFS with its FUSE thread count in its name: dualfs-t4 is dualfs mounted with --threads 4.
# bench_fs_base FS: the file system without that suffix; bench_fs_threads FS: N (or nothing).
bench_fs_base() {
    case "$1" in
        dualfs*-t[0-9]*)
            case " $BENCH_DUALFS_BASES " in *" ${1%-t*} "*)
                [[ "${1##*-t}" =~ ^[1-9][0-9]*$ ]] && { echo "${1%-t*}"; return; } ;;
            esac ;;
    esac
    echo "$1"
}
bench_fs_threads() { [ "$(bench_fs_base "$1")" != "$1" ] && echo "${1##*-t}"; return 0; }

# bench_fs_threads_list "FS..." LIST: FS... with each DualFS in it (dualfs, dualfs-wb,
# dualfs-slow) replaced by one per thread count of LIST (commas or spaces: "2,4" makes
# dualfs-t2 dualfs-t4); an empty LIST leaves FS... as it is.
bench_fs_threads_list() {
    local f n out=()
    for f in $1; do
        if [ -n "$2" ] && bench_is_dualfs "$f" && [ -z "$(bench_fs_threads "$f")" ]; then
            for n in ${2//,/ }; do
                [[ "$n" =~ ^[1-9][0-9]*$ ]] || bench_die "--threads: '$n' is not a thread count"
                out+=("$f-t$n")
            done
        else
            out+=("$f")
        fi
    done
    echo "${out[*]}"
}

bench_fs_label() {
    if [ -n "$(bench_fs_threads "$1")" ]; then
        echo "$(bench_fs_label "$(bench_fs_base "$1")") t$(bench_fs_threads "$1")"
        return
    fi
    case "$1" in
        dualfs) echo "DualFS" ;;
        dualfs-wb) echo "DualFS wbcache" ;;
        dualfs-slow) echo "DualFS slow-meta" ;;
        dualfs-nointent) echo "DualFS intent=off" ;;
        dualfs-nosup) echo "DualFS supervise=off" ;;
        dualfs-ring) echo "DualFS io_uring" ;;
        dualfs-dev) echo "DualFS /dev/fuse" ;;
        dualfs-small) echo "DualFS small-meta" ;;
        dualfs-ro) echo "DualFS -o ro" ;;
        dualfs-ro-open) echo "DualFS -o ro+open" ;;
        ext2 | ext3 | ext4 | xfs) echo "$1 (kernel)" ;;
        ext4-slow) echo "ext4 slow-dev" ;;
        fuse2fs) echo "fuse2fs (ext4)" ;;
        memfs) echo "memfs (ceiling)" ;;
        memfs-ll) echo "memfs_ll /dev/fuse" ;;
        memfs-ll-ring) echo "memfs_ll io_uring" ;;
        *) echo "$1" ;;
    esac
}

bench_is_dualfs() { case " $BENCH_DUALFS_BASES " in *" $(bench_fs_base "$1") "*) return 0 ;; *) return 1 ;; esac; }
bench_is_fuse() { bench_is_dualfs "$1" && return 0; case "$1" in fuse2fs | memfs | memfs-ll | memfs-ll-ring) return 0 ;; *) return 1 ;; esac; }

# Switch FUSE over io_uring on for the rest of the run (the kernel checks the switch at every
# ring command, so it stays on until bench_cleanup puts the old value back).
_bench_ring_on() {
    [ -w "$URING_PARAM" ] || bench_die "this kernel has no FUSE over io_uring ($URING_PARAM)"
    echo Y >"$URING_PARAM"
}

bench_check_fs_list() {
    local f
    for f in "$@"; do
        case " $BENCH_ALL_FS $BENCH_EXTRA_FS " in *" $(bench_fs_base "$f") "*) ;; *) bench_die "unknown file system '$f' (known: $BENCH_ALL_FS $BENCH_EXTRA_FS)" ;; esac
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

# _bench_attach VAR IMAGE: attach IMAGE to a free loop device, VAR = its path.
_bench_attach() {
    local l
    l=$(losetup -f --show "$2") || bench_die "losetup $2 failed"
    printf -v "$1" '%s' "$l"
}

# _bench_start_fuse MNT LOG CMD...: start a FUSE daemon in the background, wait for its mount.
_bench_start_fuse() {
    local mnt=$1 log=$2 pid
    shift 2
    "$@" >"$log" 2>&1 &
    pid=$!
    BENCH_PID[$mnt]=$pid
    _bench_wait_mounted "$mnt" "$pid" || { cat "$log" >&2; bench_die "$(basename "$1") did not mount $mnt"; }
}

# fs_mount FS MNT SIZE — SIZE in bytes-with-suffix as truncate takes it (e.g. 8G): the size of
# the ext images and of DualFS's data device (its metadata device gets a quarter, at least 1G,
# or BENCH_META_SIZE).
fs_mount() {
    local fs=$1 mnt=$2 size=${3:-8G} dir="$BENCH_TMP/img-$1" loop opts base threads
    base=$(bench_fs_base "$fs") threads=$(bench_fs_threads "$fs")
    mkdir -p "$dir" "$mnt"
    case "$base" in
        dualfs | dualfs-wb | dualfs-slow | dualfs-nointent | dualfs-nosup | dualfs-ring | dualfs-dev)
            local bytes meta meta_dev data_dev
            bytes=$(numfmt --from=iec "$size")
            meta=$((bytes / 4)); [ $meta -lt $((1 << 30)) ] && meta=$((1 << 30))
            [ -n "${BENCH_META_SIZE:-}" ] && meta=$(numfmt --from=iec "$BENCH_META_SIZE")
            mkdir -p "$dir/back"
            truncate -s "$meta" "$dir/back/meta.img"
            truncate -s "$bytes" "$dir/data.img"
            meta_dev="$dir/back/meta.img" data_dev="$dir/data.img"
            if [ "${BENCH_DUALFS_LOOP:-}" = 1 ] && [ "$base" != dualfs-slow ]; then
                local ml dl
                _bench_attach ml "$meta_dev"
                BENCH_LOOP[$mnt]=$ml
                _bench_attach dl "$data_dev"
                BENCH_LOOP[$mnt]="$ml $dl"
                meta_dev=$ml data_dev=$dl
            fi
            "$MKFS_DUALFS_BIN" -q "$meta_dev" "$data_dev" >/dev/null
            BENCH_DEV[$mnt]="meta=$meta_dev data=$data_dev"
            if [ "$base" = dualfs-slow ]; then
                # The metadata image is reached through delayfs: every read, write and fsync
                # of it waits BENCH_DELAY_MS, as on a disk that seeks.
                mkdir -p "$dir/slow"
                BENCH_MOUNTS+=("delayfs|$dir/slow")
                _bench_start_fuse "$dir/slow" "$dir/delayfs.log" \
                    "$DELAYFS_BIN" "$dir/back" "$dir/slow" --delay-ms "$BENCH_DELAY_MS"
                meta_dev="$dir/slow/meta.img"
            fi
            opts="${DUALFS_OPTS:-}"
            [ "$base" = dualfs-wb ] && opts="${opts:+$opts,}writeback_cache"
            # Without the intent log: what it costs (docs/DESIGN.md, "Surviving the daemon").
            [ "$base" = dualfs-nointent ] && opts="${opts:+$opts,}intent=off"
            # Without the supervisor: what surviving the daemon's death costs (the worker's
            # threads then share one /dev/fuse descriptor instead of a clone each).
            [ "$base" = dualfs-nosup ] && opts="${opts:+$opts,}supervise=off"
            [ "$base" = dualfs-dev ] && opts="${opts:+$opts,}transport=dev"
            if [ "$base" = dualfs-ring ]; then
                _bench_ring_on
                opts="${opts:+$opts,}transport=uring"
            fi
            local args=("$meta_dev" "$data_dev" "$mnt")
            [ -n "$opts" ] && args+=(-o "$opts")
            threads=${threads:-${DUALFS_THREADS:-}}
            [ -n "$threads" ] && args+=(--threads "$threads")
            BENCH_MOUNTS+=("$fs|$mnt")
            "$DUALFS_BIN" mount "${args[@]}"
            if [ "$base" = dualfs-ring ] && ! "$DUALFS_BIN" info "$meta_dev" | grep -q "FUSE transport: *uring"; then
                bench_die "$fs: the mount did not set up its io_uring queues (see its log)"
            fi
            ;;
        ext2 | ext3 | ext4 | ext4-slow)
            local kind=${fs%-slow} img="$dir/fs.img"
            if [ "$fs" = ext4-slow ]; then
                # A loop device over a file of delayfs: every I/O of ext4 waits BENCH_DELAY_MS.
                mkdir -p "$dir/back" "$dir/slow"
                truncate -s "$size" "$dir/back/fs.img"
                BENCH_MOUNTS+=("delayfs|$dir/slow")
                _bench_start_fuse "$dir/slow" "$dir/delayfs.log" \
                    "$DELAYFS_BIN" "$dir/back" "$dir/slow" --delay-ms "$BENCH_DELAY_MS"
                img="$dir/slow/fs.img"
            else
                truncate -s "$size" "$img"
            fi
            _bench_attach loop "$img"
            BENCH_LOOP[$mnt]=$loop
            BENCH_DEV[$mnt]="all=$loop"
            local ext_opts="lazy_itable_init=0"
            [ "$kind" != ext2 ] && ext_opts="$ext_opts,lazy_journal_init=0"
            "mkfs.$kind" -q -F -E "$ext_opts" "$loop" >/dev/null
            BENCH_MOUNTS+=("$fs|$mnt")
            mount -t "$kind" "$loop" "$mnt"
            ;;
        fuse2fs)
            truncate -s "$size" "$dir/fs.img"
            mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$dir/fs.img" >/dev/null
            BENCH_MOUNTS+=("$fs|$mnt")
            _bench_start_fuse "$mnt" "$dir/fuse2fs.log" fuse2fs "$dir/fs.img" "$mnt" -f
            ;;
        memfs)
            BENCH_MOUNTS+=("$fs|$mnt")
            _bench_start_fuse "$mnt" "$dir/memfs.log" "$MEMFS_BIN" "$mnt" --threads "$MEMFS_THREADS"
            ;;
        memfs-ll | memfs-ll-ring)
            local ll_opts=no_timeout
            if [ "$fs" = memfs-ll-ring ]; then
                _bench_ring_on
                ll_opts="$ll_opts,io_uring"
            fi
            BENCH_MOUNTS+=("$fs|$mnt")
            _bench_start_fuse "$mnt" "$dir/memfs_ll.log" "$BENCH_LIBFUSE/example/memfs_ll" -f -o "$ll_opts" "$mnt"
            ;;
        *) bench_die "unknown file system '$fs'" ;;
    esac
    mountpoint -q "$mnt" || bench_die "$fs: $mnt is not mounted"
}

# _bench_unmount FS MNT: unmount one mount point and wait for the daemon we started for it.
_bench_unmount() {
    local fs=$1 mnt=$2 rc=0
    if mountpoint -q "$mnt"; then
        if bench_is_dualfs "$fs"; then
            "$DUALFS_BIN" umount "$mnt" || rc=$?
        else
            umount "$mnt" || rc=$?
        fi
    fi
    if [ -n "${BENCH_PID[$mnt]:-}" ]; then
        _bench_wait_exit "${BENCH_PID[$mnt]}" 600 || rc=1
        unset "BENCH_PID[$mnt]"
    fi
    [ $rc = 0 ] && _bench_forget_mount "$mnt"
    return $rc
}

# fs_umount FS MNT — unmount and wait until everything is on the images (DualFS: its final
# checkpoint; fuse2fs: its daemon's exit), detach the loop devices, remove the images.
# Sets BENCH_UMOUNT_SECS to the time from the unmount call until all is written. With
# BENCH_KEEP_LOOPS=1 the loop devices stay attached (the caller reads their counters, then
# calls fs_release FS MNT).
fs_umount() {
    local fs=$1 mnt=$2 rc=0 t0
    t0=$(bench_now)
    _bench_unmount "$fs" "$mnt" || rc=$?
    BENCH_UMOUNT_SECS=$(bench_since "$t0")
    [ "${BENCH_KEEP_LOOPS:-}" = 1 ] && return $rc
    fs_release "$fs" "$mnt" || rc=$?
    return $rc
}

# fs_release FS MNT — after fs_umount: detach the loop devices, stop delayfs, remove the images.
fs_release() {
    local fs=$1 mnt=$2 dir="$BENCH_TMP/img-$1" rc=0 l
    if [ -n "${BENCH_LOOP[$mnt]:-}" ]; then
        for l in ${BENCH_LOOP[$mnt]}; do losetup -d "$l" || rc=$?; done
        unset "BENCH_LOOP[$mnt]"
    fi
    unset "BENCH_DEV[$mnt]"
    if [ -d "$dir/slow" ]; then _bench_unmount delayfs "$dir/slow" || rc=$?; fi
    rm -rf "$dir"
    return $rc
}

# Bytes a block device was sent to write so far (/sys/block/NAME/stat: sectors written, in
# 512-byte units, whatever the device's own sector size).
bench_dev_written() { # DEVICE
    local name
    name=$(basename "$(readlink -f "$1")")
    awk '{ printf "%.0f\n", $7 * 512 }' "/sys/block/$name/stat"
}

# The pid of the FUSE daemon serving MNT (DualFS, fuse2fs, memfs), for perf record -p.
fs_daemon_pid() {
    local fs=$1 mnt=$2
    if [ -n "${BENCH_PID[$mnt]:-}" ]; then echo "${BENCH_PID[$mnt]}"; return; fi
    bench_is_dualfs "$fs" && pgrep -n -f -- "dualfs mount .* $mnt( |\$)"
    return 0
}

# The trap: undo whatever is still set up, whatever state the script died in.
bench_cleanup() {
    local rc=$? i m fs mnt l
    trap - EXIT INT TERM HUP
    set +e
    for ((i = ${#BENCH_MOUNTS[@]} - 1; i >= 0; i--)); do
        m=${BENCH_MOUNTS[$i]}; fs=${m%%|*}; mnt=${m#*|}
        bench_log "cleanup: unmounting $fs at $mnt"
        if mountpoint -q "$mnt"; then
            if bench_is_dualfs "$fs"; then
                timeout 300 "$DUALFS_BIN" umount "$mnt"
            else
                umount "$mnt"
            fi
            mountpoint -q "$mnt" && umount -l "$mnt"
        fi
        # A delayfs below must not be unmounted before the loop device over it is gone.
        if [ -n "${BENCH_LOOP[$mnt]:-}" ]; then
            for l in ${BENCH_LOOP[$mnt]}; do losetup -d "$l"; done
            unset "BENCH_LOOP[$mnt]"
        fi
        if [ -n "${BENCH_PID[$mnt]:-}" ]; then
            _bench_wait_exit "${BENCH_PID[$mnt]}" 30 || kill "${BENCH_PID[$mnt]}" 2>/dev/null
            unset "BENCH_PID[$mnt]"
        fi
    done
    for mnt in "${!BENCH_PID[@]}"; do
        _bench_wait_exit "${BENCH_PID[$mnt]}" 30 || kill "${BENCH_PID[$mnt]}" 2>/dev/null
    done
    for mnt in "${!BENCH_LOOP[@]}"; do for l in ${BENCH_LOOP[$mnt]}; do losetup -d "$l"; done; done
    [ -n "$BENCH_TMP" ] && [ -d "$BENCH_TMP" ] && rm -rf "$BENCH_TMP"
    if [ -n "$BENCH_URING_WAS" ] && [ "$(cat "$URING_PARAM")" != "$BENCH_URING_WAS" ]; then
        echo "$BENCH_URING_WAS" >"$URING_PARAM"
    fi
    # A script's own undoing (settings it changed), after the unmounts.
    declare -F bench_cleanup_extra >/dev/null && bench_cleanup_extra
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

# bench_rounds HOW N: how a figure came from N rounds, for titles: "1 round" (one figure:
# neither a median nor a best of anything) or "HOW of N rounds" (HOW: median, best).
bench_rounds() { if [ "$2" = 1 ]; then echo "1 round"; else echo "$1 of $2 rounds"; fi; }

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

# ---- --out DIR: every figure in a CSV, and a chart of the timing figures.
#
# The CSV (DIR/NAME.csv) has one row per figure:
#   benchmark,fs,phase,metric,value,unit
# fs is the file system (or configuration) key (dualfs, ext4, memfs, ...), phase what was
# measured (a PostMark phase, "create W=4", "read loaded", ...), metric the kind of figure
# (seconds, ops_per_sec, p99_us, bytes, ...). Figures printed as n/a have no row; a file
# system that could not be set up has one row "FS,all,skipped,1,note".
BENCH_OUT="" BENCH_NAME="" BENCH_CSV=""
bench_out_init() { # DIR NAME
    BENCH_OUT=$1 BENCH_NAME=$2
    [ -n "$BENCH_OUT" ] || return 0
    mkdir -p "$BENCH_OUT" || bench_die "cannot make $BENCH_OUT"
    BENCH_OUT=$(cd "$BENCH_OUT" && pwd)
    BENCH_CSV="$BENCH_OUT/$BENCH_NAME.csv"
    echo "benchmark,fs,phase,metric,value,unit" >"$BENCH_CSV"
}

bench_row() { # FS PHASE METRIC VALUE UNIT
    [ -n "$BENCH_CSV" ] || return 0
    [[ "$4" =~ ^-?[0-9]+([.][0-9]+)?([eE][-+]?[0-9]+)?$ ]] || return 0
    local f
    for f in "$1" "$2" "$3" "$5"; do
        case "$f" in *,* | *'"'*) bench_die "CSV field with a comma or quote: $f" ;; esac
    done
    printf '%s,%s,%s,%s,%s,%s\n' "$BENCH_NAME" "$1" "$2" "$3" "$4" "$5" >>"$BENCH_CSV"
}

# bench_chart METRIC TITLE [WHAT] — DIR/NAME.png (or DIR/NAME-SUFFIX.png with BENCH_CHART_SUFFIX),
# drawn by gnuplot in the style of the DualFS paper's figures: one group of bars per phase,
# one bar per file system, each bar the file system's figure over the reference file
# system's in that phase (ext2 when it ran, as in the paper; else ext4, else the first).
# METRIC must be "lower is better" (a time, a latency, bytes written); WHAT names it on the
# y axis ("time", "p99 latency", "bytes written"). The reference's own figure is printed
# under each group. With one file system only (recovery) the bars are its own figures. Needs
# gnuplot (installed with gnuplot-nox); without it: a note, no PNG.
bench_chart() {
    [ -n "$BENCH_CSV" ] || return 0
    local metric=$1 title=$2 what=${3:-time} png dat ref ncol
    png="$BENCH_OUT/$BENCH_NAME${BENCH_CHART_SUFFIX:+-$BENCH_CHART_SUFFIX}.png"
    dat="$BENCH_OUT/.$BENCH_NAME-$metric.dat"
    command -v gnuplot >/dev/null || bench_install gnuplot-nox ||
        { bench_log "chart: no gnuplot, no $png"; return 0; }
    # The reference: ext2, ext4, or the first file system with rows of this metric.
    ref=$(awk -F, -v m="$metric" 'NR > 1 && $4 == m { seen[$2] = 1; if (first == "") first = $2 }
        END { if ("ext2" in seen) print "ext2"; else if ("ext4" in seen) print "ext4"; else print first }' "$BENCH_CSV")
    [ -n "$ref" ] || { bench_log "chart: no $metric figures"; return 0; }
    local labels="" f nfs=0 unit
    for f in $(awk -F, -v m="$metric" 'NR > 1 && $4 == m && !s[$2]++ { printf "%s ", $2 }' "$BENCH_CSV"); do
        labels="$labels$f=$(bench_fs_label "$f");"
        nfs=$((nfs + 1))
    done
    unit=$(awk -F, -v m="$metric" 'NR > 1 && $4 == m { print $6; exit }' "$BENCH_CSV")
    # Rows: phase (with the reference's figure under it), then each file system's ratio.
    awk -F, -v m="$metric" -v ref="$ref" -v labels="$labels" -v absolute=$((nfs == 1)) '
        function short(v) {
            if (unit == "bytes") return sprintf("%.1f MiB", v / 1048576)
            return (v >= 100 ? sprintf("%.0f", v) : (v >= 10 ? sprintf("%.1f", v) : sprintf("%.3g", v))) " " unit }
        NR > 1 && $4 == m {
            if (!($3 in pseen)) { pseen[$3] = 1; phases[np++] = $3 }
            if (!($2 in fseen)) { fseen[$2] = 1; fss[nf++] = $2 }
            v[$3, $2] = $5; unit = $6 }
        END {
            n = split(labels, l, ";"); for (i = 1; i <= n; i++) { split(l[i], kv, "="); name[kv[1]] = kv[2] }
            printf "phase"; for (j = 0; j < nf; j++) printf "\t%s", name[fss[j]]; printf "\n"
            for (i = 0; i < np; i++) {
                p = phases[i]; r = v[p, ref]
                if (absolute) printf "%s", p
                else printf "%s\\n(%s %s)", p, ref, ((p, ref) in v) ? short(r) : "n/a"
                for (j = 0; j < nf; j++) {
                    f = fss[j]
                    if (absolute) printf "\t%s", v[p, f]
                    else if ((p, f) in v && (p, ref) in v && r > 0) printf "\t%.4f", v[p, f] / r; else printf "\t?"
                }
                printf "\n"
            } }' "$BENCH_CSV" >"$dat"
    ncol=$(head -n 1 "$dat" | awk -F'\t' '{ print NF }')
    local yscale subtitle ylabel
    subtitle="$what of each file system over $(bench_fs_label "$ref")'s in the same run: lower is better"
    ylabel="$what relative to $(bench_fs_label "$ref")"
    if [ $nfs = 1 ]; then
        subtitle="$(bench_fs_label "$ref"), $what in $unit: lower is better"
        ylabel="$what ($unit)"
    fi
    # Bars spanning more than 30 times (largest over smallest) would flatten the small ones on
    # a linear axis: a log axis then. Its bottom is a decade below the power of ten under the
    # smallest bar, so every bar is at least a decade tall: gnuplot's autoscale starts at that
    # power of ten itself (at 1 when the reference's bars, all 1, are the smallest: they
    # vanished). Under 30 times, a linear axis from 0 shows every bar.
    yscale=$(awk -F'\t' -v several=$((nfs > 1)) '
        function floor(x) { return (x >= 0 || x == int(x)) ? int(x) : int(x) - 1 }
        NR > 1 { for (i = 2; i <= NF; i++) if ($i != "?" && $i > 0) {
            if (max == "" || $i > max) max = $i
            if (min == "" || $i < min) min = $i } }
        END {
            if (several && min > 0 && max / min > 30)
                printf "set logscale y 10; set yrange [%g:*]", 10 ^ (floor(log(min) / log(10)) - 1)
            else print "set yrange [0:*]" }' "$dat")
    local nphases width
    nphases=$(($(wc -l <"$dat") - 1))
    width=$((300 + nphases * (ncol - 1) * 28 + nphases * 30))
    [ $width -lt 800 ] && width=800
    gnuplot <<GNUPLOT 2>"$dat.log" || { bench_log "chart: gnuplot failed: $(head -n 3 "$dat.log")"; return 0; }
set terminal pngcairo size $width,520 font "DejaVu Sans,10" noenhanced
set output "$png"
set datafile separator "\t"
set datafile missing "?"
set title "$title\n($subtitle)"
set style data histograms
set style histogram clustered gap 1.5
set style fill solid 0.85 border -1
set boxwidth 0.9
set key outside right top vertical
set ylabel "$ylabel"
$yscale
set grid ytics
set xtics nomirror font ",9"
set ytics nomirror
set border 3
set bmargin 5
plot for [i=2:$ncol] "$dat" using i:xtic(1) title columnheader(i)$([ $nfs -gt 1 ] && echo ', 1 with lines dashtype 2 lc rgb "gray40" notitle')
GNUPLOT
    rm -f "$dat" "$dat.log"
    bench_log "chart: $png"
}

# bench_import_csv FILE: the rows an example wrote with --csv (fs,phase,metric,value,unit).
bench_import_csv() {
    [ -n "$BENCH_CSV" ] && [ -s "$1" ] || return 0
    sed "s/^/$BENCH_NAME,/" "$1" >>"$BENCH_CSV"
    rm -f "$1"
}

# bench_wrapper_args ARGS...: for the scripts that wrap one example program: --help prints
# the script's usage (before anything is built), --out DIR is taken out (BENCH_OUT_DIR), the
# rest is left in BENCH_ARGS for the example.
bench_wrapper_args() {
    BENCH_ARGS=() BENCH_OUT_DIR=""
    while [ $# -gt 0 ]; do
        case "$1" in
            -h | --help) bench_usage "$0" 0 ;;
            --out) [ $# -ge 2 ] || bench_usage "$0" 2; BENCH_OUT_DIR=$2; shift 2 ;;
            *) BENCH_ARGS+=("$1"); shift ;;
        esac
    done
}

# bench_kernel_tar [TARBALL]: a plain tar of a kernel tree in BENCH_TAR (TARBALL, default the
# newest /usr/src/linux-source-*.tar.xz of Debian's linux-source, decompressed once into the
# temporary folder, so that untar times file creation, not xz), its top folder in
# BENCH_TAR_TREE, BENCH_TAR_ENTRIES/SYMLINKS/HARDLINKS, and BENCH_TAR_BYTES (file contents).
bench_kernel_tar() {
    local tarball=${1:-}
    if [ -z "$tarball" ]; then
        tarball=$(ls /usr/src/linux-source-*.tar.xz 2>/dev/null | sort -V | tail -n 1)
        [ -n "$tarball" ] || bench_die "no /usr/src/linux-source-*.tar.xz (apt-get install linux-source)"
    fi
    case "$tarball" in
        *.tar) BENCH_TAR=$tarball ;;
        *)
            bench_log "decompressing $tarball"
            BENCH_TAR="$BENCH_TMP/linux.tar"
            case "$tarball" in
                *.gz) gzip -dc "$tarball" >"$BENCH_TAR" ;;
                *) xz -dc -T0 "$tarball" >"$BENCH_TAR" ;;
            esac
            ;;
    esac
    BENCH_TAR_TREE=$(tar -tf "$BENCH_TAR" | awk -F/ 'NR == 1 { print $1 }')
    read -r BENCH_TAR_ENTRIES BENCH_TAR_SYMLINKS BENCH_TAR_HARDLINKS BENCH_TAR_BYTES < <(tar -tvf "$BENCH_TAR" |
        awk '{ n++ } /^l/ { s++ } /^h/ { h++ } /^-/ { b += $3 } END { printf "%d %d %d %.0f\n", n, s, h, b }')
    bench_log "$BENCH_TAR_TREE: $BENCH_TAR_ENTRIES entries ($BENCH_TAR_SYMLINKS symlinks, $BENCH_TAR_HARDLINKS hard links), $((BENCH_TAR_BYTES >> 20)) MiB of file contents"
}

# bench_postmark DIR LOG FILES TRANSACTIONS SUBDIRS MIN_SIZE MAX_SIZE: one PostMark run in DIR;
# LOG gets its output, each line prefixed by the time it was printed (a progress line such as
# "Creating files...Done" is printed when its phase ends). With BENCH_POSTMARK_CGROUP set (a
# cgroup's folder), PostMark runs in that cgroup.
bench_postmark() {
    printf 'set location %s\nset number %s\nset transactions %s\nset subdirectories %s\nset size %s %s\nrun\nquit\n' \
        "$1" "$3" "$4" "$5" "$6" "$7" |
        (cd "$BENCH_TMP" && { [ -z "${BENCH_POSTMARK_CGROUP:-}" ] || echo "$BASHPID" >"$BENCH_POSTMARK_CGROUP/cgroup.procs"; } &&
            exec stdbuf -oL postmark) |
        while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done >"$2"
}
