//! Python face of `ledger`: `revive.ledger.PartitionLedger`, with the statuses as strings.

use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::ledger::{Ledger, Outcome, Refused, Status};

fn refused(Refused(reason): Refused) -> PyErr {
    PyValueError::new_err(reason)
}

fn number<T: for<'a> FromPyObject<'a>>(value: &Bound<'_, PyAny>, what: &str) -> PyResult<T> {
    value
        .extract()
        .map_err(|_| PyValueError::new_err(format!("{what} out of range: {value}")))
}

fn numbers(values: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u64>> {
    values
        .try_iter()?
        .map(|value| number(&value?, what))
        .collect()
}

fn status<'py>(py: Python<'py>, status: Status) -> Bound<'py, PyString> {
    match status {
        Status::Acked => intern!(py, "acked"),
        Status::AckedLate => intern!(py, "acked_late"),
        Status::AlreadyAcked => intern!(py, "already_acked"),
        Status::Superseded => intern!(py, "superseded"),
        Status::Invalid => intern!(py, "invalid"),
        Status::Ok => intern!(py, "ok"),
    }
    .clone()
}

/// A lease of a receipt or state record: ids and offsets no ledger holds answer `invalid`.
fn lease(checkpoint_id: &Bound<'_, PyAny>, offset: &Bound<'_, PyAny>) -> Option<(u64, u64)> {
    Some((checkpoint_id.extract().ok()?, offset.extract().ok()?))
}

/// Leases of one (group, source topic, partition); the rules are `revive.ledger`'s docstring.
#[pyclass(module = "kpd_core")]
pub struct PartitionLedger {
    ledger: Ledger,
}

#[pymethods]
impl PartitionLedger {
    #[new]
    #[pyo3(signature = (committed_offset, *, retain_settled = 1024))]
    fn new(committed_offset: &Bound<'_, PyAny>, retain_settled: usize) -> PyResult<Self> {
        let committed = number::<i64>(committed_offset, "committed offset")?;
        let committed = u64::try_from(committed).map_err(|_| {
            PyValueError::new_err(format!("committed offset must be >= 0, got {committed}"))
        })?;
        Ok(PartitionLedger {
            ledger: Ledger::new(committed, retain_settled),
        })
    }

    /// Record a pop batch; `ValueError` if it breaks the ordering invariants.
    fn open_checkpoint(
        &mut self,
        checkpoint_id: &Bound<'_, PyAny>,
        offsets: &Bound<'_, PyAny>,
        delivery_counts: &Bound<'_, PyAny>,
        deadline_ms: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let id = number(checkpoint_id, "checkpoint id")?;
        let (offsets, counts) = (
            numbers(offsets, "offset")?,
            numbers(delivery_counts, "delivery count")?,
        );
        let deadline = number(deadline_ms, "deadline")?;
        self.ledger
            .open_checkpoint(id, offsets, &counts, deadline)
            .map_err(refused)
    }

    fn ack_status<'py>(
        &self,
        checkpoint_id: &Bound<'py, PyAny>,
        offset: &Bound<'py, PyAny>,
        now_ms: i64,
    ) -> Bound<'py, PyString> {
        let answer = match lease(checkpoint_id, offset) {
            Some((id, offset)) => self.ledger.ack_status(id, offset, now_ms),
            None => Status::Invalid,
        };
        status(offset.py(), answer)
    }

    fn ack<'py>(
        &mut self,
        checkpoint_id: &Bound<'py, PyAny>,
        offset: &Bound<'py, PyAny>,
        now_ms: i64,
    ) -> Bound<'py, PyString> {
        let answer = match lease(checkpoint_id, offset) {
            Some((id, offset)) => self.ledger.ack(id, offset, now_ms),
            None => Status::Invalid,
        };
        status(offset.py(), answer)
    }

    /// End one delivery with `outcome` (`revive.ledger.Outcome`): nack, reject, revive.
    fn settle<'py>(
        &mut self,
        checkpoint_id: &Bound<'py, PyAny>,
        offset: &Bound<'py, PyAny>,
        outcome: u8,
    ) -> PyResult<Bound<'py, PyString>> {
        let outcome = match outcome {
            1 => Outcome::Acked,
            2 => Outcome::Requeued,
            3 => Outcome::DeadLettered,
            _ => return Err(PyValueError::new_err(format!("unknown outcome {outcome}"))),
        };
        let answer = match lease(checkpoint_id, offset) {
            Some((id, offset)) => self.ledger.settle(id, offset, outcome),
            None => Status::Invalid,
        };
        Ok(status(offset.py(), answer))
    }

    fn change_deadline<'py>(
        &mut self,
        checkpoint_id: &Bound<'py, PyAny>,
        offset: &Bound<'py, PyAny>,
        deadline_ms: i64,
        now_ms: i64,
    ) -> Bound<'py, PyString> {
        let answer = match lease(checkpoint_id, offset) {
            Some((id, offset)) => self.ledger.change_deadline(id, offset, deadline_ms, now_ms),
            None => Status::Invalid,
        };
        status(offset.py(), answer)
    }

    /// The group's position moved to `offset`: every open lease ends (receipts read
    /// superseded) and the next checkpoint may start there, before or after what was leased.
    fn seek(&mut self, offset: &Bound<'_, PyAny>) -> PyResult<()> {
        let offset = number::<i64>(offset, "offset")?;
        let offset = u64::try_from(offset)
            .map_err(|_| PyValueError::new_err(format!("offset must be >= 0, got {offset}")))?;
        self.ledger.seek(offset);
        Ok(())
    }

    /// (checkpoint id, offset) of every lease not settled yet.
    fn open_leases(&self) -> Vec<(u64, u64)> {
        self.ledger.open_leases()
    }

    fn next_deadline_ms(&mut self) -> Option<i64> {
        self.ledger.next_deadline_ms()
    }

    fn expired(&mut self, now_ms: i64) -> Vec<(u64, u64, u16)> {
        self.ledger.expired(now_ms)
    }

    /// Delivery count of a live lease; `KeyError` if it is not live.
    fn delivery_count(
        &self,
        checkpoint_id: &Bound<'_, PyAny>,
        offset: &Bound<'_, PyAny>,
    ) -> PyResult<u16> {
        lease(checkpoint_id, offset)
            .and_then(|(id, at)| self.ledger.delivery_count(id, at))
            .ok_or_else(|| {
                PyKeyError::new_err((checkpoint_id.clone().unbind(), offset.clone().unbind()))
            })
    }

    fn low_watermark(&mut self, cursor: &Bound<'_, PyAny>) -> PyResult<u64> {
        self.ledger
            .low_watermark(number(cursor, "cursor")?)
            .map_err(refused)
    }

    fn in_flight(&self) -> usize {
        self.ledger.in_flight()
    }

    /// Checkpoints with a lease not settled yet (settled ones are dropped at once).
    fn live_checkpoints(&self) -> usize {
        self.ledger.live_checkpoints()
    }

    /// Heap entries `expired` has examined so far.
    fn scans(&self) -> u64 {
        self.ledger.scans()
    }

    /// Bytes the ledger holds, roughly: what a leased message costs.
    fn heap_bytes(&self) -> usize {
        self.ledger.heap_bytes()
    }

    fn __deepcopy__(&self, _memo: &Bound<'_, PyAny>) -> Self {
        PartitionLedger {
            ledger: self.ledger.clone(),
        }
    }
}
