//! Python face of `render`: a lane batch of a pop in, its answers and log events out.

use std::collections::HashSet;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use crate::py_provenance::Provenance;
use crate::py_source_record::SourceRecord;
use crate::py_value::bytes_or_none;
use crate::render::{self, Delivery};

/// Renders what a pop hands out; kpd's own headers (`hidden`) are not shown to workers.
#[pyclass(frozen, module = "kpd_core")]
pub struct DeliveryRenderer {
    node: String,
    hidden: HashSet<String>,
}

#[pymethods]
impl DeliveryRenderer {
    #[new]
    fn new(node: String, hidden_headers: HashSet<String>) -> Self {
        DeliveryRenderer {
            node,
            hidden: hidden_headers,
        }
    }

    /// One lane batch (`(SourceRecord, Provenance)` pairs, their delivery counts and receipts):
    /// each message's JSON for the answer, and its (record id, DELIVERED event) for the log.
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn render<'py>(
        &self,
        py: Python<'py>,
        group: &str,
        batch: &Bound<'py, PyList>,
        counts: Vec<u64>,
        receipts: &Bound<'py, PyList>,
        at_ms: i64,
        invisible_until_ms: i64,
    ) -> PyResult<(Vec<Bound<'py, PyBytes>>, Vec<(String, Bound<'py, PyBytes>)>)> {
        if counts.len() != batch.len() || receipts.len() != batch.len() {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "a count and a receipt for each message",
            ));
        }
        let mut answers = Vec::with_capacity(batch.len());
        let mut events = Vec::with_capacity(batch.len());
        for ((pair, count), receipt) in batch.iter().zip(counts).zip(receipts.iter()) {
            let pair = pair.downcast_into::<PyTuple>()?;
            let source = pair.get_item(0)?.downcast_into::<SourceRecord>()?;
            let found = pair.get_item(1)?.downcast_into::<Provenance>()?;
            let (source, origin) = (source.get(), found.get().origin.get());
            let headers = source.headers.bind(py);
            let mut names = Vec::with_capacity(headers.len());
            let mut values = Vec::with_capacity(headers.len());
            for header in headers.iter() {
                let header = header.downcast_into::<PyTuple>()?;
                names.push(header.get_item(0)?.downcast_into::<PyString>()?);
                values.push(header.get_item(1)?);
            }
            let mut shown = Vec::with_capacity(names.len());
            for (name, header_value) in names.iter().zip(&values) {
                let name = name.to_str()?;
                if !self.hidden.contains(name) {
                    shown.push((name, bytes_or_none(header_value)?));
                }
            }
            let receipt = receipt.downcast_into::<PyString>()?;
            let delivery = Delivery {
                topic: origin.topic.bind(py).to_str()?,
                partition: origin.partition,
                offset: origin.offset,
                key: source.key.as_ref().map(|k| k.bind(py).as_bytes()),
                value: source.value.as_ref().map(|v| v.bind(py).as_bytes()),
                headers: shown,
                timestamp_ms: source.timestamp_ms,
                delivery_count: count,
                receipt: receipt.to_str()?,
            };
            answers.push(PyBytes::new(
                py,
                &render::message(&delivery, invisible_until_ms),
            ));
            let id = render::record_id(&delivery);
            let event = render::delivered_event(&delivery, &id, at_ms, &self.node, group);
            events.push((id, PyBytes::new(py, &event)));
        }
        Ok((answers, events))
    }
}
