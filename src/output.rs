//! What the programs print: sizes as people read them, and standard output that may be a
//! closed pipe (`dualfs-cleaner --status MNT | head -1`), which `println!` would panic on.

use std::io::{self, Write};

/// `bytes` in the largest binary unit that keeps the figure at 1 or more: "778.8 KiB".
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Write `text` to standard output and flush it. A reader that went away (EPIPE) is not an
/// error: it has read what it wanted, as `head` has. Other errors (a full disk) are.
pub fn write_stdout(text: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(797_491), "778.8 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }
}
