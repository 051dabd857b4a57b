//! Where a fetched record came from (`revive.copies`): `Origin`, `Provenance`, and reading them
//! off a record (the rules are `provenance.rs`'s).

use pyo3::prelude::*;
use pyo3::pyclass::CompareOp;
use pyo3::types::{PyString, PyTuple};

use crate::provenance::{copied_from, Header};
use crate::py_source_record::SourceRecord;
use crate::py_value::{bytes_or_none, compare, repr, Fields};

/// Where a message was first produced; a retry copy's origin is its original's.
#[pyclass(frozen, module = "kpd_core")]
pub struct Origin {
    #[pyo3(get)]
    pub topic: Py<PyString>,
    #[pyo3(get)]
    pub partition: i64,
    #[pyo3(get)]
    pub offset: i64,
}

impl Fields for Origin {
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        (self.topic.clone_ref(py), self.partition, self.offset).into_pyobject(py)
    }
}

#[pymethods]
impl Origin {
    #[new]
    fn new(topic: Py<PyString>, partition: i64, offset: i64) -> Self {
        Origin {
            topic,
            partition,
            offset,
        }
    }

    /// A record's own place: the origin of an original.
    #[staticmethod]
    fn here(py: Python<'_>, record: &SourceRecord) -> Self {
        Origin::new(record.topic.clone_ref(py), record.partition, record.offset)
    }

    fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<PyObject> {
        compare(self, other, op)
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        self.fields(py)?.hash()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        repr(self, py)
    }
}

/// A fetched record's origin and earlier deliveries (0 for an original, the copy's count for
/// a retry), with why a retry copy's kpd headers cannot be trusted, if they cannot.
#[pyclass(frozen, module = "kpd_core")]
pub struct Provenance {
    #[pyo3(get)]
    pub origin: Py<Origin>,
    #[pyo3(get)]
    pub previous_deliveries: i64,
    #[pyo3(get)]
    pub distrust: Option<Py<PyString>>,
}

impl Fields for Provenance {
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let distrust = self.distrust.as_ref().map(|d| d.clone_ref(py));
        (
            self.origin.clone_ref(py),
            self.previous_deliveries,
            distrust,
        )
            .into_pyobject(py)
    }
}

#[pymethods]
impl Provenance {
    #[new]
    #[pyo3(signature = (origin, previous_deliveries, distrust = None))]
    fn new(origin: Py<Origin>, previous_deliveries: i64, distrust: Option<Py<PyString>>) -> Self {
        Provenance {
            origin,
            previous_deliveries,
            distrust,
        }
    }

    fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<PyObject> {
        compare(self, other, op)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        repr(self, py)
    }
}

/// Origin and earlier deliveries of `record`; a retry copy kpd cannot trust gets its own place
/// and the reason (its lane dead-letters it).
#[pyfunction]
pub fn provenance(
    py: Python<'_>,
    record: &Bound<'_, SourceRecord>,
    retry_topic: &str,
) -> PyResult<Provenance> {
    let source = record.get();
    let here = || Py::new(py, Origin::here(py, source));
    if source.topic.bind(py).to_cow()? != retry_topic {
        return Ok(Provenance::new(here()?, 0, None));
    }
    let pairs = source.headers.bind(py);
    let mut names = Vec::with_capacity(pairs.len());
    let mut values = Vec::with_capacity(pairs.len());
    for pair in pairs.iter() {
        let pair = pair.downcast_into::<PyTuple>()?;
        names.push(pair.get_item(0)?.downcast_into::<PyString>()?);
        values.push(pair.get_item(1)?);
    }
    let mut headers: Vec<Header<'_>> = Vec::with_capacity(names.len());
    let texts = names
        .iter()
        .map(|n| n.to_cow())
        .collect::<PyResult<Vec<_>>>()?;
    for (name, value) in texts.iter().zip(&values) {
        headers.push((name, bytes_or_none(value)?));
    }
    Ok(match copied_from(&headers) {
        Ok(copied) => {
            let origin = Origin::new(
                PyString::new(py, &copied.topic).unbind(),
                copied.partition as i64,
                copied.offset as i64,
            );
            Provenance::new(
                Py::new(py, origin)?,
                copied.previous_deliveries as i64,
                None,
            )
        }
        Err(reason) => Provenance::new(here()?, 0, Some(PyString::new(py, &reason).unbind())),
    })
}
