//! fsck-dualfs (also installed as fsck.dualfs, so `fsck -t dualfs META` works): check a DualFS
//! and repair what is wrong. Options and exit codes follow e2fsck.

// A check allocates and frees a record per inode and per entry; mimalloc makes that cheaper
// than glibc's malloc (about 10% of a check of 80,000 files, bench/fsck.sh).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod devices;
mod progress;
mod questions;

use clap::Parser;
use devices::{open_pair, Access};
use dualfs::check::repair::{repair, FixClass, Policy, RepairOptions, RepairOutcome};
use dualfs::check::{check_with, glance, Options, Report};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

/// Exit codes (as e2fsck's; they add up when several apply).
pub mod exit {
    pub const CLEAN: u8 = 0;
    pub const CORRECTED: u8 = 1;
    #[allow(dead_code)]
    pub const REBOOT: u8 = 2;
    pub const UNCORRECTED: u8 = 4;
    pub const OPERATIONAL: u8 = 8;
    pub const USAGE: u8 = 16;
}

#[derive(Parser, Debug)]
#[command(
    name = "fsck-dualfs",
    version,
    about = "Check a DualFS file system and repair what is wrong",
    long_about = "Check a DualFS file system (metadata log on META, file data on DATA) and \
        repair what is wrong.\n\n\
        DATA may be left out: the data device recorded in META's superblock is used (so \
        `fsck -t dualfs META` works through fsck(8)). A file system that was unmounted cleanly \
        is reported clean at once unless -f is given.\n\n\
        Without -n, -p or -y every kind of repair is asked about on the terminal. Repairs \
        are never made to a mounted file system: the devices are opened exclusively, which a \
        mount prevents (with -n a mounted file system is read, and the result may be stale).\n\n\
        Exit status (added together): 0 no errors, 1 errors corrected, 4 errors left \
        uncorrected, 8 operational error, 16 usage error.",
    after_help = "Repairs that lose nothing (-p): rebuild data bitmaps, group descriptors and \
        segment usage; fix link counts, directory sizes and '..'; fix the inode map and the \
        free-inode list; remove entries that name nothing; reconnect unreachable inodes under \
        /lost+found; rewrite superblock copies.\n\
        Repairs that give something up (-y): free inodes that cannot be read and symlinks \
        whose target is lost; clear block pointers that cannot be followed or that share a \
        block; remove illegal or extra names; cut a log that cannot be rolled forward; \
        restore the primary superblock from a copy; rebuild a damaged directory tree from the \
        entries that can be read."
)]
struct Cli {
    /// Metadata device: an image file or a block device
    #[arg(value_name = "META")]
    meta: PathBuf,

    /// Data device [default: the one recorded in META's superblock]
    #[arg(value_name = "DATA")]
    data: Option<PathBuf>,

    /// Check only: open the devices read-only, change nothing, answer "no" to everything
    #[arg(short = 'n', conflicts_with_all = ["preen", "yes"])]
    no: bool,

    /// Repair what is safe without asking ("preen"); leave the rest
    #[arg(short = 'p', conflicts_with = "yes")]
    preen: bool,

    /// The same as -p
    #[arg(short = 'a', conflicts_with_all = ["no", "yes"])]
    auto: bool,

    /// Repair everything without asking
    #[arg(short = 'y')]
    yes: bool,

    /// Check even if the file system was unmounted cleanly
    #[arg(short = 'f')]
    force: bool,

    /// List every problem and repair (not only the first ones of each pass)
    #[arg(short = 'v')]
    verbose: bool,

    /// Accepted for compatibility with e2fsck (interactive repair is the default anyway)
    #[arg(short = 'r', hide = true)]
    interactive_compat: bool,

    /// Accepted for compatibility with fsck(8) -C: a progress bar is shown on a terminal
    #[arg(
        short = 'C',
        value_name = "FD",
        hide = true,
        allow_hyphen_values = true
    )]
    progress_fd: Option<String>,
}

/// What the program does, chosen from the options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    CheckOnly,
    Preen,
    All,
    Ask,
}

fn program_name() -> String {
    std::env::args_os()
        .next()
        .and_then(|a| {
            PathBuf::from(a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "fsck-dualfs".into())
}

fn main() -> ExitCode {
    if let Some(code) = dualfs::man_pages::generate_if_asked(|| {
        dualfs::man_pages::fsck(<Cli as clap::CommandFactory>::command())
    }) {
        return code;
    }
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let name = program_name();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { exit::USAGE } else { 0 });
        }
    };
    let mode = if cli.no {
        Mode::CheckOnly
    } else if cli.preen || cli.auto {
        Mode::Preen
    } else if cli.yes {
        Mode::All
    } else {
        Mode::Ask
    };
    // Without a terminal to ask on, only a check can be done (as e2fsck, which refuses).
    let no_terminal = mode == Mode::Ask && !std::io::stdin().is_terminal();
    let mode = if no_terminal { Mode::CheckOnly } else { mode };
    let code = run(&name, &cli, mode);
    if no_terminal && code != exit::CLEAN && code & exit::OPERATIONAL == 0 {
        eprintln!(
            "{name}: need a terminal for interactive repairs: nothing was repaired; give -p \
             (repair what is safe) or -y (repair everything)"
        );
        return ExitCode::from(exit::OPERATIONAL);
    }
    ExitCode::from(code)
}

fn run(name: &str, cli: &Cli, mode: Mode) -> u8 {
    let access = if mode == Mode::CheckOnly {
        Access::ReadOnly
    } else {
        Access::Repair
    };
    let pair = match open_pair(&cli.meta, cli.data.as_deref(), access) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{name}: {e}");
            return exit::OPERATIONAL;
        }
    };
    if let Some(warning) = &pair.warning {
        eprintln!("{name}: warning: {warning}");
    }
    let shown = cli.meta.display().to_string();
    // What a dead daemon acknowledged and only its intent log holds (docs/DESIGN.md,
    // "Surviving the daemon"): the devices are consistent without it, but a repair would
    // change what the next mount replays it onto.
    if let Some(pending) = pending_intent_log(&*pair.meta) {
        if mode == Mode::CheckOnly {
            eprintln!(
                "{name}: warning: {pending}; this check sees the devices without them (mount \
                 read-write to replay them)"
            );
        } else {
            eprintln!(
                "{name}: {shown}: {pending}: nothing was repaired; mount the file system \
                 read-write first (the mount replays them), then check it"
            );
            return exit::OPERATIONAL;
        }
    }

    // A clean file system needs no check unless forced.
    if !cli.force {
        match glance(&*pair.meta, &*pair.data) {
            Ok(Some(g)) if g.clean => {
                println!(
                    "{shown}: clean, {} inodes, {}/{} data blocks (checkpoint {})",
                    g.live_inodes,
                    g.data_blocks - g.free_data_blocks,
                    g.data_blocks,
                    g.checkpoint_serial
                );
                return exit::CLEAN;
            }
            Ok(Some(g)) => {
                if mode != Mode::Preen || cli.verbose {
                    if let Some(why) = &g.why_not {
                        println!("{shown}: {why}: checking");
                    }
                }
            }
            Ok(None) => {}
            Err(e) => {
                eprintln!("{name}: {shown}: {e}");
                return exit::OPERATIONAL;
            }
        }
    }
    if mode != Mode::Preen {
        println!(
            "{name} {}: checking {} (metadata) and {} (data)",
            env!("CARGO_PKG_VERSION"),
            pair.meta_path.display(),
            pair.data_path.display()
        );
    }
    let bar = progress::Bar::for_stderr(mode != Mode::Preen || cli.verbose);

    if mode == Mode::CheckOnly {
        let opts = Options {
            verbose: cli.verbose,
            progress: bar.callback(),
        };
        let report = match check_with(&*pair.meta, &*pair.data, &opts) {
            Ok(r) => r,
            Err(e) => {
                bar.finish();
                eprintln!("{name}: {shown}: the check failed: {e}");
                return exit::OPERATIONAL;
            }
        };
        bar.finish();
        print_report(&shown, &report, cli.verbose);
        return if report.is_clean() {
            exit::CLEAN
        } else {
            println!("\n{shown}: ********** WARNING: the file system still has errors **********");
            exit::UNCORRECTED
        };
    }

    let opts = RepairOptions {
        policy: match mode {
            Mode::All => Policy::all(),
            Mode::Preen => Policy::safe(),
            _ => Policy::none(),
        },
        interactive: mode == Mode::Ask,
        verbose: cli.verbose,
        progress: bar.callback(),
    };
    let mut ask = questions::Asker::new(&bar);
    let outcome = match repair(&pair.meta, &pair.data, &opts, &mut |q| ask.ask(q)) {
        Ok(o) => o,
        Err(e) => {
            bar.finish();
            eprintln!("{name}: {shown}: {e}");
            return exit::OPERATIONAL;
        }
    };
    bar.finish();
    report_repair(name, &shown, mode, cli.verbose, &outcome)
}

/// Print what a check found (problems, then the summary line).
fn print_report(shown: &str, r: &Report, verbose: bool) {
    if verbose {
        for n in &r.notes {
            println!("note: {n}");
        }
    }
    for p in &r.problems {
        let sev = match p.severity {
            dualfs::check::Severity::Error => "error",
            dualfs::check::Severity::Warning => "warning",
        };
        println!("{sev} [{}] {}", p.pass, p.message);
    }
    let s = &r.stats;
    println!(
        "{shown}: {} inodes ({} directories, {} files, {} symlinks, {} special, {} orphans), \
         {} entries, {} data blocks in use, {} live log blocks, {} tree nodes; {} errors, {} \
         warnings",
        s.inodes,
        s.directories,
        s.files,
        s.symlinks,
        s.special_files,
        s.orphans,
        s.entries,
        s.data_blocks_used,
        s.log_blocks_live,
        s.tree_nodes,
        r.errors().count(),
        r.warnings().count()
    );
}

const LISTED: usize = 50;

/// Records of operations a dead daemon acknowledged, left in its intent log in the default
/// directory (`intent=DIR` elsewhere is the mount's to know), said in a phrase.
fn pending_intent_log(meta: &dyn dualfs::device::BlockDevice) -> Option<String> {
    let sb = dualfs::fs::read_superblock(meta).ok()?;
    let base = std::path::Path::new(dualfs::intent::DEFAULT_INTENT_DIR);
    let dir = dualfs::intent::dir_for(base, &sb.uuid);
    let found = dualfs::intent::find(&dir, &sb.uuid).ok()?;
    let records = found.records().len();
    (records > 0).then(|| {
        format!(
            "the intent log {} of a daemon that died holds {records} records of operations it \
             acknowledged, some perhaps not in the log on the devices",
            dir.display()
        )
    })
}

fn report_repair(name: &str, shown: &str, mode: Mode, verbose: bool, o: &RepairOutcome) -> u8 {
    let preen = mode == Mode::Preen;
    if o.first.is_clean() {
        if preen {
            let s = &o.first.stats;
            println!(
                "{shown}: clean, {} inodes, {} data blocks in use",
                s.inodes, s.data_blocks_used
            );
            for w in o.first.warnings() {
                if verbose {
                    println!("{shown}: warning [{}] {}", w.pass, w.message);
                }
            }
        } else {
            print_report(shown, &o.first, verbose);
        }
        return exit::CLEAN;
    }
    if preen {
        // Preening prints one line per repair, prefixed with the device (as e2fsck -p).
        for d in o
            .done
            .iter()
            .take(if verbose { usize::MAX } else { LISTED })
        {
            println!("{shown}: {d}");
        }
        if o.done.len() > LISTED && !verbose {
            println!("{shown}: ... and {} more repairs", o.done.len() - LISTED);
        }
    } else {
        println!("Problems found:");
        for p in o.first.errors() {
            println!("  error [{}] {}", p.pass, p.message);
        }
        if !o.done.is_empty() {
            println!("Repairs made:");
            for d in o
                .done
                .iter()
                .take(if verbose { usize::MAX } else { LISTED })
            {
                println!("  {d}");
            }
            if o.done.len() > LISTED && !verbose {
                println!("  ... and {} more", o.done.len() - LISTED);
            }
        }
    }
    for f in &o.failed {
        println!("{shown}: repair failed: {f}");
    }
    if o.last.is_clean() {
        if preen {
            println!(
                "{shown}: {} problems repaired; the file system is clean",
                o.done.len()
            );
        } else {
            print_report(shown, &o.last, verbose);
            println!("\n{shown}: ***** FILE SYSTEM WAS MODIFIED *****");
        }
        exit::CORRECTED
    } else {
        if !preen {
            println!("After the repairs:");
        }
        for p in o.last.errors() {
            println!("{shown}: error [{}] {}", p.pass, p.message);
        }
        let mut classes: Vec<FixClass> = o.declined.iter().map(|(c, _)| *c).collect();
        classes.dedup();
        for c in &classes {
            println!(
                "{shown}: not repaired: {} (run with -y to allow it)",
                c.description()
            );
        }
        for u in &o.uncorrectable {
            println!("{shown}: cannot be repaired: {u}");
        }
        if preen && !classes.is_empty() {
            println!(
                "\n{shown}: UNEXPECTED INCONSISTENCY; RUN {name} MANUALLY (without -a or -p)."
            );
        } else {
            println!("\n{shown}: ********** WARNING: the file system still has errors **********");
        }
        if o.modified {
            println!("{shown}: ***** FILE SYSTEM WAS MODIFIED *****");
            exit::CORRECTED | exit::UNCORRECTED
        } else {
            exit::UNCORRECTED
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    /// Every option clap accepts has its entry in the page (and fsck.dualfs shows it too).
    #[test]
    fn the_manual_page_documents_every_option() {
        use clap::CommandFactory;
        let pages = dualfs::man_pages::fsck(Cli::command());
        dualfs::man_pages::verify(&pages).unwrap_or_else(|problems| panic!("{problems}"));
    }

    /// The page's EXIT STATUS lists exactly the codes fsck ends with (REBOOT is never one).
    #[test]
    fn the_manual_page_lists_every_exit_code() {
        let documented: Vec<&str> = dualfs::man_pages::FSCK_EXIT_STATUS
            .iter()
            .map(|(code, _)| *code)
            .collect();
        let codes = [
            exit::CLEAN,
            exit::CORRECTED,
            exit::UNCORRECTED,
            exit::OPERATIONAL,
            exit::USAGE,
        ];
        let codes: Vec<String> = codes.iter().map(u8::to_string).collect();
        assert_eq!(documented, codes);
    }

    #[test]
    fn modes_conflict_as_in_e2fsck() {
        let parse = |args: &[&str]| Cli::try_parse_from(["fsck-dualfs"].iter().chain(args));
        assert!(parse(&["-n", "m"]).is_ok());
        assert!(parse(&["-p", "-f", "-v", "m", "d"]).is_ok());
        assert!(parse(&["-a", "m"]).is_ok());
        assert!(parse(&["-y", "-C", "0", "m"]).is_ok());
        for bad in [
            &["-n", "-y", "m"][..],
            &["-p", "-y", "m"],
            &["-n", "-a", "m"],
            &[],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
