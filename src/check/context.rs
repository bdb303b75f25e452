//! What the passes share: a read-only view of the metadata device, the problem sink, a log
//! reader that validates addresses before reading, and the claims on log blocks that pass 5
//! adds up into segment usage.

use super::findings::Finding;
use super::{Options, Problem, Progress, ProgressFn, Report, Severity, Stats};
use crate::device::BlockDevice;
use crate::format::superblock::Superblock;
use crate::{FsError, Result};
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::Arc;

/// Problems listed per pass before the rest are only counted (unless verbose).
pub const PROBLEMS_PER_PASS: usize = 200;

// ---- The device ---------------------------------------------------------------------------

/// The metadata device as the checker sees it: reads past its end fail with `UnexpectedEof`
/// (so a truncated device is reported as damage, not as an I/O failure), and writes are refused
/// (the core functions the checker calls, such as roll-forward, must not write).
pub struct BoundedDevice<'a> {
    inner: &'a dyn BlockDevice,
}

impl<'a> BoundedDevice<'a> {
    pub fn new(inner: &'a dyn BlockDevice) -> Self {
        BoundedDevice { inner }
    }
}

impl BlockDevice for BoundedDevice<'_> {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let end = offset.checked_add(buf.len() as u64);
        if end.is_none_or(|e| e > self.inner.size()) {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "read of {} bytes at {offset} is past the end of the device ({} bytes)",
                    buf.len(),
                    self.inner.size()
                ),
            ));
        }
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, _buf: &[u8], _offset: u64) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "the checker never writes",
        ))
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

/// Sort an error from core code run on the devices: damage (a problem to report, returned as
/// its text) or an operational failure (returned as `Err`, ending the check).
pub fn damage_or_failure(e: FsError) -> Result<String> {
    match e {
        FsError::Io(ref io) if io.kind() == io::ErrorKind::UnexpectedEof => Ok(io.to_string()),
        FsError::Io(_) => Err(e),
        FsError::Corrupt { what, detail } => Ok(format!("{what}: {detail}")),
        other => Ok(other.to_string()),
    }
}

// ---- Problems -----------------------------------------------------------------------------

/// Collects problems (at most `PROBLEMS_PER_PASS` listed per pass unless verbose), notes and
/// statistics, and turns them into the report.
pub struct Sink {
    verbose: bool,
    problems: Vec<Problem>,
    listed: HashMap<&'static str, usize>,
    /// Per pass: (errors, warnings) not listed.
    unlisted: BTreeMap<&'static str, (u64, u64)>,
    notes: Vec<String>,
    pub stats: Stats,
    /// What a repair can act on (every finding, listed or not).
    pub findings: Vec<Finding>,
    progress: Option<ProgressFn>,
}

/// Passes, for progress reports.
pub const PASSES: u8 = 8;

impl Sink {
    pub fn new(opts: &Options) -> Sink {
        Sink {
            verbose: opts.verbose,
            problems: Vec::new(),
            listed: HashMap::new(),
            unlisted: BTreeMap::new(),
            notes: Vec::new(),
            stats: Stats::default(),
            findings: Vec::new(),
            progress: opts.progress.clone(),
        }
    }

    /// A sink for work done on another thread (same options, no progress reports), to be
    /// merged back with `absorb`.
    pub fn side(&self) -> Sink {
        Sink {
            verbose: self.verbose,
            problems: Vec::new(),
            listed: HashMap::new(),
            unlisted: BTreeMap::new(),
            notes: Vec::new(),
            stats: Stats::default(),
            findings: Vec::new(),
            progress: None,
        }
    }

    /// Take in what a side sink collected (problems, notes, findings, counts).
    pub fn absorb(&mut self, side: Sink) {
        for p in side.problems {
            self.add(p.severity, p.pass, p.message);
        }
        for (pass, (e, w)) in side.unlisted {
            let u = self.unlisted.entry(pass).or_insert((0, 0));
            u.0 += e;
            u.1 += w;
        }
        self.notes.extend(side.notes);
        self.findings.extend(side.findings);
        // Side work starts from zero counts: add them all (not the checkpoint facts).
        let (s, o) = (&mut self.stats, side.stats);
        s.inodes += o.inodes;
        s.directories += o.directories;
        s.files += o.files;
        s.symlinks += o.symlinks;
        s.special_files += o.special_files;
        s.orphans += o.orphans;
        s.data_blocks_used += o.data_blocks_used;
        s.log_blocks_live += o.log_blocks_live;
        s.tree_nodes += o.tree_nodes;
        s.entries += o.entries;
        s.attributes += o.attributes;
        s.value_blocks += o.value_blocks;
    }

    /// Record what a repair can act on.
    pub fn found(&mut self, f: Finding) {
        self.findings.push(f);
    }

    /// Pass `pass` (`name`) has done `done` of `total`.
    pub fn progress(&self, pass: u8, name: &'static str, done: u64, total: u64) {
        if let Some(p) = &self.progress {
            p(&Progress {
                pass,
                passes: PASSES,
                name,
                done,
                total,
            });
        }
    }

    fn add(&mut self, severity: Severity, pass: &'static str, message: String) {
        let n = self.listed.entry(pass).or_insert(0);
        if *n >= PROBLEMS_PER_PASS && !self.verbose {
            let u = self.unlisted.entry(pass).or_insert((0, 0));
            match severity {
                Severity::Error => u.0 += 1,
                Severity::Warning => u.1 += 1,
            }
            return;
        }
        *n += 1;
        self.problems.push(Problem {
            severity,
            pass,
            message,
        });
    }

    /// Problems reported so far (listed or not).
    pub fn problems_count(&self) -> u64 {
        self.problems.len() as u64 + self.unlisted.values().map(|(e, w)| e + w).sum::<u64>()
    }

    pub fn error(&mut self, pass: &'static str, message: impl Into<String>) {
        self.add(Severity::Error, pass, message.into());
    }

    pub fn warning(&mut self, pass: &'static str, message: impl Into<String>) {
        self.add(Severity::Warning, pass, message.into());
    }

    /// An informational line (kept only when verbose).
    pub fn note(&mut self, message: impl FnOnce() -> String) {
        if self.verbose {
            self.notes.push(message());
        }
    }

    pub fn finish(mut self) -> Report {
        for (pass, (errors, warnings)) in std::mem::take(&mut self.unlisted) {
            let severity = if errors > 0 {
                Severity::Error
            } else {
                Severity::Warning
            };
            self.problems.push(Problem {
                severity,
                pass,
                message: format!(
                    "{errors} more errors and {warnings} more warnings in this pass are not \
                     listed (check verbosely to see them)"
                ),
            });
        }
        Report {
            problems: self.problems,
            stats: self.stats,
            notes: self.notes,
        }
    }

    /// The report and the findings.
    pub fn finish_with_findings(mut self) -> (Report, Vec<Finding>) {
        let findings = std::mem::take(&mut self.findings);
        (self.finish(), findings)
    }
}

// ---- Reading the log ----------------------------------------------------------------------

/// What `LogReader::read_sorted` hands each block to: its address, and its bytes or why it
/// has none.
pub type BlockVisitor<'a> = dyn FnMut(u64, std::result::Result<&[u8], String>) -> Result<()> + 'a;

/// Reads metadata-device blocks after checking that the address is one the log can use.
pub struct LogReader<'a> {
    dev: &'a dyn BlockDevice,
    pub sb: Arc<Superblock>,
}

impl<'a> LogReader<'a> {
    pub fn new(dev: &'a dyn BlockDevice, sb: Arc<Superblock>) -> Self {
        LogReader { dev, sb }
    }

    pub fn device(&self) -> &'a dyn BlockDevice {
        self.dev
    }

    pub fn block_size(&self) -> u64 {
        self.sb.block_size as u64
    }

    pub fn segment_of(&self, addr: u64) -> u64 {
        addr / self.sb.segment_blocks as u64
    }

    /// Why `addr` cannot hold a log block, or None when it can: it must lie in segments
    /// 1..N-1, not on a superblock copy, and on the device.
    pub fn bad_address(&self, addr: u64) -> Option<String> {
        let seg = self.segment_of(addr);
        if addr == 0 {
            return Some("address 0 (none)".into());
        }
        if seg == 0 || seg >= self.sb.segments {
            return Some(format!("address {addr} is outside the log"));
        }
        if self.sb.copy_segments.contains(&seg) && addr == seg * self.sb.segment_blocks as u64 {
            return Some(format!("address {addr} is a superblock copy"));
        }
        let end = addr
            .checked_add(1)
            .and_then(|a| a.checked_mul(self.block_size()));
        if end.is_none_or(|e| e > self.dev.size()) {
            return Some(format!(
                "address {addr} is past the end of the metadata device"
            ));
        }
        None
    }

    /// Block `addr` of the metadata device, which must lie on it (no log-address rules).
    /// Outer `Err`: the device failed. Inner `Err`: why there is no such block.
    pub fn read_any(&self, addr: u64) -> Result<std::result::Result<Vec<u8>, String>> {
        let bs = self.block_size();
        let end = addr.checked_add(1).and_then(|a| a.checked_mul(bs));
        if end.is_none_or(|e| e > self.dev.size()) {
            return Ok(Err(format!(
                "block {addr} is past the end of the metadata device"
            )));
        }
        let mut b = vec![0u8; bs as usize];
        self.dev.read_at(&mut b, addr * bs)?;
        Ok(Ok(b))
    }

    /// Log block `addr`. Outer `Err`: the device failed. Inner `Err`: the address is unusable.
    pub fn read(&self, addr: u64) -> Result<std::result::Result<Vec<u8>, String>> {
        if let Some(why) = self.bad_address(addr) {
            return Ok(Err(why));
        }
        self.read_any(addr)
    }

    /// Log blocks `addrs` (ascending), each handed to `f` with its bytes or why it has none.
    /// Nearby blocks are read together, in runs of up to `MAX_RUN` blocks: a check reads the
    /// log in large sequential pieces instead of one system call per block.
    pub fn read_sorted(&self, addrs: &[u64], f: &mut BlockVisitor<'_>) -> Result<()> {
        const MAX_RUN: u64 = 256;
        const MAX_GAP: u64 = 8;
        let bs = self.block_size() as usize;
        let mut buf = Vec::new();
        let mut i = 0;
        while i < addrs.len() {
            let first = addrs[i];
            if let Some(why) = self.bad_address(first) {
                f(first, Err(why))?;
                i += 1;
                continue;
            }
            // Extend the run over the next good addresses that are close enough.
            let mut j = i + 1;
            let mut last = first;
            while j < addrs.len() {
                let a = addrs[j];
                if a < last
                    || a - last > MAX_GAP
                    || a - first >= MAX_RUN
                    || self.bad_address(a).is_some()
                {
                    break;
                }
                last = a;
                j += 1;
            }
            let n = (last - first + 1) as usize;
            // Both ends passed `bad_address`, so the whole run lies on the device.
            assert!(
                (n as u64) <= MAX_RUN && (last + 1) * bs as u64 <= self.dev.size(),
                "a run of log blocks {first}..={last} reaches past the device"
            );
            buf.resize(n * bs, 0);
            self.dev.read_at(&mut buf, first * bs as u64)?;
            for &a in &addrs[i..j] {
                let off = (a - first) as usize * bs;
                f(a, Ok(&buf[off..off + bs]))?;
            }
            i = j;
        }
        Ok(())
    }
}

// ---- Who uses which log block -------------------------------------------------------------

/// What a live log block is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogUse {
    /// An `INODES` block holding this many live inodes (256 live bytes each).
    Inodes(u32),
    Indirect {
        ino: u64,
        level: u8,
        index: u64,
    },
    Symlink {
        ino: u64,
        index: u64,
    },
    Node {
        id: u64,
    },
    Meta {
        file: u64,
        index: u64,
    },
    MetaIndirect {
        file: u64,
        level: u8,
        index: u64,
    },
}

impl std::fmt::Display for LogUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            LogUse::Inodes(n) => write!(f, "an inode block ({n} live inodes)"),
            LogUse::Indirect { ino, level, index } => write!(
                f,
                "inode {ino}'s level-{level} indirect block for file block {index}"
            ),
            LogUse::Symlink { ino, index } => write!(f, "inode {ino}'s symlink block {index}"),
            LogUse::Node { id } => write!(f, "tree node {id}"),
            LogUse::Meta { file, index } => write!(f, "block {index} of meta file {file}"),
            LogUse::MetaIndirect { file, level, index } => write!(
                f,
                "meta file {file}'s level-{level} indirect block for block {index}"
            ),
        }
    }
}

/// Every live log block and what it is. A block may hold many inodes but is otherwise used
/// once; a second claim is a conflict (two owners of one block).
#[derive(Default)]
pub struct Claims {
    by_addr: HashMap<u64, LogUse>,
}

impl Claims {
    /// `count` more live inodes in block `addr`. Err: the block is already something else.
    pub fn claim_inodes(&mut self, addr: u64, count: u32) -> std::result::Result<(), LogUse> {
        match self.by_addr.entry(addr).or_insert(LogUse::Inodes(0)) {
            LogUse::Inodes(n) => {
                *n = n.saturating_add(count);
                Ok(())
            }
            other => Err(*other),
        }
    }

    /// Block `addr` is `what`. Err: it is already claimed (as the returned use).
    pub fn claim_block(&mut self, addr: u64, what: LogUse) -> std::result::Result<(), LogUse> {
        match self.by_addr.entry(addr) {
            std::collections::hash_map::Entry::Occupied(o) => Err(*o.get()),
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(what);
                Ok(())
            }
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (u64, LogUse)> + '_ {
        self.by_addr.iter().map(|(&a, &u)| (a, u))
    }

    pub fn len(&self) -> usize {
        self.by_addr.len()
    }
}

/// "a, b, c" of at most `max` items, then "and N more".
pub fn list<T: std::fmt::Display>(items: &[T], max: usize) -> String {
    let mut s = items
        .iter()
        .take(max)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > max {
        s.push_str(&format!(" and {} more", items.len() - max));
    }
    s
}
