//! What the core's Python classes share: bytes that may be None, and value semantics.

use pyo3::prelude::*;
use pyo3::pyclass::{boolean_struct, CompareOp, PyClass};
use pyo3::types::{PyBytes, PyTuple};
use pyo3::PyTypeInfo;

pub fn bytes_or_none<'a>(value: &'a Bound<'_, PyAny>) -> PyResult<Option<&'a [u8]>> {
    if value.is_none() {
        return Ok(None);
    }
    Ok(Some(value.downcast::<PyBytes>()?.as_bytes()))
}

/// A value class: equal to another of its class with equal fields, shown as its fields.
pub trait Fields: PyClass<Frozen = boolean_struct::True> + Sync {
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>>;
}

/// `==` and `!=` by fields; no order.
pub fn compare<T: Fields>(this: &T, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<PyObject> {
    let py = other.py();
    let equal = || match other.downcast::<T>() {
        Ok(other) => this.fields(py)?.eq(other.get().fields(py)?),
        Err(_) => Ok(false),
    };
    match op {
        CompareOp::Eq => Ok(equal()?.into_pyobject(py)?.to_owned().into_any().unbind()),
        CompareOp::Ne => Ok((!equal()?)
            .into_pyobject(py)?
            .to_owned()
            .into_any()
            .unbind()),
        _ => Ok(py.NotImplemented()),
    }
}

/// `Name(field, ...)`, each field as Python shows it.
pub fn repr<T: Fields>(this: &T, py: Python<'_>) -> PyResult<String> {
    let fields = this
        .fields(py)?
        .iter()
        .map(|field| Ok(field.repr()?.to_string()))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(format!(
        "{}({})",
        <T as PyTypeInfo>::NAME,
        fields.join(", ")
    ))
}
