//! Per-partition lease bookkeeping for pop consumption: the rules are `revive/ledger.py`'s
//! docstring (its face). Checkpoints live in id order, which is also offset order, so a
//! lookup is a binary search and the low watermark is the head's first unsettled offset.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};

pub const MAX_DELIVERY_COUNT: u64 = 0xFFFF;

/// What a call answers; the face turns them into the statuses of the HTTP API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Acked,
    AckedLate,
    AlreadyAcked,
    Superseded,
    Invalid,
    Ok,
}

/// How one delivery ended (the values of state records).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Acked = 1,
    Requeued = 2,
    DeadLettered = 3,
}

#[derive(Clone, Default)]
struct Bits(Vec<u8>);

impl Bits {
    fn new(size: usize) -> Self {
        Bits(vec![0; size.div_ceil(8)])
    }
    fn get(&self, i: usize) -> bool {
        self.0[i >> 3] & (1 << (i & 7)) != 0
    }
    fn set(&mut self, i: usize) {
        self.0[i >> 3] |= 1 << (i & 7);
    }
}

/// One pop batch: offsets (none stored when contiguous), counts and three bits per message.
#[derive(Clone)]
struct Checkpoint {
    id: u64,
    first: u64,
    size: usize,
    offsets: Option<Vec<u64>>,
    counts: Vec<u16>,
    settled: Bits,
    acked: Bits,
    reported: Bits, // handed to the revive loop by `expired`: never reported twice
    deadline_ms: i64,
    overrides: Option<HashMap<u64, i64>>, // offset -> deadline, only for changed leases
    unsettled: usize,
    scan: usize, // every index below is settled: keeps the watermark amortised O(1)
    requeued_any: bool,
}

impl Checkpoint {
    fn index(&self, offset: u64) -> Option<usize> {
        match &self.offsets {
            None => {
                let i = offset.checked_sub(self.first)?;
                (i < self.size as u64).then_some(i as usize)
            }
            Some(offsets) => offsets.binary_search(&offset).ok(),
        }
    }
    fn offset_at(&self, i: usize) -> u64 {
        self.offsets
            .as_ref()
            .map_or(self.first + i as u64, |offsets| offsets[i])
    }
    fn deadline_of(&self, offset: u64) -> i64 {
        self.overrides
            .as_ref()
            .and_then(|o| o.get(&offset))
            .copied()
            .unwrap_or(self.deadline_ms)
    }
    fn settled_status(&self, i: usize) -> Status {
        if self.acked.get(i) {
            Status::AlreadyAcked
        } else {
            Status::Superseded
        }
    }
    fn first_unsettled(&mut self) -> usize {
        while self.scan < self.size && self.settled.get(self.scan) {
            self.scan += 1;
        }
        self.scan
    }
    /// Any offset neither settled nor reported expired?
    fn has_open_lease(&mut self) -> bool {
        let first = self.first_unsettled();
        (first..self.size).any(|i| !self.settled.get(i) && !self.reported.get(i))
    }
    fn heap_bytes(&self) -> usize {
        let offsets = self.offsets.as_ref().map_or(0, |o| o.capacity() * 8);
        let overrides = self.overrides.as_ref().map_or(0, |o| o.capacity() * 24);
        let bits = self.settled.0.capacity() + self.acked.0.capacity() + self.reported.0.capacity();
        std::mem::size_of::<Self>() + offsets + overrides + bits + self.counts.capacity() * 2
    }
}

#[derive(Debug, PartialEq)]
pub struct Refused(pub String);

#[derive(Clone)]
pub struct Ledger {
    next_offset: u64, // first offset never leased; below it all is settled
    last_checkpoint_id: Option<u64>,
    live: VecDeque<Checkpoint>, // by id, which is by first offset
    heap: BinaryHeap<Reverse<(i64, u64)>>, // (deadline, checkpoint id), lazily deleted
    in_flight: usize,
    retained: VecDeque<Checkpoint>, // dropped ones that requeued something: late acks read superseded
    retain_settled: usize,
    scans: u64,
    superseded_through: Option<u64>, // the last checkpoint id before a seek: its receipts are over
}

fn find(checkpoints: &VecDeque<Checkpoint>, id: u64) -> Option<usize> {
    checkpoints.binary_search_by_key(&id, |cp| cp.id).ok()
}

impl Ledger {
    pub fn new(committed_offset: u64, retain_settled: usize) -> Self {
        Ledger {
            next_offset: committed_offset,
            last_checkpoint_id: None,
            live: VecDeque::new(),
            heap: BinaryHeap::new(),
            in_flight: 0,
            retained: VecDeque::new(),
            retain_settled,
            scans: 0,
            superseded_through: None,
        }
    }

    pub fn open_checkpoint(
        &mut self,
        id: u64,
        offsets: Vec<u64>,
        counts: &[u64],
        deadline_ms: i64,
    ) -> Result<(), Refused> {
        if let Some(last) = self.last_checkpoint_id.filter(|last| id <= *last) {
            return Err(Refused(format!(
                "checkpoint id {id} not above last id {last}"
            )));
        }
        if offsets.is_empty() || offsets.len() != counts.len() {
            return Err(Refused(
                "a checkpoint needs offsets and one delivery count per offset".into(),
            ));
        }
        if offsets[0] < self.next_offset {
            return Err(Refused(format!(
                "offset {} already leased or committed",
                offsets[0]
            )));
        }
        if offsets.windows(2).any(|w| w[1] <= w[0]) {
            return Err(Refused(
                "checkpoint offsets must be strictly increasing".into(),
            ));
        }
        if counts.iter().any(|c| !(1..=MAX_DELIVERY_COUNT).contains(c)) {
            return Err(Refused(format!(
                "delivery counts must be in 1..{MAX_DELIVERY_COUNT}"
            )));
        }
        let (size, first, last) = (offsets.len(), offsets[0], offsets[offsets.len() - 1]);
        let contiguous = last - first == size as u64 - 1;
        self.live.push_back(Checkpoint {
            id,
            first,
            size,
            offsets: (!contiguous).then_some(offsets),
            counts: counts.iter().map(|&c| c as u16).collect(),
            settled: Bits::new(size),
            acked: Bits::new(size),
            reported: Bits::new(size),
            deadline_ms,
            overrides: None,
            unsettled: size,
            scan: 0,
            requeued_any: false,
        });
        self.last_checkpoint_id = Some(id);
        self.next_offset = last + 1;
        self.heap.push(Reverse((deadline_ms, id)));
        self.in_flight += size;
        Ok(())
    }

    /// (position in `live`, index) of a live lease, else the status to answer.
    fn locate(&self, id: u64, offset: u64) -> Result<(usize, usize), Status> {
        if let Some(at) = find(&self.live, id) {
            return self.live[at]
                .index(offset)
                .map(|i| (at, i))
                .ok_or(Status::Invalid);
        }
        if let Some(at) = find(&self.retained, id) {
            let retired = &self.retained[at];
            return Err(retired
                .index(offset)
                .map_or(Status::Invalid, |i| retired.settled_status(i)));
        }
        // A seek ended every lease opened before it, wherever its offsets were.
        if self.superseded_through.is_some_and(|through| id <= through) {
            return Err(Status::Superseded);
        }
        // Ids and offsets only grow between seeks, so a dropped checkpoint has an id seen before
        // and offsets below every live one; anything else was never issued for this partition.
        let floor = self.live.front().map_or(self.next_offset, |cp| cp.first);
        let seen = self.last_checkpoint_id.is_some_and(|last| id <= last);
        Err(if seen && offset < floor {
            Status::AlreadyAcked
        } else {
            Status::Invalid
        })
    }

    /// The lease still open at (id, offset), or the status to answer.
    fn open_lease(&self, id: u64, offset: u64) -> Result<(usize, usize), Status> {
        let (at, i) = self.locate(id, offset)?;
        let cp = &self.live[at];
        if cp.settled.get(i) {
            return Err(cp.settled_status(i));
        }
        Ok((at, i))
    }

    fn end(&mut self, at: usize, i: usize, outcome: Outcome) {
        let cp = &mut self.live[at];
        cp.settled.set(i);
        if outcome == Outcome::Acked {
            cp.acked.set(i);
        } else {
            cp.requeued_any = true;
        }
        cp.unsettled -= 1;
        self.in_flight -= 1;
        while self.live.front().is_some_and(|head| head.unsettled == 0) {
            let mut head = self.live.pop_front().unwrap();
            if head.requeued_any && self.retain_settled > 0 {
                // Only the two outcome bitmaps answer late receipts; free the rest.
                (head.counts, head.reported, head.overrides) = (Vec::new(), Bits::default(), None);
                self.retained.push_back(head);
                if self.retained.len() > self.retain_settled {
                    self.retained.pop_front();
                }
            }
        }
    }

    /// The group's position moved to `offset` (either way): every open lease ends as if
    /// requeued, without a copy, and receipts of any earlier checkpoint answer superseded.
    pub fn seek(&mut self, offset: u64) {
        for mut cp in std::mem::take(&mut self.live) {
            for i in 0..cp.size {
                if !cp.settled.get(i) {
                    cp.settled.set(i);
                    cp.requeued_any = true;
                }
            }
            if cp.requeued_any && self.retain_settled > 0 {
                (cp.counts, cp.reported, cp.overrides) = (Vec::new(), Bits::default(), None);
                self.retained.push_back(cp);
            }
        }
        while self.retained.len() > self.retain_settled {
            self.retained.pop_front();
        }
        self.heap.clear();
        self.in_flight = 0;
        self.superseded_through = self.last_checkpoint_id;
        self.next_offset = offset;
    }

    /// (checkpoint id, offset) of every lease not settled yet, in checkpoint order.
    pub fn open_leases(&self) -> Vec<(u64, u64)> {
        self.live
            .iter()
            .flat_map(|cp| {
                (0..cp.size)
                    .filter(|&i| !cp.settled.get(i))
                    .map(|i| (cp.id, cp.offset_at(i)))
            })
            .collect()
    }

    pub fn ack(&mut self, id: u64, offset: u64, now_ms: i64) -> Status {
        let answer = self.ack_status(id, offset, now_ms);
        if matches!(answer, Status::Acked | Status::AckedLate) {
            let (at, i) = self.open_lease(id, offset).expect("an open lease");
            self.end(at, i, Outcome::Acked);
        }
        answer
    }

    /// What `ack` would answer now, changing nothing (an all-or-nothing call asks first).
    pub fn ack_status(&self, id: u64, offset: u64, now_ms: i64) -> Status {
        match self.open_lease(id, offset) {
            Err(status) => status,
            Ok((at, _)) if now_ms >= self.live[at].deadline_of(offset) => Status::AckedLate,
            Ok(_) => Status::Acked,
        }
    }

    pub fn settle(&mut self, id: u64, offset: u64, outcome: Outcome) -> Status {
        match self.open_lease(id, offset) {
            Err(status) => status,
            Ok((at, i)) => {
                self.end(at, i, outcome);
                Status::Ok
            }
        }
    }

    pub fn change_deadline(
        &mut self,
        id: u64,
        offset: u64,
        deadline_ms: i64,
        now_ms: i64,
    ) -> Status {
        let (at, i) = match self.open_lease(id, offset) {
            Err(status) => return status,
            Ok(found) => found,
        };
        let cp = &mut self.live[at];
        if cp.reported.get(i) || now_ms >= cp.deadline_of(offset) {
            return Status::Superseded;
        }
        if deadline_ms == cp.deadline_ms {
            if let Some(overrides) = &mut cp.overrides {
                overrides.remove(&offset);
            }
        } else {
            cp.overrides
                .get_or_insert_with(HashMap::new)
                .insert(offset, deadline_ms);
        }
        // The old deadline's entry stays in the heap; `expired` checks the real deadline.
        self.heap.push(Reverse((deadline_ms, id)));
        Status::Ok
    }

    /// No lease ends before this (None: none may): a bound, as a changed lease's old entry
    /// stays until its time passes. Entries of checkpoints with no open lease left go here:
    /// a shard whose leases were all acked sleeps instead of waking at each old deadline.
    pub fn next_deadline_ms(&mut self) -> Option<i64> {
        while let Some(&Reverse((deadline, id))) = self.heap.peek() {
            if find(&self.live, id).is_some_and(|at| self.live[at].has_open_lease()) {
                return Some(deadline);
            }
            self.heap.pop();
        }
        None
    }

    /// Unsettled leases due by `now_ms` and not reported before, in deadline order:
    /// (checkpoint id, offset, delivery count).
    pub fn expired(&mut self, now_ms: i64) -> Vec<(u64, u64, u16)> {
        let mut due: Vec<(i64, u64, u64, u16)> = Vec::new();
        let mut scanned = HashSet::new();
        while let Some(&Reverse((deadline, id))) = self.heap.peek() {
            if deadline > now_ms {
                break;
            }
            self.heap.pop();
            self.scans += 1;
            // One scan per checkpoint per call finds every due offset, whichever entry led here.
            let Some(at) = find(&self.live, id) else {
                continue;
            };
            if !scanned.insert(id) {
                continue;
            }
            let cp = &mut self.live[at];
            for i in cp.first_unsettled()..cp.size {
                if cp.settled.get(i) || cp.reported.get(i) {
                    continue;
                }
                let offset = cp.offset_at(i);
                let deadline = cp.deadline_of(offset);
                if deadline <= now_ms {
                    cp.reported.set(i);
                    due.push((deadline, id, offset, cp.counts[i]));
                }
            }
        }
        // A scan also finds offsets due later than other checkpoints' entries, and stale
        // entries differ between a live and a replayed heap: sorting makes the order exact.
        due.sort_unstable();
        due.into_iter()
            .map(|(_, id, offset, count)| (id, offset, count))
            .collect()
    }

    pub fn delivery_count(&self, id: u64, offset: u64) -> Option<u16> {
        let (at, i) = self.locate(id, offset).ok()?;
        Some(self.live[at].counts[i])
    }

    /// The offset to commit; `cursor` is the next offset the pop reader will hand out.
    pub fn low_watermark(&mut self, cursor: u64) -> Result<u64, Refused> {
        if cursor < self.next_offset {
            return Err(Refused(format!(
                "cursor {cursor} is below leased offset {}",
                self.next_offset - 1
            )));
        }
        Ok(match self.live.front_mut() {
            None => cursor,
            Some(head) => {
                let i = head.first_unsettled(); // settled heads are dropped: this one has work left
                head.offset_at(i)
            }
        })
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    pub fn live_checkpoints(&self) -> usize {
        self.live.len()
    }

    /// Heap entries examined by `expired` so far: what it costs is the due entries, not a scan.
    pub fn scans(&self) -> u64 {
        self.scans
    }

    /// What the ledger holds on the heap, roughly (its structures' capacities).
    pub fn heap_bytes(&self) -> usize {
        let checkpoints: usize = self
            .live
            .iter()
            .chain(&self.retained)
            .map(Checkpoint::heap_bytes)
            .sum();
        checkpoints + self.heap.capacity() * 16
    }
}
