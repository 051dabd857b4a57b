//! Where a record of a group's retry topic came from, by the kpd headers of its copy
//! (`revive.copies` states the rules): trusted only when each parses within range. A reason
//! for distrust quotes the header as Python's `repr` shows it, as the dead-letter header did.

pub const DELIVERY_COUNT: &str = "kpd-delivery-count";
pub const ORIGIN_TOPIC: &str = "kpd-origin-topic";
pub const ORIGIN_PARTITION: &str = "kpd-origin-partition";
pub const ORIGIN_OFFSET: &str = "kpd-origin-offset";
pub const COPY_HEADERS: [&str; 4] = [
    DELIVERY_COUNT,
    ORIGIN_TOPIC,
    ORIGIN_PARTITION,
    ORIGIN_OFFSET,
];
pub const MAX_PARTITION: u64 = (1 << 31) - 1;
pub const MAX_OFFSET: u64 = (1 << 63) - 1;
pub const MAX_DELIVERIES: u64 = 0xFFFE; // a copy's count + 1 must fit the ledger's 16-bit counts
const MAX_TOPIC_CHARS: usize = 249;

use crate::python_repr::{repr_bytes, repr_str};

pub type Header<'a> = (&'a str, Option<&'a [u8]>);

/// A trusted retry copy's origin and the deliveries it already had.
#[derive(Debug, PartialEq, Eq)]
pub struct Copied {
    pub topic: String,
    pub partition: u64,
    pub offset: u64,
    pub previous_deliveries: u64,
}

/// The copy's origin, or why its headers cannot be trusted.
pub fn copied_from(headers: &[Header<'_>]) -> Result<Copied, String> {
    for (i, (name, _)) in headers.iter().enumerate() {
        if headers[..i].iter().any(|(earlier, _)| earlier == name) {
            return Err(format!("header {name} appears twice"));
        }
    }
    let field = |name: &str| -> Result<&[u8], String> {
        headers
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, value)| *value)
            .ok_or_else(|| format!("retry copy without {name}"))
    };
    // Decoded as ASCII with a replacement character per other byte, as the face always did.
    let topic: String = field(ORIGIN_TOPIC)?
        .iter()
        .map(|&b| if b.is_ascii() { b as char } else { '\u{fffd}' })
        .collect();
    if !is_topic_name(&topic) {
        let shown: String = topic.chars().take(80).collect();
        return Err(format!(
            "{ORIGIN_TOPIC} {} is not a topic name",
            repr_str(&shown)
        ));
    }
    let number = |name: &str, minimum: u64, maximum: u64| -> Result<u64, String> {
        let raw = field(name)?;
        decimal(raw)
            .filter(|n| (minimum..=maximum).contains(n))
            .ok_or_else(|| {
                let shown = &raw[..raw.len().min(40)];
                format!(
                    "{name} {} is not a decimal in {minimum}..{maximum}",
                    repr_bytes(shown)
                )
            })
    };
    Ok(Copied {
        topic,
        partition: number(ORIGIN_PARTITION, 0, MAX_PARTITION)?,
        offset: number(ORIGIN_OFFSET, 0, MAX_OFFSET)?,
        // 0: a redriven dead letter (`revive.redrive`), whose count starts over.
        previous_deliveries: number(DELIVERY_COUNT, 0, MAX_DELIVERIES)?,
    })
}

fn is_topic_name(text: &str) -> bool {
    (1..=MAX_TOPIC_CHARS).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// `0` or up to 19 digits without a leading zero (so it fits a u64).
fn decimal(raw: &[u8]) -> Option<u64> {
    let well_formed = !raw.is_empty()
        && raw.len() <= 19
        && raw.iter().all(u8::is_ascii_digit)
        && (raw[0] != b'0' || raw.len() == 1);
    if !well_formed {
        return None;
    }
    std::str::from_utf8(raw).ok()?.parse().ok()
}

/// The lane of a record: its topic for originals, `retry/origin` for retries (no topic name
/// has a `/`, so the two parts can be told apart).
pub fn lane_name(source_topic: &str, origin_topic: &str) -> String {
    if source_topic == origin_topic {
        source_topic.to_owned()
    } else {
        format!("{source_topic}/{origin_topic}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy<'a>(topic: &'a [u8], partition: &'a [u8], offset: &'a [u8]) -> Vec<Header<'a>> {
        vec![
            ("h", None),
            (DELIVERY_COUNT, Some(b"2")),
            (ORIGIN_TOPIC, Some(topic)),
            (ORIGIN_PARTITION, Some(partition)),
            (ORIGIN_OFFSET, Some(offset)),
        ]
    }

    #[test]
    fn a_copy_in_range_is_trusted() {
        let found = copied_from(&copy(b"orders", b"3", b"9223372036854775807")).unwrap();
        assert_eq!(found.topic, "orders");
        assert_eq!((found.partition, found.offset), (3, MAX_OFFSET));
        assert_eq!(found.previous_deliveries, 2);
    }

    #[test]
    fn a_redriven_copy_starts_over() {
        let mut headers = copy(b"orders", b"0", b"7");
        headers[1] = (DELIVERY_COUNT, Some(b"0"));
        assert_eq!(copied_from(&headers).unwrap().previous_deliveries, 0);
        headers[1] = (DELIVERY_COUNT, Some(b"65535"));
        assert_eq!(
            copied_from(&headers).unwrap_err(),
            "kpd-delivery-count b'65535' is not a decimal in 0..65534"
        );
    }

    #[test]
    fn distrust_says_why_as_python_shows_it() {
        let reason = |h: Vec<Header<'_>>| copied_from(&h).unwrap_err();
        assert_eq!(
            reason(copy(b"o'r\xffs", b"1", b"1")),
            "kpd-origin-topic \"o'r\u{fffd}s\" is not a topic name"
        );
        assert_eq!(
            reason(copy(b"o", b"01", b"1")),
            "kpd-origin-partition b'01' is not a decimal in 0..2147483647"
        );
        assert_eq!(
            reason(copy(b"o", b"1", b"\t\\\x00\x7f")),
            "kpd-origin-offset b'\\t\\\\\\x00\\x7f' is not a decimal in 0..9223372036854775807"
        );
        assert_eq!(
            reason(vec![(ORIGIN_TOPIC, None)]),
            "retry copy without kpd-origin-topic"
        );
        assert_eq!(
            reason(vec![("a", None), ("a", Some(b"x"))]),
            "header a appears twice"
        );
    }

    #[test]
    fn decimals_are_plain_and_bounded() {
        assert_eq!(decimal(b"0"), Some(0));
        assert_eq!(decimal(b"18446744073709551615"), None); // 20 digits
        assert_eq!(
            decimal(b"9999999999999999999"),
            Some(9_999_999_999_999_999_999)
        );
        for bad in [&b""[..], b"00", b"+1", b"1 ", b"\xd9\xa1"] {
            assert_eq!(decimal(bad), None);
        }
    }

    #[test]
    fn lanes_of_originals_and_retries() {
        assert_eq!(lane_name("orders", "orders"), "orders");
        assert_eq!(lane_name("kpd.retry.g", "orders"), "kpd.retry.g/orders");
        assert_eq!(lane_name("kpd.retry.g", ""), "kpd.retry.g/");
    }
}
