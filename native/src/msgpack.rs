//! The msgpack subset receipts use, written as Python's `msgpack.packb` writes it (the
//! smallest form of each value), and a reader of any msgpack value that refuses what Python's
//! `msgpack.unpackb(raw=False)` refuses: bad UTF-8, reserved bytes, truncation, trailing bytes.

pub fn put_uint(out: &mut Vec<u8>, n: u64) {
    match n {
        0..=0x7f => out.push(n as u8),
        0x80..=0xff => out.extend_from_slice(&[0xcc, n as u8]),
        0x100..=0xffff => {
            out.push(0xcd);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(0xce);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        }
        _ => {
            out.push(0xcf);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
}

/// A signed int, as the smallest form `packb` picks (a non-negative one as a uint).
pub fn put_int(out: &mut Vec<u8>, n: i64) {
    match n {
        0.. => put_uint(out, n as u64),
        -32..=-1 => out.push(n as u8),
        -0x80..=-33 => out.extend_from_slice(&[0xd0, n as u8]),
        -0x8000..=-0x81 => {
            out.push(0xd1);
            out.extend_from_slice(&(n as i16).to_be_bytes());
        }
        -0x8000_0000..=-0x8001 => {
            out.push(0xd2);
            out.extend_from_slice(&(n as i32).to_be_bytes());
        }
        _ => {
            out.push(0xd3);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
}

fn put_len(out: &mut Vec<u8>, len: usize, codes: [u8; 3]) {
    if len <= 0xff && codes[0] != 0 {
        out.extend_from_slice(&[codes[0], len as u8]);
    } else if len <= 0xffff {
        out.push(codes[1]);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(codes[2]);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
}

pub fn put_str(out: &mut Vec<u8>, text: &str) {
    if text.len() < 32 {
        out.push(0xa0 | text.len() as u8);
    } else {
        put_len(out, text.len(), [0xd9, 0xda, 0xdb]);
    }
    out.extend_from_slice(text.as_bytes());
}

pub fn put_bin(out: &mut Vec<u8>, data: &[u8]) {
    put_len(out, data.len(), [0xc4, 0xc5, 0xc6]);
    out.extend_from_slice(data);
}

pub fn put_array(out: &mut Vec<u8>, len: usize) {
    if len < 16 {
        out.push(0x90 | len as u8);
    } else {
        put_len(out, len, [0, 0xdc, 0xdd]);
    }
}

/// A decoded value; integers keep their sign so a negative one is told apart from a uint.
#[derive(Debug, PartialEq)]
pub enum Value {
    Nil,
    Bool(bool),
    Uint(u64),
    Int(i64),
    Float,
    Str(String),
    Bin(Vec<u8>),
    Array(Vec<Value>),
    Map,
    Ext,
}

pub struct Undecodable;

/// The one value that is all of `data`.
pub fn read(data: &[u8]) -> Result<Value, Undecodable> {
    let mut reader = Reader { data, at: 0 };
    let value = reader.value(0)?;
    if reader.at != data.len() {
        return Err(Undecodable);
    }
    Ok(value)
}

// Deeper nesting than any receipt has is refused, so hostile input cannot exhaust the stack.
const MAX_DEPTH: usize = 32;

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], Undecodable> {
        let end = self.at.checked_add(n).ok_or(Undecodable)?;
        let bytes = self.data.get(self.at..end).ok_or(Undecodable)?;
        self.at = end;
        Ok(bytes)
    }

    fn number(&mut self, n: usize) -> Result<u64, Undecodable> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, b| acc << 8 | u64::from(*b)))
    }

    fn value(&mut self, depth: usize) -> Result<Value, Undecodable> {
        if depth > MAX_DEPTH {
            return Err(Undecodable);
        }
        let code = self.take(1)?[0];
        Ok(match code {
            0x00..=0x7f => Value::Uint(u64::from(code)),
            0x80..=0x8f => self.map(usize::from(code & 0x0f), depth)?,
            0x90..=0x9f => self.array(usize::from(code & 0x0f), depth)?,
            0xa0..=0xbf => self.str(usize::from(code & 0x1f))?,
            0xc0 => Value::Nil,
            0xc2 => Value::Bool(false),
            0xc3 => Value::Bool(true),
            0xc4..=0xc6 => {
                let len = self.number(1 << (code - 0xc4))? as usize;
                Value::Bin(self.take(len)?.to_vec())
            }
            0xc7..=0xc9 => {
                let len = self.number(1 << (code - 0xc7))? as usize;
                self.take(len + 1)?;
                Value::Ext
            }
            0xca => self.skip(4, Value::Float)?,
            0xcb => self.skip(8, Value::Float)?,
            0xcc..=0xcf => Value::Uint(self.number(1 << (code - 0xcc))?),
            0xd0..=0xd3 => {
                let size = 1usize << (code - 0xd0);
                let raw = self.number(size)?;
                let shift = 64 - 8 * size as u32;
                Value::Int(((raw << shift) as i64) >> shift)
            }
            0xd4..=0xd8 => self.skip(1 + (1 << (code - 0xd4)), Value::Ext)?,
            0xd9..=0xdb => {
                let len = self.number(1 << (code - 0xd9))? as usize;
                self.str(len)?
            }
            0xdc | 0xdd => {
                let len = self.number(2 << (code - 0xdc))? as usize;
                self.array(len, depth)?
            }
            0xde | 0xdf => {
                let len = self.number(2 << (code - 0xde))? as usize;
                self.map(len, depth)?
            }
            0xe0..=0xff => Value::Int(i64::from(code as i8)),
            0xc1 => return Err(Undecodable),
        })
    }

    fn skip(&mut self, n: usize, value: Value) -> Result<Value, Undecodable> {
        self.take(n)?;
        Ok(value)
    }

    fn str(&mut self, len: usize) -> Result<Value, Undecodable> {
        let bytes = self.take(len)?;
        let text = std::str::from_utf8(bytes).map_err(|_| Undecodable)?;
        Ok(Value::Str(text.to_owned()))
    }

    fn array(&mut self, len: usize, depth: usize) -> Result<Value, Undecodable> {
        // Each element takes at least a byte: a length past the input is refused unallocated.
        if len > self.data.len() - self.at {
            return Err(Undecodable);
        }
        let items = (0..len)
            .map(|_| self.value(depth + 1))
            .collect::<Result<_, _>>()?;
        Ok(Value::Array(items))
    }

    fn map(&mut self, len: usize, depth: usize) -> Result<Value, Undecodable> {
        for _ in 0..len.checked_mul(2).ok_or(Undecodable)? {
            self.value(depth + 1)?;
        }
        Ok(Value::Map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn uints_round_trip(n: u64) {
            let mut out = Vec::new();
            put_uint(&mut out, n);
            prop_assert_eq!(read(&out).ok(), Some(Value::Uint(n)));
        }

        #[test]
        fn ints_round_trip(n: i64) {
            let mut out = Vec::new();
            put_int(&mut out, n);
            let expected = if n >= 0 { Value::Uint(n as u64) } else { Value::Int(n) };
            prop_assert_eq!(read(&out).ok(), Some(expected));
        }

        #[test]
        fn strings_round_trip(text in ".{0,300}") {
            let mut out = Vec::new();
            put_str(&mut out, &text);
            prop_assert_eq!(read(&out).ok(), Some(Value::Str(text)));
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = read(&data);
        }
    }

    #[test]
    fn reserved_truncated_and_trailing_bytes_are_refused() {
        assert!(read(&[0xc1]).is_err());
        assert!(read(&[0x92, 0x01]).is_err());
        assert!(read(&[0x01, 0x00]).is_err());
        assert!(read(&[0xa2, 0xff, 0xfe]).is_err());
        assert!(read(&[0xdd, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert!(read(&[0x91; 64]).is_err());
    }

    #[test]
    fn negative_ints_keep_their_sign() {
        assert_eq!(read(&[0xff]).ok(), Some(Value::Int(-1)));
        assert_eq!(read(&[0xd0, 0x80]).ok(), Some(Value::Int(-128)));
        assert_eq!(read(&[0xd1, 0xff, 0xfe]).ok(), Some(Value::Int(-2)));
    }
}
