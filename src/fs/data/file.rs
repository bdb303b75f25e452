//! File contents: open/release, read, write, truncate, fsync.
//!
//! Written data waits in the daemon's cache (data_cache.rs) unless the mount has none; either
//! way, when it goes to the data device, new blocks are reserved in per-file windows so
//! sequential writes come out contiguous, written, and only then linked into the block map,
//! so a log write never makes metadata point at data that is not on the device yet (the data
//! device is flushed before the log).

use crate::format::bmap::{max_blocks, parent, unwritten, DataPtr, Parent};
use crate::format::inode::FLAG_NOATIME;
use crate::format::meta::decode_pointer_block;
use crate::format::summary::Record;
use crate::format::{BlockHeader, BlockKind};
use crate::fs::attrs::flags::Change;
use crate::fs::clean::Admit;
use crate::fs::inode::bmap::{self, Need};
use crate::fs::inode::{InodeEntry, InodeState};
use crate::fs::types::*;
use crate::fs::{Fs, Handle, NO_HANDLE};
use crate::{FsError, Result};
use std::sync::Arc;

/// The size of a regular file; EISDIR for a directory, EINVAL for anything else.
pub(crate) fn regular_size(e: &InodeEntry) -> Result<u64> {
    let st = e.state.read();
    match st.d.mode & libc::S_IFMT {
        libc::S_IFREG => Ok(st.d.size),
        libc::S_IFDIR => Err(FsError::Errno(libc::EISDIR)),
        _ => Err(FsError::Errno(libc::EINVAL)),
    }
}

impl Fs {
    /// The handle a file operation came through. `NO_HANDLE` (the kernel opened the file
    /// without telling DualFS, `kernel_opens_unseen`) stands for a descriptor with the open
    /// flags `flags` the request carries; elsewhere it is EBADF like any unknown handle.
    pub(in crate::fs) fn handle_of(&self, ino: u64, fh: u64, flags: i32) -> Result<Handle> {
        if fh == NO_HANDLE && crate::intent::replaying() {
            // A replayed write or fallocate: its handle was checked when it was made.
            return Ok(Handle {
                ino,
                append: false,
                opened_append: true,
            });
        }
        if fh == NO_HANDLE && self.ns.kernel_refs.files_opened_unseen() {
            let opened_append = flags & libc::O_APPEND != 0;
            return Ok(Handle {
                ino,
                append: opened_append && !self.ns.writeback_cache(),
                opened_append,
            });
        }
        match self.ns.handle(fh) {
            Some(h) => Ok(h),
            None => self
                .ns
                .inherited_handle(fh, ino)
                .ok_or(FsError::Errno(libc::EBADF)),
        }
    }

    /// Open an existing file; `flags` are the open(2) flags (O_TRUNC, O_APPEND honoured).
    /// An immutable file opens for reading only; an append-only one for writing with
    /// O_APPEND only, never with O_TRUNC.
    pub fn open(&self, caller: &Caller, ino: u64, flags: i32) -> Result<u64> {
        self.alive()?;
        let e = self.inode(ino)?;
        let kind = FileKind::from_mode(e.state.read().d.mode);
        let writing = flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
        if kind == Some(FileKind::Directory) && writing {
            return Err(FsError::Errno(libc::EISDIR));
        }
        if writing {
            let change = if flags & libc::O_APPEND != 0 && flags & libc::O_TRUNC == 0 {
                Change::Append
            } else {
                Change::Modify
            };
            self.check_entry(&e, change)?;
        }
        // Opening to write takes no log space (each write is admitted); truncating frees.
        let _admitted = match (writing, flags & libc::O_TRUNC != 0) {
            (true, true) => Some(self.admit(Admit::Delete)?),
            (true, false) => {
                self.writable()?;
                None
            }
            (false, _) => None,
        };
        if flags & libc::O_TRUNC != 0 && kind == Some(FileKind::Regular) {
            let _op = e.op.lock_arc();
            self.check_entry(&e, Change::Modify)?;
            self.truncate_locked(&e, 0)?;
            self.contents_changed_by(caller, &e);
            self.record_truncate(&e, 0);
        }
        self.count_open(&e)?;
        Ok(self.ns.new_handle(ino, flags))
    }

    /// One more open handle of `e`, which keeps it (and its attributes) when its last name
    /// goes; ENOENT if it went already.
    pub(crate) fn count_open(&self, e: &InodeEntry) -> Result<()> {
        let mut st = e.state.write();
        if st.deleted {
            return Err(FsError::Errno(libc::ENOENT));
        }
        st.opens += 1;
        Ok(())
    }

    pub fn release(&self, ino: u64, fh: u64) -> Result<()> {
        if self.ns.remove_handle(fh).is_none() {
            // A dead predecessor's handle: the open it closes was never counted here.
            if self.ns.inherited_handle(fh, ino).is_some() {
                return Ok(());
            }
            return Err(FsError::Errno(libc::EBADF));
        }
        self.closed(ino)
    }

    /// A handle of `ino` (file or directory) was closed. The last one returns the file's
    /// reservation window, and frees an inode whose last name went while it was open.
    pub(crate) fn closed(&self, ino: u64) -> Result<()> {
        let Some(e) = self.ns.inodes.get(ino) else {
            return Ok(());
        };
        let _op = e.op.lock_arc();
        {
            let mut st = e.state.write();
            st.opens = st.opens.saturating_sub(1);
            if st.opens == 0 {
                self.alloc.return_window(&e, &mut st);
            }
        }
        self.free_if_unused_locked(&e)
    }

    /// Has `ino` (state `st`) lost its last name, with nothing left that may still use it:
    /// no open handle, and no kernel reference where the kernel opens it unseen
    /// (namespace/kernel_refs.rs)? Then it is freed now.
    pub(crate) fn removed_and_unused(&self, ino: u64, st: &InodeState) -> bool {
        st.d.nlink == 0
            && !st.deleted
            && st.opens == 0
            && !self.ns.kernel_refs.keeps(ino, st.d.mode)
    }

    /// Free `e` if it is removed and unused (the caller holds its op lock): at its last
    /// close, the kernel's last FORGET, or a mount that finds it orphaned.
    pub(crate) fn free_if_unused_locked(&self, e: &Arc<InodeEntry>) -> Result<()> {
        if self.is_read_only()
            || self.alive().is_err()
            || !self.removed_and_unused(e.ino, &e.state.read())
        {
            return Ok(());
        }
        self.preload_all(e, 0)?;
        let dropped: Vec<_> = self.attrs_drop_message(e).into_iter().collect();
        let _pre = self.ns.tree.preload(&self.nodes(), &dropped)?;
        let _g = self.log.gate.read();
        let mut st = e.state.write();
        if self.removed_and_unused(e.ino, &st) {
            let dropped = self.destroy(e, &mut st);
            drop(st);
            self.drop_attrs(dropped)?;
        }
        Ok(())
    }

    /// The pointer leading to indirect block (`level`, `index`), as cached now.
    fn parent_pointer(&self, st: &InodeState, level: u8, index: u64) -> Option<u64> {
        match parent(level, index, self.ppb) {
            Parent::Inode { tree } => Some(st.d.indirect[tree]),
            Parent::Block { level, index, slot } => {
                st.ptrs.get(&(level, index)).map(|b| b.ptrs[slot])
            }
        }
    }

    /// Read indirect block `need` and cache it, unless it changed meanwhile.
    pub(crate) fn load_ptr(&self, e: &InodeEntry, need: Need) -> Result<()> {
        let raw = self.read_log_block(need.addr)?;
        let ptrs = decode_pointer_block(
            &raw,
            BlockHeader::new(BlockKind::Indirect, need.level, e.ino, need.index),
        )?;
        let mut st = e.state.write();
        if !st.ptrs.contains_key(&(need.level, need.index))
            && self.parent_pointer(&st, need.level, need.index) == Some(need.addr)
        {
            st.ptrs
                .insert_clean((need.level, need.index), ptrs, need.addr);
        }
        Ok(())
    }

    /// The data pointer of file block `n` (0 = hole; an unwritten block has `UNWRITTEN`
    /// set), loading indirect blocks as needed. A pointer to no block or past the data device
    /// is corruption (EIO), never an offset to compute with.
    pub(crate) fn resolve(&self, e: &InodeEntry, n: u64) -> Result<u64> {
        loop {
            let r = bmap::lookup(&e.state.read(), n, self.ppb);
            match r {
                Ok(raw) => {
                    return match DataPtr::decode(raw).addr() {
                        Some(a) if a == 0 || a >= self.sb.data_blocks => Err(FsError::corrupt(
                            "block map",
                            format!(
                                "inode {}: file block {n} points at data block {a}, not on the \
                                 data device",
                                e.ino
                            ),
                        )),
                        _ => Ok(raw),
                    }
                }
                Err(need) => self.load_ptr(e, need)?,
            }
        }
    }

    /// The device block holding file block `n`'s bytes, or 0 when they read as zeros (a hole
    /// or an unwritten block).
    fn resolve_written(&self, e: &InodeEntry, n: u64) -> Result<u64> {
        let raw = self.resolve(e, n)?;
        Ok(match DataPtr::decode(raw) {
            DataPtr::Written(a) => a,
            _ => 0,
        })
    }

    /// Load the indirect blocks on the path to file block `n` (for the cleaner).
    pub(crate) fn resolve_for_clean(&self, e: &InodeEntry, n: u64) -> Result<()> {
        self.resolve(e, n).map(|_| ())
    }

    /// Cache every indirect block that maps file blocks `>= from` (before freeing them).
    pub(crate) fn preload_all(&self, e: &InodeEntry, from: u64) -> Result<()> {
        loop {
            let missing = bmap::missing_blocks(&e.state.read(), from, self.ppb);
            if missing.is_empty() {
                return Ok(());
            }
            for need in missing {
                self.load_ptr(e, need)?;
            }
        }
    }

    /// Free everything an inode owns and the inode itself (the caller holds its op lock, the
    /// gate, and has preloaded its indirect blocks). The entry stays as a tombstone until the
    /// log writer has taken the free.
    /// Free inode `e` (its state `st` locked). Its attributes go once the state lock is
    /// released: pass what this returns to `drop_attrs`, still under the gate.
    pub(crate) fn destroy(
        &self,
        e: &Arc<InodeEntry>,
        st: &mut InodeState,
    ) -> Option<crate::fs::attrs::xattr::DroppedAttrs> {
        // Only regular files own data blocks; a long symlink's pointers are log addresses.
        let freed = if st.d.mode & libc::S_IFMT == libc::S_IFREG {
            bmap::free_from(st, 0, self.ppb)
        } else {
            bmap::Freed::default()
        };
        self.drop_cached(e, st);
        let mut recs = self.log.records.lock();
        for (start, count) in freed.data {
            recs.push(Record::DFree { start, count });
        }
        let mut dead = freed.log;
        if st.d.is_symlink() && st.d.inline.is_none() {
            dead.extend(st.d.direct.iter().copied().filter(|&a| a != 0));
        }
        for a in dead {
            recs.push(Record::Dead { addr: a, count: 1 });
        }
        if st.d.mode & libc::S_IFMT == libc::S_IFDIR {
            recs.push(Record::GroupDirs {
                group: st.d.group as u64,
                delta: -1,
            });
        }
        // The generation goes with the free, so the number's next use gets a newer one even
        // if this use never reached the log (the kernel and file handles tell uses apart by
        // it).
        recs.push(Record::IFree {
            ino: e.ino,
            generation: st.d.generation,
        });
        drop(recs);
        self.alloc.return_window(e, st);
        // A tombstone in the dirty set writes no inode (admission counts it apart): one in
        // the set already becomes one, another enters as one.
        if st.dirty {
            self.log
                .dirty
                .now_deleted(e.ino, st.fresh, &self.cleaner.counts);
        }
        st.deleted = true;
        st.drop_target();
        self.mark_dirty(e, st);
        self.ns.hold_ino(e.ino);
        Fs::attrs_of_freed(e.ino, st)
    }

    /// Free an inode found with no links at mount (open-unlinked before a crash).
    pub(crate) fn free_orphan(&self, ino: u64) -> Result<()> {
        // The intent log's replay may have named it (an O_TMPFILE file linked after the log
        // took it unnamed) or freed it since the mount listed it.
        let e = match self.inode(ino) {
            Err(FsError::Errno(libc::ENOENT)) => return Ok(()),
            r => r?,
        };
        let _op = e.op.lock_arc();
        if self.removed_and_unused(ino, &e.state.read()) {
            log::info!("freeing orphan inode {ino}");
        }
        self.free_if_unused_locked(&e)
    }

    /// Update the access time after a read or listing: with `strictatime` always, else as
    /// Linux's `relatime` does, when it is not newer than the last change or more than a day
    /// old; never with `noatime`, for an inode flagged FS_NOATIME_FL, or for a directory with
    /// `nodiratime`. The new time reaches the log with the next flush, like every change.
    ///
    /// Without the gate: an access time is part of no invariant between objects, so it needs
    /// no transaction of its own, only to be in some transaction whole. The state lock makes
    /// the change atomic against the log writer's copy of the inode, and the dirty set's lock
    /// orders it against the writer's taking of the set (`DirtySet::take`): an inode marked
    /// dirty before that is in the snapshot, one marked after in the next. A read therefore never queues behind
    /// the writer waiting for the gate, or behind the mutations holding it.
    pub(crate) fn touch_atime(&self, e: &Arc<InodeEntry>) {
        if self.opts.noatime || self.is_read_only() || self.alive().is_err() {
            return;
        }
        let now = Timespec::now();
        let stale = |st: &InodeState| {
            if st.d.flags & FLAG_NOATIME != 0
                || (self.opts.nodiratime && st.d.mode & libc::S_IFMT == libc::S_IFDIR)
            {
                return false;
            }
            let a = crate::fs::inode::from_disk_time(st.d.atime);
            self.opts.strictatime
                || a <= crate::fs::inode::from_disk_time(st.d.mtime)
                || a <= crate::fs::inode::from_disk_time(st.d.ctime)
                || now.sec - a.sec >= 24 * 3600
        };
        if !stale(&e.state.read()) {
            return;
        }
        let mut st = e.state.write();
        if !st.deleted && stale(&st) {
            st.d.atime = crate::fs::inode::to_disk_time(now);
            self.mark_dirty(e, &mut st);
        }
    }

    pub fn read(&self, ino: u64, _fh: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        self.alive()?;
        let e = self.inode(ino)?;
        let fsize = regular_size(&e)?;
        let buf = self.read_range(&e, fsize, offset, size as u64)?;
        if !buf.is_empty() {
            self.touch_atime(&e);
        }
        Ok(buf)
    }

    /// Bytes [offset, offset + len) of a regular file of size `fsize`, cut at its end.
    pub(crate) fn read_range(
        &self,
        e: &InodeEntry,
        fsize: u64,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>> {
        if offset >= fsize || len == 0 {
            return Ok(Vec::new());
        }
        let end = fsize.min(offset.saturating_add(len));
        let bs = self.sb.block_size as u64;
        let mut buf = vec![0u8; (end - offset) as usize];
        let (first, last) = (offset / bs, (end - 1) / bs);
        // Runs of consecutive device blocks become one read.
        let mut run: Option<(u64, u64, u64)> = None; // (first file block, first device block, count)
        for n in first..=last + 1 {
            // A cached block is copied here and ends a run like a hole.
            let mut a = if n <= last && !self.read_cached(e, n, &mut buf, offset, end) {
                self.resolve_written(e, n)?
            } else {
                0
            };
            // The partial last block of a file written back may still be held in memory.
            if a != 0 && n == last && fsize % bs != 0 {
                let block = (n, a, fsize, bs);
                if self
                    .cache
                    .read_tail_range(e.ino, block, &mut buf, offset, end)
                {
                    a = 0;
                }
            }
            match &mut run {
                Some((_, d, c)) if a != 0 && a == *d + *c => *c += 1,
                _ => {
                    if let Some((f, d, c)) = run.take() {
                        self.read_run(&mut buf, offset, end, f, d, c)?;
                    }
                    if a != 0 {
                        run = Some((n, a, 1));
                    }
                }
            }
        }
        Ok(buf)
    }

    /// Copy device blocks [d, d+c) holding file blocks [f, f+c) into `buf` (file range [offset, end)).
    fn read_run(
        &self,
        buf: &mut [u8],
        offset: u64,
        end: u64,
        f: u64,
        d: u64,
        c: u64,
    ) -> Result<()> {
        let bs = self.sb.block_size as u64;
        let lo = (f * bs).max(offset);
        let hi = (f + c).saturating_mul(bs).min(end);
        let dev_off = d * bs + (lo - f * bs);
        self.alloc.dev().read_at(
            &mut buf[(lo - offset) as usize..(hi - offset) as usize],
            dev_off,
        )?;
        Ok(())
    }

    /// Data blocks freed by operations whose transaction is not durable yet.
    pub(crate) fn data_frees_pending(&self) -> bool {
        self.pending_data_frees() > 0
    }

    /// How many data blocks pending transactions free (they stay allocated in the committed
    /// bitmap until then).
    pub(crate) fn pending_data_frees(&self) -> u64 {
        self.log.records.data_freed()
    }

    /// Returns the number of bytes written (all of `data` unless an error).
    pub fn write(&self, ino: u64, fh: u64, offset: u64, data: &[u8]) -> Result<u32> {
        self.write_as(ino, fh, 0, offset, data, None)
    }

    /// A write by `writer`, a caller without CAP_FSETID (the kernel's
    /// FUSE_WRITE_KILL_SUIDGID): it also takes set-ID bits away (attrs/privileges.rs).
    pub fn write_unprivileged(
        &self,
        writer: &Caller,
        ino: u64,
        fh: u64,
        offset: u64,
        data: &[u8],
    ) -> Result<u32> {
        self.write_as(ino, fh, 0, offset, data, Some(writer))
    }

    /// A write through handle `fh`, whose descriptor has the open flags `flags` (the kernel
    /// sends them with every write; they matter for `NO_HANDLE`, see `handle_of`), by
    /// `unprivileged_writer` when the writer lacks CAP_FSETID. The checks open makes for a
    /// handle it hands out (immutable, append-only) are made here too, for every write.
    pub fn write_as(
        &self,
        ino: u64,
        fh: u64,
        flags: i32,
        offset: u64,
        data: &[u8],
        unprivileged_writer: Option<&Caller>,
    ) -> Result<u32> {
        let _admitted = self.admit(Admit::Write(data.len() as u64))?;
        let h = self.handle_of(ino, fh, flags)?;
        if h.ino != ino {
            return Err(FsError::Errno(libc::EBADF));
        }
        let e = self.inode(ino)?;
        let written = self.write_handle_locked(&e, h, offset, data, unprivileged_writer)?;
        // Past its budget the cache is written back by its writers, as the kernel's page
        // cache throttles writers to write back (no op lock held here).
        self.writeback_over_budget()?;
        Ok(written)
    }

    /// `write_as` once admitted and past the handle checks: under `e`'s op lock.
    fn write_handle_locked(
        &self,
        e: &Arc<InodeEntry>,
        h: Handle,
        offset: u64,
        data: &[u8],
        unprivileged_writer: Option<&Caller>,
    ) -> Result<u32> {
        let e = e.clone();
        let _op = e.op.lock_arc();
        let size = regular_size(&e)?;
        // A descriptor opened before the file became append-only may not write either.
        self.check_entry(
            &e,
            if h.opened_append {
                Change::Append
            } else {
                Change::Modify
            },
        )?;
        if data.is_empty() {
            return Ok(0);
        }
        if let Some(writer) = unprivileged_writer {
            let (mode, gid) = {
                let st = e.state.read();
                (st.d.mode, st.d.gid)
            };
            let taken =
                crate::fs::attrs::privileges::taken_by_unprivileged_change(writer, mode, gid);
            self.take_set_ids_locked(&e, taken);
        }
        let off = if h.append { size } else { offset };
        self.write_locked(&e, size, off, data)?;
        Ok(data.len() as u32)
    }

    /// Write `data` at `off` into regular file `e` of size `size` (the caller holds its op
    /// lock and was admitted; `data` is not empty).
    pub(crate) fn write_locked(
        &self,
        e: &Arc<InodeEntry>,
        size: u64,
        off: u64,
        data: &[u8],
    ) -> Result<()> {
        let bs = self.sb.block_size as u64;
        let end = off
            .checked_add(data.len() as u64)
            .ok_or(FsError::Errno(libc::EFBIG))?;
        if end.div_ceil(bs) > max_blocks(self.ppb) {
            return Err(FsError::Errno(libc::EFBIG));
        }
        if self.cache.enabled() {
            self.write_cached(e, size, off, data)?;
            self.record_written(e, off, data, true);
            return Ok(());
        }
        let (first, last) = (off / bs, (end - 1) / bs);
        // Bytes between the old end and the write are garbage on the device: they are zeroed,
        // but only once the write cannot fail for want of space. The block may still hold
        // durable data past the in-memory end (an uncommitted truncate), which a refused
        // write must leave as it is.
        let zero_tail = if off > size {
            self.tail_past_end(e, size, off)?
        } else {
            None
        };
        let mut addrs = Vec::with_capacity((last - first + 1) as usize);
        // Blocks written whole, zero-padded: new ones, and unwritten ones (whose old bytes
        // read as zeros); their pointers change once the data is on the device.
        let mut fresh = Vec::with_capacity(addrs.capacity());
        for n in first..=last {
            let ptr = DataPtr::decode(self.resolve(e, n)?);
            addrs.push(ptr.addr().unwrap_or(0));
            fresh.push(!ptr.is_written());
        }
        let holes = addrs.iter().filter(|&&a| a == 0).count() as u64;
        let mut new_runs = Vec::new();
        if holes > 0 {
            let first_hole = first + addrs.iter().position(|&a| a == 0).unwrap() as u64;
            new_runs = self.alloc_data_retrying(e, holes, first_hole, false)?;
            let mut it = new_runs.iter().flat_map(|&(s, c)| s..s + c);
            for a in addrs.iter_mut().filter(|a| **a == 0) {
                *a = it.next().unwrap();
            }
        }
        let written = match zero_tail {
            Some((at, len)) => self
                .alloc
                .dev()
                .write_at(&vec![0u8; len], at)
                .map_err(Into::into),
            None => Ok(()),
        }
        .and_then(|()| self.write_blocks(&addrs, &fresh, first, off, data));
        if let Err(err) = written {
            self.alloc.unreserve_runs(&new_runs);
            return Err(err);
        }
        self.alloc.mark_written();
        let _g = self.gate_shared();
        let mut st = e.state.write();
        for (i, &a) in addrs.iter().enumerate() {
            if fresh[i] {
                let old = bmap::set(&mut st, first + i as u64, a, self.ppb)
                    .expect("indirect blocks were loaded under the op lock");
                debug_assert!(
                    old == 0 || old == unwritten(a),
                    "file block {}",
                    first + i as u64
                );
            }
        }
        st.d.blocks += holes;
        if fresh.contains(&true) {
            self.charge_block_range(first, last);
        }
        self.record_allocations(&new_runs);
        if end > st.d.size {
            st.d.size = end;
        }
        let now = crate::fs::inode::to_disk_time(Timespec::now());
        st.d.mtime = now;
        st.d.ctime = now;
        self.mark_dirty(e, &mut st);
        drop(st);
        drop(_g);
        self.record_written(e, off, data, false);
        Ok(())
    }

    /// Put `data` (file offset `off`) into device blocks `addrs` (file blocks from `first`).
    /// Fresh blocks are written whole, zero-padded; existing ones only where data goes. The
    /// bytes of each run of consecutive device blocks go straight from `data`, in one write;
    /// only a fresh block the data covers in part is assembled apart, with its zeros.
    fn write_blocks(
        &self,
        addrs: &[u64],
        fresh: &[bool],
        first: u64,
        off: u64,
        data: &[u8],
    ) -> Result<()> {
        let bs = self.sb.block_size as u64;
        let end = off + data.len() as u64;
        let mut i = 0;
        while i < addrs.len() {
            // A run of consecutive device blocks; only its ends may be partly covered.
            let mut j = i + 1;
            while j < addrs.len() && addrs[j] == addrs[j - 1] + 1 {
                j += 1;
            }
            let (fb0, fb1) = (first + i as u64, first + j as u64); // file blocks [fb0, fb1)
            let dev = |file_off: u64| (addrs[i] + (file_off / bs - fb0)) * bs + file_off % bs;
            // The part of the run the data covers, and what must be written around it.
            let (mut lo, mut hi) = ((fb0 * bs).max(off), (fb1 * bs).min(end));
            if fresh[i] && lo > fb0 * bs {
                // A fresh first block the data starts inside: its zeros, then its data.
                let block_end = ((fb0 + 1) * bs).min(hi);
                self.write_padded(data, off, fb0 * bs, lo, block_end, dev(fb0 * bs))?;
                lo = block_end;
            }
            if fresh[j - 1] && hi < fb1 * bs && hi > lo {
                // A fresh last block the data ends inside: its data, then its zeros.
                let block_start = ((fb1 - 1) * bs).max(lo);
                self.write_padded(data, off, block_start, block_start, hi, dev(block_start))?;
                hi = block_start;
            }
            if hi > lo {
                let bytes = &data[(lo - off) as usize..(hi - off) as usize];
                self.alloc.dev().write_at(bytes, dev(lo))?;
            }
            i = j;
        }
        Ok(())
    }

    /// Write one fresh block's part [from, from + the block's rest) with the request's bytes
    /// [lo, hi) in it and zeros around them (file offsets; `data` starts at file offset `off`).
    fn write_padded(
        &self,
        data: &[u8],
        off: u64,
        from: u64,
        lo: u64,
        hi: u64,
        dev: u64,
    ) -> Result<()> {
        let bs = self.sb.block_size as u64;
        let to = (from / bs + 1) * bs;
        let mut buf = vec![0u8; (to - from) as usize];
        buf[(lo - from) as usize..(hi - from) as usize]
            .copy_from_slice(&data[(lo - off) as usize..(hi - off) as usize]);
        self.alloc.dev().write_at(&buf, dev)?;
        Ok(())
    }

    /// The end of a file moves from `size` to `to`: the bytes past `size` in its last block are
    /// garbage on the device (left by an earlier truncate) and must read as zeros from then on.
    /// Returns where they are (device offset, length), if anywhere.
    pub(crate) fn tail_past_end(
        &self,
        e: &InodeEntry,
        size: u64,
        to: u64,
    ) -> Result<Option<(u64, usize)>> {
        let bs = self.sb.block_size as u64;
        if size % bs == 0 {
            return Ok(None);
        }
        let a = self.resolve_written(e, size / bs)?;
        if a == 0 {
            return Ok(None); // a hole or an unwritten block: its bytes read as zeros
        }
        let upto = to.min((size / bs + 1) * bs);
        Ok(Some((a * bs + size % bs, (upto - size) as usize)))
    }

    /// Change a regular file's size (the caller holds its op lock). Blocks preallocated past
    /// the new end go too.
    pub(crate) fn truncate_locked(&self, e: &Arc<InodeEntry>, new_size: u64) -> Result<()> {
        self.writable()?;
        let bs = self.sb.block_size as u64;
        if new_size.div_ceil(bs) > max_blocks(self.ppb) {
            return Err(FsError::Errno(libc::EFBIG));
        }
        let size = e.state.read().d.size;
        let keep = new_size.div_ceil(bs);
        // Zeros go into the block at the end, or it goes.
        self.cache.forget_tail(e.ino);
        if new_size > size {
            // Growing over cached data would log a size that covers it: it goes first.
            self.writeback_locked(e)?;
        }
        if new_size < size {
            self.preload_all(e, keep)?;
        } else if new_size > size {
            if let Some((at, len)) = self.tail_past_end(e, size, new_size)? {
                self.alloc.dev().write_at(&vec![0u8; len], at)?;
                self.alloc.mark_written();
            }
        }
        let _g = self.gate_shared();
        let mut st = e.state.write();
        if new_size < size {
            self.drop_cached_from(e, &mut st, keep, new_size);
            self.charge_block_range(keep, keep);
            let freed = bmap::free_from(&mut st, keep, self.ppb);
            let mut recs = self.log.records.lock();
            for (start, count) in freed.data {
                recs.push(Record::DFree { start, count });
            }
            for a in freed.log {
                recs.push(Record::Dead { addr: a, count: 1 });
            }
        }
        st.d.size = new_size;
        let now = crate::fs::inode::to_disk_time(Timespec::now());
        st.d.mtime = now;
        st.d.ctime = now;
        self.mark_dirty(e, &mut st);
        Ok(())
    }

    /// close(2) of one descriptor: nothing to do for durability.
    pub fn flush(&self, _ino: u64, _fh: u64) -> Result<()> {
        self.alive()
    }

    /// Make the file's data and metadata durable, and its name (DualFS writes everything
    /// dirty in one transaction, so both kinds of fsync cost the same).
    pub fn fsync(&self, ino: u64, _datasync: bool) -> Result<()> {
        self.alive()?;
        self.inode(ino)?;
        // A full commit, as documented (and as the crash oracle models fsync): every file's
        // cached data goes first.
        self.writeback_all()?;
        self.sync_log()
    }
}
