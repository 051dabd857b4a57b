//! Receipt codec, the format of docs/receipts.md: version 2
//! signs a segment of a pop batch once, version 1 each receipt. Pure Rust; `lib.rs` is its face.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::msgpack::{self, Value};

pub const MAX_RECEIPT_CHARS: usize = 512;
pub const MIN_SECRET_BYTES: usize = 16;
pub const MAX_CACHED_GROUPS: usize = 10_000;
pub const MAX_CACHED_SEGMENTS: usize = 4096; // more than the 1000 receipts of one call
pub const MAX_BATCH_MESSAGES: usize = 1 << 16; // positions are two bytes

const V1: u8 = 1;
const V2: u8 = 2;
const TAG_BYTES: usize = 16;
const GROUP_FP_BYTES: usize = 8;
const HEAD_CHARS: usize = 4; // base64 of version + position: whole 3-byte groups
const MAX_RUNS: usize = 8;
const TAG_DOMAIN: &[u8] = b"kpd-receipt\x00";
const GROUP_DOMAIN: &[u8] = b"kpd-receipt-group\x00";
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// (first offset, length, delivery count)
pub type Run = (u64, u64, u64);

/// Why a text is not a receipt this codec issued for this group.
#[derive(Debug, PartialEq)]
pub struct Invalid(pub String);

fn invalid<T>(reason: &str) -> Result<T, Invalid> {
    Err(Invalid(reason.to_owned()))
}

/// A refused encode: a field Kafka would never hand kpd.
#[derive(Debug, PartialEq)]
pub struct Malformed(pub String);

/// The verified, signed part of version-2 receipts; `T` is how the face keeps the topic.
pub struct Segment<T> {
    pub group_fp: Vec<u8>,
    pub topic: T,
    pub partition: u64,
    pub checkpoint_id: u64,
    pub runs: Vec<Run>,
}

impl<T> Segment<T> {
    /// (offset, delivery count) of the message at `position`.
    pub fn locate(&self, mut position: u64) -> Result<(u64, u64), Invalid> {
        for &(first, length, count) in &self.runs {
            if position < length {
                return Ok((first + position, count));
            }
            position -= length;
        }
        invalid("receipt position is outside its batch")
    }
}

/// What a receipt text names before its group is checked.
pub enum Decoded<T> {
    V1 {
        group_fp: Vec<u8>,
        topic: String,
        numbers: [u64; 4],
    },
    V2 {
        segment: Arc<Segment<T>>,
        position: u64,
    },
}

pub struct Codec<T> {
    secret: Vec<u8>,
    group_fps: Mutex<HashMap<Vec<u8>, [u8; GROUP_FP_BYTES]>>, // one HMAC per group
    segments: Mutex<HashMap<String, Arc<Segment<T>>>>,        // segment text -> verified
    tags: AtomicU64,
}

impl<T> Codec<T> {
    pub fn new(secret: &[u8]) -> Result<Self, Malformed> {
        if secret.len() < MIN_SECRET_BYTES {
            return Err(Malformed(format!(
                "receipt secret must be at least {MIN_SECRET_BYTES} bytes"
            )));
        }
        Ok(Codec {
            secret: secret.to_vec(),
            group_fps: Mutex::new(HashMap::new()),
            segments: Mutex::new(HashMap::new()),
            tags: AtomicU64::new(0),
        })
    }

    /// HMACs computed for signatures so far (signing and verifying): one per segment.
    pub fn tags_computed(&self) -> u64 {
        self.tags.load(Ordering::Relaxed)
    }

    pub fn cached_segments(&self) -> usize {
        self.segments.lock().unwrap().len()
    }

    fn mac(&self, domain: &[u8], data: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.secret).expect("any key length");
        mac.update(domain);
        mac.update(data);
        mac
    }

    fn tag(&self, body: &[u8]) -> [u8; TAG_BYTES] {
        self.tags.fetch_add(1, Ordering::Relaxed);
        let full = self.mac(TAG_DOMAIN, body).finalize().into_bytes();
        full[..TAG_BYTES].try_into().unwrap()
    }

    fn tag_matches(&self, body: &[u8], tag: &[u8]) -> bool {
        self.tags.fetch_add(1, Ordering::Relaxed);
        self.mac(TAG_DOMAIN, body)
            .verify_truncated_left(tag)
            .is_ok()
    }

    /// The group's keyed fingerprint; `group` is its UTF-8 (surrogates passed through).
    pub fn group_fp(&self, group: &[u8]) -> [u8; GROUP_FP_BYTES] {
        let mut cache = self.group_fps.lock().unwrap();
        if let Some(fp) = cache.get(group) {
            return *fp;
        }
        let full = self.mac(GROUP_DOMAIN, group).finalize().into_bytes();
        let fp: [u8; GROUP_FP_BYTES] = full[..GROUP_FP_BYTES].try_into().unwrap();
        if cache.len() < MAX_CACHED_GROUPS {
            cache.insert(group.to_vec(), fp); // hostile names must not grow it
        }
        fp
    }

    /// Constant time, as an attacker may probe a fingerprint byte by byte.
    pub fn same_group(&self, group_fp: &[u8], group: &[u8]) -> bool {
        let expected = self.group_fp(group);
        group_fp.len() == expected.len()
            && group_fp
                .iter()
                .zip(expected)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }

    /// Version 1, an HMAC of its own: what nodes older than version 2 read.
    pub fn encode_v1(
        &self,
        group: &[u8],
        topic: &str,
        numbers: [u64; 4],
    ) -> Result<String, Malformed> {
        check_topic(topic)?;
        let mut body = vec![V1];
        msgpack::put_array(&mut body, 6);
        msgpack::put_bin(&mut body, &self.group_fp(group));
        msgpack::put_str(&mut body, topic);
        for n in numbers {
            msgpack::put_uint(&mut body, n);
        }
        let tag = self.tag(&body);
        body.extend_from_slice(&tag);
        let text = URL_SAFE_NO_PAD.encode(&body);
        if text.len() > MAX_RECEIPT_CHARS {
            return Err(over(text.len()));
        }
        Ok(text)
    }

    /// Version-2 receipts of one checkpoint's messages, in order, one HMAC per segment.
    pub fn encode_batch(
        &self,
        group: &[u8],
        topic: &str,
        partition: u64,
        checkpoint_id: u64,
        offsets: &[u64],
        counts: &[u64],
    ) -> Result<Vec<String>, Malformed> {
        check_topic(topic)?;
        if offsets.is_empty() || offsets.len() > MAX_BATCH_MESSAGES || offsets.len() != counts.len()
        {
            return Err(Malformed(format!(
                "a batch needs 1..{MAX_BATCH_MESSAGES} offsets, one count each"
            )));
        }
        if offsets.windows(2).any(|w| w[1] <= w[0]) {
            return Err(Malformed(
                "batch offsets must be strictly increasing".into(),
            ));
        }
        let mut head = Vec::new();
        msgpack::put_array(&mut head, 5);
        msgpack::put_bin(&mut head, &self.group_fp(group));
        msgpack::put_str(&mut head, topic);
        msgpack::put_uint(&mut head, partition);
        msgpack::put_uint(&mut head, checkpoint_id);
        let runs = runs(offsets, counts);
        let mut texts = Vec::with_capacity(offsets.len());
        for chunk in runs.chunks(MAX_RUNS) {
            self.segment_texts(&head, chunk, &mut texts)?;
        }
        Ok(texts)
    }

    fn segment_texts(
        &self,
        head: &[u8],
        runs: &[Run],
        texts: &mut Vec<String>,
    ) -> Result<(), Malformed> {
        let mut body = vec![V2];
        body.extend_from_slice(head);
        msgpack::put_array(&mut body, 3 * runs.len());
        let mut cursor = 0;
        for &(first, length, count) in runs {
            msgpack::put_uint(&mut body, first - cursor);
            msgpack::put_uint(&mut body, length);
            msgpack::put_uint(&mut body, count);
            cursor = first + length;
        }
        let tag = self.tag(&body);
        body.extend_from_slice(&tag);
        let segment = URL_SAFE_NO_PAD.encode(&body[1..]);
        if HEAD_CHARS + segment.len() > MAX_RECEIPT_CHARS {
            if runs.len() == 1 {
                return Err(over(HEAD_CHARS + segment.len()));
            }
            // A long topic and far-apart runs: fewer runs per segment.
            let (left, right) = runs.split_at(runs.len() / 2);
            self.segment_texts(head, left, texts)?;
            return self.segment_texts(head, right, texts);
        }
        let size: u64 = runs.iter().map(|run| run.1).sum();
        for position in 0..size {
            let head = u32::from(V2) << 16 | position as u32;
            let mut text = String::with_capacity(HEAD_CHARS + segment.len());
            for shift in [18, 12, 6, 0] {
                text.push(ALPHABET[(head >> shift & 0x3f) as usize] as char);
            }
            text.push_str(&segment);
            texts.push(text);
        }
        Ok(())
    }

    /// Verify a receipt's signature and shape. `topic` turns a verified segment's topic into
    /// what the face keeps (once per segment: later receipts of it come from the cache).
    pub fn decode(
        &self,
        text: &str,
        topic: impl FnOnce(String) -> T,
    ) -> Result<Decoded<T>, Invalid> {
        if text.is_empty() {
            return invalid("receipt is empty");
        }
        if text.chars().count() > MAX_RECEIPT_CHARS {
            return invalid(&format!("receipt is longer than {MAX_RECEIPT_CHARS} chars"));
        }
        if !text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return invalid("receipt is not base64url");
        }
        if text.len() <= HEAD_CHARS {
            return invalid("receipt is too short");
        }
        let head = text
            .bytes()
            .take(HEAD_CHARS)
            .fold(0u32, |acc, b| acc << 6 | sextet(b));
        match (head >> 16) as u8 {
            V1 => self.decode_v1(text),
            V2 => {
                let rest = &text[HEAD_CHARS..];
                let cached = self.segments.lock().unwrap().get(rest).cloned();
                let segment = match cached {
                    Some(segment) => segment,
                    None => self.verify(rest, topic)?,
                };
                Ok(Decoded::V2 {
                    segment,
                    position: u64::from(head & 0xffff),
                })
            }
            version => invalid(&format!("unknown receipt version {version}")),
        }
    }

    fn verify(
        &self,
        text: &str,
        topic: impl FnOnce(String) -> T,
    ) -> Result<Arc<Segment<T>>, Invalid> {
        let mut raw = vec![V2];
        raw.extend(unb64(text)?);
        let [group_fp, name, partition, checkpoint_id, flat] = self.open::<5>(&raw)?;
        let (Value::Bin(group_fp), Value::Str(name)) = (group_fp, name) else {
            unreachable!()
        };
        let (Some(partition), Some(checkpoint_id)) = (uint(&partition), uint(&checkpoint_id))
        else {
            return invalid("receipt numbers must be non-negative ints");
        };
        let runs = parse_runs(flat)?;
        let segment = Arc::new(Segment {
            group_fp,
            topic: topic(name),
            partition,
            checkpoint_id,
            runs,
        });
        let mut cache = self.segments.lock().unwrap();
        if cache.len() >= MAX_CACHED_SEGMENTS {
            cache.clear(); // only signed segments get here; the bound is for memory
        }
        cache.insert(text.to_owned(), segment.clone());
        Ok(segment)
    }

    fn decode_v1(&self, text: &str) -> Result<Decoded<T>, Invalid> {
        let [group_fp, topic, a, b, c, d] = self.open::<6>(&unb64(text)?)?;
        let (Value::Bin(group_fp), Value::Str(topic)) = (group_fp, topic) else {
            unreachable!()
        };
        match (uint(&a), uint(&b), uint(&c), uint(&d)) {
            (Some(a), Some(b), Some(c), Some(d)) => Ok(Decoded::V1 {
                group_fp,
                topic,
                numbers: [a, b, c, d],
            }),
            _ => invalid("receipt numbers must be non-negative ints"),
        }
    }

    /// The `N` fields of version byte || body || tag: signature, shape, name types.
    fn open<const N: usize>(&self, raw: &[u8]) -> Result<[Value; N], Invalid> {
        if raw.len() <= 1 + TAG_BYTES {
            return invalid("receipt is too short");
        }
        let (body, tag) = raw.split_at(raw.len() - TAG_BYTES);
        if !self.tag_matches(body, tag) {
            return invalid("receipt signature does not match");
        }
        let Ok(value) = msgpack::read(&body[1..]) else {
            return invalid("receipt payload is undecodable");
        };
        let Value::Array(items) = value else {
            return invalid("receipt payload has the wrong shape");
        };
        let Ok(fields) = <[Value; N]>::try_from(items) else {
            return invalid("receipt payload has the wrong shape");
        };
        match (&fields[0], &fields[1]) {
            (Value::Bin(_), Value::Str(topic)) if !topic.is_empty() => Ok(fields),
            _ => invalid("receipt payload has wrong field types"),
        }
    }
}

fn over(chars: usize) -> Malformed {
    // Kafka topic names (at most 249 ASCII chars) always fit; only names it refuses get here.
    Malformed(format!(
        "receipt would be {chars} chars, over {MAX_RECEIPT_CHARS}"
    ))
}

fn check_topic(topic: &str) -> Result<(), Malformed> {
    if topic.is_empty() {
        return Err(Malformed(
            "receipt group and topic must be strings, topic non-empty".into(),
        ));
    }
    Ok(())
}

fn sextet(b: u8) -> u32 {
    ALPHABET.iter().position(|&c| c == b).unwrap() as u32
}

/// Bytes of base64url `text` (already checked to be of its alphabet), canonical only: strings
/// that differ in the unused low bits of the last char decode alike, and all but one are refused.
fn unb64(text: &str) -> Result<Vec<u8>, Invalid> {
    if text.len() % 4 == 1 {
        return invalid("receipt is not base64url");
    }
    URL_SAFE_NO_PAD
        .decode(text)
        .or_else(|_| invalid("receipt is not canonical base64url"))
}

fn uint(value: &Value) -> Option<u64> {
    match value {
        Value::Uint(n) => Some(*n),
        _ => None,
    }
}

pub fn runs(offsets: &[u64], counts: &[u64]) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    for (&offset, &count) in offsets.iter().zip(counts) {
        if let Some(last) = runs.last_mut() {
            if u128::from(offset) == u128::from(last.0) + u128::from(last.1) && count == last.2 {
                last.1 += 1;
                continue;
            }
        }
        runs.push((offset, 1, count));
    }
    runs
}

fn parse_runs(flat: Value) -> Result<Vec<Run>, Invalid> {
    let Value::Array(flat) = flat else {
        return invalid("receipt payload has the wrong shape");
    };
    if flat.is_empty() || flat.len() % 3 != 0 || flat.len() > 3 * MAX_RUNS {
        return invalid("receipt payload has the wrong shape");
    }
    let Some(numbers) = flat.iter().map(uint).collect::<Option<Vec<u64>>>() else {
        return invalid("receipt numbers must be non-negative ints");
    };
    let mut runs = Vec::with_capacity(numbers.len() / 3);
    let mut cursor: u128 = 0;
    for triple in numbers.chunks(3) {
        let (skip, length, count) = (u128::from(triple[0]), triple[1], triple[2]);
        let first = cursor + skip;
        cursor = first + u128::from(length);
        if length == 0 || cursor - 1 > u128::from(u64::MAX) {
            return invalid("receipt runs are not offsets");
        }
        runs.push((first as u64, length, count));
    }
    Ok(runs)
}
