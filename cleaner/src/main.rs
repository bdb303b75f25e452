//! dualfs-cleaner: the segment cleaner daemon of a mounted DualFS.
//!
//! It talks to the mount over its control socket (`/run/dualfs/<escaped mount point>.sock`,
//! protocol in `dualfs::control_protocol`): asks for the segment usage table, chooses victims
//! with the mount's own policy code (`dualfs::fs::clean::policy`), asks the file system to
//! clean them, and logs what it did. While it is connected the mount leaves threshold cleaning to it; the mount
//! still cleans in its write path when clean segments run short, so writes never wait on
//! the daemon, and resumes its own background cleaning when the daemon goes away.
//!
//! ```text
//! dualfs-cleaner /mnt/dualfs                      # detach and clean by the mount's thresholds
//! dualfs-cleaner /mnt/dualfs --policy greedy --min-free 20 --max-free 40 --foreground
//! dualfs-cleaner /mnt/dualfs --once               # one pass now, then exit
//! dualfs-cleaner --status /mnt/dualfs             # clean/dirty segments, utilization, write cost
//! dualfs-cleaner --stop /mnt/dualfs               # stop the daemon attached to the mount
//! ```

use anyhow::{anyhow, bail, Context, Result};
use clap::Parser;
use dualfs::control_protocol::{Client, PassReport, Status};
use dualfs::daemon::{
    detach, read_pid_file, remove_pid_file, write_pid_file, Daemon, Detached, Startup,
};
use dualfs::fs::clean::policy::{choose, Policy, ThresholdUpdate, Thresholds};
use dualfs::output::{human_bytes, write_stdout};
use log::{error, info, warn};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(
    name = "dualfs-cleaner",
    version,
    about = "Clean the log segments of a mounted DualFS",
    long_about = "Clean the log segments of a mounted DualFS in the background.\n\n\
        The cleaner starts a pass when fewer than --min-free segments are clean (or fewer \
        than --max-free when no write came for the idle time), and stops once --max-free are \
        clean. Each pass asks the mount for its segment usage, picks victims by --policy and \
        has the file system move their live blocks and checkpoint. Without the daemon the \
        mount cleans by itself.\n\n\
        Only root and the user who mounted may use a mount's control socket.\n\n\
        Exit status: 0 done (or the mount went away), 1 failed, 2 bad command line."
)]
struct Cli {
    /// The mount point of a DualFS
    #[arg(value_name = "MOUNTPOINT")]
    mountpoint: PathBuf,

    /// Print the mount's segment and cleaning status and exit
    #[arg(long)]
    status: bool,

    /// With --status: print the status as JSON
    #[arg(long, requires = "status")]
    json: bool,

    /// Victim choice: cost-benefit ((1-u)*age/(1+u), Sprite LFS) or greedy (emptiest first)
    #[arg(long, value_name = "POLICY")]
    policy: Option<Policy>,

    /// Start cleaning when fewer segments than this are clean [default: the mount's]
    #[arg(long, value_name = "N")]
    min_free: Option<u64>,

    /// Stop cleaning once this many segments are clean [default: the mount's]
    #[arg(long, value_name = "N")]
    max_free: Option<u64>,

    /// Segments per pass (twice as many when idle or below --min-free) [default: the mount's]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    segments_per_pass: Option<u64>,

    /// Seconds without writes after which the file system counts as idle [default: the mount's]
    #[arg(long, value_name = "S")]
    idle: Option<u64>,

    /// Seconds between looks at the mount's state
    #[arg(long, value_name = "S", default_value_t = 1.0)]
    interval: f64,

    /// Clean one pass now (whatever the thresholds), print what it did, and exit
    #[arg(long, conflicts_with = "status")]
    once: bool,

    /// Stop the cleaner daemon attached to the mount (it exits after the pass it is in), and
    /// exit once it has
    #[arg(long, conflicts_with_all = ["status", "once"])]
    stop: bool,

    /// Stay in the foreground and log to stderr
    #[arg(short = 'f', long)]
    foreground: bool,

    /// Append the log to FILE (a detached daemon otherwise logs nowhere)
    #[arg(long, value_name = "FILE")]
    log_file: Option<PathBuf>,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Release);
}

fn main() -> ExitCode {
    if let Some(code) = dualfs::man_pages::generate_if_asked(|| {
        dualfs::man_pages::cleaner(<Cli as clap::CommandFactory>::command())
    }) {
        return code;
    }
    let cli = Cli::parse();
    if !(cli.interval.is_finite() && cli.interval > 0.0) {
        eprintln!("dualfs-cleaner: --interval must be a positive number of seconds");
        return ExitCode::from(2);
    }
    let quiet_default = if cli.status { "warn" } else { "info" };
    let mut logger =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(quiet_default));
    if let Some(path) = &cli.log_file {
        match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            Ok(f) => {
                logger.target(env_logger::Target::Pipe(Box::new(f)));
                logger.write_style(env_logger::WriteStyle::Never);
            }
            Err(e) => {
                eprintln!("dualfs-cleaner: log file {}: {e}", path.display());
                return ExitCode::from(1);
            }
        }
    }
    logger.init();
    let logs_to_file = cli.log_file.is_some();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            // stderr may be /dev/null once detached: the log file hears it too.
            eprintln!("dualfs-cleaner: {e:#}");
            if logs_to_file {
                error!("{e:#}");
            }
            ExitCode::from(1)
        }
    }
}

fn connect(mountpoint: &Path) -> Result<Client> {
    let canonical = std::fs::canonicalize(mountpoint)
        .with_context(|| format!("mount point {}", mountpoint.display()))?;
    let path = dualfs::control_protocol::socket_path(&canonical);
    Client::connect_socket(&path).map_err(|e| {
        let why = match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ECONNREFUSED) => {
                "no DualFS is mounted there (or it is read-only)".to_string()
            }
            Some(libc::EACCES) => "permission denied (only root and the mount owner)".to_string(),
            _ => e.to_string(),
        };
        anyhow!(
            "cannot reach the mount on {}: {} ({why})",
            canonical.display(),
            path.display()
        )
    })
}

/// The exit code is the daemon's verdict on its start when it detached.
fn run(cli: Cli) -> Result<ExitCode> {
    if cli.stop {
        return stop_daemon(&cli.mountpoint).map(|()| ExitCode::SUCCESS);
    }
    let mut client = connect(&cli.mountpoint)?;
    client.set_timeout(None)?;
    if cli.status {
        let s = client.status().context("status")?;
        let out = if cli.json {
            serde_json_string(&s)
        } else {
            let mut out = format_status(&cli.mountpoint, &s);
            // The daemon serving the mount, and how often its supervisor restarted it.
            if let Ok(d) = client.daemon("dualfs-cleaner --status") {
                out.push_str(&format!(
                    "\ndaemon: pid {}, {} restarts",
                    d.pid,
                    d.restarts.unwrap_or(0)
                ));
            }
            out
        };
        return print(&format!("{out}\n")).map(|()| ExitCode::SUCCESS);
    }
    let update = ThresholdUpdate {
        min_free: cli.min_free,
        max_free: cli.max_free,
        segments_per_pass: cli.segments_per_pass,
        idle_secs: cli.idle,
        policy: cli.policy,
    };
    if cli.once {
        let t = client.thresholds()?;
        let t = update.apply(t).map_err(|e| anyhow!(e))?;
        let status = client.status()?;
        let r = one_pass(&mut client, &t, t.pass_size(status.clean, false))?;
        return print(&format!("{}\n", describe_pass(&r, &status))).map(|()| ExitCode::SUCCESS);
    }
    // Who we are, and that threshold cleaning is ours now.
    client.hello("dualfs-cleaner", true)?;
    let t = if update == ThresholdUpdate::default() {
        client.thresholds()?
    } else {
        client.set_thresholds(update).map_err(|e| anyhow!("{e}"))?
    };
    let pid_file = Daemon::Cleaner.pid_file(&std::fs::canonicalize(&cli.mountpoint)?);
    if let Some(pid) = read_pid_file(&pid_file) {
        if pid as u32 != std::process::id() && Daemon::Cleaner.is_live(pid) {
            bail!(
                "a cleaner (pid {pid}) already serves {} ({})",
                cli.mountpoint.display(),
                pid_file.display()
            );
        }
    }
    // A detached cleaner logs only to --log-file, which the logger holds: its standard
    // streams go to /dev/null.
    let startup = if cli.foreground {
        Startup::foreground(Daemon::Cleaner)
    } else {
        match detach(Daemon::Cleaner, None).map_err(|e| anyhow!(e))? {
            Detached::Parent(code) => return Ok(code),
            Detached::Child(startup) => startup,
        }
    };
    if let Err(e) = write_pid_file(&pid_file) {
        warn!(
            "cannot write {} ({e}): `dualfs-cleaner --stop` will not find this daemon",
            pid_file.display()
        );
    }
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGHUP, on_signal as *const () as libc::sighandler_t);
    }
    startup.ready();
    info!(
        "cleaning {}: start below {} clean segments, stop at {}, {} per pass, idle after {} s, {}",
        cli.mountpoint.display(),
        t.min_free,
        t.max_free,
        t.segments_per_pass,
        t.idle_secs,
        t.policy
    );
    let r = daemon_loop(&mut client, Duration::from_secs_f64(cli.interval));
    if let Err(e) = remove_pid_file(&pid_file) {
        warn!("cannot remove {} ({e})", pid_file.display());
    }
    r.map(|()| ExitCode::SUCCESS)
}

fn serde_json_string(s: &Status) -> String {
    // The protocol's own encoding, without the trailing newline.
    let line = dualfs::control_protocol::encode_line(s);
    String::from_utf8_lossy(&line).trim_end().to_string()
}

fn daemon_loop(client: &mut Client, interval: Duration) -> Result<()> {
    let mut cleaning = false;
    let mut stalled = 0;
    let mut total = Totals::default();
    let started = Instant::now();
    let mut rate = Rate::default();
    while !STOP.load(Ordering::Acquire) {
        let status = match client.status() {
            Ok(s) => s,
            Err(e) => {
                info!("the mount went away ({e}); exiting");
                break;
            }
        };
        // Start early enough that writers do not reach the reserve before the next look: the
        // start threshold is raised by what the log consumes in two intervals (the stop
        // threshold stays: cleaning more than needed moves data that would have died).
        let margin = rate.margin(&status, interval);
        let mut t = status.thresholds;
        t.min_free += margin;
        t.max_free = t.max_free.max(t.min_free + 1);
        let idle = status.idle_secs >= t.idle_secs;
        let go = if cleaning {
            status.clean < t.max_free
        } else {
            t.should_start(status.clean, idle)
        };
        if go {
            if !cleaning {
                info!(
                    "{} clean segments (start below {}{}): cleaning",
                    status.clean,
                    if idle { t.max_free } else { t.min_free },
                    if idle { ", idle" } else { "" }
                );
            }
            match one_pass(client, &t, t.pass_size(status.clean, idle)) {
                Ok(r) if !r.cleaned.is_empty() => {
                    cleaning = true;
                    total.add(&r);
                    info!("{}", describe_pass(&r, &status));
                    // Passes that free less than a segment each add up, but not for ever.
                    stalled = if r.clean_after > r.clean_before {
                        0
                    } else {
                        stalled + 1
                    };
                    if stalled < 3 {
                        continue;
                    }
                    info!("three passes gained no clean segment: pausing");
                    stalled = 0;
                    cleaning = false;
                }
                Ok(r) => {
                    if cleaning || !r.refused.is_empty() {
                        info!(
                            "nothing worth cleaning now ({} clean segments){}",
                            status.clean,
                            refused_note(&r)
                        );
                    }
                    cleaning = false;
                }
                Err(e) => {
                    warn!("cleaning pass failed: {e:#}");
                    cleaning = false;
                }
            }
        } else if cleaning {
            info!(
                "{} clean segments (stop at {}): done; this run: {} passes, {} segments, {} \
                 written, {} freed",
                status.clean,
                t.max_free,
                total.passes,
                total.segments,
                human_bytes(total.written),
                human_bytes(total.freed)
            );
            cleaning = false;
        }
        sleep(interval);
    }
    info!(
        "stopping after {:.0} s: {} passes, {} segments cleaned, {} written, {} freed",
        started.elapsed().as_secs_f64(),
        total.passes,
        total.segments,
        human_bytes(total.written),
        human_bytes(total.freed)
    );
    Ok(())
}

fn sleep(d: Duration) {
    let end = Instant::now() + d;
    while !STOP.load(Ordering::Acquire) {
        let now = Instant::now();
        if now >= end {
            return;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(100)));
    }
}

/// How fast writers (not the cleaner) fill the log, in segments per second (smoothed).
#[derive(Default)]
struct Rate {
    last: Option<(Instant, u64)>,
    segments_per_sec: f64,
}

impl Rate {
    /// Clean segments writers may consume in two intervals at the current rate.
    fn margin(&mut self, s: &Status, interval: Duration) -> u64 {
        let now = Instant::now();
        let bs = s.block_size.max(1) as u64;
        let writers = s
            .log_blocks_written
            .saturating_sub(s.counters.bytes_written / bs);
        if let Some((t, blocks)) = self.last {
            let dt = now.duration_since(t).as_secs_f64();
            if dt > 0.0 {
                let seg_blocks = (s.segment_bytes / bs).max(1) as f64;
                let r = writers.saturating_sub(blocks) as f64 / seg_blocks / dt;
                self.segments_per_sec = 0.5 * self.segments_per_sec + 0.5 * r;
            }
        }
        self.last = Some((now, writers));
        let m = (self.segments_per_sec * interval.as_secs_f64() * 2.0).ceil() as u64;
        m.min(s.log_segments / 8)
    }
}

#[derive(Default)]
struct Totals {
    passes: u64,
    segments: u64,
    written: u64,
    freed: u64,
}

impl Totals {
    fn add(&mut self, r: &PassReport) {
        self.passes += 1;
        self.segments += r.cleaned.len() as u64;
        self.written += r.bytes_written;
        self.freed += r.bytes_freed;
    }
}

/// Ask for the usage table, choose up to `n` victims by the policy, have them cleaned.
fn one_pass(client: &mut Client, t: &Thresholds, n: u64) -> Result<PassReport> {
    let usage = client.usage().context("segment usage")?;
    let victims = choose(
        &usage.seg_usage(),
        usage.segment_bytes,
        usage.now,
        t.policy,
        n as usize,
    );
    if victims.is_empty() {
        return Ok(PassReport::default());
    }
    client.clean(victims).context("cleaning")
}

fn refused_note(r: &PassReport) -> String {
    match r.refused.first() {
        Some((seg, why)) => format!("; segment {seg}: {why}"),
        None => String::new(),
    }
}

/// What a pass did, in segments: how many it cleaned, how many clean segments its own
/// writes took (the live blocks it moved and its checkpoints), and the net change.
fn describe_pass(r: &PassReport, s: &Status) -> String {
    if r.cleaned.is_empty() && r.refused.is_empty() {
        return "cleaned nothing: no segment is worth cleaning (each is clean, holds the log \
                head, or is over 95% live)"
            .into();
    }
    if r.cleaned.is_empty() {
        return format!("cleaned nothing{}", refused_note(r));
    }
    let bs = s.block_size.max(1) as u64;
    let seg_blocks = (s.segment_bytes / bs).max(1);
    let written = r.bytes_written.div_ceil(bs);
    let list: Vec<String> = r.cleaned.iter().map(|n| n.to_string()).collect();
    let net = r.clean_after as i64 - r.clean_before as i64;
    let taken = r.cleaned.len() as i64 - net;
    format!(
        "cleaned {} segment{} ({}): moved {} live blocks, wrote {} log blocks ({:.1} segments), \
         freed {}; clean segments {} -> {} ({:+}: {} cleaned, {} taken by its writes and any \
         writer's meanwhile)",
        r.cleaned.len(),
        if r.cleaned.len() == 1 { "" } else { "s" },
        list.join(", "),
        r.live_moved,
        written,
        written as f64 / seg_blocks as f64,
        human_bytes(r.bytes_freed),
        r.clean_before,
        r.clean_after,
        net,
        r.cleaned.len(),
        taken.max(0)
    )
}
fn format_status(mountpoint: &Path, s: &Status) -> String {
    let c = &s.counters;
    let t = &s.thresholds;
    let log_bytes = s.log_segments * s.segment_bytes;
    let mut out = String::new();
    let mut line = |l: String| {
        out.push_str(&l);
        out.push('\n');
    };
    line(format!(
        "{}: {} log segments of {}",
        mountpoint.display(),
        s.log_segments,
        human_bytes(s.segment_bytes)
    ));
    line(format!("clean segments:   {}", s.clean));
    line(format!("dirty segments:   {}", s.dirty));
    line(format!(
        "reserve:          {} segments (writers stop there; {} only for the cleaner)",
        s.reserve, s.cleaner_reserve
    ));
    line(format!(
        "utilization:      {:.1}% ({} live of {}; writers stop at {})",
        s.utilization * 100.0,
        human_bytes(s.live_bytes),
        human_bytes(log_bytes),
        human_bytes(s.live_limit_bytes)
    ));
    line(format!(
        "cleaned:          {} segments in {} passes, {} live blocks moved",
        c.segments_cleaned, c.passes, c.live_moved
    ));
    line(format!(
        "  background:     {} passes beside operations (the mount's cleaner thread)",
        c.background_passes
    ));
    line(format!(
        "  write path:     {} passes in an operation's write path (it waited for them); {} \
         operations found the log short of room and waited",
        c.write_path_passes, c.room_waits
    ));
    line(format!(
        "  asked for:      {} passes (cleaner daemon, --once)",
        c.requested_passes
    ));
    line(format!(
        "cleaning wrote:   {}, freed {}",
        human_bytes(c.bytes_written),
        human_bytes(c.bytes_freed)
    ));
    line(format!(
        "write cost:       {:.3} (bytes written by cleaning / bytes freed)",
        s.write_cost
    ));
    line(format!("ENOSPC refusals:  {}", c.enospc));
    line(format!(
        "thresholds:       start below {} clean, stop at {}, {} per pass, idle after {} s, {}",
        t.min_free, t.max_free, t.segments_per_pass, t.idle_secs, t.policy
    ));
    line(format!(
        "cleaner daemon:   {}; idle for {} s",
        if s.daemons > 0 {
            "attached"
        } else {
            "none (the mount's cleaner thread cleans by the thresholds)"
        },
        s.idle_secs
    ));
    let _ = std::io::stdout().flush();
    out.trim_end().to_string()
}

/// `--stop`: signal the daemon whose pid file names this mount, and wait until it is gone.
fn stop_daemon(mountpoint: &Path) -> Result<()> {
    let canonical = std::fs::canonicalize(mountpoint)
        .with_context(|| format!("mount point {}", mountpoint.display()))?;
    let pid_file = Daemon::Cleaner.pid_file(&canonical);
    let pid = match read_pid_file(&pid_file) {
        Some(pid) if Daemon::Cleaner.is_live(pid) => pid,
        _ => bail!(
            "no cleaner daemon serves {} (no live pid in {})",
            canonical.display(),
            pid_file.display()
        ),
    };
    // SAFETY: a signal to the process the pid file names, which is a dualfs-cleaner.
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        bail!(
            "cannot signal the cleaner daemon (pid {pid}): {}",
            std::io::Error::last_os_error()
        );
    }
    // It finishes the pass it is in (a pass ends in a checkpoint) and exits.
    if !Daemon::Cleaner.wait_for_exit(pid, Duration::from_secs(60)) {
        bail!("the cleaner daemon (pid {pid}) did not exit within 60 s of SIGTERM");
    }
    print(&format!(
        "stopped the cleaner daemon (pid {pid}) of {}\n",
        canonical.display()
    ))
}

/// Print on stdout; a reader that closed the pipe (`--status MNT | head -1`) is no error.
fn print(text: &str) -> Result<()> {
    write_stdout(text).context("standard output")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every option clap accepts has its entry in the page.
    #[test]
    fn the_manual_page_documents_every_option() {
        let pages = dualfs::man_pages::cleaner(Cli::command());
        dualfs::man_pages::verify(&pages).unwrap_or_else(|problems| panic!("{problems}"));
    }
}
