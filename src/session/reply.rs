//! Encoding replies: the handler writes the reply's body straight into the transport's
//! buffer (after the room for the `fuse_out_header` on /dev/fuse, the entry's payload buffer
//! on io_uring); the transport then frames it.

use super::abi::{self, Dirent, EntryOut};
use zerocopy::IntoBytes;

/// How a request was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Not answered (yet).
    None,
    /// Success with the body written so far.
    Ok,
    /// A positive errno.
    Error(i32),
}

/// The reply to one request, written into a body buffer of at least the negotiated payload
/// size.
pub struct Reply<'a> {
    body: &'a mut [u8],
    len: usize,
    answer: Answer,
}

impl<'a> Reply<'a> {
    pub fn new(body: &'a mut [u8]) -> Reply<'a> {
        Reply {
            body,
            len: 0,
            answer: Answer::None,
        }
    }

    pub fn answer(&self) -> Answer {
        self.answer
    }

    /// The body to send (empty for an error).
    pub fn body(&self) -> &[u8] {
        match self.answer {
            Answer::Ok => &self.body[..self.len],
            _ => &[],
        }
    }

    /// The body's length (0 for an error).
    pub fn len(&self) -> usize {
        self.body().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Answer with an errno (positive, as the core's errors are).
    pub fn error(&mut self, errno: i32) {
        debug_assert!(errno > 0, "errno {errno} is not positive");
        self.len = 0;
        self.answer = Answer::Error(if errno > 0 { errno } else { libc::EIO });
    }

    /// Answer with success and no body.
    pub fn ok(&mut self) {
        self.len = 0;
        self.answer = Answer::Ok;
    }

    /// Answer with `bytes` as the body; EIO if they do not fit the buffer (the kernel never
    /// asks for more than it fits).
    pub fn bytes(&mut self, bytes: &[u8]) {
        match self.body.get_mut(..bytes.len()) {
            Some(dst) => {
                dst.copy_from_slice(bytes);
                self.len = bytes.len();
                self.answer = Answer::Ok;
            }
            None => self.error(libc::EIO),
        }
    }

    /// Answer with a structure.
    pub fn arg<T: IntoBytes + zerocopy::Immutable>(&mut self, value: &T) {
        self.bytes(value.as_bytes())
    }

    pub fn entry(&mut self, entry: &EntryOut) {
        self.arg(entry)
    }

    pub fn attr(&mut self, attr: &abi::AttrOut) {
        self.arg(attr)
    }

    pub fn statx(&mut self, out: &abi::StatxOut) {
        self.arg(out)
    }

    pub fn open(&mut self, open: &abi::OpenOut) {
        self.arg(open)
    }

    /// CREATE: the entry, then the open handle.
    pub fn create(&mut self, entry: &EntryOut, open: &abi::OpenOut) {
        let n = size_of::<EntryOut>();
        match self.body.get_mut(..n + size_of::<abi::OpenOut>()) {
            Some(dst) => {
                dst[..n].copy_from_slice(entry.as_bytes());
                dst[n..].copy_from_slice(open.as_bytes());
                self.len = dst.len();
                self.answer = Answer::Ok;
            }
            None => self.error(libc::EIO),
        }
    }

    pub fn written(&mut self, size: u32) {
        self.arg(&abi::WriteOut { size, padding: 0 })
    }

    pub fn statfs(&mut self, st: &abi::Kstatfs) {
        self.arg(&abi::StatfsOut { st: *st })
    }

    /// The size probe of GETXATTR and LISTXATTR (a request of size 0).
    pub fn xattr_size(&mut self, size: u32) {
        self.arg(&abi::GetxattrOut { size, padding: 0 })
    }

    pub fn lseek(&mut self, offset: u64) {
        self.arg(&abi::LseekOut { offset })
    }

    /// IOCTL: the result, then the output data.
    pub fn ioctl(&mut self, result: i32, data: &[u8]) {
        let out = abi::IoctlOut {
            result,
            flags: 0,
            in_iovs: 0,
            out_iovs: 0,
        };
        let n = size_of::<abi::IoctlOut>();
        match self.body.get_mut(..n + data.len()) {
            Some(dst) => {
                dst[..n].copy_from_slice(out.as_bytes());
                dst[n..].copy_from_slice(data);
                self.len = dst.len();
                self.answer = Answer::Ok;
            }
            None => self.error(libc::EIO),
        }
    }

    /// Fill up to `max` bytes of the body in place (READ): `fill` returns how many it wrote,
    /// or an errno.
    pub fn data_with(&mut self, max: usize, fill: impl FnOnce(&mut [u8]) -> Result<usize, i32>) {
        let max = max.min(self.body.len());
        match fill(&mut self.body[..max]) {
            Ok(n) => {
                assert!(n <= max, "wrote {n} bytes into a buffer of {max}");
                self.len = n;
                self.answer = Answer::Ok;
            }
            Err(errno) => self.error(errno),
        }
    }

    /// A directory listing of at most `size` bytes (READDIR, READDIRPLUS); answer it with
    /// [`DirBuf::finish`].
    pub fn dir(&mut self, size: u32) -> DirBuf<'_, 'a> {
        let max = (size as usize).min(self.body.len());
        self.len = 0;
        DirBuf { reply: self, max }
    }
}

/// The entries of a READDIR or READDIRPLUS reply, appended in place.
pub struct DirBuf<'r, 'a> {
    reply: &'r mut Reply<'a>,
    max: usize,
}

impl DirBuf<'_, '_> {
    /// Append a READDIR entry; false (nothing appended) when it does not fit.
    pub fn add(&mut self, ino: u64, off: u64, typ: u32, name: &[u8]) -> bool {
        self.push(None, ino, off, typ, name)
    }

    /// Append a READDIRPLUS entry; false (nothing appended) when it does not fit. The
    /// kernel counts a lookup for each entry whose `entry.nodeid` is not 0 (except "." and
    /// ".."), so a caller counting references counts exactly the entries that return true.
    pub fn add_plus(&mut self, entry: &EntryOut, off: u64, typ: u32, name: &[u8]) -> bool {
        self.push(Some(entry), entry.attr.ino, off, typ, name)
    }

    fn push(
        &mut self,
        entry: Option<&EntryOut>,
        ino: u64,
        off: u64,
        typ: u32,
        name: &[u8],
    ) -> bool {
        let head = if entry.is_some() {
            abi::DIRENTPLUS_NAME_OFFSET
        } else {
            abi::DIRENT_NAME_OFFSET
        };
        let record = abi::dirent_align(head + name.len());
        let start = self.reply.len;
        if start + record > self.max {
            return false;
        }
        let dst = &mut self.reply.body[start..start + record];
        let mut at = 0;
        if let Some(entry) = entry {
            dst[..size_of::<EntryOut>()].copy_from_slice(entry.as_bytes());
            at = size_of::<EntryOut>();
        }
        let dirent = Dirent {
            ino,
            off,
            namelen: name.len() as u32,
            typ,
        };
        dst[at..at + size_of::<Dirent>()].copy_from_slice(dirent.as_bytes());
        at += size_of::<Dirent>();
        dst[at..at + name.len()].copy_from_slice(name);
        dst[at + name.len()..].fill(0);
        self.reply.len = start + record;
        true
    }

    /// Bytes appended so far.
    pub fn len(&self) -> usize {
        self.reply.len
    }

    pub fn is_empty(&self) -> bool {
        self.reply.len == 0
    }

    /// Answer with the entries appended (none: the end of the directory).
    pub fn finish(self) {
        self.reply.answer = Answer::Ok;
    }
}

/// The `fuse_out_header` of an answered request; `None` when it is unanswered.
pub fn out_header(unique: u64, reply: &Reply<'_>) -> Option<abi::OutHeader> {
    let error = match reply.answer() {
        Answer::None => return None,
        Answer::Ok => 0,
        Answer::Error(e) => -e,
    };
    Some(abi::OutHeader {
        len: (size_of::<abi::OutHeader>() + reply.len()) as u32,
        error,
        unique,
    })
}
