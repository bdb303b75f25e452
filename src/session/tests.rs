//! Decoding and encoding checked against byte strings laid out by hand from fuse.h 7.45.

use super::abi::{self, init_flags as f, opcode};
use super::init::{negotiate, InitConfig, Negotiated};
use super::reply::{out_header, Answer, Reply};
use super::request::{decode_dev, decode_ring, Layout, Operation};
use zerocopy::FromBytes;

/// A little-endian byte string builder.
#[derive(Default)]
struct Bytes(Vec<u8>);

impl Bytes {
    fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn raw(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
}

/// `fuse_in_header` of a request of `body_len` bytes after the header.
fn header(op: u32, unique: u64, nodeid: u64, body_len: usize) -> Bytes {
    Bytes::default()
        .u32((40 + body_len) as u32)
        .u32(op)
        .u64(unique)
        .u64(nodeid)
        .u32(1000) // uid
        .u32(100) // gid
        .u32(4242) // pid
        .u16(0)
        .u16(0)
}

fn dev(op: u32, nodeid: u64, body: &[u8]) -> Vec<u8> {
    header(op, 7, nodeid, body.len()).raw(body).0
}

#[test]
fn lookup_over_dev_reads_the_name_in_place() {
    let buf = dev(opcode::LOOKUP, 1, b"hello\0");
    let req = decode_dev(&buf, Layout::default()).unwrap();
    assert_eq!((req.unique(), req.nodeid()), (7, 1));
    assert_eq!(
        (req.header.uid, req.header.gid, req.header.pid),
        (1000, 100, 4242)
    );
    let Operation::Lookup { name } = req.op else {
        panic!("{:?}", req.op)
    };
    assert_eq!(name, b"hello");
    // The name is the buffer's own bytes.
    assert_eq!(name.as_ptr(), buf[40..].as_ptr());
}

#[test]
fn lookup_over_the_ring_reads_the_name_from_the_payload() {
    let head = header(opcode::LOOKUP, 9, 1, 0).0;
    let op_in = [0u8; 128];
    let req = decode_ring(&head, &op_in, b"x\0", Layout::default()).unwrap();
    assert!(matches!(req.op, Operation::Lookup { name: b"x" }));
}

#[test]
fn mkdir_and_create_over_both_transports() {
    let mkdir_in = Bytes::default().u32(0o40755).u32(0o022).0;
    let buf = dev(opcode::MKDIR, 5, &[mkdir_in.as_slice(), b"dir\0"].concat());
    let Operation::Mkdir { arg, name } = decode_dev(&buf, Layout::default()).unwrap().op else {
        panic!()
    };
    assert_eq!((arg.mode, arg.umask, name), (0o40755, 0o022, &b"dir"[..]));

    let create_in = Bytes::default()
        .u32(libc::O_RDWR as u32)
        .u32(0o100644)
        .u32(0o077)
        .u32(0)
        .0;
    let mut op_in = [0u8; 128];
    op_in[..16].copy_from_slice(&create_in);
    let head = header(opcode::CREATE, 3, 5, 0).0;
    let req = decode_ring(&head, &op_in, b"file\0", Layout::default()).unwrap();
    let Operation::Create { arg, name } = req.op else {
        panic!()
    };
    assert_eq!(
        (arg.flags, arg.mode, arg.umask, name),
        (libc::O_RDWR as u32, 0o100644, 0o077, &b"file"[..])
    );
}

#[test]
fn write_carries_its_data_and_checks_its_size() {
    let write_in = |size: u32| {
        Bytes::default()
            .u64(11)
            .u64(4096)
            .u32(size)
            .u32(abi::WRITE_KILL_SUIDGID)
            .u64(0)
            .u32(2)
            .u32(0)
            .0
    };
    let buf = dev(
        opcode::WRITE,
        8,
        &[write_in(5).as_slice(), b"abcde"].concat(),
    );
    let Operation::Write { arg, data } = decode_dev(&buf, Layout::default()).unwrap().op else {
        panic!()
    };
    assert_eq!(
        (arg.fh, arg.offset, arg.flags, data),
        (11, 4096, 2, &b"abcde"[..])
    );
    assert_eq!(arg.write_flags, abi::WRITE_KILL_SUIDGID);
    // A size past the data is the kernel's mistake, not a panic.
    let buf = dev(
        opcode::WRITE,
        8,
        &[write_in(6).as_slice(), b"abcde"].concat(),
    );
    assert!(decode_dev(&buf, Layout::default()).is_err());
}

#[test]
fn rename_and_rename2_give_both_names() {
    let buf = dev(
        opcode::RENAME,
        2,
        &Bytes::default().u64(3).raw(b"a\0bb\0").0,
    );
    let Operation::Rename {
        newdir,
        flags,
        name,
        newname,
    } = decode_dev(&buf, Layout::default()).unwrap().op
    else {
        panic!()
    };
    assert_eq!(
        (newdir, flags, name, newname),
        (3, 0, &b"a"[..], &b"bb"[..])
    );
    let mut op_in = [0u8; 128];
    op_in[..16].copy_from_slice(&Bytes::default().u64(4).u32(libc::RENAME_NOREPLACE).u32(0).0);
    let head = header(opcode::RENAME2, 1, 2, 0).0;
    let req = decode_ring(&head, &op_in, b"c\0d\0", Layout::default()).unwrap();
    let Operation::Rename {
        newdir,
        flags,
        name,
        newname,
    } = req.op
    else {
        panic!()
    };
    assert_eq!(
        (newdir, flags, name, newname),
        (4, libc::RENAME_NOREPLACE, &b"c"[..], &b"d"[..])
    );
}

#[test]
fn setxattr_has_the_compat_layout_unless_extended() {
    let compat = Bytes::default()
        .u32(3)
        .u32(libc::XATTR_CREATE as u32)
        .raw(b"user.a\0xyz")
        .0;
    let buf = dev(opcode::SETXATTR, 2, &compat);
    let Operation::Setxattr { arg, name, value } = decode_dev(&buf, Layout::default()).unwrap().op
    else {
        panic!()
    };
    assert_eq!(
        (arg.size, arg.flags, name, value),
        (3, libc::XATTR_CREATE as u32, &b"user.a"[..], &b"xyz"[..])
    );
    let ext = Bytes::default()
        .u32(3)
        .u32(0)
        .u32(1)
        .u32(0)
        .raw(b"user.a\0xyz")
        .0;
    let buf = dev(opcode::SETXATTR, 2, &ext);
    let layout = Layout { setxattr_ext: true };
    let Operation::Setxattr { arg, name, .. } = decode_dev(&buf, layout).unwrap().op else {
        panic!()
    };
    assert_eq!((arg.setxattr_flags, name), (1, &b"user.a"[..]));
}

#[test]
fn batch_forget_lists_every_node() {
    let body = Bytes::default()
        .u32(2)
        .u32(0)
        .u64(10)
        .u64(1)
        .u64(11)
        .u64(5)
        .0;
    let buf = dev(opcode::BATCH_FORGET, 0, &body);
    let req = decode_dev(&buf, Layout::default()).unwrap();
    assert!(!req.op.wants_reply());
    let Operation::BatchForget(list) = req.op else {
        panic!()
    };
    let nodes: Vec<_> = list.iter().map(|o| (o.nodeid, o.nlookup)).collect();
    assert_eq!(nodes, [(10, 1), (11, 5)]);
    // A count past the list.
    let body = Bytes::default().u32(3).u32(0).u64(10).u64(1).0;
    assert!(decode_dev(&dev(opcode::BATCH_FORGET, 0, &body), Layout::default()).is_err());
}

#[test]
fn setattr_reads_every_field() {
    let mut body = Bytes::default()
        .u32(abi::fattr::SIZE | abi::fattr::MTIME)
        .u32(0)
        .u64(9) // fh
        .u64(12345) // size
        .u64(0) // lock_owner
        .u64(1) // atime
        .u64(2) // mtime
        .u64(3); // ctime
    body = body
        .u32(4)
        .u32(5)
        .u32(6)
        .u32(0o644)
        .u32(0)
        .u32(7)
        .u32(8)
        .u32(0);
    let buf = dev(opcode::SETATTR, 4, &body.0);
    let Operation::Setattr(s) = decode_dev(&buf, Layout::default()).unwrap().op else {
        panic!()
    };
    assert_eq!(
        (s.valid, s.fh, s.size, s.mtime, s.mtimensec),
        (abi::fattr::SIZE | abi::fattr::MTIME, 9, 12345, 2, 5)
    );
    assert_eq!((s.mode, s.uid, s.gid), (0o644, 7, 8));
}

#[test]
fn extensions_are_cut_off() {
    // A lookup with 8 bytes of extension after the name.
    let mut buf = dev(opcode::LOOKUP, 1, b"n\0\0\0\0\0\0\0EXTENSIO");
    buf[36..38].copy_from_slice(&1u16.to_le_bytes());
    let Operation::Lookup { name } = decode_dev(&buf, Layout::default()).unwrap().op else {
        panic!()
    };
    assert_eq!(name, b"n");
}

#[test]
fn truncated_and_random_requests_are_errors_not_panics() {
    let samples = [
        dev(opcode::LOOKUP, 1, b"hello\0"),
        dev(
            opcode::MKDIR,
            1,
            &Bytes::default().u32(0).u32(0).raw(b"d\0").0,
        ),
        dev(
            opcode::RENAME2,
            1,
            &Bytes::default().u64(1).u32(0).u32(0).raw(b"a\0b\0").0,
        ),
        dev(opcode::SYMLINK, 1, b"l\0target\0"),
        dev(
            opcode::SETXATTR,
            1,
            &Bytes::default().u32(1).u32(0).raw(b"n\0v").0,
        ),
        dev(
            opcode::BATCH_FORGET,
            0,
            &Bytes::default().u32(1).u32(0).u64(1).u64(1).0,
        ),
        dev(opcode::INIT, 0, &[0u8; 64]),
    ];
    for sample in &samples {
        for cut in 0..sample.len() {
            // The length field still says the whole request: too short.
            assert!(
                decode_dev(&sample[..cut], Layout::default()).is_err(),
                "{cut}"
            );
            // The length field agrees with the cut: decodes or fails cleanly.
            let mut short = sample[..cut].to_vec();
            if cut >= 4 {
                short[..4].copy_from_slice(&(cut as u32).to_le_bytes());
            }
            let _ = decode_dev(&short, Layout::default());
            if cut >= 40 {
                let _ = decode_ring(&short[..40], &short[40..], &short[40..], Layout::default());
            }
        }
    }
    let mut seed = 0x9e3779b97f4a7c15u64;
    for _ in 0..20_000 {
        let mut buf = vec![0u8; 96];
        for b in buf.iter_mut() {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            *b = seed as u8;
        }
        buf[0..4].copy_from_slice(&((seed % 100) as u32).to_le_bytes());
        buf[4..8].copy_from_slice(&((seed >> 8) as u32 % 60).to_le_bytes());
        let _ = decode_dev(&buf, Layout::default());
        let _ = decode_ring(&buf[..40], &buf[40..], &buf[40..], Layout::default());
    }
}

fn kernel_init(flags: u64, max_readahead: u32) -> abi::InitIn {
    let body = Bytes::default()
        .u32(7)
        .u32(45)
        .u32(max_readahead)
        .u32(flags as u32 | f::INIT_EXT as u32)
        .u32((flags >> 32) as u32)
        .raw(&[0u8; 44])
        .0;
    let buf = dev(opcode::INIT, 0, &body);
    let Operation::Init(init) = decode_dev(&buf, Layout::default()).unwrap().op else {
        panic!()
    };
    init
}

#[test]
fn init_grants_what_is_asked_and_offered() {
    let offered = InitConfig::DUALFS_DEFAULT_FLAGS | f::OVER_IO_URING | f::WRITEBACK_CACHE;
    let config = InitConfig::default();
    let n = negotiate(
        &kernel_init(offered & !f::CACHE_SYMLINKS, 128 << 10),
        &config,
        true,
    )
    .unwrap();
    assert!(n.has(f::OVER_IO_URING) && n.has(f::POSIX_ACL) && n.has(f::ATOMIC_O_TRUNC));
    assert!(!n.has(f::CACHE_SYMLINKS), "not offered");
    assert!(!n.has(f::WRITEBACK_CACHE), "not asked");
    assert_eq!(n.max_write, 256 << 10);
    assert_eq!(
        usize::from(n.max_pages),
        (256 << 10) / super::init::page_size()
    );
    assert!(n.payload_size() >= 256 << 10);

    // The reply's bytes, at fuse_init_out's offsets.
    let out = n.reply(&config);
    let bytes = zerocopy::IntoBytes::as_bytes(&out);
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    let u16_at = |o: usize| u16::from_le_bytes(bytes[o..o + 2].try_into().unwrap());
    assert_eq!((u32_at(0), u32_at(4)), (7, 45));
    assert_eq!(u32_at(8), 128 << 10, "max_readahead as the kernel offered");
    let flags = u64::from(u32_at(12)) | u64::from(u32_at(32)) << 32;
    assert_eq!(flags, n.flags | f::INIT_EXT);
    assert_eq!(
        (u16_at(16), u16_at(18)),
        (64, 48),
        "max_background, congestion_threshold"
    );
    assert_eq!(
        (u32_at(20), u32_at(24)),
        (256 << 10, 1),
        "max_write, time_gran"
    );
    assert_eq!(u16_at(28), n.max_pages);

    // Without the ring asked for, or once it is given up, the flag is not granted.
    let mut n = negotiate(&kernel_init(offered, 128 << 10), &config, false).unwrap();
    assert!(!n.has(f::OVER_IO_URING));
    n.set_uring(true);
    assert!(n.has(f::OVER_IO_URING));
    n.set_uring(false);
    assert!(!n.has(f::OVER_IO_URING));
    // Not offered: not granted.
    let n = negotiate(&kernel_init(offered & !f::OVER_IO_URING, 0), &config, true).unwrap();
    assert!(!n.has(f::OVER_IO_URING));
}

#[test]
fn init_refuses_old_and_foreign_protocols() {
    let mut init = kernel_init(0, 0);
    init.minor = 35;
    assert!(negotiate(&init, &InitConfig::default(), false).is_err());
    init.minor = 45;
    init.major = 8;
    assert!(negotiate(&init, &InitConfig::default(), false).is_err());
}

#[test]
fn replies_have_the_kernels_layout() {
    let mut buf = vec![0u8; 4096];
    let mut reply = Reply::new(&mut buf);
    assert_eq!(reply.answer(), Answer::None);
    assert!(out_header(1, &reply).is_none());
    let entry = abi::EntryOut {
        nodeid: 42,
        generation: 3,
        entry_valid: 3600,
        attr: abi::Attr {
            ino: 42,
            size: 10,
            mode: 0o100644,
            nlink: 1,
            ..Default::default()
        },
        ..Default::default()
    };
    reply.entry(&entry);
    let out = out_header(99, &reply).unwrap();
    assert_eq!((out.len, out.error, out.unique), (16 + 128, 0, 99));
    let body = reply.body();
    assert_eq!(u64::from_le_bytes(body[0..8].try_into().unwrap()), 42);
    assert_eq!(u64::from_le_bytes(body[16..24].try_into().unwrap()), 3600);
    // fuse_attr starts at 40: ino, size; mode at 40 + 60.
    assert_eq!(u64::from_le_bytes(body[48..56].try_into().unwrap()), 10);
    assert_eq!(
        u32::from_le_bytes(body[100..104].try_into().unwrap()),
        0o100644
    );

    reply.error(libc::ENOENT);
    let out = out_header(99, &reply).unwrap();
    assert_eq!((out.len, out.error), (16, -libc::ENOENT));
    assert!(reply.body().is_empty());

    reply.create(
        &entry,
        &abi::OpenOut {
            fh: 5,
            open_flags: abi::fopen::KEEP_CACHE,
            backing_id: 0,
        },
    );
    assert_eq!(reply.len(), 144);
    assert_eq!(
        u64::from_le_bytes(reply.body()[128..136].try_into().unwrap()),
        5
    );

    reply.written(77);
    assert_eq!(reply.body(), &[77, 0, 0, 0, 0, 0, 0, 0]);
}

#[test]
fn directory_entries_are_padded_and_bounded() {
    let mut buf = vec![0u8; 4096];
    let mut reply = Reply::new(&mut buf);
    let mut dir = reply.dir(64);
    // 24 + 3 = 27, padded to 32.
    assert!(dir.add(5, 1, libc::DT_REG as u32, b"abc"));
    assert_eq!(dir.len(), 32);
    assert!(dir.add(6, 2, libc::DT_DIR as u32, b"defgh"));
    assert_eq!(dir.len(), 64);
    assert!(
        !dir.add(7, 3, libc::DT_REG as u32, b"x"),
        "past the size asked for"
    );
    dir.finish();
    let body = reply.body();
    let first = abi::Dirent::read_from_prefix(body).unwrap().0;
    assert_eq!(
        (first.ino, first.off, first.namelen, first.typ),
        (5, 1, 3, libc::DT_REG as u32)
    );
    assert_eq!(&body[24..27], b"abc");
    assert_eq!(&body[27..32], &[0; 5]);
    let second = abi::Dirent::read_from_prefix(&body[32..]).unwrap().0;
    assert_eq!((second.ino, second.namelen), (6, 5));

    let mut reply = Reply::new(&mut buf);
    let mut dir = reply.dir(4096);
    let entry = abi::EntryOut {
        nodeid: 9,
        attr: abi::Attr {
            ino: 9,
            ..Default::default()
        },
        ..Default::default()
    };
    assert!(dir.add_plus(&entry, 1, libc::DT_REG as u32, b"f"));
    // 128 + 24 + 1 = 153, padded to 160.
    assert_eq!(dir.len(), 160);
    dir.finish();
    let d = abi::Dirent::read_from_prefix(&reply.body()[128..])
        .unwrap()
        .0;
    assert_eq!((d.ino, d.namelen), (9, 1));
    assert_eq!(reply.body()[152], b'f');
}

#[test]
fn read_replies_fill_in_place() {
    let mut buf = vec![0u8; 100];
    let mut reply = Reply::new(&mut buf);
    reply.data_with(1000, |b| {
        assert_eq!(b.len(), 100, "bounded by the buffer");
        b[..3].copy_from_slice(b"xyz");
        Ok(3)
    });
    assert_eq!(reply.body(), b"xyz");
    reply.data_with(10, |_| Err(libc::EIO));
    assert_eq!(reply.answer(), Answer::Error(libc::EIO));
    // Too large for the buffer: EIO, not a panic.
    reply.bytes(&[0u8; 101]);
    assert_eq!(reply.answer(), Answer::Error(libc::EIO));
}

#[test]
fn the_outcome_of_init_survives_its_encoding() {
    let n = Negotiated {
        minor: 45,
        offered: 0x1234_5678_9abc_def0,
        flags: 0x0fed_cba9_8765_4321,
        max_write: 256 << 10,
        max_pages: 64,
        max_readahead: 1 << 20,
    };
    assert_eq!(Negotiated::from_bytes(&n.to_bytes()), n);
}
