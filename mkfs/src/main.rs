//! mkfs-dualfs (also installed as mkfs.dualfs): make a DualFS on a metadata device and a data
//! device. Every check runs before anything is written, so a refusal leaves both untouched.

mod size;
mod target;

use clap::Parser;
use dualfs::device::{is_mounted, probe_existing, BlockDevice, FileDevice, OpenMode};
use dualfs::format::{MAX_BLOCK_SIZE, MIN_BLOCK_SIZE, MIN_SEGMENT_BLOCKS};
use dualfs::mkfs::{MkfsParams, MkfsReport};
use size::{human_size, parse_size};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use target::Target;

/// Longest data device path the metadata superblock can record (FORMAT.md, `sb_data_path`).
const DATA_PATH_MAX: usize = 1024;
/// Longest label (`sb_label`).
const LABEL_MAX: usize = 32;

#[derive(Parser)]
#[command(
    name = "mkfs-dualfs",
    version,
    about = "Make a DualFS file system: metadata in a log on META, file data on DATA",
    long_about = "Make a DualFS file system: metadata in a log on META, file data on DATA.\n\n\
        META and DATA are block devices or image files. An image file that does not exist is \
        created (sparse) at the size given with --size-meta / --size-data; an existing one is \
        used at its size, or extended to the size given.\n\n\
        Nothing is written when a check fails: a device too small, mounted or in use, already \
        holding a file system or partition table (unless --force), or both paths naming the \
        same storage.\n\n\
        SIZE values are whole numbers of bytes with an optional binary unit: 512K, 96M, 8G, 1T \
        (case-insensitive; KiB and KB mean the same)."
)]
struct Cli {
    /// Metadata device (holds the log): a block device or an image file
    #[arg(value_name = "META")]
    meta: PathBuf,

    /// Data device (holds file contents): a block device or an image file
    #[arg(value_name = "DATA")]
    data: PathBuf,

    /// Size of the metadata image file to create or extend to (not for block devices)
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    size_meta: Option<u64>,

    /// Size of the data image file to create or extend to (not for block devices)
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    size_data: Option<u64>,

    /// Block size of both devices: a power of two from 4096 to 65536
    #[arg(short = 'b', long, value_name = "SIZE", value_parser = parse_size, default_value = "4096")]
    block_size: u64,

    /// Log segment size: a multiple of the block size, at least 16 blocks
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "1M")]
    segment_size: u64,

    /// Data blocks per block group [default and maximum: 8 * (block size - 32)]
    #[arg(short = 'g', long, value_name = "N")]
    blocks_per_group: Option<u32>,

    /// Volume label, at most 32 bytes of UTF-8
    #[arg(
        short = 'L',
        long,
        value_name = "LABEL",
        default_value = "",
        hide_default_value = true
    )]
    label: String,

    /// Format over an existing file system or partition table, and allow shrinking images
    #[arg(short, long)]
    force: bool,

    /// Print nothing but errors
    #[arg(short, long)]
    quiet: bool,

    /// Check everything and print what would be done, but write nothing
    #[arg(short = 'n', long)]
    dry_run: bool,
}

/// Exit status of a bad command line (clap's, and that of every DualFS program but fsck,
/// which keeps e2fsck's 16). Every other failure is 1, as mkfs(8) has it.
const USAGE_ERROR: u8 = 2;

fn main() -> ExitCode {
    if let Some(code) = dualfs::man_pages::generate_if_asked(|| {
        dualfs::man_pages::mkfs(<Cli as clap::CommandFactory>::command())
    }) {
        return code;
    }
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(USAGE_ERROR)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let params = match parameters(&cli) {
        Ok(params) => params,
        Err(message) => {
            eprintln!("mkfs-dualfs: {message}");
            return ExitCode::from(USAGE_ERROR);
        }
    };
    match run(&cli, params) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("mkfs-dualfs: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli, mut params: MkfsParams) -> Result<(), String> {
    let meta = Target::inspect(
        "metadata",
        &cli.meta,
        "--size-meta",
        cli.size_meta,
        cli.force,
    )?;
    let data = Target::inspect("data", &cli.data, "--size-data", cli.size_data, cli.force)?;
    if meta.same_storage(&data) {
        return Err(format!(
            "{} and {} are the same {}; the metadata and data devices must be different",
            meta.path.display(),
            data.path.display(),
            meta.noun()
        ));
    }
    for target in [&meta, &data] {
        check_unused(target, cli)?;
    }
    check_sizes(&meta, &data, &params)?;

    params.data_path = data
        .absolute
        .to_str()
        .ok_or_else(|| format!("{} is not valid UTF-8", data.absolute.display()))?
        .to_string();
    if params.data_path.len() > DATA_PATH_MAX {
        return Err(format!(
            "the data device path {} is longer than {DATA_PATH_MAX} bytes, the most the \
             superblock can record",
            data.absolute.display()
        ));
    }

    if cli.dry_run {
        print_plan(&meta, &data, &params);
        return Ok(());
    }

    // On a failure, remove the images this run created (and only those).
    let mut prepared = Vec::new();
    let undo = |prepared: &[&Target]| prepared.iter().for_each(|t| t.undo_prepare());
    for target in [&meta, &data] {
        if let Err(e) = target.prepare() {
            undo(&prepared);
            return Err(e);
        }
        prepared.push(target);
    }
    let report = write_file_system(&meta, &data, &params).inspect_err(|_| undo(&prepared))?;
    if !cli.quiet {
        print_report(&meta, &data, &params, &report);
    }
    Ok(())
}

/// The file system parameters from the options, checked for shape (the core checks them
/// against the device sizes later).
fn parameters(cli: &Cli) -> Result<MkfsParams, String> {
    let block_size = u32::try_from(cli.block_size)
        .ok()
        .filter(|b| b.is_power_of_two() && (MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(b))
        .ok_or_else(|| {
            format!(
                "block size {} is not a power of two from {MIN_BLOCK_SIZE} to {MAX_BLOCK_SIZE}",
                cli.block_size
            )
        })?;
    if cli.segment_size % u64::from(block_size) != 0 {
        return Err(format!(
            "segment size {} is not a multiple of the block size {block_size}",
            cli.segment_size
        ));
    }
    let segment_blocks = u32::try_from(cli.segment_size / u64::from(block_size))
        .map_err(|_| format!("segment size {} is too large", human_size(cli.segment_size)))?;
    if segment_blocks < MIN_SEGMENT_BLOCKS {
        return Err(format!(
            "segment size {} is only {segment_blocks} blocks; a segment needs at least \
             {MIN_SEGMENT_BLOCKS} blocks ({} with {block_size}-byte blocks)",
            human_size(cli.segment_size),
            human_size(u64::from(MIN_SEGMENT_BLOCKS) * u64::from(block_size))
        ));
    }
    let max_per_group = 8 * (block_size - 32);
    let blocks_per_group = cli.blocks_per_group.unwrap_or(max_per_group);
    if !(1..=max_per_group).contains(&blocks_per_group) {
        return Err(format!(
            "{blocks_per_group} blocks per group is out of range: 1 to {max_per_group} with \
             {block_size}-byte blocks"
        ));
    }
    if cli.label.len() > LABEL_MAX {
        return Err(format!(
            "the label is {} bytes long; at most {LABEL_MAX} bytes fit",
            cli.label.len()
        ));
    }
    Ok(MkfsParams {
        block_size,
        segment_blocks,
        blocks_per_group,
        label: cli.label.clone(),
        data_path: String::new(),
        hash_seed: None,
    })
}

/// Refuse a device that is in use (never overridable), or that holds something already
/// (unless forced).
fn check_unused(target: &Target, cli: &Cli) -> Result<(), String> {
    if !target.exists() {
        return Ok(());
    }
    let shown = target.path.display();
    if let Some(in_use) = is_mounted(&target.path) {
        return Err(format!("{shown} is {in_use}; refusing to format it"));
    }
    // umount(2) returns before the daemon's final checkpoint: give it the moment it needs
    // (the open below is still exclusive, and fails if anything else holds the device).
    dualfs::daemon::unmounted::wait_until_released(
        &target.path,
        dualfs::daemon::unmounted::PATIENCE,
    )
    .map_err(|held| format!("{shown} is in use: {held}"))?;
    let device = FileDevice::open(&target.path, OpenMode::default()).map_err(|e| e.to_string())?;
    if let Some(found) = probe_existing(&device) {
        if !cli.force {
            return Err(format!(
                "{shown} already holds {found}; use --force to format over it"
            ));
        }
        if !cli.quiet {
            eprintln!("mkfs-dualfs: warning: {shown} holds {found}; overwriting it (--force)");
        }
    }
    Ok(())
}

fn check_sizes(meta: &Target, data: &Target, params: &MkfsParams) -> Result<(), String> {
    let (min_meta, min_data) = dualfs::mkfs::minimum_sizes(params);
    for (target, minimum) in [(meta, min_meta), (data, min_data)] {
        if target.size < minimum {
            return Err(format!(
                "{} is too small for a {} device: {} ({} bytes), and at least {} ({} bytes) \
                 is needed with these options",
                target.path.display(),
                target.role,
                human_size(target.size),
                target.size,
                human_size(minimum),
                minimum
            ));
        }
    }
    dualfs::mkfs::validate(params, meta.size, data.size)
}

/// Open both devices exclusively and write the file system.
fn write_file_system(
    meta: &Target,
    data: &Target,
    params: &MkfsParams,
) -> Result<MkfsReport, String> {
    let exclusive = OpenMode {
        read_only: false,
        exclusive: true,
        ..OpenMode::default()
    };
    let meta_device: Arc<dyn BlockDevice> =
        Arc::new(FileDevice::open(&meta.path, exclusive).map_err(|e| e.to_string())?);
    let data_device: Arc<dyn BlockDevice> =
        Arc::new(FileDevice::open(&data.path, exclusive).map_err(|e| e.to_string())?);
    let report = dualfs::mkfs::mkfs(meta_device.clone(), data_device.clone(), params)
        .map_err(|e| format!("formatting failed: {e}"))?;
    for device in [&meta_device, &data_device] {
        device.flush().map_err(|e| e.to_string())?;
    }
    Ok(report)
}

fn print_plan(meta: &Target, data: &Target, params: &MkfsParams) {
    println!("Dry run: nothing is written. mkfs-dualfs would:");
    for target in [meta, data] {
        if let Some(step) = target.describe_preparation() {
            println!("  {step}");
        }
    }
    println!("  format a DualFS with:");
    for target in [meta, data] {
        println!(
            "    {:<9} {}, {}",
            target.role,
            target.absolute.display(),
            human_size(target.size)
        );
    }
    println!("    {}", describe_parameters(params));
}

fn print_report(meta: &Target, data: &Target, params: &MkfsParams, report: &MkfsReport) {
    let block = u64::from(report.block_size);
    println!("Made a DualFS, UUID {}", report.uuid);
    println!(
        "  metadata  {}: {} in {} blocks, {} log segments of {}",
        meta.absolute.display(),
        human_size(report.meta_blocks * block),
        report.meta_blocks,
        report.segments,
        human_size(u64::from(params.segment_blocks) * block)
    );
    println!(
        "  data      {}: {} in {} blocks, {} groups of up to {} blocks",
        data.absolute.display(),
        human_size(report.data_blocks * block),
        report.data_blocks,
        report.groups,
        params.blocks_per_group
    );
    println!("  {}", describe_parameters(params));
}

fn describe_parameters(params: &MkfsParams) -> String {
    let block = u64::from(params.block_size);
    let mut text = format!(
        "block size {}, segments of {} ({} blocks), {} blocks per group",
        params.block_size,
        human_size(u64::from(params.segment_blocks) * block),
        params.segment_blocks,
        params.blocks_per_group
    );
    if !params.label.is_empty() {
        text += &format!(", label \"{}\"", params.label);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    /// Every option clap accepts has its entry in the page (and mkfs.dualfs shows it too).
    #[test]
    fn the_manual_page_documents_every_option() {
        use clap::CommandFactory;
        let pages = dualfs::man_pages::mkfs(Cli::command());
        dualfs::man_pages::verify(&pages).unwrap_or_else(|problems| panic!("{problems}"));
    }

    fn params_from(args: &[&str]) -> Result<MkfsParams, String> {
        let cli = Cli::try_parse_from(["mkfs-dualfs", "m", "d"].iter().chain(args))
            .map_err(|e| e.to_string())?;
        parameters(&cli)
    }

    #[test]
    fn defaults() {
        let p = params_from(&[]).unwrap();
        assert_eq!(
            (p.block_size, p.segment_blocks, p.blocks_per_group),
            (4096, 256, 32512)
        );
        assert_eq!(p.label, "");
    }

    #[test]
    fn block_sizes() {
        assert_eq!(params_from(&["-b", "64K"]).unwrap().block_size, 65536);
        assert_eq!(params_from(&["-b", "8192"]).unwrap().segment_blocks, 128);
        assert_eq!(
            params_from(&["-b", "8192"]).unwrap().blocks_per_group,
            8 * (8192 - 32)
        );
        for bad in ["2048", "6144", "128K", "1T"] {
            assert!(params_from(&["-b", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn segment_sizes() {
        assert_eq!(
            params_from(&["--segment-size", "64K"])
                .unwrap()
                .segment_blocks,
            16
        );
        assert!(params_from(&["--segment-size", "60K"]).is_err());
        assert!(params_from(&["--segment-size", "6000"]).is_err());
        assert!(params_from(&["-b", "64K", "--segment-size", "512K"]).is_err());
    }

    #[test]
    fn groups_and_labels() {
        assert_eq!(params_from(&["-g", "1000"]).unwrap().blocks_per_group, 1000);
        assert!(params_from(&["-g", "0"]).is_err());
        assert!(params_from(&["-g", "32513"]).is_err());
        assert_eq!(
            params_from(&["-L", "x".repeat(32).as_str()])
                .unwrap()
                .label
                .len(),
            32
        );
        assert!(params_from(&["-L", "x".repeat(33).as_str()]).is_err());
        // Eleven three-byte characters: 33 bytes.
        assert!(params_from(&["-L", "€".repeat(11).as_str()]).is_err());
    }
}
