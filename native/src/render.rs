//! JSON of what a pop hands out: each message as the HTTP API shows it (docs/receipts.md is
//! the receipt's; the fields are the pop answer of docs/reference.md) and its DELIVERED delivery-log event.
//! Written straight into bytes, one call per lane batch instead of a dict per message.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

/// One message as the face reads it off its Kafka record.
pub struct Delivery<'a> {
    pub topic: &'a str, // the origin's: a retry copy shows where it was first produced
    pub partition: i64,
    pub offset: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: Vec<(&'a str, Option<&'a [u8]>)>, // the user's, as produced
    pub timestamp_ms: i64,
    pub delivery_count: u64,
    pub receipt: &'a str,
}

/// A JSON string of `text`, escaped as orjson escapes it (quotes, backslash, controls).
pub fn put_string(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short = match b {
            b'"' => b'"',
            b'\\' => b'\\',
            b'\n' => b'n',
            b'\r' => b'r',
            b'\t' => b't',
            0x08 => b'b',
            0x0c => b'f',
            0..=0x1f => 0,
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if short == 0 {
            out.extend_from_slice(format!("\\u{b:04x}").as_bytes());
        } else {
            out.extend_from_slice(&[b'\\', short]);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

fn put_int(out: &mut Vec<u8>, n: impl std::fmt::Display) {
    out.extend_from_slice(n.to_string().as_bytes());
}

/// A comma unless this is an object's first member.
fn put_separator(out: &mut Vec<u8>) {
    if out.last() != Some(&b'{') {
        out.push(b',');
    }
}

/// `"name":` of a member whose name needs no escaping.
fn put_field(out: &mut Vec<u8>, name: &str) {
    put_separator(out);
    out.push(b'"');
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\":");
}

fn put_text_or_null(out: &mut Vec<u8>, data: Option<&str>) {
    match data {
        Some(text) => put_string(out, text),
        None => out.extend_from_slice(b"null"),
    }
}

/// The message's JSON: `key` and `value` as text when they are UTF-8 (`key` null otherwise,
/// `value_b64` instead of `value`); header values decoded with replacement, a later header of
/// a name replacing an earlier one's value, in the place of the first.
pub fn message(d: &Delivery<'_>, invisible_until_ms: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.push(b'{');
    put_field(&mut out, "receipt");
    put_string(&mut out, d.receipt);
    put_field(&mut out, "topic");
    put_string(&mut out, d.topic);
    put_field(&mut out, "partition");
    put_int(&mut out, d.partition);
    put_field(&mut out, "offset");
    put_int(&mut out, d.offset);
    put_field(&mut out, "key");
    put_text_or_null(&mut out, d.key.and_then(|k| std::str::from_utf8(k).ok()));
    put_field(&mut out, "headers");
    out.push(b'{');
    let mut headers: Vec<(&str, String)> = Vec::with_capacity(d.headers.len());
    for &(name, value) in &d.headers {
        let text = String::from_utf8_lossy(value.unwrap_or_default()).into_owned();
        match headers.iter_mut().find(|(seen, _)| *seen == name) {
            Some(kept) => kept.1 = text,
            None => headers.push((name, text)),
        }
    }
    for (name, text) in &headers {
        put_separator(&mut out);
        put_string(&mut out, name);
        out.push(b':');
        put_string(&mut out, text);
    }
    out.push(b'}');
    put_field(&mut out, "timestamp_ms");
    put_int(&mut out, d.timestamp_ms);
    put_field(&mut out, "delivery_count");
    put_int(&mut out, d.delivery_count);
    put_field(&mut out, "invisible_until_ms");
    put_int(&mut out, invisible_until_ms);
    match d.value.map(|v| (v, std::str::from_utf8(v))) {
        None => {
            put_field(&mut out, "value");
            out.extend_from_slice(b"null");
        }
        Some((_, Ok(text))) => {
            put_field(&mut out, "value");
            put_string(&mut out, text);
        }
        Some((raw, Err(_))) => {
            put_field(&mut out, "value_b64");
            put_string(&mut out, &STANDARD.encode(raw));
        }
    }
    out.push(b'}');
    out
}

/// The record id of the delivery log: the origin's topic, partition and offset.
pub fn record_id(d: &Delivery<'_>) -> String {
    format!("{}:{}:{}", d.topic, d.partition, d.offset)
}

/// The DELIVERED event of the delivery log, as `foundation.delivery_log.log_record` has it.
pub fn delivered_event(d: &Delivery<'_>, id: &str, at_ms: i64, node: &str, group: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(192);
    out.push(b'{');
    put_field(&mut out, "event");
    put_string(&mut out, "delivered");
    put_field(&mut out, "id");
    put_string(&mut out, id);
    put_field(&mut out, "target");
    put_string(&mut out, d.topic);
    put_field(&mut out, "due_ms");
    out.extend_from_slice(b"null");
    put_field(&mut out, "at_ms");
    put_int(&mut out, at_ms);
    put_field(&mut out, "enqueued_ms");
    put_int(&mut out, d.timestamp_ms);
    put_field(&mut out, "delivery_count");
    put_int(&mut out, d.delivery_count);
    put_field(&mut out, "node");
    put_string(&mut out, node);
    put_field(&mut out, "partition");
    put_int(&mut out, d.partition);
    put_field(&mut out, "offset");
    put_int(&mut out, d.offset);
    put_field(&mut out, "group");
    put_string(&mut out, group);
    out.push(b'}');
    out
}
