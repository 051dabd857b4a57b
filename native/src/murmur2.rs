//! Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`), the hash of its default
//! partitioner: a keyed record's partition is `(murmur2(key) & 0x7fffffff) % partitions`.

const SEED: u32 = 0x9747_B28C;
const M: u32 = 0x5BD1_E995;

pub fn murmur2(data: &[u8]) -> u32 {
    let mut h = SEED ^ data.len() as u32;
    let mut words = data.chunks_exact(4);
    for word in &mut words {
        let mut k = u32::from_le_bytes([word[0], word[1], word[2], word[3]]).wrapping_mul(M);
        k ^= k >> 24;
        h = h.wrapping_mul(M) ^ k.wrapping_mul(M);
    }
    let rest = words.remainder();
    if rest.len() == 3 {
        h ^= u32::from(rest[2]) << 16;
    }
    if rest.len() >= 2 {
        h ^= u32::from(rest[1]) << 8;
    }
    if !rest.is_empty() {
        h ^= u32::from(rest[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^ (h >> 15)
}

/// The partition Kafka's default partitioner gives a record keyed `key` (`partitions` >= 1).
pub fn partition_of(key: &[u8], partitions: u32) -> u32 {
    (murmur2(key) & 0x7FFF_FFFF) % partitions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafkas_vectors() {
        // Apache Kafka's UtilsTest.testMurmur2, as Java's signed ints.
        let vectors: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (data, signed) in vectors {
            assert_eq!(murmur2(data), signed as u32);
        }
        assert_eq!(partition_of(b"foobar", 50), 16);
    }
}
