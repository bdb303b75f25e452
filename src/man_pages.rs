//! The manual pages of the DualFS programs (section 8), made with clap_mangen from each
//! program's own clap definition, so that no option can be added without reaching its page.
//! What clap does not hold (exit status, mount options, what DualFS does not do, see also) is
//! written here, once, and put on every page that shows it.
//!
//! Each program answers `PROGRAM --generate-man-pages DIR` ([`GENERATE_OPTION`]) by writing
//! its pages into DIR; scripts/up.sh installs them. The option is looked for before clap reads
//! the command line, so neither `--help` nor a page shows it.

use clap::Command;
use clap_mangen::roff::{bold, roman, Roff};
use clap_mangen::Man;
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};

/// The manual section of every page: system administration commands.
pub const SECTION: &str = "8";

/// `PROGRAM --generate-man-pages DIR` writes the program's pages into DIR.
pub const GENERATE_OPTION: &str = "--generate-man-pages";

/// A mount option as `--help` and the pages list it: its spellings ("ro, rw",
/// "cache_size=SIZE") and what it does.
pub type MountOptionDoc = (&'static str, &'static str);

/// What an exit status means, by status.
type ExitStatusDoc = (&'static str, &'static str);

/// `dualfs` and its subcommands.
const DUALFS_EXIT_STATUS: &[ExitStatusDoc] = &[
    ("0", "Done."),
    ("1", "Failed; one line on standard error says why."),
    (
        "2",
        "Bad command line: an unknown option or subcommand, a missing or malformed argument.",
    ),
];

/// `dualfs mount` and the mount(8) helper.
const MOUNT_EXIT_STATUS: &[ExitStatusDoc] = &[
    (
        "0",
        "Mounted: the daemon serves the file system on. With --foreground, the daemon ended \
         cleanly after its final checkpoint.",
    ),
    (
        "1",
        "The mount failed, and nothing was written to the devices; one line on standard error \
         says why. A daemon whose connection the kernel aborted also ends with 1, after \
         writing its final checkpoint.",
    ),
    (
        "2",
        "Bad command line, or an unknown or malformed mount option.",
    ),
];

const MKFS_EXIT_STATUS: &[ExitStatusDoc] = &[
    (
        "0",
        "The file system was made (with --dry-run: everything was checked, nothing written).",
    ),
    (
        "1",
        "Refused or failed; one line on standard error says why. A refusal (a device too \
         small, mounted, in use or holding a file system) writes nothing.",
    ),
    (
        "2",
        "Bad command line, or a block size, segment size, group size or label out of range.",
    ),
];

/// e2fsck's codes, so that fsck(8) and boot scripts read them right.
pub const FSCK_EXIT_STATUS: &[ExitStatusDoc] = &[
    ("0", "No errors."),
    ("1", "Errors were found and corrected."),
    (
        "4",
        "Errors were left uncorrected: with -n every error found, with -p those whose repair \
         gives something up, and whatever cannot be repaired.",
    ),
    (
        "8",
        "Operational error: a device cannot be opened or is in use, or the check failed; also \
         errors found without -n, -p or -y and without a terminal to ask on.",
    ),
    ("16", "Usage error."),
];

const CLEANER_EXIT_STATUS: &[ExitStatusDoc] = &[
    (
        "0",
        "Done: the pass, status or stop asked for, or the daemon ended because the mount went \
         away.",
    ),
    (
        "1",
        "Failed; one line on standard error (and in the log file) says why.",
    ),
    ("2", "Bad command line."),
];

/// README.md, whose "What DualFS does not do, and why" is the pages' section of that name:
/// one text, read where it is written.
const README: &str = include_str!("../README.md");

/// README's list of what DualFS does not do, each item as (lead, rest): the lead is the
/// item's bold part, and markdown (bold, code, links) is reduced to plain text.
fn not_done_items() -> Vec<(String, String)> {
    let start = README
        .find("\n## What DualFS does not do, and why\n")
        .expect("README.md has its section on what DualFS does not do");
    let body = &README[start + 1..];
    let body = &body[body.find('\n').map_or(0, |n| n + 1)..];
    let end = body.find("\n#").unwrap_or(body.len());
    let mut items: Vec<String> = Vec::new();
    for line in body[..end].lines() {
        if let Some(item) = line.strip_prefix("- ") {
            items.push(item.to_string());
        } else if let (Some(last), true) = (items.last_mut(), line.starts_with("  ")) {
            last.push(' ');
            last.push_str(line.trim());
        }
    }
    items
        .iter()
        .map(|item| {
            let (lead, rest) = match item.strip_prefix("**").and_then(|r| r.split_once("**")) {
                Some((lead, rest)) => (lead, rest),
                None => ("", item.as_str()),
            };
            (plain_text(lead), plain_text(rest.trim_start()))
        })
        .collect()
}

/// Markdown's inline marks taken away: `**bold**`, `` `code` ``, `[text](target)`.
fn plain_text(md: &str) -> String {
    let mut out = String::with_capacity(md.len());
    let mut rest = md;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after
            .split_once("](")
            .and_then(|(text, tail)| tail.find(')').map(|close| (text, &tail[close + 1..])))
        {
            Some((text, tail)) => {
                out.push_str(text);
                rest = tail;
            }
            None => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out.replace("**", "").replace('`', "")
}

const MOUNT_OPTIONS_INTRO: &str = "Given with -o OPT[,OPT...], which may be repeated; later \
    options win (-o ro -o rw mounts read-write). An unknown option is refused, unless \
    mount(8) runs the helper with -s (sloppy). SIZE is a number of bytes with an optional \
    binary unit (K, M, G, T); SECONDS may have decimals.";

const MOUNT_TYPES_INTRO: &str = "Both type spellings work, with mount(8), mount -a and at \
    boot: type dualfs runs the helper /sbin/mount.dualfs; type fuse.dualfs runs \
    mount.fuse3, which runs dualfs META MOUNTPOINT -o OPTIONS (the same as dualfs mount).";

const MOUNT_TYPES_EXAMPLE: &[&str] = &[
    "mount -t dualfs /var/lib/dualfs/meta.img /mnt/dualfs",
    "mount -t fuse.dualfs /var/lib/dualfs/meta.img /mnt/dualfs -o ro",
    "",
    "# /etc/fstab",
    "/var/lib/dualfs/meta.img  /mnt/dualfs  dualfs       defaults,nofail  0 0",
    "/srv/b/meta.img           /srv/b/mnt   fuse.dualfs  defaults,noauto  0 0",
];

const MOUNT_TYPES_AFTER: &str = "The kernel type is fuse.dualfs and the source is META, as \
    /proc/mounts and findmnt(8) show. The data device is the one recorded in META by \
    mkfs-dualfs (dualfs tune --data changes it). Run by root, mount.fuse3 adds dev,suid, as \
    for every FUSE file system it mounts.";

/// One part of a section.
enum Block {
    Paragraph(&'static str),
    /// Tagged paragraphs: a term in bold, then what it means.
    Terms(&'static [(&'static str, &'static str)]),
    /// Bulleted paragraphs, each a lead in bold and the rest.
    Bullets(Vec<(String, String)>),
    /// Lines shown as they are (examples).
    Verbatim(&'static [&'static str]),
}

/// A section the clap definition does not hold.
struct Section {
    heading: &'static str,
    blocks: Vec<Block>,
}

impl Section {
    fn exit_status(codes: &'static [ExitStatusDoc]) -> Section {
        Section {
            heading: "EXIT STATUS",
            blocks: vec![Block::Terms(codes)],
        }
    }

    /// Codes that add up when several apply, as e2fsck's.
    fn summed_exit_status(codes: &'static [ExitStatusDoc]) -> Section {
        Section {
            heading: "EXIT STATUS",
            blocks: vec![
                Block::Paragraph("The exit status is the sum of these (as e2fsck's):"),
                Block::Terms(codes),
            ],
        }
    }

    fn mount_options(options: &'static [MountOptionDoc]) -> Section {
        Section {
            heading: "MOUNT OPTIONS",
            blocks: vec![Block::Paragraph(MOUNT_OPTIONS_INTRO), Block::Terms(options)],
        }
    }

    fn mount_types() -> Section {
        Section {
            heading: "MOUNT(8) AND FSTAB",
            blocks: vec![
                Block::Paragraph(MOUNT_TYPES_INTRO),
                Block::Verbatim(MOUNT_TYPES_EXAMPLE),
                Block::Paragraph(MOUNT_TYPES_AFTER),
            ],
        }
    }

    fn not_done() -> Section {
        Section {
            heading: "WHAT DUALFS DOES NOT DO",
            blocks: vec![Block::Bullets(not_done_items())],
        }
    }

    fn render(&self, roff: &mut Roff) {
        roff.control("SH", [self.heading]);
        for block in &self.blocks {
            match block {
                Block::Paragraph(text) => {
                    roff.control("PP", []).text([roman(*text)]);
                }
                Block::Terms(terms) => {
                    for (term, meaning) in *terms {
                        roff.control("TP", [])
                            .text([bold(*term)])
                            .text([roman(*meaning)]);
                    }
                }
                Block::Bullets(items) => {
                    for (lead, rest) in items {
                        roff.control("IP", ["\\(bu", "2"])
                            .text([bold(lead.as_str()), roman(format!(" {rest}"))]);
                    }
                }
                Block::Verbatim(lines) => {
                    roff.control("PP", [])
                        .control("RS", ["4"])
                        .control("nf", []);
                    for line in *lines {
                        roff.text([roman(*line)]);
                    }
                    roff.control("fi", []).control("RE", []);
                }
            }
        }
    }
}

/// One manual page: a program's (or a subcommand's) clap command and what clap does not hold.
pub struct Page {
    /// Built (clap's `Command::build`), so a subcommand knows its full name.
    command: Command,
    /// Other names the program is installed as: each gets a page that includes this one.
    aliases: &'static [&'static str],
    /// The heading the command's `after_help` goes under; `None` when a section of the page
    /// says the same (the mount options).
    after_help_heading: Option<&'static str>,
    sections: Vec<Section>,
    /// Mount options the page lists, for [`verify`].
    mount_options: &'static [MountOptionDoc],
    see_also: &'static [&'static str],
}

impl Page {
    fn new(mut command: Command, see_also: &'static [&'static str]) -> Page {
        command.build();
        Page {
            command,
            aliases: &[],
            after_help_heading: Some("NOTES"),
            sections: Vec::new(),
            mount_options: &[],
            see_also,
        }
    }

    fn with_mount_options(mut self, options: &'static [MountOptionDoc]) -> Page {
        self.sections.push(Section::mount_options(options));
        self.mount_options = options;
        // The command's after_help is the same list, laid out for a terminal.
        self.after_help_heading = None;
        self
    }

    fn with(mut self, section: Section) -> Page {
        self.sections.push(section);
        self
    }

    /// The page's name: the program's, or `dualfs-mount` for a subcommand.
    pub fn name(&self) -> &str {
        self.command
            .get_display_name()
            .unwrap_or_else(|| self.command.get_name())
    }

    pub fn file_name(&self) -> String {
        format!("{}.{SECTION}", self.name())
    }

    /// The page in roff: NAME, SYNOPSIS, DESCRIPTION, OPTIONS and SUBCOMMANDS as clap_mangen
    /// makes them from the command, then the sections of this module and SEE ALSO.
    pub fn render(&self) -> io::Result<Vec<u8>> {
        let man = Man::new(self.command.clone())
            .title(self.name().to_uppercase())
            .section(SECTION)
            // No date, so that a page changes only with its text. roff writes arguments as
            // given: an empty one must be quoted to keep its place in `.TH`.
            .date("\"\"")
            .source(format!("DualFS {}", env!("CARGO_PKG_VERSION")))
            .manual("System Administration");
        // NAME is this module's, to list the aliases beside the program's name.
        let mut name = Roff::new();
        name.control("SH", ["NAME"]);
        let about = self
            .command
            .get_about()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let names: Vec<&str> = std::iter::once(self.name())
            .chain(self.aliases.iter().copied())
            .collect();
        name.text([roman(format!("{} - {about}", names.join(", ")))]);
        let mut parts = vec![render_with(|w| man.render_title(w))?, roff_bytes(&name)?];
        parts.push(render_with(|w| man.render_synopsis_section(w))?);
        parts.push(render_with(|w| man.render_description_section(w))?);
        if self.command.get_arguments().any(|a| !a.is_hide_set()) {
            parts.push(render_with(|w| man.render_options_section(w))?);
        }
        if self.command.get_subcommands().any(|c| !c.is_hide_set()) {
            parts.push(render_with(|w| man.render_subcommands_section(w))?);
        }
        let mut rest = Roff::new();
        let after_help = self
            .command
            .get_after_long_help()
            .or_else(|| self.command.get_after_help());
        if let (Some(heading), Some(text)) = (self.after_help_heading, after_help) {
            rest.control("SH", [heading]);
            for line in text.to_string().lines().filter(|l| !l.trim().is_empty()) {
                rest.control("PP", []).text([roman(line)]);
            }
        }
        for section in &self.sections {
            section.render(&mut rest);
        }
        rest.control("SH", ["SEE ALSO"])
            .text([roman(self.see_also.join(", "))]);
        parts.push(roff_bytes(&rest)?);
        // Every part opens with roff's preamble (a string definition); keep the first only.
        let preamble = roff_bytes(&Roff::new())?;
        let mut page = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            match part.strip_prefix(preamble.as_slice()) {
                Some(rest) if i > 0 => page.extend_from_slice(rest),
                _ => page.extend_from_slice(part),
            }
        }
        Ok(page)
    }

    /// Every file of the page: its own, and one per alias that includes it (as man-db and
    /// Debian's packages make them).
    pub fn files(&self) -> io::Result<Vec<(String, Vec<u8>)>> {
        let mut files = vec![(self.file_name(), self.render()?)];
        for alias in self.aliases {
            let include = format!(".so man{SECTION}/{}\n", self.file_name());
            files.push((format!("{alias}.{SECTION}"), include.into_bytes()));
        }
        Ok(files)
    }
}

fn render_with(render: impl FnOnce(&mut dyn io::Write) -> io::Result<()>) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    render(&mut out)?;
    Ok(out)
}

fn roff_bytes(roff: &Roff) -> io::Result<Vec<u8>> {
    render_with(|w| roff.to_writer(w))
}

/// The pages of `dualfs` (`cli`), one per subcommand (`dualfs-mount`, ...), the mount(8)
/// helper's (`helper`, installed as mount.dualfs), with `mount_options` on every page about
/// mounting, and the umount(8) helper's (`umount_helper`, installed as umount.fuse.dualfs).
pub fn dualfs(
    cli: Command,
    helper: Command,
    umount_helper: Command,
    mount_options: &'static [MountOptionDoc],
) -> Vec<Page> {
    // A page per subcommand, as clap_mangen's SUBCOMMANDS section refers to them (so SEE
    // ALSO need not); no `help`.
    let top = Page::new(
        cli.disable_help_subcommand(true),
        &[
            "mount.dualfs(8)",
            "mkfs-dualfs(8)",
            "fsck-dualfs(8)",
            "dualfs-cleaner(8)",
            "mount(8)",
            "fstab(5)",
            "fuse(8)",
        ],
    );
    let subcommands: Vec<Command> = top
        .command
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .cloned()
        .collect();
    let mut pages = vec![top
        .with_mount_options(mount_options)
        .with(Section::mount_types())
        .with(Section::exit_status(DUALFS_EXIT_STATUS))
        .with(Section::not_done())];
    for sub in subcommands {
        let is_mount = sub.get_name() == "mount";
        let see_also: &[&str] = if is_mount {
            &[
                "dualfs(8)",
                "mount.dualfs(8)",
                "dualfs-umount(8)",
                "fuse(8)",
            ]
        } else {
            &["dualfs(8)"]
        };
        let page = Page::new(sub, see_also);
        pages.push(if is_mount {
            page.with_mount_options(mount_options)
                .with(Section::exit_status(MOUNT_EXIT_STATUS))
        } else {
            page.with(Section::exit_status(DUALFS_EXIT_STATUS))
        });
    }
    pages.push(
        Page::new(
            helper,
            &[
                "dualfs(8)",
                "dualfs-mount(8)",
                "mount(8)",
                "fstab(5)",
                "fuse(8)",
            ],
        )
        .with_mount_options(mount_options)
        .with(Section::mount_types())
        .with(Section::exit_status(MOUNT_EXIT_STATUS)),
    );
    pages.push(
        Page::new(
            umount_helper,
            &["dualfs-umount(8)", "umount(8)", "mount.dualfs(8)"],
        )
        .with(Section::exit_status(DUALFS_EXIT_STATUS)),
    );
    pages
}

/// mkfs-dualfs's page, also installed as mkfs.dualfs (for `mkfs -t dualfs`).
pub fn mkfs(cli: Command) -> Vec<Page> {
    let mut page = Page::new(cli, &["dualfs(8)", "fsck-dualfs(8)", "mkfs(8)"])
        .with(Section::exit_status(MKFS_EXIT_STATUS));
    page.aliases = &["mkfs.dualfs"];
    vec![page]
}

/// fsck-dualfs's page, also installed as fsck.dualfs (for `fsck -t dualfs`).
pub fn fsck(cli: Command) -> Vec<Page> {
    let mut page = Page::new(
        cli,
        &["dualfs(8)", "mkfs-dualfs(8)", "fsck(8)", "e2fsck(8)"],
    )
    .with(Section::summed_exit_status(FSCK_EXIT_STATUS));
    page.aliases = &["fsck.dualfs"];
    page.after_help_heading = Some("REPAIRS");
    vec![page]
}

/// dualfs-cleaner's page.
pub fn cleaner(cli: Command) -> Vec<Page> {
    vec![Page::new(cli, &["dualfs(8)", "dualfs-mount(8)"])
        .with(Section::exit_status(CLEANER_EXIT_STATUS))]
}

/// Write every file of `pages` into `dir` (made if missing); returns their paths.
pub fn write_pages(pages: &[Page], dir: &Path) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for page in pages {
        for (name, contents) in page.files()? {
            let path = dir.join(name);
            std::fs::write(&path, contents)?;
            written.push(path);
        }
    }
    Ok(written)
}

/// If the program was run as `PROGRAM --generate-man-pages DIR`, write its pages (made by
/// `pages`) into DIR and return the exit status to end with; else `None`.
pub fn generate_if_asked(pages: impl FnOnce() -> Vec<Page>) -> Option<ExitCode> {
    answer(std::env::args_os().collect(), pages)
}

fn answer(args: Vec<OsString>, pages: impl FnOnce() -> Vec<Page>) -> Option<ExitCode> {
    if args.get(1).map(OsString::as_os_str) != Some(OsStr::new(GENERATE_OPTION)) {
        return None;
    }
    let program = args
        .first()
        .and_then(|a| Path::new(a).file_name())
        .map_or_else(|| "dualfs".into(), |n| n.to_string_lossy().into_owned());
    let [_, _, dir] = args.as_slice() else {
        eprintln!("{program}: usage: {program} {GENERATE_OPTION} DIR");
        return Some(ExitCode::from(2));
    };
    match write_pages(&pages(), Path::new(dir)) {
        Ok(_) => Some(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!(
                "{program}: cannot write the manual pages into {}: {e}",
                Path::new(dir).display()
            );
            Some(ExitCode::from(1))
        }
    }
}

/// What every program's tests require of its pages, checked against the program's own clap
/// definitions: each page (and each alias) formats with man(1) without a warning; it has the
/// sections NAME, SYNOPSIS, DESCRIPTION, EXIT STATUS and SEE ALSO; every argument clap
/// accepts, but hidden ones, has help text and an entry under OPTIONS; every subcommand has
/// a page; every mount option the page is given is listed. Needs man-db's `man`. Returns
/// every problem found, one a line.
pub fn verify(pages: &[Page]) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!(
        "dualfs-man-pages-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let man_dir = dir.join(format!("man{SECTION}"));
    let result = write_pages(pages, &man_dir)
        .map_err(|e| format!("writing the pages into {}: {e}", man_dir.display()))
        .and_then(|_| verify_written(pages, &dir));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn verify_written(pages: &[Page], dir: &Path) -> Result<(), String> {
    let names: Vec<&str> = pages.iter().map(Page::name).collect();
    let mut problems = Vec::new();
    for page in pages {
        let name = page.name();
        let text = match formatted(dir, &page.file_name()) {
            Ok(text) => text,
            Err(e) => {
                problems.push(format!("{name}: {e}"));
                continue;
            }
        };
        for alias in page.aliases {
            match formatted(dir, &format!("{alias}.{SECTION}")) {
                Ok(alias_text) if alias_text == text => {}
                Ok(_) => problems.push(format!("{alias}: does not show the page of {name}")),
                Err(e) => problems.push(format!("{alias}: {e}")),
            }
        }
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for heading in ["NAME", "SYNOPSIS", "DESCRIPTION", "EXIT STATUS", "SEE ALSO"] {
            if !text.lines().any(|l| l == heading) {
                problems.push(format!("{name}: no {heading} section"));
            }
        }
        for arg in page.command.get_arguments().filter(|a| !a.is_hide_set()) {
            let entry = option_entry(arg);
            if arg.get_help().or_else(|| arg.get_long_help()).is_none() {
                problems.push(format!("{name}: {entry} has no help text"));
            }
            if !lines.iter().any(|l| l.starts_with(&entry)) {
                problems.push(format!("{name}: {entry} is not listed"));
            }
        }
        for sub in page.command.get_subcommands().filter(|c| !c.is_hide_set()) {
            let sub_page = format!("{name}-{}", sub.get_name());
            if !names.contains(&sub_page.as_str()) {
                problems.push(format!("{name}: no page for the subcommand {sub_page}"));
            }
        }
        let listed = section_text(&text, "MOUNT OPTIONS");
        for (spellings, _) in page.mount_options {
            for option in spellings.split(", ") {
                if !listed.split([' ', ',', '\n']).any(|word| word == option) {
                    problems.push(format!("{name}: the mount option {option} is not listed"));
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// The text of a section of a formatted page, from its heading to the next one.
fn section_text(text: &str, heading: &str) -> String {
    text.lines()
        .skip_while(|line| *line != heading)
        .skip(1)
        .take_while(|line| line.is_empty() || line.starts_with(' '))
        .collect::<Vec<_>>()
        .join("\n")
}

/// How an argument's entry under OPTIONS begins: `-b, --block-size`, `-n`, `--json`,
/// `<META>`, `[DATA]`.
fn option_entry(arg: &clap::Arg) -> String {
    if arg.is_positional() {
        let value = arg
            .get_value_names()
            .map(|v| v.join(" "))
            .unwrap_or_else(|| arg.get_id().to_string());
        return if arg.is_required_set() {
            format!("<{value}>")
        } else {
            format!("[{value}]")
        };
    }
    match (arg.get_short(), arg.get_long()) {
        (Some(short), Some(long)) => format!("-{short}, --{long}"),
        (Some(short), None) => format!("-{short}"),
        (None, Some(long)) => format!("--{long}"),
        (None, None) => arg.get_id().to_string(),
    }
}

/// A page file of `dir/man8` formatted by man(1) as plain text (no hyphenation, no
/// justification, so every name stays whole); groff's warnings are errors.
fn formatted(dir: &Path, file_name: &str) -> Result<String, String> {
    let output = std::process::Command::new("man")
        .args(["--warnings", "--nh", "--nj", "-E", "UTF-8", "-l"])
        .arg(Path::new(&format!("man{SECTION}")).join(file_name))
        // `.so man8/NAME.8` is found from here.
        .current_dir(dir)
        .env("MANWIDTH", "100")
        .env("MAN_KEEP_FORMATTING", "")
        .env_remove("MANPAGER")
        .env_remove("PAGER")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run man (man-db): {e}"))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() || !stderr.trim().is_empty() {
        return Err(format!(
            "man -l failed ({}): {}",
            output.status,
            stderr.trim()
        ));
    }
    // Dashes may come out as Unicode hyphens or minus signs: compare ASCII.
    Ok(String::from_utf8_lossy(&output.stdout).replace(['\u{2010}', '\u{2212}'], "-"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, ArgAction};

    #[test]
    fn what_dualfs_does_not_do_is_readmes_list_in_plain_text() {
        let items = not_done_items();
        let readme_items = README
            .split("\n## What DualFS does not do, and why\n")
            .nth(1)
            .and_then(|s| s.split("\n#").next())
            .map(|s| s.lines().filter(|l| l.starts_with("- ")).count());
        assert_eq!(Some(items.len()), readme_items);
        assert!(items.len() >= 5);
        for (lead, rest) in &items {
            assert!(!lead.is_empty() && !rest.is_empty(), "{lead:?} {rest:?}");
            for mark in ["**", "`", "](", "\n"] {
                assert!(
                    !lead.contains(mark) && !rest.contains(mark),
                    "{mark} in {lead}{rest}"
                );
            }
        }
        assert_eq!(plain_text("**a** `b` [c](#d), [e] (f)"), "a b c, [e] (f)");
    }

    fn toy() -> Command {
        Command::new("toy")
            .version("1")
            .about("A program for the tests")
            .arg(
                Arg::new("meta")
                    .value_name("META")
                    .required(true)
                    .help("The metadata device"),
            )
            .arg(
                Arg::new("json")
                    .long("json")
                    .action(ArgAction::SetTrue)
                    .help("Print JSON"),
            )
            .arg(
                Arg::new("secret")
                    .long("secret")
                    .hide(true)
                    .action(ArgAction::SetTrue),
            )
    }

    fn text_of(page: &Page) -> String {
        String::from_utf8(page.render().unwrap()).unwrap()
    }

    #[test]
    fn a_documented_program_passes() {
        verify(&cleaner(toy())).unwrap();
        verify(&fsck(toy().after_help("First.\nSecond."))).unwrap();
    }

    #[test]
    fn an_option_without_help_fails() {
        let undocumented = toy().arg(Arg::new("quiet").short('q').action(ArgAction::SetTrue));
        let problems = verify(&mkfs(undocumented)).unwrap_err();
        assert!(problems.contains("toy: -q has no help text"), "{problems}");
    }

    #[test]
    fn sections_come_in_order_and_hidden_options_stay_hidden() {
        let page = &fsck(toy().after_help("Repairs."))[0];
        let text = text_of(page);
        let order: Vec<usize> = [
            ".SH NAME",
            ".SH SYNOPSIS",
            ".SH OPTIONS",
            ".SH REPAIRS",
            ".SH \"EXIT STATUS\"",
            ".SH \"SEE ALSO\"",
        ]
        .iter()
        .map(|h| {
            text.find(h)
                .unwrap_or_else(|| panic!("{h} missing:\n{text}"))
        })
        .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{text}");
        assert!(text.contains("toy, fsck.dualfs \\- A program for the tests"));
        assert!(!text.contains("secret"));
        assert_eq!(text.matches(".ds Aq").count(), 2, "one preamble (.ie/.el)");
    }

    #[test]
    fn mount_pages_list_the_options_they_are_given() {
        const OPTIONS: &[MountOptionDoc] = &[("ro, rw", "read-only or read-write")];
        let helper = Command::new("mount.dualfs").about("The helper");
        let cli = Command::new("dualfs")
            .about("DualFS")
            .subcommand(Command::new("mount").about("Mount"))
            .subcommand(Command::new("info").about("Show"));
        let umount_helper = Command::new("umount.fuse.dualfs").about("The other helper");
        let pages = dualfs(cli, helper, umount_helper, OPTIONS);
        let names: Vec<&str> = pages.iter().map(Page::name).collect();
        assert_eq!(
            names,
            [
                "dualfs",
                "dualfs-mount",
                "dualfs-info",
                "mount.dualfs",
                "umount.fuse.dualfs"
            ]
        );
        for page in &pages {
            let lists = text_of(page).contains("MOUNT OPTIONS");
            let lists_them = !matches!(page.name(), "dualfs-info" | "umount.fuse.dualfs");
            assert_eq!(lists, lists_them, "{}", page.name());
        }
        verify(&pages).unwrap();
    }

    #[test]
    fn the_hidden_option_writes_the_pages() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("man8");
        let args = |list: &[&OsStr]| list.iter().map(OsString::from).collect::<Vec<_>>();
        let program = OsStr::new("/usr/sbin/fsck-dualfs");
        let option = OsStr::new(GENERATE_OPTION);
        assert!(answer(args(&[program, OsStr::new("/m")]), || fsck(toy())).is_none());
        assert!(answer(args(&[program]), || fsck(toy())).is_none());
        assert_eq!(
            answer(args(&[program, option]), || fsck(toy())),
            Some(ExitCode::from(2))
        );
        assert_eq!(
            answer(args(&[program, option, out.as_os_str()]), || fsck(toy())),
            Some(ExitCode::SUCCESS)
        );
        assert!(out.join("toy.8").is_file());
        assert_eq!(
            std::fs::read_to_string(out.join("fsck.dualfs.8")).unwrap(),
            ".so man8/toy.8\n"
        );
        let blocked = out.join("toy.8").join("below-a-file");
        assert_eq!(
            answer(
                args(&[program, option, blocked.as_os_str()]),
                || fsck(toy())
            ),
            Some(ExitCode::from(1))
        );
    }
}
