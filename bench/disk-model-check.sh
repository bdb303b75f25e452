#!/usr/bin/env bash
# disk-model-check.sh — does diskmodel behave as its model says? Each parameter set becomes
# one simulated disk holding one file that spans it (capacity = the file's size), mounted by
# diskmodel and read through the mount with direct I/O: sequential 1 MiB reads, then random
# 4 KiB reads one at a time (queue depth 1) and from 8 threads at once (queue depth 8, which
# the disk reorders by C-LOOK). Each figure is shown three ways:
#   wall   what the reading program saw: about the model's or below it, by FUSE's round
#          trip and the copy of the data (much below for the SSD, whose requests take tens
#          of microseconds)
#   busy   from the disk's reported busy time (the figure the benchmarks use): the model's,
#          except that sequential reads may come out faster (the disk reads ahead while idle
#          between two requests, which is not busy time), and that the SSD at queue depth 8
#          comes out slower (FUSE does not keep 8 requests of tens of microseconds in
#          flight, so fewer overlap)
#   model  what the model predicts for the same workload (diskmodel --show)
# plus, for random reads, the datasheet's sum: average seek + half a turn + the transfer (an
# SSD: latency + transfer), and the requests that came back late (their real I/O outlasted
# the simulated service: a slow or busy host). The sequential range of each backing file is
# read once first, so that the host making a sparse file's pages does not slow the requests.
# Each phase takes about 3 s of simulated disk time (the default three disks: about 35 s).
#
# Usage: bench/disk-model-check.sh [MODEL...]      (run as root; default: ssd hdd7200 paper5400)
#   MODEL   a parameter set of diskmodel, with changes if wanted: hdd7200,readahead=0
#   --help  this text
# Environment: CHECK_SIZE  the simulated disks' size (default 4G)
set -euo pipefail
export LC_ALL=C
. "$(dirname "$0")/lib.sh"
case "${1:-}" in -h | --help) bench_usage "$0" ;; esac
MODELS=("$@")
[ ${#MODELS[@]} -eq 0 ] && MODELS=(ssd hdd7200 paper5400)
SIZE=$(numfmt --from=iec "${CHECK_SIZE:-4G}")
DISKMODEL_BIN="$CARGO_TARGET_DIR/release/diskmodel"

bench_init
bench_install python3
bench_log "building diskmodel (bench/fuse-tools)"
(cd "$BENCH_REPO" && cargo build --release -p dualfs-bench-fuse --quiet) || bench_die "bench/fuse-tools did not build"

back="$BENCH_TMP/back" mnt="$BENCH_TMP/mnt"
mkdir -p "$back" "$mnt"
args=() specs=()
for i in "${!MODELS[@]}"; do
    spec="${MODELS[$i]},capacity=$SIZE"
    "$DISKMODEL_BIN" --show "$spec" >/dev/null || bench_die "bad parameter set: ${MODELS[$i]}"
    truncate -s "$SIZE" "$back/d$i.img"
    args+=(--disk "d$i:$spec" --file "d$i.img:d$i")
    specs+=("$spec")
done
BENCH_MOUNTS+=("diskmodel|$mnt")
_bench_start_fuse "$mnt" "$BENCH_TMP/diskmodel.log" "$DISKMODEL_BIN" "$back" "$mnt" "${args[@]}"

python3 - "$DISKMODEL_BIN" "$back" "$mnt" "${specs[@]}" <<'EOF'
import json, mmap, os, random, subprocess, sys, threading, time

diskmodel, back, mnt, specs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
MIB = 1 << 20

def show(spec, seq_mib=64):
    out = subprocess.run([diskmodel, "--show", spec, "--seq-mib", str(seq_mib)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)

def stats(disk):
    with open(os.path.join(mnt, ".diskmodel-stats")) as f:
        report = json.load(f)
    return next(d for d in report["disks"] if d["name"] == disk)

def reads(path, size, offsets_per_thread):
    """Direct reads of `size` bytes at each offset, one thread per list; the wall time."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    def run(offsets):
        buf = mmap.mmap(-1, size)  # page-aligned, as direct I/O wants
        for off in offsets:
            os.preadv(fd, [buf], off)
    threads = [threading.Thread(target=run, args=(o,)) for o in offsets_per_thread]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - t
    os.close(fd)
    return elapsed

def phase(disk, path, size, offsets_per_thread):
    before = stats(disk)
    wall = reads(path, size, offsets_per_thread)
    after = stats(disk)
    return (wall, after["busy_s"] - before["busy_s"], after["reads"] - before["reads"],
            after["late"] - before["late"])

def warm(path, nbytes):
    """Read the backing file's range once, so that the host's first touch of it (a sparse
    file's pages being made) does not make requests late: the model is what is checked."""
    with open(path, "rb") as f:
        while nbytes > 0 and f.read(min(nbytes, 16 * MIB)):
            nbytes -= 16 * MIB

rows = []
for i, spec in enumerate(specs):
    disk, path = f"d{i}", os.path.join(mnt, f"d{i}.img")
    size = os.path.getsize(path)
    first = show(spec)["expect"]
    # About 3 s of disk time a phase.
    seq_mib = int(min(max(16, 3 * first["seq_read_mbs"] * 1e6 / MIB), 1024, size // MIB))
    n1 = int(min(max(100, 3 * first["random_read_4k_iops"]), 20000))
    n8 = int(min(max(200, 3 * first["random_read_4k_qd8_iops"]), 40000)) // 8 * 8
    info = show(spec, seq_mib)
    expect = info["expect"]
    print(f"d{i}: {json.dumps(info['params'])}", file=sys.stderr)
    rng = random.Random(1)
    blocks = size // 4096
    warm(os.path.join(back, f"d{i}.img"), seq_mib * MIB)
    wall, busy, n, late = phase(disk, path, MIB, [[k * MIB for k in range(seq_mib)]])
    assert n == seq_mib, f"{n} reads for {seq_mib} MiB"
    seq = (seq_mib * MIB / 1e6 / wall, seq_mib * MIB / 1e6 / busy, expect["seq_read_mbs"], late)
    wall, busy, n, late = phase(disk, path, 4096,
                                [[rng.randrange(blocks) * 4096 for _ in range(n1)]])
    qd1 = (n1 / wall, n1 / busy, expect["random_read_4k_iops"], late)
    datasheet = 1000 / expect["random_read_4k_datasheet_ms"]
    wall, busy, n, late = phase(disk, path, 4096, [[rng.randrange(blocks) * 4096
                                                    for _ in range(n8 // 8)] for _ in range(8)])
    qd8 = (n8 / wall, n8 / busy, expect["random_read_4k_qd8_iops"], late)
    rows.append((spec.split(",")[0], seq, qd1, datasheet, qd8))

print(f"{'':12} {'sequential MB/s':>26}   {'random 4 KiB reads/s, QD1':>36}   "
      f"{'random 4 KiB reads/s, QD8':>28}   {'late':>17}")
print(f"{'disk':12} {'wall':>8} {'busy':>8} {'model':>8}   {'wall':>8} {'busy':>8} {'model':>8} "
      f"{'datasheet':>9}   {'wall':>8} {'busy':>8} {'model':>8}   {'seq':>5} {'QD1':>5} {'QD8':>5}")
for name, seq, qd1, datasheet, qd8 in rows:
    print(f"{name:12} {seq[0]:8.1f} {seq[1]:8.1f} {seq[2]:8.1f}   "
          f"{qd1[0]:8.1f} {qd1[1]:8.1f} {qd1[2]:8.1f} {datasheet:9.1f}   "
          f"{qd8[0]:8.1f} {qd8[1]:8.1f} {qd8[2]:8.1f}   {seq[3]:5} {qd1[3]:5} {qd8[3]:5}")
print("late: requests whose real I/O (through FUSE, on the backing file) outlasted their "
      "simulated service; they make the wall figures low, not the busy ones")
EOF
_bench_unmount diskmodel "$mnt"
