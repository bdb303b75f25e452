//! `-o` option lists: the standard FUSE mount options and DualFS's own.
//!
//! Later options override earlier ones (`-o ro -o rw` mounts read-write), as with mount(8).

use super::error::CliError;
use dualfs::device::DeviceIo;
use dualfs::fs::MountOptions;
use dualfs::fuse::{DirCache, FuseConfig, Readdirplus};
use dualfs::session::{Acl, Transport};
use nix::mount::MsFlags;
use std::path::Path;
use std::time::Duration;

/// The read-ahead window unless `readahead=` says otherwise: 1 MiB, four FUSE read requests
/// of `max_write`'s default 256 KiB (INIT derives max_pages from it; docs/DESIGN.md, "FUSE
/// levers").
pub const DEFAULT_READAHEAD: u64 = 1 << 20;

/// How the devices are read and written unless `devio=` says otherwise (docs/DESIGN.md,
/// "Direct I/O to the devices").
pub const DEFAULT_DEVICE_IO: DeviceIo = DeviceIo::Buffered;

/// The largest `max_write=` (the kernel's FUSE limit of 256 pages) and the smallest (a page).
const MAX_WRITE_RANGE: std::ops::RangeInclusive<u64> = 4096..=1 << 20;

/// Everything `-o` can set.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MountSettings {
    pub read_only: bool,
    /// `allow_other` or `allow_root`; neither: see `session_acl`.
    pub allow: Option<Allow>,
    /// `Some(true)` for `dev`, `Some(false)` for `nodev`; `None` leaves FUSE's default.
    pub dev: Option<bool>,
    pub suid: Option<bool>,
    pub exec: Option<bool>,
    /// `atime`/`noatime`/`relatime`/`strictatime`, the last one given.
    pub atime: Option<Atime>,
    /// `nodiratime` (`diratime` clears it).
    pub nodiratime: bool,
    /// `lazytime`: accepted; DualFS always logs time stamps with the next flush.
    pub lazytime: bool,
    pub sync: Option<bool>,
    pub dirsync: bool,
    pub fsname: Option<String>,
    pub subtype: Option<String>,
    pub cache_bytes: Option<u64>,
    /// `log_readahead=SIZE`: bytes a cold read of a log block reads around it (0: none).
    pub log_readahead: Option<u64>,
    /// `data_readahead=SIZE`: bytes a small read of file data reads from its start (0: none).
    pub data_readahead: Option<u64>,
    /// `data_cache=SIZE`: written data held before it gets blocks (0: none).
    pub data_cache_bytes: Option<u64>,
    pub data_expire: Option<Duration>,
    /// `intent=on|off|DIR`: `None` on, in the default directory; `Some(None)` off.
    pub intent_dir: Option<Option<std::path::PathBuf>>,
    pub flush_interval: Option<Duration>,
    pub checkpoint_interval: Option<Duration>,
    pub writeback_cache: bool,
    pub ttl: Option<Duration>,
    /// `dir_cache=off|open|kept`.
    pub dir_cache: Option<DirCache>,
    /// `noopendir` (the default) or `opendir`.
    pub noopendir: Option<bool>,
    /// `noopen` or `open`; unset: on for a read-only mount (`fuse_config`).
    pub noopen: Option<bool>,
    /// `nocache_symlinks` (`cache_symlinks` clears it).
    pub nocache_symlinks: bool,
    /// `readdirplus=never|auto|always`.
    pub readdirplus: Option<Readdirplus>,
    /// `readahead=SIZE`: the kernel's read-ahead window for the mount.
    pub readahead: Option<u64>,
    /// `max_write=SIZE`: the largest FUSE write (and read) request.
    pub max_write: Option<u64>,
    /// `devio=direct|buffered`: the devices' I/O, past the page cache or through it.
    pub devio: Option<DeviceIo>,
    /// `transport=uring|dev`: how FUSE requests travel; unset: io_uring where the kernel
    /// offers it, /dev/fuse otherwise.
    pub transport: Option<Transport>,
    /// `supervise=on|off`: a supervisor restarts a dead daemon on the same mount; unset: on
    /// wherever a successor can take over (cli/mount.rs, `supervised`).
    pub supervise: Option<bool>,
    /// Options that only mean something to mount(8), fstab or systemd, accepted and ignored.
    pub ignored: Vec<String>,
}

/// When reads update access times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Atime {
    /// `noatime`: never.
    Never,
    /// `relatime` (the default; `atime` too): when the access time is older than the last
    /// change, or a day old.
    Relative,
    /// `strictatime`: at every read.
    Always,
}

/// Who besides the mounting user may use the mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allow {
    Root,
    Everyone,
}

/// The options `-o` accepts, as `--help` and the manual pages (`dualfs::man_pages`) list
/// them: their spellings, and what they do.
pub const MOUNT_OPTIONS: &[(&str, &str)] = &[
    (
        "ro, rw",
        "read-only (nothing is written to either device) or read-write",
    ),
    (
        "allow_other, allow_root",
        "let every user, or root too, use the mount (without either, a mount made by root is \
         open to every user, as a kernel file system is; allow_root keeps it to root)",
    ),
    (
        "default_permissions",
        "always on: the kernel checks permissions, DualFS does not",
    ),
    (
        "dev, nodev, suid, nosuid",
        "device files and set-id bits (off unless asked for)",
    ),
    (
        "exec, noexec",
        "programs on the mount may be run (the default), or not",
    ),
    (
        "sync, async",
        "every write is durable when it returns, at the price of a commit per write (sync \
         implies dirsync), or not (the default)",
    ),
    (
        "dirsync",
        "every directory change (create, mkdir, mknod, symlink, link, unlink, rmdir, rename) \
         is durable when it returns; sync implies it",
    ),
    (
        "relatime, atime",
        "update access times when older than the last change or a day old (the default)",
    ),
    (
        "noatime, strictatime",
        "never update them; update them at every read (reads then bypass the kernel's page \
         cache: slower)",
    ),
    (
        "nodiratime, diratime",
        "never update directories' access times, or do (the default)",
    ),
    (
        "lazytime, nolazytime",
        "accepted: DualFS writes time stamps with the next flush anyway",
    ),
    (
        "fsname=NAME",
        "source shown in /proc/mounts (default: the META path)",
    ),
    ("subtype=NAME", "file system subtype (default: dualfs)"),
    (
        "cache_size=SIZE",
        "metadata cache budget, e.g. 512M or 2G (default 256M)",
    ),
    (
        "log_readahead=SIZE",
        "a metadata block read from the log brings the blocks written beside it, SIZE bytes \
         around it within its segment, kept until they are asked for (default 64K; 0: none)",
    ),
    (
        "data_readahead=SIZE",
        "a small read of file data that misses reads SIZE bytes of the data device from its \
         start and keeps the rest until asked for: the next files of a directory written \
         together come from memory (default 64K; 0: none)",
    ),
    (
        "data_cache=SIZE",
        "written file data DualFS holds before giving it data blocks (default 256M; 0: \
         none, every write goes to the data device at once): data deleted before it is \
         written back never reaches the device, and each file's blocks are allocated together",
    ),
    (
        "data_expire=SECONDS",
        "cached data this old is written back at the next flush (default 30, as the kernel's \
         dirty_expire_centisecs): the most of it a crash loses without fsync",
    ),
    (
        "intent=on|off|DIR",
        "record every acknowledged operation in an intent log on tmpfs until the log holds \
         it, so that the daemon's death (kill -9, the OOM killer) loses nothing; the next mount \
         replays it (default on, in /dev/shm/dualfs-intent; DIR: another directory, which \
         must outlive the daemon)",
    ),
    (
        "supervise=on|off",
        "run the daemon under a supervisor that holds the FUSE connection and starts a \
         successor when the daemon dies, so that the mount lives on (default on where a \
         successor can take over: root, over /dev/fuse; off over io_uring)",
    ),
    (
        "flush_interval=SECONDS",
        "how often dirty metadata is written to the log (default 5): the most a crash loses \
         of it without fsync (of cached file data: data_expire)",
    ),
    (
        "checkpoint_interval=SECONDS",
        "how often a checkpoint is written (default 30): bounds recovery time",
    ),
    (
        "writeback_cache",
        "let the kernel cache writes (default off)",
    ),
    (
        "ttl=SECONDS",
        "how long the kernel caches names and attributes (default 3600)",
    ),
    (
        "dir_cache=off|open|kept",
        "how long the kernel keeps directory listings: not at all, while the directory is \
         open, or until it changes (the default; strictatime implies off)",
    ),
    (
        "noopendir, opendir",
        "let the kernel open directories itself (the default, with dir_cache=kept: no \
         OPENDIR/RELEASEDIR requests), or send the opens to DualFS",
    ),
    (
        "noopen, open",
        "let the kernel open regular files itself, or send the opens to DualFS (the default, \
         but for read-only mounts); not with strictatime. Without them an immutable or \
         append-only file opens for writing and refuses each write (EPERM), and a removed file \
         is freed at the kernel's FORGET, a moment after its last close: neither can happen on \
         a read-only mount, so there the kernel opens files itself unless `open` is given",
    ),
    (
        "nocache_symlinks, cache_symlinks",
        "keep symlink targets out of the kernel's cache, or let it cache them (the default)",
    ),
    (
        "readdirplus=never|auto|always",
        "when listings carry attributes (default auto: at the start of a listing and after \
         lookups in the directory)",
    ),
    (
        "readahead=SIZE",
        "the kernel's read-ahead window for sequential reads (default 1M; the kernel's own \
         default is 128K)",
    ),
    (
        "max_write=SIZE",
        "the largest write request, 4K to 1M (default 256K): larger ones cost the daemon less \
         CPU per byte, but each one is copied in the kernel without a pause, which other \
         requests wait for",
    ),
    (
        "devio=buffered|direct",
        "how DualFS reads and writes its two devices: through the kernel's page cache (the \
         default: small writes are absorbed there), or with direct I/O (O_DIRECT: file data is \
         not cached a second time for the data device, large writes are faster, and the \
         devices see DualFS's own requests; each small write waits for the device). direct on \
         an image whose file system refuses O_DIRECT fails the mount",
    ),
    (
        "transport=uring|dev",
        "how FUSE requests travel between the kernel and DualFS: FUSE over io_uring (one ring \
         per CPU; the default where the kernel offers it, i.e. \
         /sys/module/fuse/parameters/enable_uring is Y) or read() and write() on /dev/fuse. \
         Where the ring cannot be set up the mount serves over /dev/fuse and says so in its \
         log; `dualfs info` shows the transport in use",
    ),
    (
        "defaults, auto, noauto, nofail, _netdev, user, users, nouser, owner, group, \
         comment=..., x-*",
        "for mount(8), fstab and systemd: accepted, ignored by DualFS",
    ),
];

/// [`MOUNT_OPTIONS`] laid out for `--help`: spellings in one column, what they do beside them.
pub fn options_help() -> String {
    const WIDTH: usize = 92;
    const MEANING_COLUMN: usize = 29;
    let mut help =
        String::from("Mount options (-o OPT[,OPT...], may be repeated; later options win):");
    for (names, meaning) in MOUNT_OPTIONS {
        let mut line = format!("  {names}");
        if line.len() + 2 > MEANING_COLUMN {
            // Too wide for the column: what it does starts on the next line.
            help += &format!("\n{line}");
            line = String::new();
        }
        for word in meaning.split_whitespace() {
            if line.len() >= MEANING_COLUMN && line.len() + 1 + word.len() > WIDTH {
                help += &format!("\n{line}");
                line = String::new();
            }
            if line.len() < MEANING_COLUMN {
                line = format!("{line:<MEANING_COLUMN$}{word}");
            } else {
                line = format!("{line} {word}");
            }
        }
        help += &format!("\n{line}");
    }
    help
}

/// What to do with an option DualFS does not know.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Strictness {
    /// A usage error.
    #[default]
    Strict,
    /// Warn and go on (mount(8)'s `-s`, "sloppy").
    Sloppy,
}

/// Parse every `-o` argument, in order.
pub fn parse_option_lists_as<S: AsRef<str>>(
    lists: &[S],
    strictness: Strictness,
) -> Result<MountSettings, CliError> {
    let mut settings = MountSettings::default();
    for list in lists {
        for option in list.as_ref().split(',').filter(|o| !o.is_empty()) {
            match apply_option(&mut settings, option) {
                Err(CliError::Usage(message))
                    if strictness == Strictness::Sloppy && is_unknown(&settings, option) =>
                {
                    eprintln!("dualfs: {message}: ignored (sloppy mount, -s)");
                    settings.ignored.push(option.to_string());
                }
                other => other?,
            }
        }
    }
    if settings.noopen == Some(true) && settings.atime == Some(Atime::Always) {
        return Err(CliError::Usage(
            "noopen cannot go with strictatime: every read must reach DualFS, and only an \
             answer to OPEN can ask the kernel for that (direct I/O)"
                .into(),
        ));
    }
    Ok(settings)
}

/// Is `option` one DualFS does not know at all (rather than one given a bad value)?
fn is_unknown(settings: &MountSettings, option: &str) -> bool {
    let key = option.split_once('=').map_or(option, |(k, _)| k);
    let mut probe = settings.clone();
    matches!(
        apply_option(&mut probe, key),
        Err(CliError::Usage(m)) if m.starts_with("unknown mount option")
    )
}

/// Options for mount(8), fstab and systemd rather than for the file system: `auto`/`noauto`
/// (mounted by `mount -a`), `nofail`, `_netdev` (boot ordering), `user`, `users`, `nouser`,
/// `owner`, `group` (who may mount; mount(8) checks them), `comment=` and `x-*` (notes for
/// other programs, `x-systemd.*`). mount(8) and mount.fuse3 strip some of them, not all.
fn is_mount_program_option(key: &str) -> bool {
    matches!(
        key,
        "auto"
            | "noauto"
            | "nofail"
            | "_netdev"
            | "user"
            | "users"
            | "nouser"
            | "owner"
            | "group"
            | "comment"
    ) || key.starts_with("x-")
}

pub(super) fn apply_option(s: &mut MountSettings, option: &str) -> Result<(), CliError> {
    let (key, value) = match option.split_once('=') {
        Some((k, v)) => (k, Some(v)),
        None => (option, None),
    };
    let flag = |on: &mut Option<bool>, v: bool| -> Result<(), CliError> {
        no_value(key, value)?;
        *on = Some(v);
        Ok(())
    };
    match key {
        "ro" | "rw" => {
            no_value(key, value)?;
            s.read_only = key == "ro";
        }
        "allow_other" | "allow_root" => {
            no_value(key, value)?;
            let wanted = if key == "allow_other" {
                Allow::Everyone
            } else {
                Allow::Root
            };
            if s.allow.is_some_and(|allowed| allowed != wanted) {
                return Err(CliError::usage(
                    "-o allow_other and allow_root cannot be used together",
                ));
            }
            s.allow = Some(wanted);
        }
        // Always on; accepted so that the usual option lists work.
        "default_permissions" | "defaults" => no_value(key, value)?,
        key if is_mount_program_option(key) => s.ignored.push(option.to_string()),
        "dev" => flag(&mut s.dev, true)?,
        "nodev" => flag(&mut s.dev, false)?,
        "suid" => flag(&mut s.suid, true)?,
        "nosuid" => flag(&mut s.suid, false)?,
        "exec" => flag(&mut s.exec, true)?,
        "noexec" => flag(&mut s.exec, false)?,
        "atime" | "relatime" | "noatime" | "strictatime" => {
            no_value(key, value)?;
            s.atime = Some(match key {
                "noatime" => Atime::Never,
                "strictatime" => Atime::Always,
                _ => Atime::Relative,
            });
        }
        "nodiratime" | "diratime" => {
            no_value(key, value)?;
            s.nodiratime = key == "nodiratime";
        }
        "lazytime" | "nolazytime" => {
            no_value(key, value)?;
            s.lazytime = key == "lazytime";
        }
        "sync" => flag(&mut s.sync, true)?,
        "async" => flag(&mut s.sync, false)?,
        "dirsync" => {
            no_value(key, value)?;
            s.dirsync = true;
        }
        "writeback_cache" => {
            no_value(key, value)?;
            s.writeback_cache = true;
        }
        "fsname" => s.fsname = Some(text_value(key, value)?),
        "subtype" => s.subtype = Some(text_value(key, value)?),
        "cache_size" => {
            let text = needs_value(key, value, "SIZE")?;
            s.cache_bytes = Some(parse_size(text).map_err(|e| bad_value(key, text, &e))?);
        }
        "log_readahead" | "data_readahead" => {
            let text = needs_value(key, value, "SIZE")?;
            let bytes = if text == "0" {
                0
            } else {
                parse_size(text).map_err(|e| bad_value(key, text, &e))?
            };
            if key == "log_readahead" {
                s.log_readahead = Some(bytes);
            } else {
                s.data_readahead = Some(bytes);
            }
        }
        "data_cache" => {
            let text = needs_value(key, value, "SIZE")?;
            s.data_cache_bytes = Some(if text == "0" {
                0
            } else {
                parse_size(text).map_err(|e| bad_value(key, text, &e))?
            });
        }
        "data_expire" => s.data_expire = Some(positive_seconds(key, value)?),
        "intent" => {
            let text = needs_value(key, value, "on|off|DIR")?;
            s.intent_dir = Some(match text {
                "on" => Some(dualfs::intent::DEFAULT_INTENT_DIR.into()),
                "off" => None,
                dir if dir.starts_with('/') => Some(dir.into()),
                _ => return Err(bad_value(key, text, "on, off or an absolute directory")),
            });
        }
        "supervise" => {
            let text = needs_value(key, value, "on|off")?;
            s.supervise = Some(match text {
                "on" => true,
                "off" => false,
                _ => return Err(bad_value(key, text, "expected on or off")),
            });
        }
        "flush_interval" => s.flush_interval = Some(positive_seconds(key, value)?),
        "checkpoint_interval" => s.checkpoint_interval = Some(positive_seconds(key, value)?),
        "ttl" => {
            let text = needs_value(key, value, "SECONDS")?;
            s.ttl = Some(parse_seconds(text).map_err(|e| bad_value(key, text, &e))?);
        }
        "dir_cache" => {
            let text = needs_value(key, value, "off|open|kept")?;
            s.dir_cache = Some(match text {
                "off" => DirCache::Off,
                "open" => DirCache::PerOpen,
                "kept" => DirCache::Kept,
                _ => return Err(bad_value(key, text, "expected off, open or kept")),
            });
        }
        "noopendir" | "opendir" => {
            no_value(key, value)?;
            s.noopendir = Some(key == "noopendir");
        }
        "noopen" | "open" => {
            no_value(key, value)?;
            s.noopen = Some(key == "noopen");
        }
        "nocache_symlinks" | "cache_symlinks" => {
            no_value(key, value)?;
            s.nocache_symlinks = key == "nocache_symlinks";
        }
        "readahead" => {
            let text = needs_value(key, value, "SIZE")?;
            s.readahead = Some(parse_size(text).map_err(|e| bad_value(key, text, &e))?);
        }
        "max_write" => {
            let text = needs_value(key, value, "SIZE")?;
            let bytes = parse_size(text).map_err(|e| bad_value(key, text, &e))?;
            if !MAX_WRITE_RANGE.contains(&bytes) {
                return Err(bad_value(key, text, "expected 4K to 1M"));
            }
            s.max_write = Some(bytes);
        }
        "devio" => {
            let text = needs_value(key, value, "buffered|direct")?;
            s.devio = Some(match text {
                "direct" => DeviceIo::Direct,
                "buffered" => DeviceIo::Buffered,
                _ => return Err(bad_value(key, text, "expected buffered or direct")),
            });
        }
        "transport" => {
            let text = needs_value(key, value, "uring|dev")?;
            s.transport = Some(match text {
                "uring" => Transport::Uring,
                "dev" => Transport::Dev,
                _ => return Err(bad_value(key, text, "expected uring or dev")),
            });
        }
        "readdirplus" => {
            let text = needs_value(key, value, "never|auto|always")?;
            s.readdirplus = Some(match text {
                "never" => Readdirplus::Never,
                "auto" => Readdirplus::Auto,
                "always" => Readdirplus::Always,
                _ => return Err(bad_value(key, text, "expected never, auto or always")),
            });
        }
        _ => {
            return Err(CliError::usage(format!(
                "unknown mount option '{option}' (see dualfs mount --help)"
            )))
        }
    }
    Ok(())
}

fn no_value(key: &str, value: Option<&str>) -> Result<(), CliError> {
    match value {
        None => Ok(()),
        Some(_) => Err(CliError::usage(format!("-o {key} takes no value"))),
    }
}

fn needs_value<'a>(key: &str, value: Option<&'a str>, what: &str) -> Result<&'a str, CliError> {
    match value {
        Some(v) if !v.is_empty() => Ok(v),
        _ => Err(CliError::usage(format!(
            "-o {key} needs a value: {key}={what}"
        ))),
    }
}

fn text_value(key: &str, value: Option<&str>) -> Result<String, CliError> {
    needs_value(key, value, "NAME").map(str::to_string)
}

fn positive_seconds(key: &str, value: Option<&str>) -> Result<Duration, CliError> {
    let text = needs_value(key, value, "SECONDS")?;
    match parse_seconds(text) {
        Ok(d) if d.is_zero() => Err(bad_value(key, text, "must be more than 0")),
        Ok(d) => Ok(d),
        Err(e) => Err(bad_value(key, text, &e)),
    }
}

fn bad_value(key: &str, text: &str, why: &str) -> CliError {
    CliError::usage(format!("-o {key}={text}: {why}"))
}

/// A byte count: digits with an optional binary suffix, `K`, `M`, `G` or `T` (also `KiB`,
/// `KB`...; all powers of 1024), or `B`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(digits_end);
    if digits.is_empty() {
        return Err("expected a number such as 256M".into());
    }
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("unknown unit '{suffix}' (use K, M, G or T)")),
    };
    let number: u64 = digits.parse().map_err(|_| "number too large".to_string())?;
    let bytes = number
        .checked_mul(1u64 << shift)
        .ok_or_else(|| "number too large".to_string())?;
    if bytes == 0 {
        return Err("must be more than 0".into());
    }
    Ok(bytes)
}

/// Seconds, whole or decimal (`5`, `0.5`).
pub fn parse_seconds(text: &str) -> Result<Duration, String> {
    let valid = !text.is_empty()
        && text.chars().all(|c| c.is_ascii_digit() || c == '.')
        && text.chars().filter(|&c| c == '.').count() <= 1
        && text != ".";
    let seconds: f64 = match text.parse() {
        Ok(s) if valid => s,
        _ => return Err("expected a number of seconds such as 5 or 0.5".into()),
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| "too many seconds".to_string())
}

impl MountSettings {
    /// The kernel type of the mount: `fuse.<subtype>`, `fuse.dualfs` by default.
    pub fn fs_type(&self) -> String {
        format!("fuse.{}", self.subtype.as_deref().unwrap_or("dualfs"))
    }

    /// The source /proc/mounts shows: `fsname=`, else the metadata device.
    pub fn source(&self, meta: &Path) -> String {
        match &self.fsname {
            Some(name) => name.clone(),
            None => meta.display().to_string(),
        }
    }

    /// mount(2) flags for the daemon's own mount. Device files and set-id bits are off
    /// unless asked for (`dev`, `suid`), as for every FUSE mount.
    pub fn kernel_flags(&self) -> MsFlags {
        let mut flags = MsFlags::empty();
        let toggles = [
            (self.dev != Some(true), MsFlags::MS_NODEV),
            (self.suid != Some(true), MsFlags::MS_NOSUID),
            (self.exec == Some(false), MsFlags::MS_NOEXEC),
            (self.atime == Some(Atime::Never), MsFlags::MS_NOATIME),
            (self.atime == Some(Atime::Always), MsFlags::MS_STRICTATIME),
            (self.nodiratime, MsFlags::MS_NODIRATIME),
            (self.sync == Some(true), MsFlags::MS_SYNCHRONOUS),
            (self.dirsync, MsFlags::MS_DIRSYNC),
            (self.read_only, MsFlags::MS_RDONLY),
        ];
        for (on, flag) in toggles {
            if on {
                flags |= flag;
            }
        }
        flags
    }

    /// The options fusermount3 mounts with (for a user who may not call mount(2)).
    /// `default_permissions` is always on: the core leaves permission checks to the kernel.
    /// Commas and backslashes in names are escaped, as fusermount3 reads them.
    pub fn fusermount_options(&self, meta: &Path, allow_other: bool) -> Vec<String> {
        let escape = |s: &str| s.replace('\\', "\\\\").replace(',', "\\,");
        let fsname = escape(&self.source(meta));
        let subtype = escape(self.subtype.as_deref().unwrap_or("dualfs"));
        let mut options = vec![
            "default_permissions".to_string(),
            format!("fsname={fsname}"),
            format!("subtype={subtype}"),
            if self.read_only { "ro" } else { "rw" }.to_string(),
        ];
        let toggles = [
            (self.dev, "dev", "nodev"),
            (self.suid, "suid", "nosuid"),
            (self.exec, "exec", "noexec"),
            // The kernel leaves FUSE's access times to DualFS; this only shows in mount(8).
            (self.atime.map(|a| a != Atime::Never), "atime", "noatime"),
            (self.sync, "sync", "async"),
        ];
        for (setting, on, off) in toggles {
            match setting {
                Some(true) => options.push(on.to_string()),
                Some(false) => options.push(off.to_string()),
                None => {}
            }
        }
        if self.dirsync {
            options.push("dirsync".to_string());
        }
        if allow_other {
            options.push("allow_other".to_string());
        }
        options
    }

    /// Who may use the mount. Without `allow_other` or `allow_root`, a mount made by root is
    /// open to every user, as a kernel file system is (permissions are the kernel's to check:
    /// `default_permissions` is always on); `allow_root` keeps it to root. A mount made by
    /// another user is that user's alone (`allow_other` then needs `user_allow_other` in
    /// /etc/fuse.conf, as for every FUSE file system). The session enforces allow_root itself
    /// (`dualfs::session::Acl`); the kernel only knows allow_other.
    pub fn session_acl(&self, mounted_by_root: bool) -> Acl {
        match self.allow {
            None if mounted_by_root => Acl::All,
            None => Acl::Owner,
            Some(Allow::Root) => Acl::RootAndOwner,
            Some(Allow::Everyone) => Acl::All,
        }
    }

    pub fn core_options(&self) -> MountOptions {
        let defaults = MountOptions::default();
        MountOptions {
            read_only: self.read_only,
            cache_bytes: self.cache_bytes.unwrap_or(defaults.cache_bytes),
            log_readahead: self.log_readahead.unwrap_or(defaults.log_readahead),
            data_readahead: self.data_readahead.unwrap_or(defaults.data_readahead),
            flush_interval: self.flush_interval.unwrap_or(defaults.flush_interval),
            checkpoint_interval: self
                .checkpoint_interval
                .unwrap_or(defaults.checkpoint_interval),
            noatime: self.atime == Some(Atime::Never),
            strictatime: self.atime == Some(Atime::Always),
            nodiratime: self.nodiratime,
            // `sync` makes directory changes synchronous too, as on Linux (IS_DIRSYNC).
            dirsync: self.dirsync || self.sync == Some(true),
            // `sync`: every write reaches the device before it returns.
            data_cache_bytes: match self.sync {
                Some(true) => 0,
                _ => self.data_cache_bytes.unwrap_or(defaults.data_cache_bytes),
            },
            data_expire: self.data_expire.unwrap_or(defaults.data_expire),
            intent_dir: self
                .intent_dir
                .clone()
                .unwrap_or_else(|| Some(dualfs::intent::DEFAULT_INTENT_DIR.into())),
            ..defaults
        }
    }

    /// The read-ahead window in KiB (written to the mount's bdi `read_ahead_kb`; FUSE's INIT
    /// can only lower it from the kernel's 128 KiB).
    pub fn readahead_kb(&self) -> u64 {
        self.readahead.unwrap_or(DEFAULT_READAHEAD).div_ceil(1024)
    }

    /// The FUSE transport asked for: `transport=`, else io_uring (the session falls back to
    /// /dev/fuse where the kernel does not offer it).
    pub fn transport(&self) -> Transport {
        self.transport.unwrap_or(Transport::Uring)
    }

    /// How the devices are opened: `devio=`, else [`DEFAULT_DEVICE_IO`].
    pub fn device_io(&self) -> DeviceIo {
        self.devio.unwrap_or(DEFAULT_DEVICE_IO)
    }

    /// Without `noopen` or `open`: does the kernel open files itself? On a read-only mount,
    /// yes: what the OPEN round trip guards on a read-write one (opens for writing of
    /// immutable and append-only files, and a removed file kept while open) cannot happen
    /// there, and a scan then sends a third of the requests (docs/DESIGN.md, "FUSE levers").
    /// Not with strictatime, which needs an answer to every OPEN (direct I/O).
    fn read_only_opens_unseen(&self) -> bool {
        self.read_only && self.atime != Some(Atime::Always)
    }

    pub fn fuse_config(&self) -> FuseConfig {
        let defaults = FuseConfig::default();
        FuseConfig {
            ttl: self.ttl.unwrap_or(defaults.ttl),
            writeback_cache: self.writeback_cache,
            // strictatime must see every read and listing.
            direct_io: self.atime == Some(Atime::Always),
            dir_cache: if self.atime == Some(Atime::Always) {
                DirCache::Off
            } else {
                self.dir_cache.unwrap_or(defaults.dir_cache)
            },
            no_opendir: self.noopendir.unwrap_or(defaults.no_opendir),
            no_open: self.noopen.unwrap_or(self.read_only_opens_unseen()),
            cache_symlinks: !self.nocache_symlinks,
            readdirplus: self.readdirplus.unwrap_or(defaults.readdirplus),
            max_write: self.max_write.map_or(defaults.max_write, |b| b as u32),
            ..defaults
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(lists: &[&str]) -> Result<MountSettings, CliError> {
        parse_option_lists_as(lists, Strictness::Strict)
    }

    #[test]
    fn empty_lists_give_defaults() {
        assert_eq!(parse(&[]).unwrap(), MountSettings::default());
        assert_eq!(parse(&["", ",,"]).unwrap(), MountSettings::default());
    }

    #[test]
    fn lists_split_on_commas_and_repeat() {
        let s = parse(&["ro,noatime", "allow_other,cache_size=512M"]).unwrap();
        assert!(s.read_only);
        assert_eq!(s.atime, Some(Atime::Never));
        assert_eq!(s.allow, Some(Allow::Everyone));
        assert_eq!(s.cache_bytes, Some(512 << 20));
    }

    #[test]
    fn later_options_win() {
        assert!(!parse(&["ro", "rw"]).unwrap().read_only);
        assert!(parse(&["rw,ro"]).unwrap().read_only);
        assert_eq!(parse(&["nodev,dev"]).unwrap().dev, Some(true));
        assert_eq!(
            parse(&["ttl=5,ttl=7"]).unwrap().ttl,
            Some(Duration::from_secs(7))
        );
    }

    #[test]
    fn dualfs_options() {
        let s = parse(&[
            "cache_size=2G,flush_interval=0.5,checkpoint_interval=60,writeback_cache,ttl=0",
            "data_cache=16M,data_expire=10,log_readahead=128K,data_readahead=256K",
        ])
        .unwrap();
        let core = s.core_options();
        assert_eq!(core.cache_bytes, 2 << 30);
        assert_eq!(core.log_readahead, 128 << 10);
        assert_eq!(core.data_readahead, 256 << 10);
        assert_eq!(
            parse(&["log_readahead=0"])
                .unwrap()
                .core_options()
                .log_readahead,
            0
        );
        assert_eq!(core.data_cache_bytes, 16 << 20);
        assert_eq!(core.data_expire, Duration::from_secs(10));
        assert_eq!(
            core.intent_dir.as_deref(),
            Some(std::path::Path::new(dualfs::intent::DEFAULT_INTENT_DIR))
        );
        assert_eq!(
            parse(&["intent=off"]).unwrap().core_options().intent_dir,
            None
        );
        assert_eq!(
            parse(&["intent=/run/x"]).unwrap().core_options().intent_dir,
            Some("/run/x".into())
        );
        assert!(parse(&["intent=relative"]).is_err());
        let none = parse(&["data_cache=0"]).unwrap().core_options();
        assert_eq!(none.data_cache_bytes, 0);
        let sync = parse(&["sync,data_cache=16M"]).unwrap().core_options();
        assert_eq!(
            sync.data_cache_bytes, 0,
            "sync writes go to the device at once"
        );
        assert_eq!(core.flush_interval, Duration::from_millis(500));
        assert_eq!(core.checkpoint_interval, Duration::from_secs(60));
        let fuse = s.fuse_config();
        assert!(fuse.writeback_cache);
        assert_eq!(fuse.ttl, Duration::ZERO);
    }

    #[test]
    fn defaults_come_from_the_core_and_the_adapter() {
        let s = parse(&[]).unwrap();
        let core = s.core_options();
        let default = MountOptions::default();
        assert_eq!(core.cache_bytes, default.cache_bytes);
        assert_eq!(core.flush_interval, default.flush_interval);
        assert!(!core.read_only);
        assert_eq!(s.fuse_config(), FuseConfig::default());
    }

    #[test]
    fn unknown_and_malformed_options_are_usage_errors() {
        for bad in [
            "bogus",
            "cache_size",
            "cache_size=",
            "cache_size=abc",
            "cache_size=0",
            "cache_size=12Q",
            "cache_size=99999999999T",
            "flush_interval=0",
            "flush_interval=-1",
            "flush_interval=1e3",
            "checkpoint_interval=soon",
            "ttl",
            "ttl=inf",
            "ttl=NaN",
            "ro=1",
            "writeback_cache=yes",
            "fsname",
            "allow_other,allow_root",
        ] {
            match parse(&[bad]) {
                Err(CliError::Usage(message)) => assert!(!message.contains('\n'), "{message}"),
                other => panic!("{bad}: expected a usage error, got {other:?}"),
            }
        }
        let Err(e) = parse(&["rw,frobnicate"]) else {
            panic!()
        };
        assert!(e.message().contains("frobnicate"), "{e}");
    }

    #[test]
    fn kernel_cache_options() {
        let c = parse(&[]).unwrap().fuse_config();
        assert_eq!(
            (c.dir_cache, c.no_opendir, c.cache_symlinks, c.readdirplus),
            (DirCache::Kept, true, true, Readdirplus::Auto)
        );
        let c = parse(&["dir_cache=open,noopendir,nocache_symlinks,readdirplus=always"])
            .unwrap()
            .fuse_config();
        assert_eq!(
            (c.dir_cache, c.no_opendir, c.cache_symlinks, c.readdirplus),
            (DirCache::PerOpen, true, false, Readdirplus::Always)
        );
        let c = parse(&["dir_cache=off,noopendir,opendir,nocache_symlinks,cache_symlinks"])
            .unwrap()
            .fuse_config();
        assert_eq!(
            (c.dir_cache, c.no_opendir, c.cache_symlinks),
            (DirCache::Off, false, true)
        );
        assert_eq!(
            parse(&["readdirplus=never"])
                .unwrap()
                .fuse_config()
                .readdirplus,
            Readdirplus::Never
        );
        assert!(!parse(&[]).unwrap().fuse_config().no_open);
        assert!(parse(&["noopen"]).unwrap().fuse_config().no_open);
        assert!(!parse(&["noopen,open"]).unwrap().fuse_config().no_open);
        // Read-only mounts let the kernel open files itself unless told otherwise.
        assert!(parse(&["ro"]).unwrap().fuse_config().no_open);
        assert!(parse(&["rw,ro"]).unwrap().fuse_config().no_open);
        assert!(!parse(&["ro,rw"]).unwrap().fuse_config().no_open);
        assert!(!parse(&["ro,open"]).unwrap().fuse_config().no_open);
        assert!(!parse(&["open", "ro"]).unwrap().fuse_config().no_open);
        assert!(parse(&["ro,noopen"]).unwrap().fuse_config().no_open);
        // strictatime needs OPEN: a read-only mount with it keeps OPEN, and is no error.
        let c = parse(&["ro,strictatime"]).unwrap().fuse_config();
        assert!(!c.no_open && c.direct_io);
        assert!(parse(&["ro,noopen,strictatime"]).is_err());
        assert_eq!(parse(&[]).unwrap().readahead_kb(), 1024);
        assert_eq!(parse(&["readahead=4M"]).unwrap().readahead_kb(), 4096);
        assert_eq!(parse(&["readahead=1000"]).unwrap().readahead_kb(), 1);
        assert_eq!(parse(&[]).unwrap().fuse_config().max_write, 256 << 10);
        assert_eq!(
            parse(&["max_write=1M"]).unwrap().fuse_config().max_write,
            1 << 20
        );
        assert_eq!(
            parse(&["max_write=4K"]).unwrap().fuse_config().max_write,
            4096
        );
        for bad in [
            "dir_cache=on",
            "dir_cache",
            "readdirplus=yes",
            "noopendir=1",
            "noopen=1",
            "noopen,strictatime",
            "strictatime,noopen",
            "readahead=0",
            "readahead",
            "max_write=2M",
            "max_write=4095",
            "max_write",
        ] {
            assert!(parse(&[bad]).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn device_io_option() {
        assert_eq!(parse(&[]).unwrap().device_io(), DEFAULT_DEVICE_IO);
        for (list, io) in [
            ("devio=direct", DeviceIo::Direct),
            ("devio=buffered", DeviceIo::Buffered),
            ("devio=buffered,devio=direct", DeviceIo::Direct),
        ] {
            assert_eq!(parse(&[list]).unwrap().device_io(), io, "{list}");
            assert_eq!(io.name(), list.rsplit('=').next().unwrap());
        }
        for bad in [
            "devio",
            "devio=",
            "devio=auto",
            "devio=odirect",
            "devio=Direct",
        ] {
            assert!(parse(&[bad]).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn access_time_options() {
        let s = parse(&["strictatime"]).unwrap();
        assert!(s.core_options().strictatime && !s.core_options().noatime);
        assert!(s.fuse_config().direct_io);
        assert_eq!(s.fuse_config().dir_cache, DirCache::Off);
        let s = parse(&["dir_cache=kept,strictatime"]).unwrap();
        assert_eq!(s.fuse_config().dir_cache, DirCache::Off, "strictatime wins");
        // The last of noatime, atime, relatime, strictatime wins.
        for (list, atime) in [
            ("noatime,strictatime", Atime::Always),
            ("strictatime,relatime", Atime::Relative),
            ("strictatime,atime", Atime::Relative),
            ("relatime,noatime", Atime::Never),
        ] {
            assert_eq!(parse(&[list]).unwrap().atime, Some(atime), "{list}");
        }
        let s = parse(&["relatime,nodiratime,lazytime"]).unwrap();
        let core = s.core_options();
        assert!(!core.noatime && !core.strictatime && core.nodiratime);
        assert_eq!(s.fuse_config(), FuseConfig::default());
        assert!(s.lazytime);
        assert!(!parse(&["nodiratime,diratime"]).unwrap().nodiratime);
        let meta = Path::new("/m");
        assert!(parse(&["noatime"])
            .unwrap()
            .fusermount_options(meta, false)
            .contains(&"noatime".to_string()));
        assert!(parse(&["strictatime"])
            .unwrap()
            .fusermount_options(meta, false)
            .contains(&"atime".to_string()));
        for bad in ["strictatime=1", "lazytime=yes", "nodiratime=0"] {
            assert!(parse(&[bad]).is_err(), "{bad}");
        }
    }

    /// Every spelling `--help` and the manual pages list is one the parser takes, with each
    /// value it names (`dir_cache=off|open|kept`) or a valid one for its placeholder.
    #[test]
    fn every_documented_mount_option_is_accepted() {
        let mut spellings = Vec::new();
        for (names, _) in MOUNT_OPTIONS {
            for name in names.split(", ") {
                let Some((key, value)) = name.split_once('=') else {
                    spellings.push(name.replace('*', "anything"));
                    continue;
                };
                let samples = match value {
                    "SIZE" => vec!["1M"],
                    "SECONDS" => vec!["5"],
                    "NAME" | "..." => vec!["x"],
                    // A directory is spelled as an absolute path.
                    alternatives => alternatives
                        .split('|')
                        .map(|a| if a == "DIR" { "/dev/shm/x" } else { a })
                        .collect(),
                };
                spellings.extend(samples.iter().map(|v| format!("{key}={v}")));
            }
        }
        assert!(spellings.len() > 40, "{spellings:?}");
        for spelling in spellings {
            assert!(
                parse(&[&spelling]).is_ok(),
                "{spelling} is documented, not accepted"
            );
        }
        let help = options_help();
        for (names, _) in MOUNT_OPTIONS {
            assert!(help.contains(names), "--help lacks {names}:\n{help}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4096B"), Ok(4096));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("3T"), Ok(3 << 40));
        assert!(parse_size("M").is_err());
        assert!(parse_size("1.5G").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("16777216T").is_err());
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_seconds("0.25"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_seconds("0"), Ok(Duration::ZERO));
        for bad in ["", ".", "1..2", "-3", "+3", "3s", "1e9", "inf"] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn fuse_options_always_include_default_permissions_fsname_and_subtype() {
        let meta = Path::new("/images/meta.img");
        let options = parse(&[]).unwrap().fusermount_options(meta, false);
        assert_eq!(
            options,
            [
                "default_permissions",
                "fsname=/images/meta.img",
                "subtype=dualfs",
                "rw"
            ]
        );

        let options = parse(&["ro,fsname=pool,subtype=x,nosuid,exec,dirsync"])
            .unwrap()
            .fusermount_options(meta, true);
        for expected in [
            "ro",
            "fsname=pool",
            "subtype=x",
            "nosuid",
            "exec",
            "dirsync",
            "allow_other",
        ] {
            assert!(
                options.contains(&expected.to_string()),
                "{expected:?} in {options:?}"
            );
        }
        assert!(!options.contains(&"rw".to_string()));
        // fusermount3 splits at commas not escaped.
        let options = parse(&[])
            .unwrap()
            .fusermount_options(Path::new("/i/a,b\\c"), false);
        assert!(
            options.contains(&"fsname=/i/a\\,b\\\\c".to_string()),
            "{options:?}"
        );
    }

    #[test]
    fn fstab_and_systemd_options_are_accepted_and_ignored() {
        let list = "defaults,auto,noauto,nofail,_netdev,user,users,nouser,owner,group,\
                    comment=backup disk,x-systemd.automount,x-systemd.device-timeout=10s,x-gvfs-hide";
        let s = parse(&[list]).unwrap();
        assert_eq!(s.ignored.len(), 13, "{:?}", s.ignored);
        let plain = MountSettings {
            ignored: Vec::new(),
            ..s
        };
        assert_eq!(plain, MountSettings::default());
        // What mount(8) passes a helper for such a line, and what mount.fuse3 passes.
        let s = parse(&["rw,noexec,nosuid,nodev,nofail,_netdev,user"]).unwrap();
        assert_eq!(
            (s.exec, s.suid, s.dev),
            (Some(false), Some(false), Some(false))
        );
        let s =
            parse(&["defaults,x-systemd.automount,comment=foo,noexec,rw,suid,dev,exec,dev,suid"])
                .unwrap();
        assert_eq!(
            (s.exec, s.suid, s.dev),
            (Some(true), Some(true), Some(true))
        );
    }

    #[test]
    fn sloppy_parsing_ignores_unknown_options_only() {
        let s = parse_option_lists_as(&["rw,frobnicate,ttl=5"], Strictness::Sloppy).unwrap();
        assert_eq!(s.ignored, vec!["frobnicate".to_string()]);
        assert_eq!(s.ttl, Some(Duration::from_secs(5)));
        // A known option with a bad value is still an error.
        assert!(parse_option_lists_as(&["ttl=soon"], Strictness::Sloppy).is_err());
        assert!(parse_option_lists_as(&["ro=1"], Strictness::Sloppy).is_err());
    }

    #[test]
    fn kernel_type_source_and_flags() {
        let meta = Path::new("/images/meta.img");
        let s = parse(&[]).unwrap();
        assert_eq!(s.fs_type(), "fuse.dualfs");
        assert_eq!(s.source(meta), "/images/meta.img");
        assert_eq!(s.kernel_flags(), MsFlags::MS_NODEV | MsFlags::MS_NOSUID);
        let s = parse(&["ro,dev,suid,noexec,noatime,sync,dirsync,subtype=x,fsname=pool"]).unwrap();
        assert_eq!(s.fs_type(), "fuse.x");
        assert_eq!(s.source(meta), "pool");
        assert_eq!(
            s.kernel_flags(),
            MsFlags::MS_RDONLY
                | MsFlags::MS_NOEXEC
                | MsFlags::MS_NOATIME
                | MsFlags::MS_SYNCHRONOUS
                | MsFlags::MS_DIRSYNC
        );
    }

    #[test]
    fn access_control() {
        // Mounted by root: everyone, as for a kernel file system, unless allow_root.
        assert_eq!(parse(&[]).unwrap().session_acl(true), Acl::All);
        assert_eq!(parse(&[]).unwrap().session_acl(false), Acl::Owner);
        for by_root in [true, false] {
            assert_eq!(
                parse(&["allow_root"]).unwrap().session_acl(by_root),
                Acl::RootAndOwner
            );
            assert_eq!(
                parse(&["allow_other,allow_other"])
                    .unwrap()
                    .session_acl(by_root),
                Acl::All
            );
        }
    }
}
