//! INIT negotiation: what DualFS asks of the kernel, and what the kernel grants.

use super::abi::{self, init_flags as f, InitIn, InitOut};

/// What the file system asks for at INIT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitConfig {
    /// INIT flags wanted; those the kernel does not offer are dropped one by one.
    pub flags: u64,
    /// Largest write (and read) request, bytes.
    pub max_write: u32,
    /// Background requests (readahead, writeback) in flight.
    pub max_background: u16,
}

impl InitConfig {
    /// The flags `src/fuse.rs` asks for with DualFS's defaults (`FuseConfig::default()`:
    /// readdirplus auto, cached symlinks, no OPENDIR, OPEN kept with atomic O_TRUNC, no
    /// writeback cache, no direct I/O; `fuse::tests::init_asks_for_what_the_options_say`).
    pub const DUALFS_DEFAULT_FLAGS: u64 = f::POSIX_ACL
        | f::DONT_MASK
        | f::PARALLEL_DIROPS
        | f::EXPORT_SUPPORT
        | f::MAX_PAGES
        | f::ASYNC_READ
        | f::BIG_WRITES
        | f::HANDLE_KILLPRIV_V2
        | f::DO_READDIRPLUS
        | f::READDIRPLUS_AUTO
        | f::CACHE_SYMLINKS
        | f::NO_OPENDIR_SUPPORT
        | f::ATOMIC_O_TRUNC;
}

impl Default for InitConfig {
    fn default() -> Self {
        InitConfig {
            flags: Self::DUALFS_DEFAULT_FLAGS,
            max_write: 256 << 10,
            max_background: 64,
        }
    }
}

/// Why INIT failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitError {
    /// A protocol this layer does not speak (major, minor).
    Unsupported(u32, u32),
}

impl std::fmt::Display for InitError {
    fn fmt(&self, fm: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InitError::Unsupported(major, minor) => write!(
                fm,
                "the kernel speaks FUSE {major}.{minor}; this file system needs 7.{} or later 7.x",
                abi::MIN_KERNEL_MINOR_VERSION
            ),
        }
    }
}

/// The outcome of INIT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// The kernel's minor version.
    pub minor: u32,
    /// What the kernel offered.
    pub offered: u64,
    /// What the reply grants (asked and offered).
    pub flags: u64,
    pub max_write: u32,
    pub max_pages: u16,
    pub max_readahead: u32,
}

impl Negotiated {
    /// Bytes of `to_bytes`.
    pub const ENCODED: usize = 30;

    /// The outcome as bytes, for a successor daemon that serves the same connection (it
    /// never sees INIT): little-endian fields in declaration order.
    pub fn to_bytes(&self) -> [u8; Self::ENCODED] {
        let mut b = [0u8; Self::ENCODED];
        b[0..4].copy_from_slice(&self.minor.to_le_bytes());
        b[4..12].copy_from_slice(&self.offered.to_le_bytes());
        b[12..20].copy_from_slice(&self.flags.to_le_bytes());
        b[20..24].copy_from_slice(&self.max_write.to_le_bytes());
        b[24..26].copy_from_slice(&self.max_pages.to_le_bytes());
        b[26..30].copy_from_slice(&self.max_readahead.to_le_bytes());
        b
    }

    pub fn from_bytes(b: &[u8; Self::ENCODED]) -> Negotiated {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        Negotiated {
            minor: u32_at(0),
            offered: u64_at(4),
            flags: u64_at(12),
            max_write: u32_at(20),
            max_pages: u16::from_le_bytes([b[24], b[25]]),
            max_readahead: u32_at(26),
        }
    }

    pub fn has(&self, flag: u64) -> bool {
        self.flags & flag == flag
    }

    pub fn offers(&self, flag: u64) -> bool {
        self.offered & flag == flag
    }

    /// The largest payload of a request or reply: the size of a ring entry's payload
    /// buffer, which the kernel checks at REGISTER (`max(FUSE_MIN_READ_BUFFER, max_write,
    /// max_pages * PAGE_SIZE)`).
    pub fn payload_size(&self) -> usize {
        // Without FUSE_MAX_PAGES the kernel uses its default of 32 pages.
        let pages = usize::from(if self.max_pages == 0 {
            32
        } else {
            self.max_pages
        }) * page_size();
        abi::MIN_READ_BUFFER.max(self.max_write as usize).max(pages)
    }

    /// A /dev/fuse read buffer: a header and the largest arguments besides the payload.
    pub fn dev_buffer_size(&self) -> usize {
        self.payload_size() + 4096
    }

    pub fn layout(&self) -> super::request::Layout {
        super::request::Layout {
            setxattr_ext: self.has(f::SETXATTR_EXT),
        }
    }

    /// Set or clear FUSE_OVER_IO_URING in what is granted (before the reply is encoded).
    pub fn set_uring(&mut self, on: bool) {
        if on && self.offers(f::OVER_IO_URING) {
            self.flags |= f::OVER_IO_URING;
        } else {
            self.flags &= !f::OVER_IO_URING;
        }
    }

    /// The reply to the kernel's INIT.
    pub fn reply(&self, config: &InitConfig) -> InitOut {
        let flags = self.flags | f::INIT_EXT;
        InitOut {
            major: abi::KERNEL_VERSION,
            minor: abi::KERNEL_MINOR_VERSION,
            max_readahead: self.max_readahead,
            flags: flags as u32,
            max_background: config.max_background,
            congestion_threshold: (u32::from(config.max_background) * 3 / 4) as u16,
            max_write: self.max_write,
            time_gran: 1,
            max_pages: self.max_pages,
            flags2: (flags >> 32) as u32,
            ..InitOut::default()
        }
    }
}

pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

/// Negotiate from the kernel's INIT. FUSE_OVER_IO_URING is granted when `uring` is asked
/// and offered; the transport clears it again (`set_uring`) if its rings cannot be set up.
pub fn negotiate(
    kernel: &InitIn,
    config: &InitConfig,
    uring: bool,
) -> Result<Negotiated, InitError> {
    if kernel.major != abi::KERNEL_VERSION || kernel.minor < abi::MIN_KERNEL_MINOR_VERSION {
        return Err(InitError::Unsupported(kernel.major, kernel.minor));
    }
    let mut offered = u64::from(kernel.flags);
    if offered & f::INIT_EXT != 0 {
        offered |= u64::from(kernel.flags2) << 32;
    }
    let mut wanted = config.flags & !f::OVER_IO_URING & !f::INIT_EXT;
    if uring {
        wanted |= f::OVER_IO_URING;
    }
    let flags = wanted & offered;
    let max_write = config.max_write.max(4096);
    // Reads are as large as writes: max_pages covers both and the kernel's readahead.
    let largest = max_write.max(kernel.max_readahead) as usize;
    let max_pages = if flags & f::MAX_PAGES != 0 {
        largest.div_ceil(page_size()).clamp(1, 256) as u16
    } else {
        0
    };
    Ok(Negotiated {
        minor: kernel.minor,
        offered,
        flags,
        max_write,
        max_pages,
        max_readahead: kernel.max_readahead,
    })
}
