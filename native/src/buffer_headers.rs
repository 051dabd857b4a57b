//! A buffer-topic record's kpd headers checked into a schedule or a cancel (the rules are
//! `delay_service.headers`'s). A refusal says why, as the `kpd-error` header of its copy to
//! `kpd.invalid` shows it.

use std::collections::HashSet;

use crate::python_repr::repr_str;

pub const TARGET: &str = "kpd-target";
pub const DELIVER_AT: &str = "kpd-deliver-at";
pub const DELAY_MS: &str = "kpd-delay-ms";
pub const ID: &str = "kpd-id";
pub const CANCEL: &str = "kpd-cancel";
pub const CONTROL_HEADERS: [&str; 5] = [TARGET, DELIVER_AT, DELAY_MS, ID, CANCEL];
const MAX_TIME_DIGITS: usize = 15; // epoch ms stay 13 digits until 2286; more is surely garbage
const MAX_ID_CHARS: usize = 128;
const MAX_TOPIC_CHARS: usize = 249;
const INTERNAL_PREFIX: &str = "__"; // Kafka's own topics

pub struct Limits {
    pub max_delay_ms: i64,
    pub max_record_bytes: usize,
    pub forbidden_targets: HashSet<String>, // kpd's own topics: delivering into them would loop
}

/// The kpd headers of one record, each at most once, decoded as ASCII.
#[derive(Default)]
pub struct Control {
    values: [Option<String>; 5],
}

impl Control {
    /// Note one header; `Ok(false)` if it is not a kpd header (it is the user's).
    pub fn note(&mut self, name: &str, raw: Option<&[u8]>) -> Result<bool, String> {
        let Some(slot) = CONTROL_HEADERS.iter().position(|c| *c == name) else {
            return Ok(false);
        };
        if self.values[slot].is_some() {
            return Err(format!("header {name} given more than once"));
        }
        // Exactly as documented: no whitespace is trimmed ("x\n" is not the id "x").
        let raw = raw.unwrap_or_default();
        if !raw.is_ascii() {
            return Err(format!("header {name} is not ASCII"));
        }
        self.values[slot] = Some(raw.iter().map(|&b| b as char).collect());
        Ok(true)
    }

    fn get(&self, name: &str) -> Option<&str> {
        let slot = CONTROL_HEADERS.iter().position(|c| *c == name)?;
        self.values[slot].as_deref()
    }
}

/// What a valid record asks for; a schedule's id is `None` when it names none (the record's
/// default id then).
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    Schedule {
        schedule_id: Option<String>,
        target: String,
        due_ms: i64,
    },
    Cancel {
        schedule_id: String,
    },
}

/// Check a record whose kpd headers are in `control` and whose key, value and user headers
/// take `size` bytes.
pub fn parse(
    control: &Control,
    size: usize,
    timestamp_ms: i64,
    limits: &Limits,
) -> Result<Request, String> {
    if size > limits.max_record_bytes {
        return Err(format!(
            "record of {size} bytes exceeds the {} limit",
            limits.max_record_bytes
        ));
    }
    if let Some(id) = control.get(CANCEL) {
        return Ok(Request::Cancel {
            schedule_id: schedule_id(id, CANCEL)?,
        });
    }
    let target = control
        .get(TARGET)
        .ok_or_else(|| format!("missing {TARGET} header"))?;
    if !is_topic_name(target) {
        let shown: String = target.chars().take(80).collect();
        return Err(format!(
            "{TARGET} {} is not a valid topic name",
            repr_str(&shown)
        ));
    }
    if limits.forbidden_targets.contains(target) {
        return Err(format!("{TARGET} {} is a kpd topic", repr_str(target)));
    }
    if target.starts_with(INTERNAL_PREFIX) {
        return Err(format!(
            "{TARGET} {} is a Kafka-internal topic",
            repr_str(target)
        ));
    }
    let due_ms = due_ms(control, timestamp_ms, limits.max_delay_ms)?;
    let schedule_id = match control.get(ID) {
        Some(id) => Some(schedule_id(id, ID)?),
        None => None,
    };
    Ok(Request::Schedule {
        schedule_id,
        target: target.to_owned(),
        due_ms,
    })
}

fn is_topic_name(text: &str) -> bool {
    (1..=MAX_TOPIC_CHARS).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && text != "."
        && text != ".."
}

fn time(control: &Control, name: &str) -> Result<i64, String> {
    let text = control.get(name).unwrap_or_default();
    let shown = || repr_str(&text[..text.len().min(40)]);
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{name} {} is not a non-negative decimal integer",
            shown()
        ));
    }
    if text.len() > MAX_TIME_DIGITS {
        return Err(format!("{name} {} is out of range", shown()));
    }
    text.parse()
        .map_err(|_| format!("{name} {} is out of range", shown()))
}

fn due_ms(control: &Control, timestamp_ms: i64, max_delay_ms: i64) -> Result<i64, String> {
    let (has_at, has_delay) = (
        control.get(DELIVER_AT).is_some(),
        control.get(DELAY_MS).is_some(),
    );
    if has_at == has_delay {
        return Err(format!(
            "exactly one of {DELIVER_AT} and {DELAY_MS} is required"
        ));
    }
    if has_delay {
        let delay = time(control, DELAY_MS)?;
        if delay > max_delay_ms {
            return Err(format!(
                "{DELAY_MS} {delay} exceeds the max delay of {max_delay_ms} ms"
            ));
        }
        return Ok(timestamp_ms.saturating_add(delay));
    }
    let due = time(control, DELIVER_AT)?;
    if i128::from(due) - i128::from(timestamp_ms) > i128::from(max_delay_ms) {
        return Err(format!(
            "{DELIVER_AT} {due} is beyond the max delay of {max_delay_ms} ms"
        ));
    }
    Ok(due)
}

fn schedule_id(text: &str, name: &str) -> Result<String, String> {
    let valid = (1..=MAX_ID_CHARS).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    if !valid {
        let shown = &text[..text.len().min(140)];
        return Err(format!(
            "{name} {} must be 1..128 of [A-Za-z0-9._:-]",
            repr_str(shown)
        ));
    }
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            max_delay_ms: 1_000,
            max_record_bytes: 100,
            forbidden_targets: HashSet::from(["kpd.schedules".to_owned()]),
        }
    }

    fn control(headers: &[(&str, &[u8])]) -> Control {
        let mut control = Control::default();
        for (name, raw) in headers {
            assert!(control.note(name, Some(raw)).unwrap());
        }
        control
    }

    #[test]
    fn a_schedule_and_a_cancel() {
        let c = control(&[(TARGET, b"orders"), (DELAY_MS, b"007")]);
        assert_eq!(
            parse(&c, 10, 5, &limits()),
            Ok(Request::Schedule {
                schedule_id: None,
                target: "orders".into(),
                due_ms: 12
            })
        );
        let c = control(&[(CANCEL, b"a:b"), (TARGET, b"_")]);
        assert_eq!(
            parse(&c, 10, 5, &limits()),
            Ok(Request::Cancel {
                schedule_id: "a:b".into()
            })
        );
    }

    #[test]
    fn refusals_say_why() {
        let refused = |headers: &[(&str, &[u8])], size| {
            parse(&control(headers), size, 0, &limits()).unwrap_err()
        };
        assert_eq!(
            refused(&[], 101),
            "record of 101 bytes exceeds the 100 limit"
        );
        assert_eq!(refused(&[(DELAY_MS, b"1")], 0), "missing kpd-target header");
        assert_eq!(
            refused(&[(TARGET, b"..")], 0),
            "kpd-target '..' is not a valid topic name"
        );
        assert_eq!(
            refused(&[(TARGET, b"__consumer_offsets"), (DELAY_MS, b"1")], 0),
            "kpd-target '__consumer_offsets' is a Kafka-internal topic"
        );
        assert_eq!(
            refused(&[(TARGET, b"t"), (DELAY_MS, b" 1")], 0),
            "kpd-delay-ms ' 1' is not a non-negative decimal integer"
        );
        assert_eq!(
            refused(&[(TARGET, b"t"), (DELIVER_AT, b"1234567890123456")], 0),
            "kpd-deliver-at '1234567890123456' is out of range"
        );
        assert_eq!(
            refused(&[(TARGET, b"t"), (DELIVER_AT, b"1001")], 0),
            "kpd-deliver-at 1001 is beyond the max delay of 1000 ms"
        );
        assert_eq!(
            refused(&[(TARGET, b"t"), (DELAY_MS, b"1"), (ID, b"a b")], 0),
            "kpd-id 'a b' must be 1..128 of [A-Za-z0-9._:-]"
        );
        let mut twice = control(&[(ID, b"x")]);
        assert_eq!(
            twice.note(ID, None),
            Err("header kpd-id given more than once".into())
        );
        assert_eq!(
            Control::default().note(TARGET, Some(b"\xff")),
            Err("header kpd-target is not ASCII".into())
        );
        assert_eq!(Control::default().note("user", Some(b"\xff")), Ok(false));
    }
}
