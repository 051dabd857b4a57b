//! Python face of `state_records`: `revive.records.ack_records`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::state_records;

/// The ack records of one ledger's settled deliveries ((checkpoint id, offset) pairs) with
/// `outcome` at `at_ms`, each as `revive.records.AckRecord.to_bytes` gives it.
#[pyfunction]
pub fn ack_records<'py>(
    py: Python<'py>,
    ledger: (String, String, u64),
    leases: Vec<(u64, u64)>,
    outcome: u8,
    at_ms: i64,
) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    if !(1..=4).contains(&outcome) {
        return Err(PyValueError::new_err(format!("unknown outcome {outcome}")));
    }
    let (group, topic, partition) = &ledger;
    Ok(
        state_records::ack_records((group, topic, *partition), &leases, outcome, at_ms)
            .iter()
            .map(|record| PyBytes::new(py, record))
            .collect(),
    )
}
