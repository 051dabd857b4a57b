//! A consume's messages sorted into lane runs in one call (`revive.fetcher`).

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::py_provenance::provenance;
use crate::py_source_record::SourceRecord;

/// The lane of a record: its topic for originals, `retry/origin` for retries.
#[pyfunction]
pub fn lane_name(source_topic: &str, origin_topic: &str) -> String {
    crate::provenance::lane_name(source_topic, origin_topic)
}

/// A consume's messages (those without an error) as runs of one lane: (origin topic, lane,
/// partition, [(SourceRecord, Provenance)]), in the order consumed. Distrusted retry copies
/// run under the origin `untrusted`.
#[pyfunction]
pub fn lane_runs<'py>(
    py: Python<'py>,
    messages: &Bound<'py, PyList>,
    retry_topic: &str,
    untrusted: &str,
) -> PyResult<Vec<Bound<'py, PyTuple>>> {
    struct Run<'py> {
        topic: String,
        partition: i64,
        origin: String,
        fetched: Vec<Bound<'py, PyTuple>>,
    }
    let mut runs: Vec<Run<'py>> = Vec::new();
    for message in messages.iter() {
        if !message.call_method0(intern!(py, "error"))?.is_none() {
            continue;
        }
        let record = Bound::new(py, SourceRecord::of(&message)?)?;
        let found = provenance(py, &record, retry_topic)?;
        let origin = match &found.distrust {
            Some(_) => untrusted.to_owned(),
            None => found.origin.get().topic.bind(py).to_cow()?.into_owned(),
        };
        let topic = record.get().topic.bind(py).to_cow()?.into_owned();
        let partition = record.get().partition;
        let pair = PyTuple::new(py, [record.into_any(), Bound::new(py, found)?.into_any()])?;
        match runs.last_mut() {
            Some(run)
                if run.partition == partition && run.origin == origin && run.topic == topic =>
            {
                run.fetched.push(pair)
            }
            _ => runs.push(Run {
                topic,
                partition,
                origin,
                fetched: vec![pair],
            }),
        }
    }
    runs.into_iter()
        .map(|run| {
            let lane = crate::provenance::lane_name(&run.topic, &run.origin);
            (
                run.origin,
                lane,
                run.partition,
                PyList::new(py, run.fetched)?,
            )
                .into_pyobject(py)
        })
        .collect()
}
