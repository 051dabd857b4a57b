//! Python face of `buffer_headers`: `delay_service.headers.parse` and what it returns.

use std::collections::HashSet;

use pyo3::create_exception;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pyclass::CompareOp;
use pyo3::types::{PyList, PyString, PyTuple};

use crate::buffer_headers::{self, Control, Request};
use crate::py_source_record::HEADER_FRAMING_BYTES;
use crate::py_value::{bytes_or_none, compare, repr, Fields};

create_exception!(
    kpd_core,
    InvalidRecord,
    PyValueError,
    "The record breaks the buffer-topic contract; `str(self)` says how."
);

/// What a buffer record may ask for.
#[pyclass(frozen, module = "kpd_core")]
pub struct Limits {
    limits: buffer_headers::Limits,
}

#[pymethods]
impl Limits {
    #[new]
    #[pyo3(signature = (*, max_delay_ms, max_record_bytes, forbidden_targets))]
    fn new(max_delay_ms: i64, max_record_bytes: usize, forbidden_targets: HashSet<String>) -> Self {
        Limits {
            limits: buffer_headers::Limits {
                max_delay_ms,
                max_record_bytes,
                forbidden_targets,
            },
        }
    }
}

/// A valid schedule: its id (the default id given, the same object, when it names none), the
/// target, when it is due, and the user's headers (null values kept, no kpd ones).
#[pyclass(frozen, module = "kpd_core")]
pub struct ScheduleRequest {
    #[pyo3(get)]
    schedule_id: Py<PyString>,
    #[pyo3(get)]
    target: Py<PyString>,
    #[pyo3(get)]
    due_ms: i64,
    #[pyo3(get)]
    headers: Py<PyTuple>,
}

impl Fields for ScheduleRequest {
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let (id, target) = (self.schedule_id.clone_ref(py), self.target.clone_ref(py));
        (id, target, self.due_ms, self.headers.clone_ref(py)).into_pyobject(py)
    }
}

#[pymethods]
impl ScheduleRequest {
    #[new]
    fn new(
        schedule_id: Py<PyString>,
        target: Py<PyString>,
        due_ms: i64,
        headers: Py<PyTuple>,
    ) -> Self {
        ScheduleRequest {
            schedule_id,
            target,
            due_ms,
            headers,
        }
    }

    fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<PyObject> {
        compare(self, other, op)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        repr(self, py)
    }
}

/// A valid cancel of the schedule of `schedule_id`.
#[pyclass(frozen, module = "kpd_core")]
pub struct CancelRequest {
    #[pyo3(get)]
    schedule_id: Py<PyString>,
}

impl Fields for CancelRequest {
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        (self.schedule_id.clone_ref(py),).into_pyobject(py)
    }
}

#[pymethods]
impl CancelRequest {
    #[new]
    fn new(schedule_id: Py<PyString>) -> Self {
        CancelRequest { schedule_id }
    }

    fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<PyObject> {
        compare(self, other, op)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        repr(self, py)
    }
}

fn len_or_zero(data: &Bound<'_, PyAny>) -> PyResult<usize> {
    Ok(bytes_or_none(data)?.map_or(0, <[u8]>::len))
}

/// A buffer record (its headers as consumed, key, value, timestamp) as a `ScheduleRequest` or
/// a `CancelRequest`; `InvalidRecord` with the reason for anything else, whatever the bytes.
#[pyfunction]
pub fn parse<'py>(
    py: Python<'py>,
    headers: &Bound<'py, PyAny>,
    key: &Bound<'py, PyAny>,
    value: &Bound<'py, PyAny>,
    timestamp_ms: i64,
    default_id: Bound<'py, PyString>,
    limits: &Limits,
) -> PyResult<Bound<'py, PyAny>> {
    let mut control = Control::default();
    let user = PyList::empty(py);
    let mut size = len_or_zero(key)? + len_or_zero(value)?;
    if !headers.is_none() {
        for pair in headers.try_iter()? {
            let pair = pair?;
            let header = pair
                .downcast::<PyTuple>()
                .ok()
                .filter(|p| p.len() == 2)
                .ok_or_else(|| PyTypeError::new_err("a header is a (name, value) pair"))?;
            let (name, raw) = (header.get_item(0)?, header.get_item(1)?);
            let name = name.downcast::<PyString>()?.to_cow()?;
            let raw = bytes_or_none(&raw)?;
            if !control.note(&name, raw).map_err(InvalidRecord::new_err)? {
                size += name.len() + raw.map_or(0, <[u8]>::len) + HEADER_FRAMING_BYTES;
                user.append(pair)?;
            }
        }
    }
    let request = buffer_headers::parse(&control, size, timestamp_ms, &limits.limits)
        .map_err(InvalidRecord::new_err)?;
    let text = |s: &str| PyString::new(py, s).unbind();
    Ok(match request {
        Request::Cancel { schedule_id } => Bound::new(
            py,
            CancelRequest {
                schedule_id: text(&schedule_id),
            },
        )?
        .into_any(),
        Request::Schedule {
            schedule_id,
            target,
            due_ms,
        } => Bound::new(
            py,
            ScheduleRequest {
                schedule_id: schedule_id.map_or_else(|| default_id.unbind(), |id| text(&id)),
                target: text(&target),
                due_ms,
                headers: PyTuple::new(py, user)?.unbind(),
            },
        )?
        .into_any(),
    })
}
