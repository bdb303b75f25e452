//! What an intent record says (docs/FORMAT.md, "Intent records"): one acknowledged
//! operation, with what it decided that a replay could not decide again the same way (the
//! inode number and generation it made, the mode and owner it left, its time).

use crate::fs::types::{RenameFlags, SetAttr, SetTime, Timespec, XattrFlags};
use crate::{FsError, Result};

/// A write into the data cache.
pub const KIND_WRITE: u8 = 7;
/// A write that reached the data device before its reply (a mount without the cache).
pub const KIND_WRITE_THROUGH: u8 = 14;
/// An O_TMPFILE inode (chunk version 4).
pub const KIND_MAKE_UNNAMED: u8 = 15;

/// One operation as the intent log holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IntentOp {
    /// mknod, mkdir, symlink, create: the new inode as it was made.
    Make {
        parent: u64,
        name: Vec<u8>,
        ino: u64,
        generation: u32,
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u32,
        target: Option<Vec<u8>>,
    },
    /// open(2) with O_TMPFILE: the new inode, made with no link as if in `parent`.
    MakeUnnamed {
        parent: u64,
        ino: u64,
        generation: u32,
        mode: u32,
        uid: u32,
        gid: u32,
    },
    Link {
        ino: u64,
        parent: u64,
        name: Vec<u8>,
    },
    Unlink {
        parent: u64,
        name: Vec<u8>,
    },
    Rmdir {
        parent: u64,
        name: Vec<u8>,
    },
    Rename {
        parent: u64,
        name: Vec<u8>,
        new_parent: u64,
        new_name: Vec<u8>,
        flags: RenameFlags,
    },
    /// setattr, and open with O_TRUNC (a size of 0); `mode`, `uid`, `gid` and the times
    /// are the inode's afterwards (a change by an unprivileged caller may have taken set-ID
    /// bits; a truncate reads the clock apart from the rest).
    SetAttr {
        ino: u64,
        generation: u32,
        set: SetAttr,
        mode: u32,
        uid: u32,
        gid: u32,
        mtime: Timespec,
        ctime: Timespec,
    },
    /// `data` written at `offset` (the offset the write used: an O_APPEND write's end of
    /// file); `mode` is the file's afterwards. `cached`: it went into the data cache (kind
    /// `WRITE`), not to the data device before its reply (`WRITE_THROUGH`, a mount without
    /// the cache).
    Write {
        ino: u64,
        generation: u32,
        offset: u64,
        mode: u32,
        data: Vec<u8>,
        cached: bool,
    },
    Fallocate {
        ino: u64,
        generation: u32,
        offset: u64,
        len: u64,
        mode: i32,
    },
    SetXattr {
        ino: u64,
        name: Vec<u8>,
        value: Vec<u8>,
        flags: XattrFlags,
        /// The mode afterwards (an access ACL sets it).
        mode: u32,
    },
    RemoveXattr {
        ino: u64,
        name: Vec<u8>,
        mode: u32,
    },
    SetFlags {
        ino: u64,
        flags: u32,
    },
    /// The file's cached data reached the device and its block map: the writes recorded
    /// before it need no replay once a transaction after it is durable.
    WrittenBack {
        ino: u64,
        generation: u32,
    },
}

/// A record: the operation and the time it took (its clock reading, which a replay uses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntentRecord {
    pub time: Timespec,
    pub op: IntentOp,
}

impl IntentOp {
    pub fn kind(&self) -> u8 {
        match self {
            IntentOp::Make { .. } => 1,
            IntentOp::Link { .. } => 2,
            IntentOp::Unlink { .. } => 3,
            IntentOp::Rmdir { .. } => 4,
            IntentOp::Rename { .. } => 5,
            IntentOp::SetAttr { .. } => 6,
            IntentOp::Write { cached: true, .. } => KIND_WRITE,
            IntentOp::Write { cached: false, .. } => KIND_WRITE_THROUGH,
            IntentOp::Fallocate { .. } => 8,
            IntentOp::SetXattr { .. } => 10,
            IntentOp::RemoveXattr { .. } => 11,
            IntentOp::SetFlags { .. } => 12,
            IntentOp::WrittenBack { .. } => 13,
            IntentOp::MakeUnnamed { .. } => KIND_MAKE_UNNAMED,
        }
    }

    /// The file whose data (cached or not) and size the operation changes, if any, and
    /// whether it is the write-back of that file's cache: records of the file before a
    /// covered write-back never need a replay of their data.
    pub fn data_of(&self) -> Option<(u64, u32, bool)> {
        match *self {
            IntentOp::Write {
                ino, generation, ..
            } => Some((ino, generation, false)),
            IntentOp::SetAttr {
                ino,
                generation,
                set: SetAttr { size: Some(_), .. },
                ..
            } => Some((ino, generation, false)),
            IntentOp::Fallocate {
                ino, generation, ..
            } => Some((ino, generation, false)),
            IntentOp::WrittenBack { ino, generation } => Some((ino, generation, true)),
            _ => None,
        }
    }
}

struct Enc(Vec<u8>);

impl Enc {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
    fn time(&mut self, t: Timespec) {
        self.u64(t.sec as u64);
        self.u32(t.nsec);
    }
    fn opt_u32(&mut self, v: Option<u32>) {
        self.u8(v.is_some() as u8);
        self.u32(v.unwrap_or(0));
    }
    fn set_time(&mut self, v: Option<SetTime>) {
        match v {
            None => self.u8(0),
            Some(SetTime::Now) => self.u8(1),
            Some(SetTime::At(t)) => {
                self.u8(2);
                self.time(t);
            }
        }
    }
}

struct Dec<'a>(&'a [u8]);

impl Dec<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        if self.0.len() < n {
            return Err(FsError::corrupt("intent record", "shorter than its fields"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn bytes(&mut self) -> Result<Vec<u8>> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    fn time(&mut self) -> Result<Timespec> {
        Ok(Timespec {
            sec: self.u64()? as i64,
            nsec: self.u32()?,
        })
    }
    fn opt_u32(&mut self) -> Result<Option<u32>> {
        let some = self.u8()? != 0;
        let v = self.u32()?;
        Ok(some.then_some(v))
    }
    fn set_time(&mut self) -> Result<Option<SetTime>> {
        Ok(match self.u8()? {
            0 => None,
            1 => Some(SetTime::Now),
            _ => Some(SetTime::At(self.time()?)),
        })
    }
}

/// A write record's payload up to its data, which follows it (`Fs::record_write` appends
/// the two without joining them).
pub fn write_head(
    time: Timespec,
    ino: u64,
    generation: u32,
    offset: u64,
    mode: u32,
    len: usize,
) -> Vec<u8> {
    let mut e = Enc(Vec::with_capacity(40));
    e.time(time);
    e.u64(ino);
    e.u32(generation);
    e.u64(offset);
    e.u32(mode);
    e.u32(len as u32);
    e.0
}

impl IntentRecord {
    /// The payload: time, then the operation's fields in declaration order.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc(Vec::with_capacity(64));
        e.time(self.time);
        match &self.op {
            IntentOp::Make {
                parent,
                name,
                ino,
                generation,
                mode,
                uid,
                gid,
                rdev,
                target,
            } => {
                e.u64(*parent);
                e.bytes(name);
                e.u64(*ino);
                e.u32(*generation);
                e.u32(*mode);
                e.u32(*uid);
                e.u32(*gid);
                e.u32(*rdev);
                e.u8(target.is_some() as u8);
                e.bytes(target.as_deref().unwrap_or(&[]));
            }
            IntentOp::MakeUnnamed {
                parent,
                ino,
                generation,
                mode,
                uid,
                gid,
            } => {
                e.u64(*parent);
                e.u64(*ino);
                e.u32(*generation);
                e.u32(*mode);
                e.u32(*uid);
                e.u32(*gid);
            }
            IntentOp::Link { ino, parent, name } => {
                e.u64(*ino);
                e.u64(*parent);
                e.bytes(name);
            }
            IntentOp::Unlink { parent, name } | IntentOp::Rmdir { parent, name } => {
                e.u64(*parent);
                e.bytes(name);
            }
            IntentOp::Rename {
                parent,
                name,
                new_parent,
                new_name,
                flags,
            } => {
                e.u64(*parent);
                e.bytes(name);
                e.u64(*new_parent);
                e.bytes(new_name);
                e.u8(flags.noreplace as u8 | (flags.exchange as u8) << 1);
            }
            IntentOp::SetAttr {
                ino,
                generation,
                set,
                mode,
                uid,
                gid,
                mtime,
                ctime,
            } => {
                e.u64(*ino);
                e.u32(*generation);
                e.opt_u32(set.mode);
                e.opt_u32(set.uid);
                e.opt_u32(set.gid);
                e.u8(set.size.is_some() as u8);
                e.u64(set.size.unwrap_or(0));
                e.set_time(set.atime);
                e.set_time(set.mtime);
                e.set_time(set.ctime.map(SetTime::At));
                e.u32(*mode);
                e.u32(*uid);
                e.u32(*gid);
                e.time(*mtime);
                e.time(*ctime);
            }
            IntentOp::Write {
                ino,
                generation,
                offset,
                mode,
                data,
                ..
            } => {
                let mut v = write_head(self.time, *ino, *generation, *offset, *mode, data.len());
                v.extend_from_slice(data);
                return v;
            }
            IntentOp::Fallocate {
                ino,
                generation,
                offset,
                len,
                mode,
            } => {
                e.u64(*ino);
                e.u32(*generation);
                e.u64(*offset);
                e.u64(*len);
                e.u32(*mode as u32);
            }
            IntentOp::SetXattr {
                ino,
                name,
                value,
                flags,
                mode,
            } => {
                e.u64(*ino);
                e.bytes(name);
                e.bytes(value);
                e.u8(flags.create as u8 | (flags.replace as u8) << 1);
                e.u32(*mode);
            }
            IntentOp::RemoveXattr { ino, name, mode } => {
                e.u64(*ino);
                e.bytes(name);
                e.u32(*mode);
            }
            IntentOp::SetFlags { ino, flags } => {
                e.u64(*ino);
                e.u32(*flags);
            }
            IntentOp::WrittenBack { ino, generation } => {
                e.u64(*ino);
                e.u32(*generation);
            }
        }
        e.0
    }

    pub fn decode(kind: u8, payload: &[u8]) -> Result<IntentRecord> {
        let mut d = Dec(payload);
        let time = d.time()?;
        let op = match kind {
            1 => IntentOp::Make {
                parent: d.u64()?,
                name: d.bytes()?,
                ino: d.u64()?,
                generation: d.u32()?,
                mode: d.u32()?,
                uid: d.u32()?,
                gid: d.u32()?,
                rdev: d.u32()?,
                target: {
                    let some = d.u8()? != 0;
                    let t = d.bytes()?;
                    some.then_some(t)
                },
            },
            KIND_MAKE_UNNAMED => IntentOp::MakeUnnamed {
                parent: d.u64()?,
                ino: d.u64()?,
                generation: d.u32()?,
                mode: d.u32()?,
                uid: d.u32()?,
                gid: d.u32()?,
            },
            2 => IntentOp::Link {
                ino: d.u64()?,
                parent: d.u64()?,
                name: d.bytes()?,
            },
            3 => IntentOp::Unlink {
                parent: d.u64()?,
                name: d.bytes()?,
            },
            4 => IntentOp::Rmdir {
                parent: d.u64()?,
                name: d.bytes()?,
            },
            5 => {
                let (parent, name, new_parent, new_name) =
                    (d.u64()?, d.bytes()?, d.u64()?, d.bytes()?);
                let f = d.u8()?;
                IntentOp::Rename {
                    parent,
                    name,
                    new_parent,
                    new_name,
                    flags: RenameFlags {
                        noreplace: f & 1 != 0,
                        exchange: f & 2 != 0,
                    },
                }
            }
            6 => {
                let (ino, generation) = (d.u64()?, d.u32()?);
                let (mode, uid, gid) = (d.opt_u32()?, d.opt_u32()?, d.opt_u32()?);
                let has_size = d.u8()? != 0;
                let size = d.u64()?;
                let (atime, mtime) = (d.set_time()?, d.set_time()?);
                let ctime = match d.set_time()? {
                    Some(SetTime::At(t)) => Some(t),
                    _ => None,
                };
                IntentOp::SetAttr {
                    ino,
                    generation,
                    set: SetAttr {
                        mode,
                        uid,
                        gid,
                        size: has_size.then_some(size),
                        atime,
                        mtime,
                        ctime,
                    },
                    mode: d.u32()?,
                    uid: d.u32()?,
                    gid: d.u32()?,
                    mtime: d.time()?,
                    ctime: d.time()?,
                }
            }
            KIND_WRITE | KIND_WRITE_THROUGH => IntentOp::Write {
                ino: d.u64()?,
                generation: d.u32()?,
                offset: d.u64()?,
                mode: d.u32()?,
                data: d.bytes()?,
                cached: kind == KIND_WRITE,
            },
            8 => IntentOp::Fallocate {
                ino: d.u64()?,
                generation: d.u32()?,
                offset: d.u64()?,
                len: d.u64()?,
                mode: d.u32()? as i32,
            },
            10 => {
                let (ino, name, value) = (d.u64()?, d.bytes()?, d.bytes()?);
                let f = d.u8()?;
                IntentOp::SetXattr {
                    ino,
                    name,
                    value,
                    flags: XattrFlags {
                        create: f & 1 != 0,
                        replace: f & 2 != 0,
                    },
                    mode: d.u32()?,
                }
            }
            11 => IntentOp::RemoveXattr {
                ino: d.u64()?,
                name: d.bytes()?,
                mode: d.u32()?,
            },
            12 => IntentOp::SetFlags {
                ino: d.u64()?,
                flags: d.u32()?,
            },
            13 => IntentOp::WrittenBack {
                ino: d.u64()?,
                generation: d.u32()?,
            },
            k => {
                return Err(FsError::corrupt(
                    "intent record",
                    format!("unknown kind {k}"),
                ))
            }
        };
        Ok(IntentRecord { time, op })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_record_decodes_to_what_was_encoded() {
        let t = Timespec {
            sec: 1_700_000_000,
            nsec: 123,
        };
        let ops = vec![
            IntentOp::Make {
                parent: 1,
                name: b"a".to_vec(),
                ino: 9,
                generation: 3,
                mode: 0o100644,
                uid: 1000,
                gid: 100,
                rdev: 0,
                target: Some(b"/x".to_vec()),
            },
            IntentOp::MakeUnnamed {
                parent: 1,
                ino: 10,
                generation: 4,
                mode: 0o100600,
                uid: 1000,
                gid: 100,
            },
            IntentOp::Link {
                ino: 9,
                parent: 1,
                name: b"b".to_vec(),
            },
            IntentOp::Unlink {
                parent: 1,
                name: b"a".to_vec(),
            },
            IntentOp::Rmdir {
                parent: 1,
                name: b"d".to_vec(),
            },
            IntentOp::Rename {
                parent: 1,
                name: b"b".to_vec(),
                new_parent: 2,
                new_name: b"c".to_vec(),
                flags: RenameFlags {
                    noreplace: false,
                    exchange: true,
                },
            },
            IntentOp::SetAttr {
                ino: 9,
                generation: 3,
                set: SetAttr {
                    mode: Some(0o600),
                    size: Some(5),
                    atime: Some(SetTime::Now),
                    mtime: Some(SetTime::At(t)),
                    ctime: Some(t),
                    ..SetAttr::default()
                },
                mode: 0o100600,
                uid: 0,
                gid: 0,
                mtime: t,
                ctime: t,
            },
            IntentOp::Write {
                ino: 9,
                generation: 3,
                offset: 7,
                mode: 0o100600,
                data: vec![1, 2, 3],
                cached: true,
            },
            IntentOp::Write {
                ino: 9,
                generation: 3,
                offset: 4096,
                mode: 0o100600,
                data: vec![4, 5],
                cached: false,
            },
            IntentOp::Fallocate {
                ino: 9,
                generation: 3,
                offset: 0,
                len: 4096,
                mode: 3,
            },
            IntentOp::SetXattr {
                ino: 9,
                name: b"user.a".to_vec(),
                value: b"v".to_vec(),
                flags: XattrFlags {
                    create: true,
                    replace: false,
                },
                mode: 0o100600,
            },
            IntentOp::RemoveXattr {
                ino: 9,
                name: b"user.a".to_vec(),
                mode: 0o100600,
            },
            IntentOp::SetFlags {
                ino: 9,
                flags: 0x10,
            },
            IntentOp::WrittenBack {
                ino: 9,
                generation: 3,
            },
        ];
        for op in ops {
            let r = IntentRecord { time: t, op };
            let back = IntentRecord::decode(r.op.kind(), &r.encode()).unwrap();
            assert_eq!(back, r);
            // A record cut short is refused, never read as something else.
            let bytes = r.encode();
            assert!(IntentRecord::decode(r.op.kind(), &bytes[..bytes.len() - 1]).is_err());
        }
    }
}
