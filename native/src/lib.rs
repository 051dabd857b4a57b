//! kpd's compiled core: per-record work done once per batch, bytes in and bytes out, no I/O.
//! The Python packages are its face (`revive.receipt`, `revive.lease`, `revive.ledger`,
//! `revive.source_record`, `revive.copies`, `revive.records`, `delay_service.headers`,
//! `foundation.shards`); nothing here talks to Kafka or HTTP.

mod buffer_headers;
mod ledger;
mod msgpack;
mod murmur2;
mod provenance;
mod py_buffer_headers;
mod py_lanes;
mod py_ledger;
mod py_murmur2;
mod py_provenance;
mod py_render;
mod py_source_record;
mod py_state_records;
mod py_value;
mod python_repr;
mod receipt;
mod render;
mod state_records;

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pyclass::CompareOp;
use pyo3::types::{PyBytes, PyInt, PyString, PyTuple};

use receipt::{Codec, Decoded, Invalid, Malformed};

create_exception!(
    kpd_core,
    InvalidReceipt,
    PyValueError,
    "A receipt that this codec did not issue for this group (or that was altered)."
);

fn invalid_receipt(py: Python<'_>, Invalid(reason): Invalid) -> PyErr {
    let error = InvalidReceipt::new_err(reason.clone());
    // `reason` is what a per-item result shows; setting it on a fresh instance cannot fail.
    let _ = error.value(py).setattr("reason", reason);
    error
}

fn malformed(Malformed(reason): Malformed) -> PyErr {
    PyValueError::new_err(reason)
}

/// A Python int in 0..2**64 (exactly an int: a bool is not offset 1).
fn uint(value: &Bound<'_, PyAny>) -> Option<u64> {
    if value.is_exact_instance_of::<PyInt>() {
        value.extract().ok()
    } else {
        None
    }
}

fn uints(values: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
    values
        .try_iter()?
        .map(|value| uint(&value?).ok_or_else(not_uints))
        .collect()
}

fn not_uints() -> PyErr {
    PyValueError::new_err("receipt numbers must be non-negative ints")
}

const NAMES: &str = "receipt group and topic must be strings, topic non-empty";

/// UTF-8 of a group name; surrogates pass, so any str hashes and none raises UnicodeError.
fn group_bytes(group: &Bound<'_, PyString>) -> PyResult<Vec<u8>> {
    match group.to_str() {
        Ok(text) => Ok(text.as_bytes().to_vec()),
        Err(_) => Ok(group
            .call_method1("encode", ("utf-8", "surrogatepass"))?
            .downcast_into::<PyBytes>()?
            .as_bytes()
            .to_vec()),
    }
}

fn topic_str<'a>(topic: &'a Bound<'_, PyAny>) -> PyResult<&'a str> {
    let topic = topic
        .downcast::<PyString>()
        .map_err(|_| PyValueError::new_err(NAMES))?;
    topic
        .to_str()
        .map_err(|_| PyValueError::new_err("receipt topic is not valid unicode"))
}

/// One delivery of one message; `topic` is the topic it was read from (origin or retry).
#[pyclass(frozen, module = "kpd_core")]
pub struct Receipt {
    #[pyo3(get)]
    group: Py<PyString>,
    #[pyo3(get)]
    topic: Py<PyString>,
    #[pyo3(get)]
    partition: u64,
    #[pyo3(get)]
    offset: u64,
    #[pyo3(get)]
    checkpoint_id: u64,
    #[pyo3(get)]
    delivery_count: u64,
}

impl Receipt {
    /// The fields as a tuple: what equality, hashing and repr compare and show.
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let (group, topic) = (self.group.clone_ref(py), self.topic.clone_ref(py));
        let numbers = (
            self.partition,
            self.offset,
            self.checkpoint_id,
            self.delivery_count,
        );
        (group, topic, numbers.0, numbers.1, numbers.2, numbers.3).into_pyobject(py)
    }
}

#[pymethods]
impl Receipt {
    #[new]
    fn new(
        group: Bound<'_, PyString>,
        topic: Bound<'_, PyString>,
        partition: &Bound<'_, PyAny>,
        offset: &Bound<'_, PyAny>,
        checkpoint_id: &Bound<'_, PyAny>,
        delivery_count: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let numbers = [partition, offset, checkpoint_id, delivery_count].map(uint);
        let [Some(partition), Some(offset), Some(checkpoint_id), Some(delivery_count)] = numbers
        else {
            return Err(not_uints());
        };
        Ok(Receipt {
            group: group.unbind(),
            topic: topic.unbind(),
            partition,
            offset,
            checkpoint_id,
            delivery_count,
        })
    }

    fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<PyObject> {
        let py = other.py();
        let Ok(other) = other.downcast::<Receipt>() else {
            return Ok(py.NotImplemented());
        };
        let equal = self.fields(py)?.eq(other.get().fields(py)?)?;
        match op {
            CompareOp::Eq => Ok(equal.into_pyobject(py)?.to_owned().into_any().unbind()),
            CompareOp::Ne => Ok((!equal).into_pyobject(py)?.to_owned().into_any().unbind()),
            _ => Ok(py.NotImplemented()),
        }
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        self.fields(py)?.hash()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!("Receipt{}", self.fields(py)?.repr()?))
    }
}

/// Encodes and verifies receipts with one shared secret (`KPD_RECEIPT_SECRET`).
#[pyclass(frozen, module = "kpd_core")]
pub struct ReceiptCodec {
    codec: Codec<Py<PyString>>,
}

#[pymethods]
impl ReceiptCodec {
    #[new]
    fn new(secret: &Bound<'_, PyAny>) -> PyResult<Self> {
        let secret = secret
            .downcast::<PyBytes>()
            .map_err(|_| PyValueError::new_err("receipt secret must be bytes"))?;
        Ok(ReceiptCodec {
            codec: Codec::new(secret.as_bytes()).map_err(malformed)?,
        })
    }

    /// One receipt in version 1 (an HMAC of its own): what nodes older than version 2 read.
    fn encode(&self, py: Python<'_>, r: &Receipt) -> PyResult<String> {
        let group = group_bytes(r.group.bind(py))?;
        let topic = r.topic.bind(py).clone().into_any();
        let numbers = [r.partition, r.offset, r.checkpoint_id, r.delivery_count];
        self.codec
            .encode_v1(&group, topic_str(&topic)?, numbers)
            .map_err(malformed)
    }

    /// Version-2 receipts of one checkpoint's messages, in order, one HMAC per segment;
    /// `ValueError` if a field is malformed, offsets do not increase or a receipt is too long.
    fn encode_batch(
        &self,
        group: &Bound<'_, PyAny>,
        topic: &Bound<'_, PyAny>,
        partition: &Bound<'_, PyAny>,
        checkpoint_id: &Bound<'_, PyAny>,
        offsets: &Bound<'_, PyAny>,
        counts: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<String>> {
        let group = group
            .downcast::<PyString>()
            .map_err(|_| PyValueError::new_err(NAMES))?;
        let topic = topic_str(topic)?;
        let (Some(partition), Some(checkpoint_id)) = (uint(partition), uint(checkpoint_id)) else {
            return Err(not_uints());
        };
        let (offsets, counts) = (uints(offsets)?, uints(counts)?);
        self.codec
            .encode_batch(
                &group_bytes(group)?,
                topic,
                partition,
                checkpoint_id,
                &offsets,
                &counts,
            )
            .map_err(malformed)
    }

    /// Verify `text` and return its receipt; `InvalidReceipt` on anything else.
    #[pyo3(signature = (text, *, group))]
    fn decode(&self, text: &Bound<'_, PyAny>, group: &Bound<'_, PyAny>) -> PyResult<Receipt> {
        let py = text.py();
        let refuse = |reason: &str| invalid_receipt(py, Invalid(reason.to_owned()));
        let text = text
            .downcast::<PyString>()
            .map_err(|_| refuse("receipt must be a string"))?;
        let group = group
            .downcast::<PyString>()
            .map_err(|_| refuse("group must be a string"))?;
        let Ok(text) = text.to_str() else {
            return Err(refuse("receipt is not base64url"));
        };
        let decoded = self
            .codec
            .decode(text, |name| PyString::new(py, &name).unbind());
        let group_utf8 = group_bytes(group)?;
        let another = || refuse("receipt belongs to another group");
        match decoded.map_err(|error| invalid_receipt(py, error))? {
            Decoded::V1 {
                group_fp,
                topic,
                numbers: [partition, offset, checkpoint_id, count],
            } => {
                if !self.codec.same_group(&group_fp, &group_utf8) {
                    return Err(another());
                }
                Ok(Receipt {
                    group: group.clone().unbind(),
                    topic: PyString::new(py, &topic).unbind(),
                    partition,
                    offset,
                    checkpoint_id,
                    delivery_count: count,
                })
            }
            Decoded::V2 { segment, position } => {
                if !self.codec.same_group(&segment.group_fp, &group_utf8) {
                    return Err(another());
                }
                let (offset, count) = segment
                    .locate(position)
                    .map_err(|e| invalid_receipt(py, e))?;
                Ok(Receipt {
                    group: group.clone().unbind(),
                    topic: segment.topic.clone_ref(py),
                    partition: segment.partition,
                    offset,
                    checkpoint_id: segment.checkpoint_id,
                    delivery_count: count,
                })
            }
        }
    }

    /// HMACs computed for signatures (signing and verifying): one per segment, not per receipt.
    #[getter]
    fn tags_computed(&self) -> u64 {
        self.codec.tags_computed()
    }

    /// Verified segments remembered, so later receipts of a segment skip its HMAC.
    #[getter]
    fn cached_segments(&self) -> usize {
        self.codec.cached_segments()
    }
}

#[pymodule]
fn kpd_core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("InvalidReceipt", m.py().get_type::<InvalidReceipt>())?;
    m.add_class::<Receipt>()?;
    m.add_class::<ReceiptCodec>()?;
    m.add_class::<py_render::DeliveryRenderer>()?;
    m.add_class::<py_ledger::PartitionLedger>()?;
    m.add_class::<py_source_record::SourceRecord>()?;
    m.add_class::<py_provenance::Origin>()?;
    m.add_class::<py_provenance::Provenance>()?;
    m.add_function(wrap_pyfunction!(py_provenance::provenance, m)?)?;
    m.add_function(wrap_pyfunction!(py_lanes::lane_name, m)?)?;
    m.add_function(wrap_pyfunction!(py_lanes::lane_runs, m)?)?;
    m.add_function(wrap_pyfunction!(py_state_records::ack_records, m)?)?;
    m.add(
        "InvalidRecord",
        m.py().get_type::<py_buffer_headers::InvalidRecord>(),
    )?;
    m.add_class::<py_buffer_headers::Limits>()?;
    m.add_class::<py_buffer_headers::ScheduleRequest>()?;
    m.add_class::<py_buffer_headers::CancelRequest>()?;
    m.add_function(wrap_pyfunction!(py_buffer_headers::parse, m)?)?;
    m.add("CONTROL_HEADERS", buffer_headers::CONTROL_HEADERS)?;
    m.add("COPY_HEADERS", provenance::COPY_HEADERS)?;
    m.add_function(wrap_pyfunction!(py_murmur2::murmur2, m)?)?;
    m.add_function(wrap_pyfunction!(py_murmur2::partition_of, m)?)?;
    m.add(
        "HEADER_FRAMING_BYTES",
        py_source_record::HEADER_FRAMING_BYTES,
    )?;
    m.add("MAX_DELIVERY_COUNT", ledger::MAX_DELIVERY_COUNT)?;
    m.add("MAX_RECEIPT_CHARS", receipt::MAX_RECEIPT_CHARS)?;
    m.add("MIN_SECRET_BYTES", receipt::MIN_SECRET_BYTES)?;
    m.add("MAX_CACHED_GROUPS", receipt::MAX_CACHED_GROUPS)?;
    m.add("MAX_CACHED_SEGMENTS", receipt::MAX_CACHED_SEGMENTS)?;
    m.add("MAX_BATCH_MESSAGES", receipt::MAX_BATCH_MESSAGES)?;
    Ok(())
}
