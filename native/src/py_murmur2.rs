//! Python face of `murmur2`: `foundation.shards.murmur2` and `partition_of`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::murmur2 as hash;

fn key_bytes<'a>(key: &'a Bound<'_, PyAny>) -> PyResult<&'a [u8]> {
    match key.downcast::<PyString>() {
        Ok(text) => Ok(text.to_str()?.as_bytes()),
        Err(_) => Ok(key.downcast::<PyBytes>()?.as_bytes()),
    }
}

/// Kafka's murmur2 of `data`, as an unsigned 32 bits.
#[pyfunction]
pub fn murmur2(data: &[u8]) -> u32 {
    hash::murmur2(data)
}

/// The partition Kafka's default partitioner gives a record keyed `key` (bytes, or a str as
/// its UTF-8 bytes).
#[pyfunction]
pub fn partition_of(key: &Bound<'_, PyAny>, partitions: u32) -> PyResult<u32> {
    if partitions == 0 {
        return Err(PyValueError::new_err("a topic has at least one partition"));
    }
    Ok(hash::partition_of(key_bytes(key)?, partitions))
}
