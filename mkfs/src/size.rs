//! Sizes on the command line ("96M", "8G", "512k", "1TiB", "4096") and in messages.

/// Binary unit suffixes, smallest first; each is 1024 times the one before.
const UNITS: [&str; 6] = ["K", "M", "G", "T", "P", "E"];

/// Parse a size in bytes: a whole number, optionally followed by a binary unit (K, M, G, T,
/// P, E; case-insensitive, also written as KB or KiB) or by B for bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(digits_end);
    if digits.is_empty() {
        return Err(format!(
            "'{text}' is not a size: expected a whole number with an optional unit, like \
             4096, 512K, 96M, 8G or 1T"
        ));
    }
    let multiplier = unit_multiplier(unit.trim()).ok_or_else(|| {
        format!("'{text}' has an unknown unit '{unit}': use K, M, G, T, P or E (powers of 1024)")
    })?;
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("'{text}' is too large"))?;
    let bytes = number
        .checked_mul(multiplier)
        .ok_or_else(|| format!("'{text}' is too large"))?;
    if bytes == 0 {
        return Err("a size must be greater than zero".into());
    }
    Ok(bytes)
}

fn unit_multiplier(unit: &str) -> Option<u64> {
    let unit = unit.to_ascii_uppercase();
    if unit.is_empty() || unit == "B" {
        return Some(1);
    }
    let prefix = unit
        .strip_suffix("IB")
        .or_else(|| unit.strip_suffix('B'))
        .unwrap_or(&unit);
    let power = UNITS.iter().position(|u| *u == prefix)?;
    Some(1024u64.pow(power as u32 + 1))
}

/// A size for people: "96 MiB", "1.5 GiB", "4095 bytes".
pub fn human_size(bytes: u64) -> String {
    let Some(power) = (0..UNITS.len())
        .rev()
        .find(|&p| bytes >= 1024u64.pow(p as u32 + 1))
    else {
        return format!("{bytes} bytes");
    };
    let unit = 1024u64.pow(power as u32 + 1);
    let name = UNITS[power];
    if bytes % unit == 0 {
        format!("{} {name}iB", bytes / unit)
    } else {
        format!("{:.1} {name}iB", bytes as f64 / unit as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_bytes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1"), Ok(1));
        assert_eq!(parse_size("4096b"), Ok(4096));
        assert_eq!(parse_size(" 12 "), Ok(12));
    }

    #[test]
    fn binary_units_in_any_case_and_spelling() {
        assert_eq!(parse_size("512K"), Ok(512 << 10));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("96M"), Ok(96 << 20));
        assert_eq!(parse_size("96MB"), Ok(96 << 20));
        assert_eq!(parse_size("96MiB"), Ok(96 << 20));
        assert_eq!(parse_size("96mib"), Ok(96 << 20));
        assert_eq!(parse_size("8G"), Ok(8 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert_eq!(parse_size("2P"), Ok(2 << 50));
        assert_eq!(parse_size("15E"), Ok(15 << 60));
    }

    #[test]
    fn rejects_what_is_not_a_size() {
        for bad in [
            "", "M", "-1", "1.5G", "12Q", "1GG", "0x100", "1 2", "K1", "1iB", "1Mi",
        ] {
            assert!(parse_size(bad).is_err(), "'{bad}' was accepted");
        }
        assert!(parse_size("0").unwrap_err().contains("greater than zero"));
        assert!(parse_size("0M").is_err());
    }

    #[test]
    fn rejects_overflow() {
        assert!(parse_size("16E").unwrap_err().contains("too large"));
        assert!(parse_size("99999999999999999999")
            .unwrap_err()
            .contains("too large"));
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human_size(0), "0 bytes");
        assert_eq!(human_size(1023), "1023 bytes");
        assert_eq!(human_size(1024), "1 KiB");
        assert_eq!(human_size(96 << 20), "96 MiB");
        assert_eq!(human_size(3 << 29), "1.5 GiB");
        assert_eq!(human_size(1 << 40), "1 TiB");
        assert_eq!(human_size(u64::MAX), "16.0 EiB");
    }
}
