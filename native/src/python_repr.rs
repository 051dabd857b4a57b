//! Python's `repr` of bytes and of ASCII text, for reasons that quote a header as Python
//! shows it (they reach users in kpd's headers, so they read the same as they always did).

/// Python's quote choice: single quotes unless the text has one and no double quote.
fn quote(has_single: bool, has_double: bool) -> char {
    if has_single && !has_double {
        '"'
    } else {
        '\''
    }
}

fn escape(out: &mut String, c: char, quote: char) -> bool {
    match c {
        '\\' => out.push_str("\\\\"),
        '\t' => out.push_str("\\t"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        c if c == quote => {
            out.push('\\');
            out.push(c);
        }
        _ => return false,
    }
    true
}

/// Python's `repr` of bytes.
pub fn repr_bytes(data: &[u8]) -> String {
    let q = quote(data.contains(&b'\''), data.contains(&b'"'));
    let mut out = format!("b{q}");
    for &b in data {
        if !escape(&mut out, b as char, q) {
            if (0x20..0x7f).contains(&b) {
                out.push(b as char);
            } else {
                out.push_str(&format!("\\x{b:02x}"));
            }
        }
    }
    out.push(q);
    out
}

/// Python's `repr` of a str of ASCII and U+FFFD (what kpd decodes from header bytes).
pub fn repr_str(text: &str) -> String {
    let q = quote(text.contains('\''), text.contains('"'));
    let mut out = q.to_string();
    for c in text.chars() {
        if !escape(&mut out, c, q) {
            if (c as u32) < 0x20 || c == '\x7f' {
                out.push_str(&format!("\\x{:02x}", c as u32));
            } else {
                out.push(c);
            }
        }
    }
    out.push(q);
    out
}
