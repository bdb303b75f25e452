#!/usr/bin/env python3
"""The project's own mixed workload for bench/stress.sh: WORKERS processes in shared
directories under ROOT, each doing random creates, writes, appends, extended attributes,
fallocate and punch-hole, renames, hard links, symlinks, truncates, unlinks and mkdir/rmdir for
SECONDS, and checking after every step that what it owns reads back exactly as its model says.

Names a worker owns carry its number, so its model is exact while the directories, and the
shared subdirectory names every worker races to make and remove, are common to all. Any error a
POSIX file system would not return (or any mismatch) is printed as "mixed-workload: FAIL ..."
and makes the exit status 1.

    bench/mixed-workload.py ROOT [--workers 4] [--seconds 60] [--seed 1]
"""
import argparse
import ctypes
import errno
import multiprocessing
import os
import random
import sys
import time

LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 0x01, 0x02
DIRS = 8
BS = 4096


def fallocate(fd, mode, offset, length):
    if LIBC.fallocate(fd, mode, offset, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


class Worker:
    def __init__(self, root, me, seed):
        self.root, self.me = root, me
        self.rng = random.Random(seed * 1000 + me)
        self.files = {}  # path -> bytearray (contents)
        self.attrs = {}  # path -> {name: value}
        self.links = {}  # path -> the path it is a hard link of (shared contents)
        self.n = 0
        self.ops = 0

    def fail(self, what):
        print(f"mixed-workload: FAIL worker {self.me}: {what}", flush=True)
        sys.exit(1)

    def new_path(self):
        self.n += 1
        d = self.rng.randrange(DIRS)
        return os.path.join(self.root, f"d{d}", f"w{self.me}-{self.n}")

    def group(self, path):
        """Every path sharing contents with `path` (itself and its hard links)."""
        base = self.links.get(path, path)
        return [p for p in self.files if self.links.get(p, p) == base]

    def set_contents(self, path, data):
        for p in self.group(path):
            self.files[p] = data

    def verify(self, path):
        with open(path, "rb") as f:
            got = f.read()
        if got != bytes(self.files[path]):
            self.fail(f"{path}: {len(got)} bytes read, {len(self.files[path])} expected "
                      f"(first difference at {next((i for i, (a, b) in enumerate(zip(got, self.files[path])) if a != b), min(len(got), len(self.files[path])))})")
        want = self.attrs.get(self.links.get(path, path), {})
        names = {n for n in os.listxattr(path) if n.startswith("user.")}
        if names != set(want):
            self.fail(f"{path}: attributes {sorted(names)}, expected {sorted(want)}")
        for n, v in want.items():
            if os.getxattr(path, n) != v:
                self.fail(f"{path}: attribute {n} differs")

    def pick(self):
        return self.rng.choice(list(self.files)) if self.files else None

    def step(self):
        r = self.rng.random()
        p = self.pick()
        if p is None or r < 0.15:
            p = self.new_path()
            data = bytearray(os.urandom(self.rng.choice([0, 100, BS, 3 * BS + 17, 70000])))
            with open(p, "xb") as f:
                f.write(data)
            self.files[p] = data
            self.attrs[p] = {}
            if self.rng.random() < 0.5:
                v = os.urandom(self.rng.choice([8, 200, 5000]))
                os.setxattr(p, "user.k", v)
                self.attrs[p]["user.k"] = v
        elif r < 0.25:  # overwrite somewhere, or append
            data = self.files[p]
            off = self.rng.randrange(len(data) + 1)
            chunk = os.urandom(self.rng.choice([1, 512, BS, 20000]))
            fd = os.open(p, os.O_WRONLY)
            try:
                os.pwrite(fd, chunk, off)
                if self.rng.random() < 0.3:
                    os.fsync(fd)
            finally:
                os.close(fd)
            new = bytearray(data)
            if off + len(chunk) > len(new):
                new.extend(b"\0" * (off + len(chunk) - len(new)))
            new[off:off + len(chunk)] = chunk
            self.set_contents(p, new)
        elif r < 0.35:  # extended attributes
            base = self.links.get(p, p)
            names = self.attrs.setdefault(base, {})
            n = f"user.a{self.rng.randrange(4)}"
            if n in names and self.rng.random() < 0.5:
                os.removexattr(p, n)
                del names[n]
            else:
                v = os.urandom(self.rng.choice([1, 64, 3000]))
                os.setxattr(p, n, v)
                names[n] = v
        elif r < 0.45:  # fallocate: allocate (size grows) or keep-size, or punch a hole
            data = self.files[p]
            fd = os.open(p, os.O_RDWR)
            try:
                off = self.rng.randrange(0, max(len(data), 1) + 2 * BS)
                length = self.rng.choice([1, BS, 5 * BS + 3])
                mode = self.rng.choice([0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE])
                fallocate(fd, mode, off, length)
            finally:
                os.close(fd)
            new = bytearray(data)
            if mode == 0 and off + length > len(new):
                new.extend(b"\0" * (off + length - len(new)))
            elif mode & FALLOC_FL_PUNCH_HOLE:
                end = min(off + length, len(new))
                if off < end:
                    new[off:end] = b"\0" * (end - off)
            self.set_contents(p, new)
        elif r < 0.55:  # rename into another shared directory
            q = self.new_path()
            os.rename(p, q)
            for m in (self.files, self.attrs):
                if p in m:
                    m[q] = m.pop(p)
            for k, v in list(self.links.items()):
                if v == p:
                    self.links[k] = q
            if p in self.links:
                self.links[q] = self.links.pop(p)
            p = q
        elif r < 0.62:  # hard link
            q = self.new_path()
            os.link(p, q)
            self.files[q] = self.files[p]
            self.links[q] = self.links.get(p, p)
        elif r < 0.68:  # truncate
            size = self.rng.randrange(len(self.files[p]) + 2 * BS)
            os.truncate(p, size)
            new = bytearray(self.files[p][:size])
            new.extend(b"\0" * (size - len(new)))
            self.set_contents(p, new)
        elif r < 0.76:  # unlink (a link's group keeps the data)
            os.unlink(p)
            base = self.links.get(p, p)
            del self.files[p]
            rest = [q for q in self.files if self.links.get(q, q) == base]
            self.links.pop(p, None)
            if base == p and rest:
                # The inode lives on under another name: it becomes the group's base.
                new_base = rest[0]
                for q in rest:
                    self.links[q] = new_base
                self.links.pop(new_base, None)
                self.attrs[new_base] = self.attrs.pop(p, {})
            elif not rest:
                self.attrs.pop(base, None)
            return
        elif r < 0.84:  # shared subdirectories: everyone races on the same names
            d = os.path.join(self.root, f"d{self.rng.randrange(DIRS)}", f"shared{self.rng.randrange(3)}")
            try:
                if self.rng.random() < 0.5:
                    os.mkdir(d)
                else:
                    os.rmdir(d)
            except OSError as e:
                if e.errno not in (errno.EEXIST, errno.ENOENT, errno.ENOTEMPTY):
                    raise
        elif r < 0.90:  # symlinks to own files
            s = self.new_path() + ".lnk"
            os.symlink(p, s)
            if os.readlink(s) != p:
                self.fail(f"symlink {s} reads back differently")
            os.unlink(s)
        else:  # directory scan sees own names
            d = os.path.dirname(p)
            if os.path.basename(p) not in os.listdir(d):
                self.fail(f"{p} missing from the listing of {d}")
        self.verify(p)

    def run(self, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                self.step()
            except SystemExit:
                raise
            except OSError as e:
                self.fail(f"{e!r}")
            self.ops += 1
        for p in list(self.files):
            self.verify(p)
        print(f"mixed-workload: worker {self.me}: {self.ops} operations, {len(self.files)} files, all verified", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    for d in range(DIRS):
        os.makedirs(os.path.join(a.root, f"d{d}"), exist_ok=True)
    procs = [multiprocessing.Process(target=lambda me=me: Worker(a.root, me, a.seed).run(a.seconds)) for me in range(a.workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    bad = [p.exitcode for p in procs if p.exitcode != 0]
    if bad:
        print(f"mixed-workload: FAIL {len(bad)} of {a.workers} workers failed", flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
