//! Recording a workload on two recording devices with one clock, building crash states from
//! the record, and judging each one against the model.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use dualfs::device::{BlockDevice, MemDevice, RecordingDevice, SeqClock, WriteSubset};
use dualfs::fs::{Caller, FileKind, Fs, MountOptions, Whence};
use dualfs::mkfs::{mkfs, MkfsParams};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::model::{join, DataWrite, Id, Kind, Model, View, ViewEntry};
use super::ops::{exec, release_held, Held, Op};

/// Device sizes: 16 segments of 16 blocks of metadata (the smallest mkfs allows), 2 MiB of
/// data in 4 groups.
pub const META_BYTES: u64 = 16 * 16 * 4096;
pub const DATA_BYTES: u64 = 2 << 20;

pub fn mkfs_params() -> MkfsParams {
    MkfsParams {
        segment_blocks: 16,
        blocks_per_group: 128,
        ..MkfsParams::default()
    }
}

/// No background flushes or checkpoints: the device writes happen only where the workload
/// asks for them, so the record is the same every run.
pub fn mount_options() -> MountOptions {
    MountOptions {
        flush_interval: Duration::from_secs(3600),
        checkpoint_interval: Duration::from_secs(3600),
        background_cleaning: false,
        cache_bytes: 8 << 20,
        ..MountOptions::default()
    }
}

/// Whether workload `id` runs with the data cache (delayed allocation, the default mount) or
/// writes through (`data_cache=0`, as `-o sync` has it): half the workloads each, by a hash
/// of the id, so that every family covers both and a reproducer needs nothing but the id.
pub fn delayed_allocation(id: &str) -> bool {
    let h = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    h >> 63 == 0
}

fn recording_mount_options(delayed: bool) -> MountOptions {
    MountOptions {
        data_cache_bytes: if delayed {
            MountOptions::default().data_cache_bytes
        } else {
            0
        },
        ..mount_options()
    }
}

/// A named list of operations: `setup` runs (and is unmounted cleanly) before recording
/// starts; `ops` are recorded, between a recorded mount and a recorded unmount.
#[derive(Clone, Debug)]
pub struct Workload {
    pub id: String,
    pub setup: Vec<Op>,
    pub ops: Vec<Op>,
}

/// The devices and model after a workload's setup.
#[derive(Clone)]
pub struct Base {
    pub setup: Vec<Op>,
    pub meta: Vec<u8>,
    pub data: Vec<u8>,
    pub model: Model,
    pub writes: BTreeMap<Id, Vec<DataWrite>>,
}

fn mem(bytes: Vec<u8>) -> Arc<MemDevice> {
    Arc::new(MemDevice::from_bytes(bytes))
}

/// The unit a device writes atomically: a 4 KiB page, or `DUALFS_CRASH_SECTOR` bytes (512 to
/// tear blocks into sectors).
fn atomic_unit() -> usize {
    std::env::var("DUALFS_CRASH_SECTOR")
        .ok()
        .map(|v| v.parse().expect("DUALFS_CRASH_SECTOR is a number of bytes"))
        .unwrap_or(4096)
}

fn recorder(bytes: Vec<u8>, clock: &Arc<SeqClock>) -> Arc<Rec> {
    Arc::new(RecordingDevice::with_clock(
        MemDevice::from_bytes(bytes),
        atomic_unit(),
        clock.clone(),
    ))
}

/// mkfs, run `setup` (checked against the model), unmount.
pub fn make_base(setup: &[Op]) -> Base {
    let meta = Arc::new(MemDevice::new(META_BYTES));
    let data = Arc::new(MemDevice::new(DATA_BYTES));
    mkfs(meta.clone(), data.clone(), &mkfs_params()).expect("mkfs");
    let fs = Fs::mount(meta.clone(), data.clone(), mount_options()).expect("mount");
    let mut model = Model::new();
    let mut writes = BTreeMap::new();
    let mut held: Held = None;
    for (gi, op) in setup.iter().enumerate() {
        let want = model.apply(gi, op, &mut writes);
        let got = exec(&fs, op, gi, &mut held);
        assert_eq!(
            got, want,
            "setup op {gi} ({op}): DualFS and the model disagree"
        );
    }
    release_held(&fs, &mut held).expect("close");
    fs.unmount().expect("unmount");
    Base {
        setup: setup.to_vec(),
        meta: meta.snapshot(),
        data: data.snapshot(),
        model,
        writes,
    }
}

type Rec = RecordingDevice<MemDevice>;

/// A workload run on recording devices: everything needed to build and judge crash states.
pub struct Recording {
    pub id: String,
    /// Setup and recorded operations (recorded op `i` is global op `setup_len + i`); recorded
    /// op 0 is the mount and the last is the unmount.
    pub all_ops: Vec<Op>,
    pub setup_len: usize,
    base_meta: Vec<u8>,
    base_data: Vec<u8>,
    meta: Rec,
    data: Rec,
    /// Clock at the start and end of each recorded op; whether it succeeded.
    starts: Vec<u64>,
    ends: Vec<u64>,
    ok: Vec<bool>,
    /// models[p]: after the first p recorded ops.
    models: Vec<Model>,
    views: Vec<View>,
    writes: BTreeMap<Id, Vec<DataWrite>>,
    /// Recorded ops that changed each file's content.
    touched: BTreeMap<Id, Vec<usize>>,
    /// Files an O_TMPFILE op made and named, with that recorded op: inside it each was empty
    /// (and unnamed) until its data was written, as a created file is until its first write,
    /// so with the data cache a crash may show it empty (see `lagging_sizes`).
    born_empty: BTreeMap<Id, usize>,
    pub end: u64,
    /// Operations refused with ENOSPC.
    pub enospc: usize,
    /// The errno of each recorded op (0: success).
    pub errs: Vec<i32>,
    /// Recorded with the data cache (`delayed_allocation`).
    pub delayed: bool,
    /// The intent log after each recorded op: what a daemon killed then leaves.
    intents: Vec<IntentSnap>,
}

/// An intent log directory as a daemon killed at clock moment `t` leaves it: each file's path
/// (below the directory), its bytes up to the last non-zero one, and its size.
#[derive(Clone)]
pub struct IntentSnap {
    pub t: u64,
    files: Vec<(std::path::PathBuf, Vec<u8>, u64)>,
}

impl IntentSnap {
    fn take(dir: &std::path::Path, t: u64) -> IntentSnap {
        let mut files = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                    continue;
                }
                let mut bytes = std::fs::read(&p).unwrap();
                let len = bytes.len() as u64;
                let used = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
                bytes.truncate(used);
                files.push((p.strip_prefix(dir).unwrap().to_path_buf(), bytes, len));
            }
        }
        files.sort();
        IntentSnap { t, files }
    }

    /// Make the directory `dir` hold this log again.
    fn restore(&self, dir: &std::path::Path) {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).unwrap();
        for (rel, bytes, len) in &self.files {
            let p = dir.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            let f = std::fs::File::create(&p).unwrap();
            std::io::Write::write_all(&mut &f, bytes).unwrap();
            f.set_len(*len).unwrap();
        }
    }

    /// The offset of the last record of the newest chunk and its kind, if it has one.
    fn last_record(&self) -> Option<(usize, usize, u8)> {
        let k = self.files.len().checked_sub(1)?;
        let bytes = &self.files[k].1;
        use dualfs::intent::chunk::{frame_at, CHUNK_HEADER, FRAME};
        let mut off = CHUNK_HEADER;
        let mut last = None;
        while off + FRAME <= bytes.len() {
            let len = u32::from_le_bytes(bytes[off..off + 4].try_into().unwrap()) as usize;
            if len == 0 {
                break;
            }
            last = Some((k, off, bytes[off + frame_at::KIND]));
            off += len;
        }
        last
    }

    /// The same log with its last record torn (its copy never finished), if that record was
    /// appended after `before` and describes an operation (kind 0 is a transaction's marker,
    /// always whole before its transaction is written).
    fn torn_after(&self, before: &IntentSnap) -> Option<IntentSnap> {
        let (k, off, kind) = self.last_record()?;
        if kind == 0 {
            return None;
        }
        let newer = match before.last_record() {
            None => true,
            Some((bk, boff, _)) => self.files[k].0 != before.files[bk].0 || off > boff,
        };
        if !newer {
            return None;
        }
        let mut torn = self.clone();
        let bytes = &mut torn.files[k].1;
        // A byte of the payload (or the frame's last, for an empty one): the CRC fails.
        let at = (off + dualfs::intent::chunk::FRAME).min(bytes.len() - 1);
        bytes[at] ^= 0x5a;
        Some(torn)
    }
}

/// A directory of its own for one intent log, removed when dropped.
struct IntentDir(std::path::PathBuf);

impl IntentDir {
    fn new() -> IntentDir {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p =
            std::env::temp_dir().join(format!("dualfs-crash-intent-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        IntentDir(p)
    }
}

impl Drop for IntentDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Recording {
    pub fn ops(&self) -> &[Op] {
        &self.all_ops[self.setup_len..]
    }
}

/// Run `w` from `base` on recording devices, with the data cache or without as its id
/// says (`delayed_allocation`).
pub fn record(base: &Base, w: &Workload) -> Recording {
    record_in(base, w, delayed_allocation(&w.id))
}

/// Run `w` from `base` on recording devices, with the data cache if `delayed`.
pub fn record_in(base: &Base, w: &Workload, delayed: bool) -> Recording {
    assert_eq!(base.setup, w.setup, "workload {} on the wrong base", w.id);
    let clock = SeqClock::new();
    let meta = recorder(base.meta.clone(), &clock);
    let data = recorder(base.data.clone(), &clock);
    let mut ops = vec![Op::Mount];
    ops.extend(w.ops.iter().cloned());
    ops.push(Op::Unmount);
    let setup_len = w.setup.len();
    let mut model = base.model.clone();
    let mut writes = base.writes.clone();
    let mut models = vec![model.clone()];
    let mut touched: BTreeMap<Id, Vec<usize>> = BTreeMap::new();
    let mut born_empty = BTreeMap::new();
    let (mut starts, mut ends, mut ok) = (Vec::new(), Vec::new(), Vec::new());
    let mut fs: Option<Arc<Fs>> = None;
    let mut held: Held = None;
    let intent_dir = IntentDir::new();
    let mut intents = Vec::new();
    let mut enospc = 0;
    let mut errs = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let gi = setup_len + i;
        if let Some(id) = data_target(&model, op) {
            touched.entry(id).or_default().push(i);
        }
        let before = (model.clone(), writes.clone());
        let want = model.apply(gi, op, &mut writes);
        starts.push(clock.now());
        let got = match op {
            Op::Mount => {
                let m: Arc<dyn BlockDevice> = meta.clone();
                let d: Arc<dyn BlockDevice> = data.clone();
                let opts = MountOptions {
                    intent_dir: Some(intent_dir.0.clone()),
                    ..recording_mount_options(delayed)
                };
                fs = Some(Fs::mount(m, d, opts).expect("recorded mount"));
                Ok(())
            }
            Op::Unmount => {
                let f = fs.take().unwrap();
                release_held(&f, &mut held).expect("close");
                f.unmount().expect("recorded unmount");
                Ok(())
            }
            _ => exec(fs.as_ref().unwrap(), op, gi, &mut held),
        };
        ends.push(clock.now());
        intents.push(IntentSnap::take(&intent_dir.0, clock.now()));
        // The model knows no space limits: an operation DualFS refuses for want of space
        // changes nothing (it fails before it changes anything). Where the model fails the
        // operation for another reason, ENOSPC is as right: POSIX leaves the order in which
        // errors are detected undefined (DualFS admits an operation by space first, before
        // it looks at names; through FUSE the kernel's own lookup reports EEXIST first).
        if got == Err(libc::ENOSPC) {
            (model, writes) = before;
            enospc += 1;
        } else {
            assert_eq!(
                got, want,
                "workload {}: op {i} ({op}): DualFS and the model disagree (errno)",
                w.id
            );
        }
        // The file an O_TMPFILE op names did not exist before it: its data changed in the op.
        if let (Op::Tmpfile { path, .. }, Ok(())) = (op, got) {
            let id = model.resolve(path).expect("the model names it");
            touched.entry(id).or_default().push(i);
            born_empty.insert(id, i);
        }
        ok.push(got.is_ok());
        errs.push(got.err().unwrap_or(0));
        models.push(model.clone());
    }
    let end = clock.now();
    let views = models.iter().map(|m| m.view()).collect();
    let mut all_ops = w.setup.clone();
    all_ops.extend(ops);
    // Unwrap the recorders out of their Arcs (the file system is gone).
    let meta = Arc::try_unwrap(meta).unwrap_or_else(|_| panic!("meta recorder still shared"));
    let data = Arc::try_unwrap(data).unwrap_or_else(|_| panic!("data recorder still shared"));
    Recording {
        id: w.id.clone(),
        all_ops,
        setup_len,
        base_meta: base.meta.clone(),
        base_data: base.data.clone(),
        meta,
        data,
        starts,
        ends,
        ok,
        models,
        views,
        writes,
        touched,
        born_empty,
        end,
        enospc,
        errs,
        delayed,
        intents,
    }
}

/// The file whose content `op` changes, if any (resolved before the op).
fn data_target(m: &Model, op: &Op) -> Option<Id> {
    let path = match op {
        Op::Creat(p) => p,
        Op::Write { path, .. } | Op::Append { path, .. } | Op::Truncate { path, .. } => path,
        Op::Fallocate { path, .. } => path,
        _ => return None,
    };
    let id = m.resolve(path).ok()?;
    (m.inodes[&id].kind() == Kind::File).then_some(id)
}

/// Which writes of a device's open epoch a crash state keeps.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Subset {
    All,
    None,
    Random(u64),
    Chosen(Vec<usize>),
}

impl Subset {
    fn to_write_subset(&self) -> WriteSubset {
        match self {
            Subset::All => WriteSubset::Prefix(usize::MAX),
            Subset::None => WriteSubset::Prefix(0),
            Subset::Random(s) => WriteSubset::Random { seed: *s },
            Subset::Chosen(v) => WriteSubset::Chosen(v.clone()),
        }
    }

    pub fn parse(s: &str) -> Subset {
        match s {
            "all" => Subset::All,
            "none" => Subset::None,
            _ if s.starts_with('r') => Subset::Random(s[1..].parse().expect("r<seed>")),
            _ => Subset::Chosen(
                s.split(',')
                    .filter(|x| !x.is_empty())
                    .map(|x| x.parse().expect("index list"))
                    .collect(),
            ),
        }
    }
}

impl std::fmt::Display for Subset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Subset::All => write!(f, "all"),
            Subset::None => write!(f, "none"),
            Subset::Random(s) => write!(f, "r{s}"),
            Subset::Chosen(v) => {
                let s: Vec<String> = v.iter().map(|i| i.to_string()).collect();
                write!(f, "{}", s.join(","))
            }
        }
    }
}

/// One crash state: a moment and, on each device, which writes of its open epoch landed.
#[derive(Clone, Debug)]
pub struct CrashPoint {
    pub t: u64,
    pub meta: Subset,
    pub data: Subset,
    /// The same images arise at every moment of [t, t_last]: the state must be valid for all.
    pub t_last: u64,
}

impl CrashPoint {
    pub fn spec(&self) -> String {
        format!("{}/{}/{}", self.t, self.meta, self.data)
    }

    pub fn parse(s: &str) -> CrashPoint {
        let parts: Vec<&str> = s.split('/').collect();
        assert_eq!(
            parts.len(),
            3,
            "DUALFS_CRASH_STATE is t/meta-subset/data-subset"
        );
        let t = parts[0].parse().expect("moment");
        CrashPoint {
            t,
            meta: Subset::parse(parts[1]),
            data: Subset::parse(parts[2]),
            t_last: t,
        }
    }
}

/// Indexes of the writes a subset keeps out of `n`, given the device's writes so far.
fn chosen(n: usize, s: &Subset) -> Vec<usize> {
    match s {
        Subset::All => (0..n).collect(),
        Subset::None => Vec::new(),
        Subset::Chosen(v) => v.iter().copied().filter(|&i| i < n).collect(),
        Subset::Random(seed) => {
            // Same generator as RecordingDevice's WriteSubset::Random.
            let mut z = *seed;
            (0..n)
                .filter(|_| {
                    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
                    let mut x = z;
                    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                    (x ^ (x >> 31)) & 1 == 1
                })
                .collect()
        }
    }
}

/// Canonical form of "which writes of a device landed": all writes before `prefix` (in
/// recorded order), plus `extra`.
fn landed(dev: &Rec, t: u64, s: &Subset) -> (usize, Vec<usize>) {
    let k = dev.epoch_at(t);
    let n = dev.pending_at(t);
    let before: usize = (0..k).map(|e| dev.epoch(e).len()).sum();
    let idx = chosen(n, s);
    let mut prefix = before;
    let mut extra = Vec::new();
    for i in idx {
        if extra.is_empty() && before + i == prefix {
            prefix += 1;
        } else {
            extra.push(before + i);
        }
    }
    (prefix, extra)
}

/// Every distinct crash state this recording offers (several subsets per moment), each with
/// the range of moments it stands for.
pub fn crash_points(rec: &Recording, rng: &mut StdRng) -> Vec<CrashPoint> {
    type Key = ((usize, Vec<usize>), (usize, Vec<usize>));
    let mut seen: HashMap<Key, usize> = HashMap::new();
    let mut out: Vec<CrashPoint> = Vec::new();
    for t in 0..=rec.end {
        let nm = rec.meta.pending_at(t);
        let nd = rec.data.pending_at(t);
        let mut variants = vec![(Subset::All, Subset::All)];
        if nm > 0 {
            variants.push((Subset::None, Subset::All));
            variants.push((Subset::Random(rng.gen()), Subset::All));
            if nm > 2 {
                variants.push((Subset::Chosen(vec![nm - 1]), Subset::All));
            }
        }
        if nd > 0 {
            variants.push((Subset::All, Subset::None));
            variants.push((Subset::All, Subset::Random(rng.gen())));
        }
        if nm > 0 && nd > 0 {
            variants.push((Subset::Random(rng.gen()), Subset::Random(rng.gen())));
        }
        for (m, d) in variants {
            let key = (landed(&rec.meta, t, &m), landed(&rec.data, t, &d));
            match seen.get(&key) {
                Some(&i) => out[i].t_last = t,
                None => {
                    seen.insert(key, out.len());
                    out.push(CrashPoint {
                        t,
                        meta: m,
                        data: d,
                        t_last: t,
                    });
                }
            }
        }
    }
    out
}

/// Pick at most `max` of `points` (seeded), keeping their order.
pub fn sample(mut points: Vec<CrashPoint>, max: usize, rng: &mut StdRng) -> Vec<CrashPoint> {
    if points.len() <= max {
        return points;
    }
    let mut keep: BTreeSet<usize> = BTreeSet::new();
    while keep.len() < max {
        keep.insert(rng.gen_range(0..points.len()));
    }
    let mut i = 0;
    points.retain(|_| {
        i += 1;
        keep.contains(&(i - 1))
    });
    points
}

/// What a file system showed: the view of every path and the content of every file (by the
/// smallest of its names).
pub struct Observed {
    pub view: View,
    pub contents: BTreeMap<String, Vec<u8>>,
    /// Of every file, which blocks SEEK_DATA / SEEK_HOLE call data.
    pub data_blocks: BTreeMap<String, Vec<bool>>,
}

fn kind_of(k: FileKind) -> Kind {
    match k {
        FileKind::Directory => Kind::Dir,
        FileKind::Symlink => Kind::Symlink,
        _ => Kind::File,
    }
}

/// Walk the whole tree of a mounted file system.
pub fn observe(fs: &Fs) -> Result<Observed, String> {
    let e = |what: &str, p: &str, err: dualfs::FsError| format!("{what} /{p}: {err}");
    let root = fs.getattr(1).map_err(|x| e("getattr", "", x))?;
    let mut list: Vec<(String, dualfs::fs::Attr)> = vec![(String::new(), root)];
    let mut i = 0;
    while i < list.len() {
        let (p, a) = list[i].clone();
        if a.kind == FileKind::Directory {
            let mut ents = Vec::new();
            fs.readdir(a.ino, 0, &mut |d| {
                if d.name != b"." && d.name != b".." {
                    ents.push(d.clone());
                }
                true
            })
            .map_err(|x| e("readdir", &p, x))?;
            for d in ents {
                let name =
                    String::from_utf8(d.name.clone()).map_err(|_| format!("/{p}: bad name"))?;
                let path = join(&p, &name);
                let ca = fs.getattr(d.ino).map_err(|x| e("getattr", &path, x))?;
                if ca.kind != d.kind {
                    return Err(format!(
                        "/{path}: entry says {:?}, inode is {:?}",
                        d.kind, ca.kind
                    ));
                }
                list.push((path, ca));
            }
        }
        i += 1;
    }
    let mut first: HashMap<u64, String> = HashMap::new();
    for (p, a) in &list {
        let f = first.entry(a.ino).or_insert_with(|| p.clone());
        if p < f {
            *f = p.clone();
        }
    }
    let mut view = View::default();
    let mut contents = BTreeMap::new();
    let mut data_blocks_of = BTreeMap::new();
    for (p, a) in &list {
        let kind = kind_of(a.kind);
        let (size, target) = match kind {
            Kind::Dir => {
                let n = list
                    .iter()
                    .filter(|(q, _)| {
                        !q.is_empty() && super::model::split(q).0 == p.as_str() && q != p
                    })
                    .count() as u64;
                (n, None)
            }
            Kind::Symlink => {
                let t = fs.readlink(a.ino).map_err(|x| e("readlink", p, x))?;
                (a.size, Some(t))
            }
            Kind::File => (a.size, None),
        };
        if kind == Kind::File && first[&a.ino] == *p {
            let fh = fs
                .open(&Caller::ROOT, a.ino, libc::O_RDONLY)
                .map_err(|x| e("open", p, x))?;
            let mut data = Vec::with_capacity(a.size as usize);
            while (data.len() as u64) < a.size {
                let chunk = fs
                    .read(a.ino, fh, data.len() as u64, 1 << 20)
                    .map_err(|x| e("read", p, x))?;
                if chunk.is_empty() {
                    break;
                }
                data.extend_from_slice(&chunk);
            }
            fs.release(a.ino, fh).map_err(|x| e("release", p, x))?;
            if data.len() as u64 != a.size {
                return Err(format!("/{p}: read {} of {} bytes", data.len(), a.size));
            }
            contents.insert(p.clone(), data);
            let blocks = data_blocks(fs, a.ino, a.size).map_err(|x| e("lseek", p, x))?;
            data_blocks_of.insert(p.clone(), blocks);
        }
        let mut attrs = BTreeMap::new();
        let names = fs
            .listxattr(&Caller::ROOT, a.ino)
            .map_err(|x| e("listxattr", p, x))?;
        for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
            let value = fs
                .getxattr(&Caller::ROOT, a.ino, name)
                .map_err(|x| e("getxattr", p, x))?;
            attrs.insert(String::from_utf8_lossy(name).into_owned(), value);
        }
        view.entries.insert(
            p.clone(),
            ViewEntry {
                kind,
                perm: a.perm,
                nlink: a.nlink,
                size,
                target,
                first_name: first[&a.ino].clone(),
                id: a.ino,
                attrs,
            },
        );
    }
    Ok(Observed {
        view,
        contents,
        data_blocks: data_blocks_of,
    })
}

/// Which blocks of a file of `size` bytes SEEK_DATA / SEEK_HOLE call data.
fn data_blocks(fs: &Fs, ino: u64, size: u64) -> Result<Vec<bool>, dualfs::FsError> {
    let bs = super::model::BS;
    let mut blocks = vec![false; size.div_ceil(bs) as usize];
    let mut pos = 0;
    while pos < size {
        let data = match fs.seek(ino, pos, Whence::Data) {
            Err(e) if e.errno() == libc::ENXIO => break,
            r => r?,
        };
        let hole = fs.seek(ino, data, Whence::Hole)?;
        assert!(data % bs == 0 && (hole % bs == 0 || hole == size) && hole > data);
        blocks[(data / bs) as usize..hole.div_ceil(bs) as usize].fill(true);
        pos = hole;
    }
    Ok(blocks)
}

/// How one crash state was judged.
pub enum Verdict {
    /// It matched the model after `prefix` recorded ops.
    Matched(Matched),
    Violation(String),
}

pub struct Matched {
    pub prefix: usize,
    /// Roll-forward applied transactions / discarded an incomplete chain.
    pub rolled_forward: bool,
    pub discarded: bool,
    /// The mount freed orphans (files unlinked while open at the crash).
    pub orphans: bool,
    /// A second crash during the recovery mount and its unmount was judged too.
    pub recovery_crash: bool,
}

/// Recorded ops started before moment `t`.
fn issued(rec: &Recording, t: u64) -> usize {
    rec.starts.iter().filter(|&&s| s < t).count()
}

/// Recorded ops made durable by a persistence call complete before moment `t`.
fn durable(rec: &Recording, t: u64) -> usize {
    (0..rec.starts.len())
        .filter(|&j| rec.ok[j] && rec.all_ops[rec.setup_len + j].persists() && rec.ends[j] <= t)
        .map(|j| j + 1)
        .max()
        .unwrap_or(0)
}

/// The recorded op in progress at moment `t` (its first event happened, its last not yet).
pub fn op_at(rec: &Recording, t: u64) -> Option<&Op> {
    (0..rec.starts.len())
        .find(|&i| rec.starts[i] < t && t < rec.ends[i])
        .map(|i| &rec.all_ops[rec.setup_len + i])
}

/// Build the two images of a crash point.
pub fn images(rec: &Recording, cp: &CrashPoint) -> (Vec<u8>, Vec<u8>) {
    let m = rec
        .meta
        .crash_state_at(&rec.base_meta, cp.t, &cp.meta.to_write_subset())
        .expect("meta crash state");
    let d = rec
        .data
        .crash_state_at(&rec.base_data, cp.t, &cp.data.to_write_subset())
        .expect("data crash state");
    (m, d)
}

/// Mount (recovery), observe, unmount cleanly, check. Returns what the mount showed.
fn recover(
    meta: Arc<dyn BlockDevice>,
    data: Arc<dyn BlockDevice>,
    what: &str,
) -> Result<(Observed, dualfs::fs::Recovery), String> {
    let fs = Fs::mount(meta.clone(), data.clone(), mount_options())
        .map_err(|e| format!("{what}: mount (recovery) failed: {e}"))?;
    let recovery = fs.recovery().clone();
    let seen = observe(&fs);
    fs.unmount()
        .map_err(|e| format!("{what}: unmount after recovery failed: {e}"))?;
    drop(fs);
    let seen = seen.map_err(|e| format!("{what}: after recovery: {e}"))?;
    match dualfs::check::check(&*meta, &*data) {
        Ok(r) if r.is_clean() => Ok((seen, recovery)),
        Ok(r) => Err(format!("{what}: checker after recovery + unmount:\n{r}")),
        Err(e) => Err(format!("{what}: checker failed: {e}")),
    }
}

fn same(a: &Observed, b: &Observed) -> Option<String> {
    let d = a.view.diff(&b.view, 10);
    if !d.is_empty() {
        return Some(d.join("\n"));
    }
    for (p, c) in &a.contents {
        if b.contents.get(p) != Some(c) {
            return Some(format!("/{p}: content differs"));
        }
    }
    for (p, c) in &a.data_blocks {
        if b.data_blocks.get(p) != Some(c) {
            return Some(format!("/{p}: holes differ"));
        }
    }
    None
}

/// A second crash, during the recovery mount and its unmount.
#[derive(Clone, Debug)]
pub enum RecoveryCrash {
    /// At a moment and with subsets chosen by this seed.
    Seeded(u64),
    /// At moment `t` of the recovery's own record, with these subsets.
    At(u64, Subset, Subset),
}

/// Mount the crash state (recovery), unmount, check, mount again and compare with the model.
/// With `recovery_crash`, the recovery mount and its unmount are recorded and a crash inside
/// them is judged too: it must recover to what the first recovery showed.
pub fn judge(rec: &Recording, cp: &CrashPoint, recovery_crash: Option<RecoveryCrash>) -> Verdict {
    let (m, d) = images(rec, cp);
    if std::env::var_os("DUALFS_CRASH_NO_RAW_CHECK").is_none() {
        // The checker rolls the log forward itself: on the crash image as it is, it must
        // agree with the mount that nothing is inconsistent.
        let (mm, dd) = (
            MemDevice::from_bytes(m.clone()),
            MemDevice::from_bytes(d.clone()),
        );
        match dualfs::check::check(&mm, &dd) {
            Ok(r) if r.is_clean() => {}
            Ok(r) => return Verdict::Violation(format!("checker on the crash image itself:\n{r}")),
            Err(e) => return Verdict::Violation(format!("checker on the crash image failed: {e}")),
        }
    }
    let clock = SeqClock::new();
    let meta = recorder(m.clone(), &clock);
    let data = recorder(d.clone(), &clock);
    let (first, recovery) = match recover(meta.clone(), data.clone(), "first mount") {
        Ok(x) => x,
        Err(e) => return Verdict::Violation(e),
    };
    let first_end = clock.now();
    if recovery_crash.is_some() {
        // A read-only mount recovers in memory only: it must show the same tree and write
        // nothing.
        let (rm, rd) = (mem(m.clone()), mem(d.clone()));
        let ro = MountOptions {
            read_only: true,
            ..mount_options()
        };
        let rmd: Arc<dyn BlockDevice> = rm.clone();
        let rdd: Arc<dyn BlockDevice> = rd.clone();
        match Fs::mount(rmd, rdd, ro) {
            Err(e) => return Verdict::Violation(format!("read-only mount failed: {e}")),
            Ok(fs) => {
                let seen = observe(&fs);
                let _ = fs.unmount();
                match seen {
                    Err(e) => return Verdict::Violation(format!("read-only mount: {e}")),
                    Ok(o) => {
                        if let Some(why) = same(&o, &first) {
                            return Verdict::Violation(format!(
                                "a read-only mount recovers something else than a \
                                 read-write one:\n{why}"
                            ));
                        }
                    }
                }
                if rm.snapshot() != m || rd.snapshot() != d {
                    return Verdict::Violation("a read-only mount wrote to a device".into());
                }
            }
        }
    }
    // Again, from what the first recovery left: nothing may change.
    let (second, _) = match recover(meta.clone(), data.clone(), "second mount") {
        Ok(x) => x,
        Err(e) => return Verdict::Violation(e),
    };
    if let Some(why) = same(&second, &first) {
        return Verdict::Violation(format!(
            "the second mount shows something else than the first (after recovery):\n{why}"
        ));
    }
    let hi = issued(rec, cp.t);
    let lo = durable(rec, cp.t_last).min(hi);
    let mut best: Option<(usize, Vec<String>)> = None;
    let mut prefix = None;
    for p in (lo..=hi).rev() {
        let problems = compare(rec, &second, p, lo, hi);
        if std::env::var_os("DUALFS_CRASH_VERBOSE").is_some() {
            eprintln!("  prefix {p}: {} differences", problems.len());
            for x in problems.iter().take(4) {
                eprintln!("    {x}");
            }
        }
        if problems.is_empty() {
            prefix = Some(p);
            break;
        }
        if best.as_ref().is_none_or(|b| problems.len() < b.1.len()) {
            best = Some((p, problems));
        }
    }
    let Some(prefix) = prefix else {
        let (p, problems) = best.unwrap();
        return Verdict::Violation(format!(
            "matches the model after no prefix of {lo}..={hi} recorded ops; closest is {p} ops:\n{}",
            problems.join("\n")
        ));
    };
    let recovery_crashed = recovery_crash.is_some();
    if let Some(rc) = recovery_crash {
        // The first recovery's mount and unmount were recorded (and the second's after them).
        let (t2, sm, sd) = match rc {
            RecoveryCrash::At(t, m, d) => (t, m, d),
            RecoveryCrash::Seeded(seed) => {
                let mut rng = StdRng::seed_from_u64(seed);
                let t2 = rng.gen_range(0..=first_end);
                let pick = |rng: &mut StdRng| {
                    if rng.gen_bool(0.5) {
                        Subset::All
                    } else {
                        Subset::Random(rng.gen())
                    }
                };
                let sm = pick(&mut rng);
                (t2, sm, pick(&mut rng))
            }
        };
        let m2 = meta.crash_state_at(&m, t2, &sm.to_write_subset()).unwrap();
        let d2 = data.crash_state_at(&d, t2, &sd.to_write_subset()).unwrap();
        let what = format!("crash at moment {t2}/{sm}/{sd} of the recovery mount + unmount");
        match recover(mem(m2), mem(d2), &what) {
            Ok((third, _)) => {
                if let Some(why) = same(&third, &first) {
                    return Verdict::Violation(format!(
                        "{what}: recovers to something else than the first recovery:\n{why}"
                    ));
                }
            }
            Err(e) => return Verdict::Violation(e),
        }
    }
    Verdict::Matched(Matched {
        prefix,
        rolled_forward: recovery.report.transactions > 0,
        discarded: recovery.report.discarded > 0,
        orphans: recovery.orphans_freed > 0,
        recovery_crash: recovery_crashed,
    })
}

/// The daemon killed right after recorded op `i` returned: both devices hold every write
/// issued so far (the kernel has them), the intent log holds what the daemon appended (with
/// `tear`, its last record half copied: op `i` was then never acknowledged). Recovery plus
/// the replay must show the model after op `i` exactly (or, torn, before it); killed again
/// once it has recovered, the next mount must show the same; then the checker is clean.
pub fn judge_death(rec: &Recording, i: usize, tear: bool) -> Option<Verdict> {
    let snap = &rec.intents[i];
    let snap = if tear {
        snap.torn_after(i.checked_sub(1).map(|j| &rec.intents[j])?)?
    } else {
        snap.clone()
    };
    let all = WriteSubset::Prefix(usize::MAX);
    let m = rec
        .meta
        .crash_state_at(&rec.base_meta, snap.t, &all)
        .unwrap();
    let d = rec
        .data
        .crash_state_at(&rec.base_data, snap.t, &all)
        .unwrap();
    let dir = IntentDir::new();
    snap.restore(&dir.0);
    let opts = MountOptions {
        intent_dir: Some(dir.0.clone()),
        ..mount_options()
    };
    let (meta, data): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (mem(m), mem(d));
    let what = format!(
        "killed after op {i}{}",
        if tear { ", its record torn" } else { "" }
    );
    let fs = match Fs::mount(meta.clone(), data.clone(), opts.clone()) {
        Ok(fs) => fs,
        Err(e) => return Some(Verdict::Violation(format!("{what}: mount failed: {e}"))),
    };
    let replay = fs.intent_replay();
    if replay.failed > 0 {
        return Some(Verdict::Violation(format!(
            "{what}: replay failed: {replay:?}"
        )));
    }
    let first = match observe(&fs) {
        Ok(o) => o,
        Err(e) => return Some(Verdict::Violation(format!("{what}: after the replay: {e}"))),
    };
    // Killed again, once recovered: the next mount must find the same.
    fs.shutdown();
    drop(fs);
    let fs = match Fs::mount(meta.clone(), data.clone(), opts) {
        Ok(fs) => fs,
        Err(e) => {
            return Some(Verdict::Violation(format!(
                "{what}, then again: mount failed: {e}"
            )))
        }
    };
    let second = observe(&fs);
    if let Err(e) = fs.unmount() {
        return Some(Verdict::Violation(format!("{what}: unmount failed: {e}")));
    }
    drop(fs);
    let second = match second {
        Ok(o) => o,
        Err(e) => return Some(Verdict::Violation(format!("{what}, then again: {e}"))),
    };
    if let Some(why) = same(&first, &second) {
        return Some(Verdict::Violation(format!(
            "{what}: killed again after its recovery, the next mount shows something else:\n{why}"
        )));
    }
    match dualfs::check::check(&*meta, &*data) {
        Ok(r) if r.is_clean() => {}
        Ok(r) => return Some(Verdict::Violation(format!("{what}: checker:\n{r}"))),
        Err(e) => return Some(Verdict::Violation(format!("{what}: checker failed: {e}"))),
    }
    let hi = i + 1;
    let lo = if tear { i } else { hi };
    let mut closest: Option<Vec<String>> = None;
    for p in (lo..=hi).rev() {
        // A torn record: op `i` was under way, so bytes it wrote in place may show.
        let problems = if tear {
            compare(rec, &second, p, lo, hi)
        } else {
            compare(rec, &second, p, p, p)
        };
        if problems.is_empty() {
            return Some(Verdict::Matched(Matched {
                prefix: p,
                rolled_forward: false,
                discarded: false,
                orphans: false,
                recovery_crash: false,
            }));
        }
        closest.get_or_insert(problems);
    }
    Some(Verdict::Violation(format!(
        "{what}: the tree is not the model after op {i}{}:\n{}",
        if tear { " or before it" } else { "" },
        closest.unwrap().join("\n")
    )))
}

/// Whether file `id` changed its content in recorded ops [lo, hi) (after the durable point).
fn changed_since(rec: &Recording, id: Id, lo: usize, hi: usize) -> bool {
    rec.touched
        .get(&id)
        .is_some_and(|v| v.iter().any(|&i| i >= lo && i < hi))
}

/// With the data cache, a file's writes since the durable point may be missing as a whole
/// (they were cached, not written back, when the log was written): such a file may show any
/// size it had after the durable point, up to prefix `p` (an O_TMPFILE file named since then
/// also the 0 it had before its write, as a created file has). Everything else still matches
/// the prefix: names, links, modes, directories, files not written since. (ext4's delayed
/// allocation gives the same: the on-disk size moves at write-back.)
fn lagging_sizes(rec: &Recording, found: &View, p: usize, lo: usize, hi: usize) -> View {
    let mut want = rec.views[p].clone();
    if !rec.delayed {
        return want;
    }
    for (path, w) in want.entries.iter_mut() {
        let Some(f) = found.entries.get(path) else {
            continue;
        };
        if w.kind != Kind::File || f.kind != Kind::File || f.size == w.size {
            continue;
        }
        let born_empty =
            f.size == 0 && rec.born_empty.get(&w.id).is_some_and(|&i| lo <= i && i < p);
        if changed_since(rec, w.id, lo, hi)
            && ((lo..=p).any(|q| rec.models[q].file_size(w.id) == Some(f.size)) || born_empty)
        {
            w.size = f.size;
        }
    }
    want
}

/// Differences between what was found and the model after `p` recorded ops; data may also
/// show bytes of writes issued before the crash to files changed after the durable point.
fn compare(rec: &Recording, found: &Observed, p: usize, lo: usize, hi: usize) -> Vec<String> {
    let want = &lagging_sizes(rec, &found.view, p, lo, hi);
    let mut out = found.view.diff(want, 8);
    if !out.is_empty() {
        return out;
    }
    let model = &rec.models[p];
    let issued_global = rec.setup_len + hi;
    for (path, e) in &want.entries {
        if e.kind != Kind::File || e.first_name != *path {
            continue;
        }
        let got = &found.contents[path];
        let full = model.content(e.id);
        let loose = changed_since(rec, e.id, lo, hi);
        // A lagging file (see `lagging_sizes`) is compared over the size it shows.
        assert!(
            got.len() == full.len() || (rec.delayed && loose),
            "sizes were compared"
        );
        let exp = &full[..got.len().min(full.len())];
        // Untouched since the last persistence point, a file has exactly the model's holes.
        let holes = &found.data_blocks[path];
        let want_holes = model.data_blocks(e.id);
        if !loose && *holes != want_holes {
            let b = holes.iter().zip(&want_holes).position(|(x, y)| x != y);
            out.push(format!(
                "/{path}: block {b:?} is {} by SEEK_DATA, expected {} (untouched since the \
                 last persistence point)",
                if b.is_some_and(|b| holes[b]) {
                    "data"
                } else {
                    "a hole"
                },
                if b.is_some_and(|b| want_holes[b]) {
                    "data"
                } else {
                    "a hole"
                },
            ));
        }
        if got[..] == exp[..] {
            continue;
        }
        let no_writes = Vec::new();
        let ws = rec.writes.get(&e.id).unwrap_or(&no_writes);
        let bad: Vec<usize> = (0..got.len())
            .filter(|&o| {
                exp.get(o) != Some(&got[o])
                    && !(loose
                        && ws
                            .iter()
                            .filter(|w| w.op < issued_global)
                            .any(|w| w.value_at(o as u64) == Some(got[o])))
            })
            .collect();
        if !bad.is_empty() {
            let o = bad[0];
            out.push(format!(
                "/{path}: {} bad bytes from offset {o} (found {:#04x}, expected {:#04x}{}), \
                 file {}",
                bad.len(),
                got[o],
                exp.get(o).copied().unwrap_or(0),
                if loose {
                    " or a byte some write put there"
                } else {
                    ", untouched since the last persistence point"
                },
                describe_bytes(got, o)
            ));
        }
    }
    out
}

fn describe_bytes(b: &[u8], at: usize) -> String {
    let lo = at.saturating_sub(4);
    let hi = (at + 12).min(b.len());
    format!("bytes {lo}..{hi}: {:02x?}", &b[lo..hi])
}

/// Everything needed to see and replay a failing case.
/// `replay_env` is what else the replay needs in its environment (the master seed, which
/// seeds the recovery crashes).
pub fn reproducer(rec: &Recording, cp: &CrashPoint, replay_env: &str, why: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "CRASH CONSISTENCY VIOLATION in workload {}", rec.id);
    let _ = writeln!(s, "{why}");
    let hi = issued(rec, cp.t);
    let lo = durable(rec, cp.t_last).min(hi);
    let _ = writeln!(
        s,
        "crash at moment {} (same images through {}); recorded ops {lo}..={hi} may show; \
         data cache {}",
        cp.t,
        cp.t_last,
        if rec.delayed {
            "on"
        } else {
            "off (write-through)"
        }
    );
    for (name, dev, sub) in [("meta", &rec.meta, &cp.meta), ("data", &rec.data, &cp.data)] {
        let k = dev.epoch_at(cp.t);
        let n = dev.pending_at(cp.t);
        let _ = writeln!(
            s,
            "  {name}: epochs 0..{k} flushed, epoch {k}: {n} writes issued, landed: {:?}",
            chosen(n, sub)
        );
    }
    let _ = writeln!(
        s,
        "operations (setup, then recorded ops with their clock span):"
    );
    for (gi, op) in rec.all_ops.iter().enumerate() {
        if gi < rec.setup_len {
            let _ = writeln!(s, "  setup {gi:3}: {op}");
        } else {
            let i = gi - rec.setup_len;
            let _ = writeln!(
                s,
                "  op {i:3} [{}..{}){}: {op}",
                rec.starts[i],
                rec.ends[i],
                if rec.ok[i] { "" } else { " (failed)" }
            );
        }
    }
    let _ = writeln!(
        s,
        "replay: {replay_env} DUALFS_CRASH_CASE={} DUALFS_CRASH_STATE={} cargo test --release \
         --test crash_states -- --exact crash_states --nocapture",
        rec.id,
        cp.spec()
    );
    s
}

/// Totals of a run.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    pub workloads: u64,
    pub ops: u64,
    pub candidates: u64,
    pub states: u64,
    pub rolled_forward: u64,
    pub discarded: u64,
    pub orphans: u64,
    pub enospc: u64,
    pub lost_nothing: u64,
    /// States whose crash moment falls inside a cleaning pass / another checkpoint.
    pub in_clean: u64,
    pub in_checkpoint: u64,
    pub recovery_crashes: u64,
    /// States of a daemon killed after an operation (devices whole, intent log as left), and
    /// of those, with the last record torn.
    pub deaths: u64,
    pub torn_intents: u64,
    pub violations: Vec<String>,
}

impl Tally {
    pub fn add(&mut self, o: &Tally) {
        self.workloads += o.workloads;
        self.ops += o.ops;
        self.candidates += o.candidates;
        self.states += o.states;
        self.rolled_forward += o.rolled_forward;
        self.discarded += o.discarded;
        self.orphans += o.orphans;
        self.enospc += o.enospc;
        self.lost_nothing += o.lost_nothing;
        self.in_clean += o.in_clean;
        self.in_checkpoint += o.in_checkpoint;
        self.recovery_crashes += o.recovery_crashes;
        self.deaths += o.deaths;
        self.torn_intents += o.torn_intents;
        self.violations.extend(o.violations.iter().cloned());
    }
}

/// Record `w` and judge up to `max_states` of its crash states (or only `only`).
pub fn run_workload(
    base: &Base,
    w: &Workload,
    max_states: usize,
    seed: u64,
    only: Option<&CrashPoint>,
    replay_env: &str,
) -> Tally {
    let rec = record(base, w);
    let mut rng = StdRng::seed_from_u64(seed);
    let all = crash_points(&rec, &mut rng);
    let mut t = Tally {
        workloads: 1,
        enospc: rec.enospc as u64,
        ops: w.ops.len() as u64,
        candidates: all.len() as u64,
        ..Default::default()
    };
    if std::env::var_os("DUALFS_CRASH_VERBOSE").is_some() {
        let okn = rec.ok.iter().filter(|&&o| o).count();
        eprintln!(
            "{}: {} recorded ops ({okn} succeeded), {} clock events, meta {} epochs, data {} epochs, {} distinct crash states",
            rec.id,
            rec.ok.len(),
            rec.end,
            rec.meta.epoch_count(),
            rec.data.epoch_count(),
            all.len()
        );
        eprintln!(
            "  at the end: {} paths",
            rec.models.last().unwrap().paths().len()
        );
        for (i, op) in rec.ops().iter().enumerate() {
            let e = match rec.errs[i] {
                0 => "ok".to_string(),
                e => std::io::Error::from_raw_os_error(e).kind().to_string(),
            };
            eprintln!("  {i:3} [{}..{}) {e:>10} {op}", rec.starts[i], rec.ends[i]);
        }
    }
    let points = match only {
        Some(cp) => vec![cp.clone()],
        None => sample(all, max_states, &mut rng),
    };
    for cp in &points {
        t.states += 1;
        // One state in four also crashes its own recovery (seeded by the point, to replay).
        let h = cp
            .spec()
            .bytes()
            .fold(seed, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01B3));
        let rc = (h % 4 == 0).then_some(RecoveryCrash::Seeded(h));
        match judge(&rec, cp, rc) {
            Verdict::Matched(m) => {
                t.rolled_forward += m.rolled_forward as u64;
                t.discarded += m.discarded as u64;
                t.orphans += m.orphans as u64;
                t.lost_nothing += (m.prefix == issued(&rec, cp.t)) as u64;
                t.recovery_crashes += m.recovery_crash as u64;
                match op_at(&rec, cp.t) {
                    Some(Op::Clean) => t.in_clean += 1,
                    Some(Op::Persist(super::ops::Persist::Sync) | Op::Mount | Op::Unmount) => {
                        t.in_checkpoint += 1
                    }
                    _ => {}
                }
                if only.is_some() {
                    eprintln!(
                        "{}: matched the model after {} recorded ops",
                        rec.id, m.prefix
                    );
                }
            }
            Verdict::Violation(why) => {
                let r = reproducer(&rec, cp, replay_env, &why);
                eprintln!("{r}");
                t.violations.push(r);
                // One per workload is enough to go on.
                break;
            }
        }
    }
    if only.is_none() && t.violations.is_empty() {
        judge_deaths(&rec, max_states, &mut rng, &mut t);
    }
    t
}

/// The daemon killed after some of the recorded ops (a tenth of the workload's budget, at
/// least one, each also with its last intent record torn where that is a state a death can
/// leave).
fn judge_deaths(rec: &Recording, max_states: usize, rng: &mut StdRng, t: &mut Tally) {
    let n = rec.intents.len();
    let want = (max_states / 10).clamp(1, n);
    let mut picks: BTreeSet<usize> = BTreeSet::new();
    while picks.len() < want {
        picks.insert(rng.gen_range(0..n));
    }
    for i in picks {
        for tear in [false, true] {
            let Some(v) = judge_death(rec, i, tear) else {
                continue;
            };
            t.deaths += 1;
            t.torn_intents += tear as u64;
            if let Verdict::Violation(why) = v {
                let r = format!("workload {} (DUALFS_CRASH_CASE={}): {why}", rec.id, rec.id);
                eprintln!("{r}");
                t.violations.push(r);
                return;
            }
        }
    }
}
