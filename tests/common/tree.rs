//! Trees of files: a seeded generator, a copier that keeps everything a file system stores
//! (types, modes, owners, times, sparseness, hard links, symlink targets) and a comparer that
//! reports every difference readably.

use super::sys::{self, SetTs};
use super::ByteStream;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// What [`generate`] makes.
#[derive(Clone, Debug)]
pub struct TreeSpec {
    pub seed: u64,
    pub dirs: usize,
    pub files: usize,
    pub max_depth: usize,
    pub symlinks: usize,
    /// Extra names for existing regular files.
    pub hardlinks: usize,
    pub fifos: usize,
    /// Give entries varied modes (setuid/setgid/sticky included) and owners.
    pub vary_attrs: bool,
    /// Largest regular file (sizes are skewed small; see `file_size`).
    pub max_file: u64,
}

impl Default for TreeSpec {
    fn default() -> Self {
        TreeSpec {
            seed: 1,
            dirs: 50,
            files: 500,
            max_depth: 6,
            symlinks: 50,
            hardlinks: 30,
            fifos: 3,
            vary_attrs: true,
            max_file: 1 << 20,
        }
    }
}

/// What [`generate`] made.
#[derive(Clone, Debug, Default)]
pub struct TreeStats {
    pub dirs: usize,
    pub files: usize,
    pub symlinks: usize,
    pub hardlinks: usize,
    pub fifos: usize,
    pub bytes: u64,
}

/// A file size skewed to small files, with many sizes at and around block boundaries.
fn file_size(rng: &mut StdRng, max: u64) -> u64 {
    let s = if rng.gen_bool(0.2) {
        // k*4096 + {-1, 0, 1}: the edges of blocks
        let k = rng.gen_range(1..=8u64);
        (k * 4096).saturating_add_signed(rng.gen_range(-1..=1i64))
    } else {
        match rng.gen_range(0..1000u32) {
            0..=119 => 0,
            120..=519 => rng.gen_range(1..1024),
            520..=849 => rng.gen_range(1024..8192),
            850..=969 => rng.gen_range(8192..32768),
            970..=998 => rng.gen_range(32768..262144),
            _ => rng.gen_range(262144..1 << 20),
        }
    };
    s.min(max)
}

/// A name unique in its directory (carries `id`), with varied length and bytes: spaces,
/// UTF-8, control bytes, sometimes the full 255 bytes.
fn gen_name(rng: &mut StdRng, id: usize) -> OsString {
    let mut n = format!("{id}").into_bytes();
    let len = match rng.gen_range(0..100) {
        0..=2 => 255,
        3..=10 => rng.gen_range(40..200),
        _ => rng.gen_range(n.len() + 1..24),
    };
    const PIECES: &[&[u8]] = &[
        b"a",
        b"b",
        b"Z",
        b"_",
        b"-",
        b".",
        b" ",
        b"\xc3\xa9",
        b"\xe6\x96\x87",
        b"\x01",
        b"~",
        b"#",
        b"x",
        b"y",
        b"0",
        b"9",
    ];
    n.push(b'.');
    while n.len() < len {
        let p = PIECES[rng.gen_range(0..PIECES.len())];
        if n.len() + p.len() > len {
            n.push(b'q');
        } else {
            n.extend_from_slice(p);
        }
    }
    OsString::from_vec(n)
}

const FILE_MODES: &[u32] = &[
    0o644, 0o644, 0o644, 0o600, 0o755, 0o444, 0o640, 0o4755, 0o2755, 0o6711, 0o000, 0o1644,
];
const DIR_MODES: &[u32] = &[0o755, 0o755, 0o755, 0o700, 0o750, 0o1777, 0o2775, 0o711];
const OWNERS: &[(u32, u32)] = &[(0, 0), (1000, 1000), (1001, 100), (65534, 65534), (0, 5)];

/// Lengths of symlink targets: inline/out-of-line edges of DualFS (120/121, one and two blocks).
const TARGET_LENS: &[usize] = &[1, 7, 60, 120, 121, 500, 4064, 4065, 4095];

/// Make a tree under `root` (which must exist and be empty). Deterministic for a seed.
pub fn generate(root: &Path, spec: &TreeSpec) -> TreeStats {
    let mut rng = StdRng::seed_from_u64(spec.seed);
    let mut st = TreeStats::default();
    // (path, depth)
    let mut dirs: Vec<(PathBuf, usize)> = vec![(root.to_path_buf(), 0)];
    let mut files: Vec<PathBuf> = Vec::new();
    let mut id = 0usize;
    let mut next_id = || {
        id += 1;
        id
    };
    for _ in 0..spec.dirs {
        let (parent, depth) = loop {
            let d = &dirs[rng.gen_range(0..dirs.len())];
            if d.1 < spec.max_depth {
                break d.clone();
            }
        };
        let p = parent.join(gen_name(&mut rng, next_id()));
        fs::create_dir(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
        dirs.push((p, depth + 1));
        st.dirs += 1;
    }
    let mut buf = Vec::new();
    for _ in 0..spec.files {
        let d = &dirs[rng.gen_range(0..dirs.len())].0;
        let i = next_id();
        let p = d.join(gen_name(&mut rng, i));
        let size = file_size(&mut rng, spec.max_file) as usize;
        buf.resize(size, 0);
        ByteStream::new(spec.seed ^ ((i as u64) << 20)).fill(&mut buf);
        fs::write(&p, &buf).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
        st.files += 1;
        st.bytes += size as u64;
        files.push(p);
    }
    for _ in 0..spec.symlinks {
        let d = &dirs[rng.gen_range(0..dirs.len())].0;
        let p = d.join(gen_name(&mut rng, next_id()));
        let target: Vec<u8> = match rng.gen_range(0..4) {
            // a real file, relative to the root
            0 if !files.is_empty() => {
                let f = &files[rng.gen_range(0..files.len())];
                f.strip_prefix(root)
                    .unwrap()
                    .as_os_str()
                    .as_bytes()
                    .to_vec()
            }
            _ => {
                let len = TARGET_LENS[rng.gen_range(0..TARGET_LENS.len())];
                let mut t = Vec::with_capacity(len);
                while t.len() < len {
                    t.push(match rng.gen_range(0..10) {
                        0 => b'/',
                        1 => b'.',
                        _ => rng.gen_range(b'a'..=b'z'),
                    });
                }
                t
            }
        };
        sys::symlink(OsStr::from_bytes(&target), &p)
            .unwrap_or_else(|e| panic!("symlink {}: {e}", p.display()));
        st.symlinks += 1;
    }
    for _ in 0..if files.is_empty() { 0 } else { spec.hardlinks } {
        let f = files[rng.gen_range(0..files.len())].clone();
        let d = &dirs[rng.gen_range(0..dirs.len())].0;
        let p = d.join(gen_name(&mut rng, next_id()));
        fs::hard_link(&f, &p).unwrap_or_else(|e| panic!("link {}: {e}", p.display()));
        st.hardlinks += 1;
    }
    let mut fifos = Vec::new();
    for _ in 0..spec.fifos {
        let d = &dirs[rng.gen_range(0..dirs.len())].0;
        let p = d.join(gen_name(&mut rng, next_id()));
        sys::mkfifo(&p, 0o640).unwrap();
        st.fifos += 1;
        fifos.push(p);
    }
    if spec.vary_attrs {
        // Owners first (chown clears setuid/setgid), then modes, then times; directories last
        // and deepest first so that nothing done below changes a directory's times afterwards.
        for f in files.iter().chain(&fifos) {
            let (u, g) = OWNERS[rng.gen_range(0..OWNERS.len())];
            sys::chown(f, u, g).unwrap();
            sys::chmod(f, FILE_MODES[rng.gen_range(0..FILE_MODES.len())]).unwrap();
            set_random_times(&mut rng, f, false);
        }
        walk_symlinks(root, &mut |p| {
            let (u, g) = OWNERS[rng.gen_range(0..OWNERS.len())];
            sys::lchown(p, u, g).unwrap();
            set_random_times(&mut rng, p, true);
        });
        let mut ds: Vec<_> = dirs.iter().collect();
        ds.sort_by_key(|d| std::cmp::Reverse(d.1));
        for (d, depth) in ds {
            if *depth > 0 {
                let (u, g) = OWNERS[rng.gen_range(0..OWNERS.len())];
                sys::chown(d, u, g).unwrap();
                sys::chmod(d, DIR_MODES[rng.gen_range(0..DIR_MODES.len())]).unwrap();
            }
            set_random_times(&mut rng, d, false);
        }
    }
    st
}

fn walk_symlinks(dir: &Path, f: &mut dyn FnMut(&Path)) {
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let t = e.file_type().unwrap();
        if t.is_symlink() {
            f(&e.path());
        } else if t.is_dir() {
            walk_symlinks(&e.path(), f);
        }
    }
}

fn set_random_times(rng: &mut StdRng, p: &Path, nofollow: bool) {
    // 2000-01-01 .. 2030-01-01, with nanoseconds
    let mut t = || {
        SetTs::At(
            rng.gen_range(946_684_800..1_893_456_000),
            rng.gen_range(0..1_000_000_000),
        )
    };
    let (a, m) = (t(), t());
    sys::utimens(p, a, m, nofollow).unwrap_or_else(|e| panic!("utimens {}: {e}", p.display()));
}

/// Data extents of an open file as (offset, length), via SEEK_DATA/SEEK_HOLE.
pub fn data_extents(f: &File, size: u64) -> Vec<(u64, u64)> {
    use std::os::unix::io::AsRawFd;
    let fd = f.as_raw_fd();
    let mut out = Vec::new();
    let mut pos = 0u64;
    while pos < size {
        let d = unsafe { libc::lseek(fd, pos as i64, libc::SEEK_DATA) };
        if d < 0 {
            break; // ENXIO: no data past pos
        }
        let h = unsafe { libc::lseek(fd, d, libc::SEEK_HOLE) };
        let h = if h < 0 { size as i64 } else { h };
        out.push((d as u64, (h - d) as u64));
        pos = h as u64;
    }
    out
}

/// Copy `src` (a directory) into the existing directory `dst`, keeping types, permission
/// bits, owners, atime/mtime, symlink targets, hard links (by inode) and holes (only data
/// extents are written; the size is set with ftruncate).
pub fn copy_tree(src: &Path, dst: &Path) {
    let mut links: HashMap<(u64, u64), PathBuf> = HashMap::new();
    copy_dir_contents(src, dst, &mut links);
    copy_attrs(&sys::lstat(src), dst);
}

fn copy_dir_contents(src: &Path, dst: &Path, links: &mut HashMap<(u64, u64), PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(src)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    entries.sort();
    for name in entries {
        let (s, d) = (src.join(&name), dst.join(&name));
        let m = sys::lstat(&s);
        let ft = m.file_type();
        if ft.is_dir() {
            sys::mkdir(&d, 0o700).unwrap_or_else(|e| panic!("mkdir {}: {e}", d.display()));
            copy_dir_contents(&s, &d, links);
        } else if ft.is_symlink() {
            let t = fs::read_link(&s).unwrap();
            sys::symlink(&t, &d).unwrap_or_else(|e| panic!("symlink {}: {e}", d.display()));
        } else if ft.is_file() {
            if m.nlink() > 1 {
                if let Some(first) = links.get(&(m.dev(), m.ino())) {
                    sys::link(first, &d).unwrap_or_else(|e| panic!("link {}: {e}", d.display()));
                    continue;
                }
                links.insert((m.dev(), m.ino()), d.clone());
            }
            copy_file_data(&s, &d, m.len());
        } else if ft.is_fifo() {
            sys::mkfifo(&d, 0o600).unwrap();
        } else {
            sys::mknod(&d, m.mode(), m.rdev()).unwrap();
        }
        copy_attrs(&m, &d);
    }
}

fn copy_file_data(src: &Path, dst: &Path, size: u64) {
    let s = File::open(src).unwrap();
    let mut d = sys::open(dst, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o600)
        .unwrap_or_else(|e| panic!("create {}: {e}", dst.display()));
    let mut buf = vec![0u8; 1 << 20];
    for (off, len) in data_extents(&s, size) {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(buf.len() as u64) as usize;
            s.read_exact_at(&mut buf[..n], off + done).unwrap();
            d.seek(SeekFrom::Start(off + done)).unwrap();
            d.write_all(&buf[..n])
                .unwrap_or_else(|e| panic!("write {}: {e}", dst.display()));
            done += n as u64;
        }
    }
    d.set_len(size).unwrap();
}

fn copy_attrs(m: &fs::Metadata, d: &Path) {
    let nofollow = m.file_type().is_symlink();
    if nofollow {
        sys::lchown(d, m.uid(), m.gid()).unwrap();
    } else {
        sys::chown(d, m.uid(), m.gid()).unwrap();
        sys::chmod(d, m.mode() & 0o7777).unwrap();
    }
    sys::utimens(
        d,
        SetTs::At(m.atime(), m.atime_nsec()),
        SetTs::At(m.mtime(), m.mtime_nsec()),
        nofollow,
    )
    .unwrap_or_else(|e| panic!("utimens {}: {e}", d.display()));
}

/// What [`compare_trees`] looks at.
#[derive(Clone, Copy, Debug)]
pub struct CompareOpts {
    pub mtime: bool,
    pub owner: bool,
    pub nlink: bool,
    /// Files larger than this are compared on the expected side's data extents only; its holes
    /// are sampled on both sides (reading a 10 GiB hole through FUSE would take minutes).
    pub sample_holes_above: u64,
}

impl Default for CompareOpts {
    fn default() -> Self {
        CompareOpts {
            mtime: true,
            owner: true,
            nlink: true,
            sample_holes_above: 256 << 20,
        }
    }
}

/// Totals of a comparison.
#[derive(Clone, Debug, Default)]
pub struct CompareStats {
    pub entries: usize,
    pub bytes: u64,
}

/// Compare `expected` with `actual`; panic with a readable list of differences.
pub fn compare_trees(expected: &Path, actual: &Path, opts: CompareOpts) -> CompareStats {
    let (diffs, stats) = run_compare(expected, actual, opts);
    if !diffs.is_empty() {
        let n = diffs.len();
        let shown: Vec<_> = diffs.iter().take(60).cloned().collect();
        panic!(
            "{n} difference(s) between {} (expected) and {} (actual):\n  {}{}",
            expected.display(),
            actual.display(),
            shown.join("\n  "),
            if n > 60 { "\n  ..." } else { "" }
        );
    }
    stats
}

/// The differences, as a list, instead of a panic (for the harness self-test).
pub fn tree_diffs(expected: &Path, actual: &Path, opts: CompareOpts) -> Vec<String> {
    run_compare(expected, actual, opts).0
}

fn run_compare(expected: &Path, actual: &Path, opts: CompareOpts) -> (Vec<String>, CompareStats) {
    let mut c = Comparer {
        opts,
        diffs: Vec::new(),
        inodes: HashMap::new(),
        seen: Default::default(),
        stats: CompareStats::default(),
    };
    c.dir(expected, actual, Path::new(""));
    (c.diffs, c.stats)
}

struct Comparer {
    opts: CompareOpts,
    diffs: Vec<String>,
    /// expected inode -> actual inode, to check hard-link structure both ways.
    inodes: HashMap<u64, u64>,
    /// actual inodes already seen.
    seen: std::collections::HashSet<u64>,
    stats: CompareStats,
}

fn show(rel: &Path) -> String {
    if rel.as_os_str().is_empty() {
        "/".into()
    } else {
        format!("{:?}", rel)
    }
}

impl Comparer {
    fn diff(&mut self, rel: &Path, what: String) {
        self.diffs.push(format!("{}: {what}", show(rel)));
    }

    fn dir(&mut self, a: &Path, b: &Path, rel: &Path) {
        let ma = sys::lstat(a);
        let mb = match fs::symlink_metadata(b) {
            Ok(m) => m,
            Err(e) => return self.diff(rel, format!("missing in actual ({e})")),
        };
        self.attrs(&ma, &mb, rel);
        let la = sys::names(a);
        let lb_all = sys::list_dir(b);
        let mut lb: Vec<Vec<u8>> = lb_all
            .iter()
            .map(|d| d.name.clone())
            .filter(|n| n != b"." && n != b"..")
            .collect();
        lb.sort();
        if lb.windows(2).any(|w| w[0] == w[1]) {
            self.diff(rel, "readdir returned a name twice".into());
            lb.dedup();
        }
        for dots in [&b"."[..], b".."] {
            if !lb_all.iter().any(|d| d.name == dots) {
                self.diff(rel, format!("readdir lacks {:?}", OsStr::from_bytes(dots)));
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < la.len() || j < lb.len() {
            let ord = match (la.get(i), lb.get(j)) {
                (Some(x), Some(y)) => x.cmp(y),
                (Some(_), None) => std::cmp::Ordering::Less,
                _ => std::cmp::Ordering::Greater,
            };
            match ord {
                std::cmp::Ordering::Less => {
                    let r = rel.join(OsStr::from_bytes(&la[i]));
                    self.diff(&r, "missing in actual".into());
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    let r = rel.join(OsStr::from_bytes(&lb[j]));
                    self.diff(&r, "unexpected in actual".into());
                    j += 1;
                }
                std::cmp::Ordering::Equal => {
                    let n = OsStr::from_bytes(&la[i]);
                    self.entry(&a.join(n), &b.join(n), &rel.join(n));
                    i += 1;
                    j += 1;
                }
            }
        }
    }

    fn entry(&mut self, a: &Path, b: &Path, rel: &Path) {
        self.stats.entries += 1;
        let ma = sys::lstat(a);
        let mb = match fs::symlink_metadata(b) {
            Ok(m) => m,
            Err(e) => return self.diff(rel, format!("lstat failed in actual: {e}")),
        };
        if sys::fmt(&ma) != sys::fmt(&mb) {
            return self.diff(
                rel,
                format!("type {:o} expected, got {:o}", sys::fmt(&ma), sys::fmt(&mb)),
            );
        }
        if ma.is_dir() {
            return self.dir(a, b, rel);
        }
        self.attrs(&ma, &mb, rel);
        let ft = ma.file_type();
        if ft.is_symlink() {
            let (ta, tb) = (fs::read_link(a).unwrap(), fs::read_link(b));
            match tb {
                Ok(tb) if tb == ta => {}
                Ok(tb) => self.diff(
                    rel,
                    format!(
                        "symlink target differs: expected {} bytes {:?}, got {} bytes {:?}",
                        ta.as_os_str().len(),
                        trunc(ta.as_os_str().as_bytes()),
                        tb.as_os_str().len(),
                        trunc(tb.as_os_str().as_bytes())
                    ),
                ),
                Err(e) => self.diff(rel, format!("readlink: {e}")),
            }
        } else if ft.is_file() {
            match self.inodes.get(&ma.ino()) {
                Some(&ino) if ino != mb.ino() => self.diff(
                    rel,
                    "hard link structure differs: this name should share an inode with an \
                     earlier one"
                        .into(),
                ),
                Some(_) => {} // already compared through another name
                None => {
                    if !self.seen.insert(mb.ino()) {
                        self.diff(rel, "shares an inode it should not share".into());
                    }
                    self.inodes.insert(ma.ino(), mb.ino());
                    if ma.len() == mb.len() {
                        self.content(a, b, rel, ma.len());
                    }
                }
            }
        }
    }

    fn attrs(&mut self, ma: &fs::Metadata, mb: &fs::Metadata, rel: &Path) {
        if sys::perm(ma) != sys::perm(mb) && !ma.file_type().is_symlink() {
            self.diff(
                rel,
                format!(
                    "mode {:04o} expected, got {:04o}",
                    sys::perm(ma),
                    sys::perm(mb)
                ),
            );
        }
        if self.opts.owner && (ma.uid(), ma.gid()) != (mb.uid(), mb.gid()) {
            self.diff(
                rel,
                format!(
                    "owner {}:{} expected, got {}:{}",
                    ma.uid(),
                    ma.gid(),
                    mb.uid(),
                    mb.gid()
                ),
            );
        }
        if !ma.is_dir() && ma.len() != mb.len() {
            self.diff(rel, format!("size {} expected, got {}", ma.len(), mb.len()));
        }
        if self.opts.nlink && ma.nlink() != mb.nlink() {
            self.diff(
                rel,
                format!("nlink {} expected, got {}", ma.nlink(), mb.nlink()),
            );
        }
        if self.opts.mtime && sys::mtime(ma) != sys::mtime(mb) {
            self.diff(
                rel,
                format!(
                    "mtime {:?} expected, got {:?}",
                    sys::mtime(ma),
                    sys::mtime(mb)
                ),
            );
        }
    }

    fn content(&mut self, a: &Path, b: &Path, rel: &Path, size: u64) {
        let fa = File::open(a).unwrap();
        let fb = match File::open(b) {
            Ok(f) => f,
            Err(e) => return self.diff(rel, format!("open: {e}")),
        };
        let ranges = if size > self.opts.sample_holes_above {
            let ext = data_extents(&fa, size);
            // Sample each hole at its edges and at a few places inside.
            let mut r = ext.clone();
            let mut pos = 0;
            let mut holes = Vec::new();
            for &(o, l) in ext.iter().chain(std::iter::once(&(size, 0))) {
                if o > pos {
                    holes.push((pos, o - pos));
                }
                pos = o + l;
            }
            for (o, l) in holes {
                // Both edges, the middle, and evenly spaced windows between.
                let w = l.min(64 << 10);
                r.push((o + l / 2 - w / 2, w));
                for k in 0..=16u64 {
                    r.push((o + (l - w) * k / 16, w));
                }
            }
            r
        } else {
            vec![(0, size)]
        };
        let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
        for (off, len) in ranges {
            let mut done = 0u64;
            while done < len {
                let n = (len - done).min(1 << 20) as usize;
                let at = off + done;
                fa.read_exact_at(&mut ba[..n], at).unwrap();
                if let Err(e) = read_full_at(&fb, &mut bb[..n], at) {
                    return self.diff(rel, format!("read {n} bytes at {at}: {e}"));
                }
                if ba[..n] != bb[..n] {
                    let i = (0..n).find(|&i| ba[i] != bb[i]).unwrap();
                    return self.diff(
                        rel,
                        format!(
                            "content differs at byte {} (expected {:#04x}, got {:#04x})",
                            at + i as u64,
                            ba[i],
                            bb[i]
                        ),
                    );
                }
                done += n as u64;
                self.stats.bytes += n as u64;
            }
        }
        // Nothing past the end either.
        let mut one = [0u8; 1];
        match fb.read_at(&mut one, size) {
            Ok(0) => {}
            Ok(_) => self.diff(rel, format!("data past the size {size}")),
            Err(e) => self.diff(rel, format!("read at EOF: {e}")),
        }
    }
}

fn read_full_at(f: &File, buf: &mut [u8], off: u64) -> io::Result<()> {
    f.read_exact_at(buf, off)
}

fn trunc(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    if s.len() > 40 {
        format!("{}...", &s.chars().take(40).collect::<String>())
    } else {
        s.into_owned()
    }
}

/// Read a whole file (helper for tests).
pub fn read_all(p: &Path) -> Vec<u8> {
    let mut v = Vec::new();
    File::open(p)
        .unwrap_or_else(|e| panic!("open {}: {e}", p.display()))
        .read_to_end(&mut v)
        .unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    v
}
