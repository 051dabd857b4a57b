//! A fetched record as a pop leader keeps it (`revive.source_record`).
//!
//! It holds only strs, ints, bytes and tuples of them, and is not tracked by the garbage
//! collector: a leader holds many thousands, which full collections would walk.

use pyo3::exceptions::PyTypeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::pyclass::CompareOp;
use pyo3::types::{PyBytes, PyString, PyTuple};

use crate::py_value::{bytes_or_none, compare, repr, Fields};

/// Each header's framing in a record's size (`foundation.record_size.HEADER_FRAMING_BYTES`).
pub const HEADER_FRAMING_BYTES: usize = 8;

fn optional_bytes(value: Bound<'_, PyAny>) -> PyResult<Option<Py<PyBytes>>> {
    if value.is_none() {
        return Ok(None);
    }
    Ok(Some(value.downcast_into::<PyBytes>()?.unbind()))
}

/// `headers` as a tuple of (str, bytes | None) pairs, and their size in a record.
fn header_tuple<'py>(headers: &Bound<'py, PyAny>) -> PyResult<(Bound<'py, PyTuple>, usize)> {
    let py = headers.py();
    let pairs = if headers.is_none() {
        PyTuple::empty(py)
    } else {
        PyTuple::new(py, headers.try_iter()?.collect::<PyResult<Vec<_>>>()?)?
    };
    let mut size = 0;
    for pair in pairs.iter() {
        let pair = pair
            .downcast_into::<PyTuple>()
            .ok()
            .filter(|p| p.len() == 2)
            .ok_or_else(|| PyTypeError::new_err("a header is a (name, value) pair"))?;
        let name = pair.get_item(0)?;
        let name = name.downcast::<PyString>()?.to_cow()?;
        size += name.len() + bytes_or_none(&pair.get_item(1)?)?.map_or(0, <[u8]>::len);
        size += HEADER_FRAMING_BYTES;
    }
    Ok((pairs, size))
}

fn len_of(data: &Option<Py<PyBytes>>, py: Python<'_>) -> usize {
    data.as_ref().map_or(0, |d| d.bind(py).as_bytes().len())
}

/// A record of a popped topic or a retry topic, copied off its `Message` as it is fetched.
#[pyclass(frozen, module = "kpd_core")]
pub struct SourceRecord {
    #[pyo3(get)]
    pub topic: Py<PyString>,
    #[pyo3(get)]
    pub partition: i64,
    #[pyo3(get)]
    pub offset: i64,
    #[pyo3(get)]
    pub key: Option<Py<PyBytes>>,
    #[pyo3(get)]
    pub value: Option<Py<PyBytes>>,
    /// As produced, kpd's own included.
    #[pyo3(get)]
    pub headers: Py<PyTuple>,
    #[pyo3(get)]
    pub timestamp_ms: i64,
    /// Key, value and headers in bytes, each header with its framing (`record_bytes`).
    #[pyo3(get)]
    pub size: usize,
}

impl Fields for SourceRecord {
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let (key, value) = (
            self.key.as_ref().map(|k| k.clone_ref(py)),
            self.value.as_ref().map(|v| v.clone_ref(py)),
        );
        let place = (self.topic.clone_ref(py), self.partition, self.offset);
        (
            place,
            key,
            value,
            self.headers.clone_ref(py),
            self.timestamp_ms,
        )
            .into_pyobject(py)
    }
}

#[pymethods]
impl SourceRecord {
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        topic: Bound<'_, PyString>,
        partition: i64,
        offset: i64,
        key: Bound<'_, PyAny>,
        value: Bound<'_, PyAny>,
        headers: Bound<'_, PyAny>,
        timestamp_ms: i64,
    ) -> PyResult<Self> {
        let py = topic.py();
        let (headers, header_bytes) = header_tuple(&headers)?;
        let (key, value) = (optional_bytes(key)?, optional_bytes(value)?);
        let size = len_of(&key, py) + len_of(&value, py) + header_bytes;
        Ok(SourceRecord {
            topic: topic.unbind(),
            partition,
            offset,
            key,
            value,
            headers: headers.unbind(),
            timestamp_ms,
            size,
        })
    }

    /// Copy a consumed `Message` (its timestamp's value, whatever its type).
    #[staticmethod]
    pub fn of<'py>(message: &Bound<'py, PyAny>) -> PyResult<Self> {
        let py = message.py();
        let call = |name: &Bound<'py, PyString>| message.call_method0(name);
        let timestamp = call(intern!(py, "timestamp"))?.downcast_into::<PyTuple>()?;
        SourceRecord::new(
            call(intern!(py, "topic"))?.downcast_into()?,
            call(intern!(py, "partition"))?.extract()?,
            call(intern!(py, "offset"))?.extract()?,
            call(intern!(py, "key"))?,
            call(intern!(py, "value"))?,
            call(intern!(py, "headers"))?,
            timestamp.get_item(1)?.extract()?,
        )
    }

    fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<PyObject> {
        compare(self, other, op)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        repr(self, py)
    }
}
