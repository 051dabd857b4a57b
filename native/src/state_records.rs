//! State records of the pop service (`revive.records` has the format and the reader): here the
//! ones written once per settled delivery, so a call's acks are encoded in one pass.

use crate::msgpack::{put_array, put_int, put_str, put_uint};

const VERSION: u64 = 1;
const KIND_ACK: u64 = 2;

/// One ledger's settled deliveries, each `[1, 2, group, topic, partition, checkpoint, offset,
/// outcome, at_ms]` as `msgpack.packb` writes it.
pub fn ack_records(
    ledger: (&str, &str, u64),
    leases: &[(u64, u64)],
    outcome: u8,
    at_ms: i64,
) -> Vec<Vec<u8>> {
    let (group, topic, partition) = ledger;
    let mut head = Vec::with_capacity(16 + group.len() + topic.len());
    put_array(&mut head, 9);
    put_uint(&mut head, VERSION);
    put_uint(&mut head, KIND_ACK);
    put_str(&mut head, group);
    put_str(&mut head, topic);
    put_uint(&mut head, partition);
    let mut tail = Vec::with_capacity(10);
    put_uint(&mut tail, outcome.into());
    put_int(&mut tail, at_ms);
    leases
        .iter()
        .map(|&(checkpoint_id, offset)| {
            let mut out = Vec::with_capacity(head.len() + tail.len() + 18);
            out.extend_from_slice(&head);
            put_uint(&mut out, checkpoint_id);
            put_uint(&mut out, offset);
            out.extend_from_slice(&tail);
            out
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msgpack::{read, Value};

    #[test]
    fn an_ack_record_reads_back_as_written() {
        let records = ack_records(("g", "orders", 3), &[(7, 40), (7, u64::MAX)], 1, -5);
        assert_eq!(records.len(), 2);
        let Ok(Value::Array(fields)) = read(&records[1]) else {
            panic!("not an array")
        };
        assert_eq!(fields.len(), 9);
        assert_eq!(fields[2], Value::Str("g".into()));
        assert_eq!(fields[8], Value::Int(-5));
    }
}
