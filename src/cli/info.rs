//! `dualfs info META [--json]`: what a file system is and how full it is, as `dumpe2fs -h`
//! shows it for ext4. Reads only. Unmounted, the figures come from a read-only mount of the
//! core (recovery in memory, nothing written); mounted, from the mount itself (its control
//! socket and statfs), as the devices' contents lag behind it.

use super::device::{is_in_use, open_device};
use super::error::{describe_fs_error, describe_io, print_error, CliError};
use super::mount::{dead_mount_error, device_path};
use dualfs::control_protocol::{Client, DaemonInfo, Status};
use dualfs::device::{BlockDevice, DeviceIo, FileDevice, OpenMode};
use dualfs::format::superblock::Superblock;
use dualfs::format::FORMAT_VERSION;
use dualfs::fs::{read_superblock, Fs, MountOptions};
use dualfs::log::checkpoint::read_newest;
use dualfs::mountinfo::fuse_mounts_of;
use dualfs::output::{human_bytes, write_stdout};
use serde::Serialize;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

#[derive(clap::Args, Debug)]
pub struct InfoArgs {
    /// The metadata device (image file or block device)
    #[arg(value_name = "META")]
    pub meta: PathBuf,
    /// Print one JSON object instead of lines of text
    #[arg(long)]
    pub json: bool,
}

/// Everything `dualfs info` reports; the JSON output is this, field for field.
#[derive(Serialize, Debug)]
pub struct Info {
    pub label: String,
    pub uuid: String,
    pub format_version: u32,
    pub block_size: u32,
    pub segment_blocks: u32,
    /// mkfs time, seconds since the epoch.
    pub created: u64,
    pub meta: MetaDevice,
    pub data: DataDevice,
    pub checkpoint: CheckpointInfo,
    /// "clean", "needs recovery" (not unmounted cleanly: the next mount rolls the log
    /// forward), "mounted", or "daemon died" (still mounted, but its daemon was killed: the
    /// mount point gives ENOTCONN; `dead_mount` says what to do).
    pub state: &'static str,
    /// When the daemon died: the mount point, the error and the way out.
    pub dead_mount: Option<String>,
    /// Where it is mounted, when it is (and the mount could be found).
    pub mountpoint: Option<PathBuf>,
    /// The FUSE transport the mount serves over, "uring" or "dev" (when mounted read-write:
    /// a read-only mount has no control socket to ask).
    pub transport: Option<String>,
    /// The pid of the daemon serving the mount (a supervised mount's worker), when mounted
    /// read-write.
    pub daemon_pid: Option<u32>,
    /// How many times the mount's supervisor restarted its daemon.
    pub restarts: Option<u32>,
    pub mounted: bool,
}

#[derive(Serialize, Debug)]
pub struct MetaDevice {
    pub path: PathBuf,
    pub bytes: u64,
    pub segments: u64,
    /// Of the segments the log uses (all but segment 0): clean ones, dirty ones, and the
    /// bytes still live in them. Absent when a mount holds the device but cannot be asked.
    pub clean_segments: Option<u64>,
    pub dirty_segments: Option<u64>,
    pub used_bytes: Option<u64>,
    pub free_bytes: Option<u64>,
}

#[derive(Serialize, Debug)]
pub struct DataDevice {
    /// The path recorded in META (relative paths are taken from the current directory).
    pub recorded_path: PathBuf,
    /// Size of the device found there; absent when it cannot be opened (see `problem`).
    pub bytes: Option<u64>,
    pub blocks: u64,
    pub free_blocks: Option<u64>,
    pub used_blocks: Option<u64>,
    pub problem: Option<String>,
}

#[derive(Serialize, Debug)]
pub struct CheckpointInfo {
    pub serial: u64,
    /// When it was written, seconds since the epoch.
    pub time: u64,
    /// Written by a clean unmount.
    pub clean: bool,
}

pub fn run(args: InfoArgs) -> ExitCode {
    match info(&args.meta) {
        Ok(info) => {
            let text = if args.json {
                serde_json::to_string_pretty(&info).expect("info serializes") + "\n"
            } else {
                render(&info)
            };
            match write_stdout(&text) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    print_error(&format!("standard output: {}", describe_io(&e)));
                    ExitCode::from(1)
                }
            }
        }
        Err(e) => {
            print_error(e.message());
            e.exit_code()
        }
    }
}

/// The figures a mounted or unmounted file system gives beyond its superblock.
struct Usage {
    status: Status,
    data_free_blocks: u64,
    /// Who serves the mount, when mounted.
    daemon: DaemonInfo,
}

fn info(meta_arg: &Path) -> Result<Info, CliError> {
    let meta_path = device_path(meta_arg)?;
    let failure = |e: &dualfs::FsError| {
        CliError::failure(format!("{}: {}", meta_arg.display(), describe_fs_error(e)))
    };
    // A shared lock: refused while a read-write mount (or fsck -y) holds the device.
    let (meta, mounted) = match open_device(&meta_path, true, DeviceIo::Buffered) {
        Ok(dev) => (dev, false),
        Err(e) if is_in_use(&e) => {
            let dev = FileDevice::open(
                &meta_path,
                OpenMode {
                    read_only: true,
                    exclusive: false,
                    ..OpenMode::default()
                },
            )
            .map_err(|e| io_failure(meta_arg, &e))?;
            (Arc::new(dev) as Arc<dyn BlockDevice>, true)
        }
        Err(e) => return Err(io_failure(meta_arg, &e)),
    };
    let sb = read_superblock(&*meta).map_err(|e| failure(&e))?;
    if sb.role != dualfs::format::superblock::Role::Meta {
        return Err(CliError::failure(format!(
            "{} is the data device of a DualFS; give its metadata device",
            meta_arg.display()
        )));
    }
    let cp = read_newest(&sb, &*meta).map_err(|e| failure(&e))?;
    let recorded = PathBuf::from(OsStr::from_bytes(&sb.data_path));
    // A read-only mount holds only a shared lock: look for the mount too.
    let mountpoint = fuse_mounts_of(&meta_path)
        .map_err(|e| CliError::failure(format!("/proc/self/mountinfo: {}", describe_io(&e))))?
        .pop();
    let in_use = mounted;
    let mounted = in_use || mountpoint.is_some();
    // A killed daemon's mount stays in the table (its lock gone with it) until unmounted.
    // statfs always asks the daemon (a stat may be answered from the kernel's cache).
    let dead_mount = mountpoint.as_deref().and_then(|mnt| {
        let Err(nix::errno::Errno::ENOTCONN) = nix::sys::statvfs::statvfs(mnt) else {
            return None;
        };
        let e = std::io::Error::from_raw_os_error(libc::ENOTCONN);
        let then = if cp.is_clean() {
            ""
        } else {
            ", then the next mount recovers it"
        };
        Some(format!("{}{then}", dead_mount_error(mnt, &e).message()))
    });
    let mut problem = None;
    let mut data_bytes = None;
    let usage = match (&mountpoint, in_use) {
        (Some(mnt), true) => match usage_of_mount(mnt) {
            Ok(u) => Some(u),
            Err(why) => {
                problem = Some(why);
                None
            }
        },
        (None, true) => {
            problem = Some(format!(
                "{} is in use, but no mount of it was found to ask (held by fsck?)",
                meta_arg.display()
            ));
            None
        }
        (_, false) => match device_path(&recorded)
            .map_err(|e| e.message().to_string())
            .and_then(|found| {
                open_device(&found, true, DeviceIo::Buffered).map_err(|e| describe_io(&e))
            }) {
            Ok(data) => {
                data_bytes = Some(data.size());
                match usage_unmounted(meta.clone(), data) {
                    Ok(u) => Some(u),
                    Err(e) => {
                        problem = Some(describe_fs_error(&e));
                        None
                    }
                }
            }
            Err(why) => {
                problem = Some(why);
                None
            }
        },
    };
    if data_bytes.is_none() && problem.is_none() {
        data_bytes = std::fs::metadata(&recorded)
            .ok()
            .map(|m| device_size(&recorded, m.len()));
    }
    Ok(assemble(
        &sb,
        &cp,
        meta_path,
        meta.size(),
        recorded,
        data_bytes,
        usage,
        problem,
        mounted,
        mountpoint,
        dead_mount,
    ))
}

#[allow(clippy::too_many_arguments)]
fn assemble(
    sb: &Superblock,
    cp: &dualfs::format::checkpoint::Checkpoint,
    meta_path: PathBuf,
    meta_bytes: u64,
    recorded: PathBuf,
    data_bytes: Option<u64>,
    usage: Option<Usage>,
    problem: Option<String>,
    mounted: bool,
    mountpoint: Option<PathBuf>,
    dead_mount: Option<String>,
) -> Info {
    let segment_bytes = sb.segment_blocks as u64 * sb.block_size as u64;
    let status = usage.as_ref().map(|u| &u.status);
    let daemon = usage.as_ref().map(|u| u.daemon.clone()).unwrap_or_default();
    let free = usage.as_ref().map(|u| u.data_free_blocks);
    Info {
        label: sb.label.clone(),
        uuid: uuid::Uuid::from_bytes(sb.uuid).hyphenated().to_string(),
        format_version: FORMAT_VERSION,
        block_size: sb.block_size,
        segment_blocks: sb.segment_blocks,
        created: sb.created,
        meta: MetaDevice {
            path: meta_path,
            bytes: meta_bytes,
            segments: sb.segments,
            clean_segments: status.map(|s| s.clean),
            dirty_segments: status.map(|s| s.dirty),
            used_bytes: status.map(|s| s.live_bytes),
            free_bytes: status.map(|s| s.clean * segment_bytes),
        },
        data: DataDevice {
            recorded_path: recorded,
            bytes: data_bytes,
            blocks: sb.data_blocks,
            free_blocks: free,
            used_blocks: free.map(|f| sb.data_blocks.saturating_sub(f)),
            problem,
        },
        checkpoint: CheckpointInfo {
            serial: cp.serial,
            time: cp.time_ns / 1_000_000_000,
            clean: cp.is_clean(),
        },
        state: if dead_mount.is_some() {
            "daemon died"
        } else if mounted {
            "mounted"
        } else if cp.is_clean() {
            "clean"
        } else {
            "needs recovery"
        },
        dead_mount,
        mountpoint,
        transport: daemon.transport,
        daemon_pid: (daemon.pid != 0).then_some(daemon.pid),
        restarts: daemon.restarts,
        mounted,
    }
}

/// Size of an image file, or of a block device (whose metadata says 0).
fn device_size(path: &Path, len: u64) -> u64 {
    if len > 0 {
        return len;
    }
    open_device(path, true, DeviceIo::Buffered).map_or(0, |d| d.size())
}

fn io_failure(path: &Path, e: &std::io::Error) -> CliError {
    CliError::failure(format!("{}: {}", path.display(), describe_io(e)))
}

/// A read-only mount of the core: nothing is written, recovery happens in memory.
fn usage_unmounted(
    meta: Arc<dyn BlockDevice>,
    data: Arc<dyn BlockDevice>,
) -> dualfs::Result<Usage> {
    let opts = MountOptions {
        read_only: true,
        cache_bytes: 16 << 20,
        ..MountOptions::default()
    };
    let fs = Fs::mount(meta, data, opts)?;
    let usage = Usage {
        status: fs.cleaner_status(),
        data_free_blocks: fs.statfs()?.bfree,
        daemon: DaemonInfo::default(),
    };
    fs.unmount()?;
    Ok(usage)
}

/// Ask the mount: its control socket for the log, statfs for the data device.
fn usage_of_mount(mountpoint: &Path) -> Result<Usage, String> {
    let status = Client::connect(mountpoint)
        .and_then(|mut c| c.status())
        .map_err(|e| {
            format!(
                "cannot ask the mount at {}: {}",
                mountpoint.display(),
                describe_io(&e)
            )
        })?;
    let st = nix::sys::statvfs::statvfs(mountpoint)
        .map_err(|e| format!("statfs {}: {}", mountpoint.display(), e.desc()))?;
    let daemon = Client::connect(mountpoint)
        .and_then(|mut c| c.daemon("dualfs info"))
        .unwrap_or_default();
    Ok(Usage {
        status,
        data_free_blocks: st.blocks_free(),
        daemon,
    })
}

/// The text form, one "Name: value" line each, as dumpe2fs -h.
fn render(i: &Info) -> String {
    let mut lines: Vec<(&str, String)> = Vec::new();
    let unknown = || "unknown".to_string();
    let with_bytes = |b: u64| format!("{} ({b} bytes)", human_bytes(b));
    let bytes = |b: Option<u64>| b.map_or_else(unknown, with_bytes);
    lines.push(("Label", i.label.clone()));
    lines.push(("UUID", i.uuid.clone()));
    lines.push(("Format version", i.format_version.to_string()));
    lines.push(("Block size", i.block_size.to_string()));
    lines.push((
        "Segment size",
        format!(
            "{} blocks ({})",
            i.segment_blocks,
            human_bytes(i.segment_blocks as u64 * i.block_size as u64)
        ),
    ));
    lines.push(("Created", time(i.created)));
    let state = match &i.dead_mount {
        Some(what) => format!("{}: {what}", i.state),
        None => i.state.to_string(),
    };
    lines.push(("State", state));
    let mounted = match &i.mountpoint {
        Some(m) => format!("yes, on {}", m.display()),
        None if i.mounted => "yes (in use)".to_string(),
        None => "no".to_string(),
    };
    lines.push(("Mounted", mounted));
    if let Some(pid) = i.daemon_pid {
        let restarts = i.restarts.unwrap_or(0);
        lines.push(("Daemon", format!("pid {pid}, {restarts} restarts")));
    }
    if let Some(t) = &i.transport {
        lines.push(("FUSE transport", t.clone()));
    }
    lines.push((
        "Last checkpoint",
        format!(
            "serial {}, {}{}",
            i.checkpoint.serial,
            time(i.checkpoint.time),
            if i.checkpoint.clean {
                ", clean unmount"
            } else {
                ""
            }
        ),
    ));
    lines.push(("Metadata device", i.meta.path.display().to_string()));
    lines.push(("Metadata size", with_bytes(i.meta.bytes)));
    lines.push(("Segments", i.meta.segments.to_string()));
    let count = |c: Option<u64>| c.map_or_else(unknown, |c| c.to_string());
    lines.push(("Clean segments", count(i.meta.clean_segments)));
    lines.push(("Dirty segments", count(i.meta.dirty_segments)));
    lines.push(("Metadata used", bytes(i.meta.used_bytes)));
    lines.push(("Metadata free", bytes(i.meta.free_bytes)));
    lines.push(("Data device", i.data.recorded_path.display().to_string()));
    lines.push(("Data size", bytes(i.data.bytes)));
    lines.push(("Data blocks", i.data.blocks.to_string()));
    let blocks = |b: Option<u64>| {
        b.map_or_else(unknown, |b| {
            format!("{b} ({})", human_bytes(b * i.block_size as u64))
        })
    };
    lines.push(("Data blocks used", blocks(i.data.used_blocks)));
    lines.push(("Data blocks free", blocks(i.data.free_blocks)));
    if let Some(p) = &i.data.problem {
        lines.push(("Problem", p.clone()));
    }
    let width = lines.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    lines
        .iter()
        .map(|(k, v)| format!("{:width$} {v}\n", format!("{k}:")))
        .collect()
}

fn time(secs: u64) -> String {
    match jiff::Timestamp::from_second(secs as i64) {
        Ok(t) => format!("{t}"),
        Err(_) => format!("{secs} s after the epoch"),
    }
}
