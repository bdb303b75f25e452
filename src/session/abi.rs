//! The kernel's FUSE ABI (include/uapi/linux/fuse.h, protocol 7.45): the request and reply
//! structures of the operations DualFS serves, INIT, and the io_uring entry header.
//!
//! Every structure is `repr(C)` without implicit padding (the derives refuse padding), so any
//! byte string of the right length is a valid value and a value's bytes are what the kernel
//! reads. Sizes are checked against the header at compile time (bottom of this file).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// The protocol this layer speaks.
pub const KERNEL_VERSION: u32 = 7;
pub const KERNEL_MINOR_VERSION: u32 = 45;
/// The oldest minor accepted: 7.36 brought `flags2` (the INIT flags past bit 31).
pub const MIN_KERNEL_MINOR_VERSION: u32 = 36;

pub const ROOT_ID: u64 = 1;

/// The kernel refuses reads from /dev/fuse into smaller buffers.
pub const MIN_READ_BUFFER: usize = 8192;

/// INIT flags (`flags | flags2 << 32`).
pub mod init_flags {
    pub const ASYNC_READ: u64 = 1 << 0;
    pub const POSIX_LOCKS: u64 = 1 << 1;
    pub const ATOMIC_O_TRUNC: u64 = 1 << 3;
    pub const EXPORT_SUPPORT: u64 = 1 << 4;
    pub const BIG_WRITES: u64 = 1 << 5;
    pub const DONT_MASK: u64 = 1 << 6;
    pub const DO_READDIRPLUS: u64 = 1 << 13;
    pub const READDIRPLUS_AUTO: u64 = 1 << 14;
    pub const WRITEBACK_CACHE: u64 = 1 << 16;
    pub const NO_OPEN_SUPPORT: u64 = 1 << 17;
    pub const PARALLEL_DIROPS: u64 = 1 << 18;
    pub const POSIX_ACL: u64 = 1 << 20;
    pub const MAX_PAGES: u64 = 1 << 22;
    pub const CACHE_SYMLINKS: u64 = 1 << 23;
    pub const NO_OPENDIR_SUPPORT: u64 = 1 << 24;
    pub const HANDLE_KILLPRIV_V2: u64 = 1 << 28;
    pub const SETXATTR_EXT: u64 = 1 << 29;
    pub const INIT_EXT: u64 = 1 << 30;
    pub const DIRECT_IO_ALLOW_MMAP: u64 = 1 << 36;
    pub const OVER_IO_URING: u64 = 1 << 41;
}

/// Open reply flags (`fuse_open_out::open_flags`).
pub mod fopen {
    pub const DIRECT_IO: u32 = 1 << 0;
    pub const KEEP_CACHE: u32 = 1 << 1;
    pub const CACHE_DIR: u32 = 1 << 3;
    pub const NOFLUSH: u32 = 1 << 5;
}

/// `fuse_setattr_in::valid` bits.
pub mod fattr {
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const ATIME: u32 = 1 << 4;
    pub const MTIME: u32 = 1 << 5;
    pub const FH: u32 = 1 << 6;
    pub const ATIME_NOW: u32 = 1 << 7;
    pub const MTIME_NOW: u32 = 1 << 8;
    pub const LOCKOWNER: u32 = 1 << 9;
    pub const CTIME: u32 = 1 << 10;
    pub const KILL_SUIDGID: u32 = 1 << 11;
}

/// `fuse_write_in::write_flags`.
pub const WRITE_KILL_SUIDGID: u32 = 1 << 2;
/// `fuse_getattr_in::getattr_flags`: `fh` is valid.
pub const GETATTR_FH: u32 = 1 << 0;

/// Opcodes (`enum fuse_opcode`).
pub mod opcode {
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const SYMLINK: u32 = 6;
    pub const MKNOD: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const UNLINK: u32 = 10;
    pub const RMDIR: u32 = 11;
    pub const RENAME: u32 = 12;
    pub const LINK: u32 = 13;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const SETXATTR: u32 = 21;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const REMOVEXATTR: u32 = 24;
    pub const FLUSH: u32 = 25;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const FSYNCDIR: u32 = 30;
    pub const ACCESS: u32 = 34;
    pub const CREATE: u32 = 35;
    pub const INTERRUPT: u32 = 36;
    pub const DESTROY: u32 = 38;
    pub const IOCTL: u32 = 39;
    pub const BATCH_FORGET: u32 = 42;
    pub const FALLOCATE: u32 = 43;
    pub const READDIRPLUS: u32 = 44;
    pub const RENAME2: u32 = 45;
    pub const LSEEK: u32 = 46;
    pub const COPY_FILE_RANGE: u32 = 47;
    pub const SYNCFS: u32 = 50;
    pub const TMPFILE: u32 = 51;
    pub const STATX: u32 = 52;
}

/// `statx(2)` mask bits (`STATX_*`) FUSE carries.
pub mod statx {
    pub const BASIC_STATS: u32 = 0x7ff;
    pub const BTIME: u32 = 0x800;
}

/// Notification codes (`enum fuse_notify_code`), sent with `unique` 0 as the error field.
pub mod notify {
    pub const INVAL_INODE: i32 = 2;
    pub const INVAL_ENTRY: i32 = 3;
    /// Put every request read and not yet answered back in the queue (no payload).
    pub const RESEND: i32 = 7;
}

/// `FUSE_UNIQUE_RESEND`: set in the unique id of a request the kernel sent again after
/// `notify::RESEND`; the reply carries the id as it came.
pub const UNIQUE_RESEND: u64 = 1 << 63;

/// `FUSE_DEV_IOC_CLONE`: `_IOR(229, 0, uint32_t)`.
pub const DEV_IOC_CLONE: u64 = (2 << 30) | (4 << 16) | (229 << 8);

/// io_uring commands (`enum fuse_uring_cmd`).
pub const URING_CMD_REGISTER: u32 = 1;
pub const URING_CMD_COMMIT_AND_FETCH: u32 = 2;
pub const URING_IN_OUT_HEADER_SZ: usize = 128;
pub const URING_OP_IN_OUT_SZ: usize = 128;

macro_rules! abi_struct {
    ($(#[$m:meta])* $name:ident { $($field:ident : $ty:ty),* $(,)? }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
        pub struct $name { $(pub $field: $ty),* }

        impl Default for $name {
            fn default() -> Self {
                <Self as zerocopy::FromZeros>::new_zeroed()
            }
        }
    };
}

abi_struct!(
    /// `struct fuse_in_header`.
    InHeader { len: u32, opcode: u32, unique: u64, nodeid: u64, uid: u32, gid: u32, pid: u32,
        total_extlen: u16, padding: u16 }
);
abi_struct!(
    /// `struct fuse_out_header`.
    OutHeader { len: u32, error: i32, unique: u64 }
);
abi_struct!(
    /// `struct fuse_attr`.
    Attr { ino: u64, size: u64, blocks: u64, atime: u64, mtime: u64, ctime: u64,
        atimensec: u32, mtimensec: u32, ctimensec: u32, mode: u32, nlink: u32, uid: u32,
        gid: u32, rdev: u32, blksize: u32, flags: u32 }
);
abi_struct!(
    /// `struct fuse_entry_out`.
    EntryOut { nodeid: u64, generation: u64, entry_valid: u64, attr_valid: u64,
        entry_valid_nsec: u32, attr_valid_nsec: u32, attr: Attr }
);
abi_struct!(
    /// `struct fuse_attr_out`.
    AttrOut { attr_valid: u64, attr_valid_nsec: u32, dummy: u32, attr: Attr }
);
abi_struct!(ForgetIn { nlookup: u64 });
abi_struct!(ForgetOne {
    nodeid: u64,
    nlookup: u64
});
abi_struct!(BatchForgetIn {
    count: u32,
    dummy: u32
});
abi_struct!(GetattrIn {
    getattr_flags: u32,
    dummy: u32,
    fh: u64
});
abi_struct!(
    /// `struct fuse_statx_in`.
    StatxIn { getattr_flags: u32, reserved: u32, fh: u64, sx_flags: u32, sx_mask: u32 }
);
abi_struct!(
    /// `struct fuse_sx_time`.
    SxTime { tv_sec: i64, tv_nsec: u32, reserved: i32 }
);
abi_struct!(
    /// `struct fuse_statx`.
    Statx { mask: u32, blksize: u32, attributes: u64, nlink: u32, uid: u32, gid: u32,
        mode: u16, spare0: u16, ino: u64, size: u64, blocks: u64, attributes_mask: u64,
        atime: SxTime, btime: SxTime, ctime: SxTime, mtime: SxTime, rdev_major: u32,
        rdev_minor: u32, dev_major: u32, dev_minor: u32, spare2: [u64; 14] }
);
abi_struct!(
    /// `struct fuse_statx_out`.
    StatxOut { attr_valid: u64, attr_valid_nsec: u32, flags: u32, spare: [u64; 2], stat: Statx }
);
abi_struct!(MknodIn {
    mode: u32,
    rdev: u32,
    umask: u32,
    padding: u32
});
abi_struct!(MkdirIn {
    mode: u32,
    umask: u32
});
abi_struct!(RenameIn { newdir: u64 });
abi_struct!(Rename2In {
    newdir: u64,
    flags: u32,
    padding: u32
});
abi_struct!(LinkIn { oldnodeid: u64 });
abi_struct!(
    /// `struct fuse_setattr_in`.
    SetattrIn { valid: u32, padding: u32, fh: u64, size: u64, lock_owner: u64, atime: u64,
        mtime: u64, ctime: u64, atimensec: u32, mtimensec: u32, ctimensec: u32, mode: u32,
        unused4: u32, uid: u32, gid: u32, unused5: u32 }
);
abi_struct!(OpenIn {
    flags: u32,
    open_flags: u32
});
abi_struct!(CreateIn {
    flags: u32,
    mode: u32,
    umask: u32,
    open_flags: u32
});
abi_struct!(OpenOut {
    fh: u64,
    open_flags: u32,
    backing_id: i32
});
abi_struct!(ReleaseIn {
    fh: u64,
    flags: u32,
    release_flags: u32,
    lock_owner: u64
});
abi_struct!(FlushIn {
    fh: u64,
    unused: u32,
    padding: u32,
    lock_owner: u64
});
abi_struct!(
    /// `struct fuse_read_in` (also READDIR and READDIRPLUS).
    ReadIn { fh: u64, offset: u64, size: u32, read_flags: u32, lock_owner: u64, flags: u32,
        padding: u32 }
);
abi_struct!(
    /// `struct fuse_write_in`.
    WriteIn { fh: u64, offset: u64, size: u32, write_flags: u32, lock_owner: u64, flags: u32,
        padding: u32 }
);
abi_struct!(WriteOut {
    size: u32,
    padding: u32
});
abi_struct!(
    /// `struct fuse_kstatfs`.
    Kstatfs { blocks: u64, bfree: u64, bavail: u64, files: u64, ffree: u64, bsize: u32,
        namelen: u32, frsize: u32, padding: u32, spare: [u32; 6] }
);
abi_struct!(StatfsOut { st: Kstatfs });
abi_struct!(FsyncIn {
    fh: u64,
    fsync_flags: u32,
    padding: u32
});
abi_struct!(
    /// `struct fuse_setxattr_in`; without FUSE_SETXATTR_EXT the kernel sends only its first
    /// 8 bytes (`FUSE_COMPAT_SETXATTR_IN_SIZE`).
    SetxattrIn { size: u32, flags: u32, setxattr_flags: u32, padding: u32 }
);
abi_struct!(GetxattrIn {
    size: u32,
    padding: u32
});
abi_struct!(GetxattrOut {
    size: u32,
    padding: u32
});
abi_struct!(AccessIn {
    mask: u32,
    padding: u32
});
abi_struct!(
    /// `struct fuse_init_in`.
    InitIn { major: u32, minor: u32, max_readahead: u32, flags: u32, flags2: u32,
        unused: [u32; 11] }
);
abi_struct!(
    /// `struct fuse_init_out`.
    InitOut { major: u32, minor: u32, max_readahead: u32, flags: u32, max_background: u16,
        congestion_threshold: u16, max_write: u32, time_gran: u32, max_pages: u16,
        map_alignment: u16, flags2: u32, max_stack_depth: u32, request_timeout: u16,
        unused: [u16; 11] }
);
abi_struct!(InterruptIn { unique: u64 });
abi_struct!(
    /// `struct fuse_ioctl_in`.
    IoctlIn { fh: u64, flags: u32, cmd: u32, arg: u64, in_size: u32, out_size: u32 }
);
abi_struct!(IoctlOut {
    result: i32,
    flags: u32,
    in_iovs: u32,
    out_iovs: u32
});
abi_struct!(FallocateIn {
    fh: u64,
    offset: u64,
    length: u64,
    mode: u32,
    padding: u32
});
abi_struct!(
    /// `struct fuse_dirent` without its name.
    Dirent { ino: u64, off: u64, namelen: u32, typ: u32 }
);
abi_struct!(LseekIn {
    fh: u64,
    offset: u64,
    whence: u32,
    padding: u32
});
abi_struct!(LseekOut { offset: u64 });
abi_struct!(
    /// `struct fuse_copy_file_range_in`.
    CopyFileRangeIn { fh_in: u64, off_in: u64, nodeid_out: u64, fh_out: u64, off_out: u64,
        len: u64, flags: u64 }
);
abi_struct!(NotifyInvalInodeOut {
    ino: u64,
    off: i64,
    len: i64
});
abi_struct!(NotifyInvalEntryOut {
    parent: u64,
    namelen: u32,
    flags: u32
});
abi_struct!(
    /// `struct fuse_uring_ent_in_out`: the ring entry's part of its header buffer.
    UringEntInOut { flags: u64, commit_id: u64, payload_sz: u32, padding: u32, reserved: u64 }
);
abi_struct!(
    /// `struct fuse_uring_req_header`: the header buffer each ring entry registers.
    UringReqHeader { in_out: [u8; URING_IN_OUT_HEADER_SZ], op_in: [u8; URING_OP_IN_OUT_SZ],
        ring_ent_in_out: UringEntInOut }
);
abi_struct!(
    /// `struct fuse_uring_cmd_req`: the command area of a 128-byte SQE.
    UringCmdReq { flags: u64, commit_id: u64, qid: u16, padding: [u8; 6] }
);

/// Where the name of a `fuse_dirent` starts (`FUSE_NAME_OFFSET`).
pub const DIRENT_NAME_OFFSET: usize = size_of::<Dirent>();
/// Where the name of a `fuse_direntplus` starts.
pub const DIRENTPLUS_NAME_OFFSET: usize = size_of::<EntryOut>() + size_of::<Dirent>();
/// The compat size of `fuse_setxattr_in` the kernel sends without FUSE_SETXATTR_EXT.
pub const COMPAT_SETXATTR_IN_SIZE: usize = 8;

/// `FUSE_DIRENT_ALIGN`: records are padded to 8 bytes.
pub const fn dirent_align(len: usize) -> usize {
    (len + 7) & !7
}

// The sizes of fuse.h 7.45 (checked with a C compiler against the header).
const _: () = {
    assert!(size_of::<InHeader>() == 40);
    assert!(size_of::<OutHeader>() == 16);
    assert!(size_of::<Attr>() == 88);
    assert!(size_of::<EntryOut>() == 128);
    assert!(size_of::<AttrOut>() == 104);
    assert!(size_of::<ForgetIn>() == 8);
    assert!(size_of::<ForgetOne>() == 16);
    assert!(size_of::<BatchForgetIn>() == 8);
    assert!(size_of::<GetattrIn>() == 16);
    assert!(size_of::<MknodIn>() == 16);
    assert!(size_of::<MkdirIn>() == 8);
    assert!(size_of::<RenameIn>() == 8);
    assert!(size_of::<Rename2In>() == 16);
    assert!(size_of::<LinkIn>() == 8);
    assert!(size_of::<SetattrIn>() == 88);
    assert!(size_of::<OpenIn>() == 8);
    assert!(size_of::<CreateIn>() == 16);
    assert!(size_of::<OpenOut>() == 16);
    assert!(size_of::<ReleaseIn>() == 24);
    assert!(size_of::<FlushIn>() == 24);
    assert!(size_of::<ReadIn>() == 40);
    assert!(size_of::<WriteIn>() == 40);
    assert!(size_of::<WriteOut>() == 8);
    assert!(size_of::<Kstatfs>() == 80);
    assert!(size_of::<StatfsOut>() == 80);
    assert!(size_of::<FsyncIn>() == 16);
    assert!(size_of::<SetxattrIn>() == 16);
    assert!(size_of::<GetxattrIn>() == 8);
    assert!(size_of::<GetxattrOut>() == 8);
    assert!(size_of::<AccessIn>() == 8);
    assert!(size_of::<StatxIn>() == 24);
    assert!(size_of::<SxTime>() == 16);
    assert!(size_of::<Statx>() == 256);
    assert!(size_of::<StatxOut>() == 288);
    assert!(size_of::<InitIn>() == 64);
    assert!(size_of::<InitOut>() == 64);
    assert!(size_of::<InterruptIn>() == 8);
    assert!(size_of::<IoctlIn>() == 32);
    assert!(size_of::<IoctlOut>() == 16);
    assert!(size_of::<FallocateIn>() == 32);
    assert!(size_of::<Dirent>() == 24);
    assert!(size_of::<LseekIn>() == 24);
    assert!(size_of::<LseekOut>() == 8);
    assert!(size_of::<CopyFileRangeIn>() == 56);
    assert!(size_of::<NotifyInvalInodeOut>() == 24);
    assert!(size_of::<NotifyInvalEntryOut>() == 16);
    assert!(size_of::<UringEntInOut>() == 32);
    assert!(size_of::<UringReqHeader>() == 288);
    assert!(size_of::<UringCmdReq>() == 24);
    // The command area of a 128-byte SQE holds 80 bytes.
    assert!(size_of::<UringCmdReq>() <= 80);
    // Every op struct a ring entry carries fits its op_in area.
    assert!(size_of::<SetattrIn>() <= URING_OP_IN_OUT_SZ);
    assert!(size_of::<CopyFileRangeIn>() <= URING_OP_IN_OUT_SZ);
};
