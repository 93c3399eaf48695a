//! The server-wide work queue: how many requests hold decoded pixels, how
//! many wait, how many bytes of uploads are held, and how much memory the
//! requests at work may hold, at once.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};

/// Bounds what the server holds at once. Up to `max_running` requests hold
/// decoded pixels (one per inference worker, plus one decoding or encoding
/// beside them); the others wait in line, at most `capacity()` in all, past
/// which a request is refused at once. Turns go in the order requests were
/// ready for one, so nobody's wait grows while later arrivals go first. A
/// request in line reads its upload only when the uploads held fit in
/// `upload_buffer` bytes, and its account's in half of them; until then it
/// holds only its connection (the client's bytes wait in the network). So
/// one account's uploads, however slowly they come, leave room for
/// another's.
///
/// A request's turn also waits until the memory it will hold at its peak
/// (`memory::need`) fits the `memory_budget` beside what the requests at
/// work and the answers being sent hold. One that could never fit is
/// refused at once, and so is one that would join a line already holding
/// more than `BACKLOG` budgets' worth: its wait would be longer than a
/// client waits.
pub struct WorkQueue {
    counts: Mutex<Counts>,
    changed: Condvar,
    max_running: usize,
    max_waiting: usize,
    upload_buffer: u64,
    memory_budget: u64,
}

/// How many budgets' worth of requests may be at work and in line for memory.
const BACKLOG: u64 = 2;

/// Why a request gets no turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoTurn {
    /// It needs more memory than the whole budget.
    NeverFits { budget: u64 },
    /// The line ahead already needs `BACKLOG` budgets.
    Busy,
}

#[derive(Default)]
struct Counts {
    running: usize,
    waiting: usize,
    /// Bytes reserved by the uploads being read or held.
    uploads: u64,
    /// The same, by account.
    uploads_by: HashMap<i64, u64>,
    /// The number the next request ready for a turn takes, and the one
    /// whose turn is next.
    next_number: u64,
    next_turn: u64,
    /// Bytes reserved by the requests at work and the answers being sent.
    memory: u64,
    /// Bytes the requests in line for a turn will reserve.
    memory_wanted: u64,
}

/// A request's place in line; its upload's reservation and, once it has
/// its turn, its right to hold pixels. Both end when it is dropped.
pub struct Place<'q> {
    queue: &'q WorkQueue,
    upload: u64,
    account: Option<i64>,
    running: bool,
    /// Bytes of memory reserved once it has its turn.
    memory: u64,
}

/// Memory still held once a request's turn is over: its answer, until sent.
pub struct Held<'q> {
    queue: &'q WorkQueue,
    memory: u64,
}

impl WorkQueue {
    pub fn new(max_running: usize, max_waiting: usize, upload_buffer: u64) -> WorkQueue {
        WorkQueue {
            counts: Mutex::default(),
            changed: Condvar::new(),
            max_running: max_running.max(1),
            max_waiting,
            upload_buffer,
            memory_budget: u64::MAX,
        }
    }

    /// Bounds the memory the requests at work hold at once.
    pub fn with_memory_budget(mut self, bytes: u64) -> WorkQueue {
        self.memory_budget = bytes;
        self
    }

    fn lock(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'a>(&self, counts: MutexGuard<'a, Counts>) -> MutexGuard<'a, Counts> {
        self.changed.wait(counts).unwrap_or_else(|p| p.into_inner())
    }

    /// A place in line for an upload of at most `upload` bytes, once the
    /// uploads held leave room for it (one upload alone always fits); `None`
    /// at once if the line is full.
    pub fn join(&self, upload: u64) -> Option<Place<'_>> {
        self.join_as(None, upload)
    }

    /// `join` for `account`'s upload, which also waits while the account's
    /// uploads would hold more than half the buffer (one alone always fits).
    pub fn join_as(&self, account: Option<i64>, upload: u64) -> Option<Place<'_>> {
        let mut counts = self.lock();
        if counts.running + counts.waiting >= self.capacity() {
            return None;
        }
        counts.waiting += 1;
        self.hold(counts, account, upload);
        Some(Place {
            queue: self,
            upload,
            account,
            running: false,
            memory: 0,
        })
    }

    /// Waits until the uploads held leave room for `upload` more bytes (one
    /// upload alone always fits), and `account`'s for its half, then holds them.
    fn hold(&self, mut counts: MutexGuard<'_, Counts>, account: Option<i64>, upload: u64) {
        let share = self.upload_buffer / 2;
        let held_by = |counts: &Counts| {
            account.map_or(0, |a| counts.uploads_by.get(&a).copied().unwrap_or(0))
        };
        while (counts.uploads > 0 && counts.uploads + upload > self.upload_buffer)
            || (held_by(&counts) > 0 && held_by(&counts) + upload > share)
        {
            counts = self.wait(counts);
        }
        counts.uploads += upload;
        if let Some(account) = account {
            *counts.uploads_by.entry(account).or_default() += upload;
        }
    }

    /// Requests running and waiting.
    pub fn depth(&self) -> usize {
        let counts = self.lock();
        counts.running + counts.waiting
    }

    /// Bytes reserved by the uploads being read or held.
    pub fn uploads_held(&self) -> u64 {
        self.lock().uploads
    }

    /// The most requests it holds before refusing.
    pub fn capacity(&self) -> usize {
        self.max_running + self.max_waiting
    }

    /// Bytes of memory reserved now, and the budget.
    pub fn memory(&self) -> (u64, u64) {
        (self.lock().memory, self.memory_budget)
    }
}

impl<'q> Place<'q> {
    /// Holds `more` bytes of uploads beside this place's, waiting as
    /// `join_as` does until the uploads held leave room: a file fetched
    /// from a URL is held as an uploaded one is. The old reservation is
    /// given up while it waits, so that two places growing at once never
    /// wait on each other.
    pub fn hold_more(&mut self, more: u64) {
        let upload = self.upload + more;
        let mut counts = self.queue.lock();
        counts.uploads -= self.upload;
        if let Some(account) = self.account {
            *counts.uploads_by.entry(account).or_default() -= self.upload;
        }
        self.queue.hold(counts, self.account, upload);
        self.upload = upload;
    }

    /// Waits until this request may hold decoded pixels, and `memory`
    /// bytes of them at its peak beside what the others at work hold;
    /// refused at once if it can never fit, or the line is too long.
    pub fn wait_for_turn(&mut self, memory: u64) -> Result<(), NoTurn> {
        if self.running {
            return Ok(());
        }
        let queue = self.queue;
        let budget = queue.memory_budget;
        if memory > budget {
            return Err(NoTurn::NeverFits { budget });
        }
        let mut counts = queue.lock();
        let ahead = counts.memory.saturating_add(counts.memory_wanted);
        if ahead > 0 && ahead.saturating_add(memory) > budget.saturating_mul(BACKLOG) {
            return Err(NoTurn::Busy);
        }
        counts.memory_wanted += memory;
        let number = counts.next_number;
        counts.next_number += 1;
        while counts.next_turn != number
            || counts.running >= queue.max_running
            || counts.memory + memory > budget
        {
            counts = queue.wait(counts);
        }
        counts.next_turn += 1;
        counts.waiting -= 1;
        counts.running += 1;
        counts.memory_wanted -= memory;
        counts.memory += memory;
        self.running = true;
        self.memory = memory;
        let slot_left = counts.running < queue.max_running;
        drop(counts);
        // The next place may have woken before this one and gone back to
        // sleep; only a slot still free is worth waking it for.
        if slot_left {
            queue.changed.notify_all();
        }
        Ok(())
    }

    /// Ends this request's turn and its place in line, keeping `memory`
    /// bytes of its reservation (its answer) until the `Held` is dropped.
    pub fn hand_over(mut self, memory: u64) -> Held<'q> {
        let kept = memory.min(self.memory);
        let mut counts = self.queue.lock();
        counts.memory -= self.memory - kept;
        self.memory = 0;
        drop(counts);
        Held {
            queue: self.queue,
            memory: kept,
        }
    }
}

impl Held<'_> {
    /// Keeps at most `memory` bytes reserved: the answer as it is sent,
    /// once its copies made on the way are gone.
    pub fn shrink_to(&mut self, memory: u64) {
        let kept = memory.min(self.memory);
        self.queue.lock().memory -= self.memory - kept;
        self.memory = kept;
        self.queue.changed.notify_all();
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.queue.lock().memory -= self.memory;
        self.queue.changed.notify_all();
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let mut counts = self.queue.lock();
        if self.running {
            counts.running -= 1;
        } else {
            counts.waiting -= 1;
        }
        counts.memory -= self.memory;
        counts.uploads -= self.upload;
        if let Some(account) = self.account {
            if let Some(held) = counts.uploads_by.get_mut(&account) {
                *held -= self.upload;
                if *held == 0 {
                    counts.uploads_by.remove(&account);
                }
            }
        }
        drop(counts);
        // Waiters for a turn and for upload room share the condition.
        self.queue.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_refuses_only_when_running_and_waiting_are_both_full() {
        let queue = WorkQueue::new(1, 1, u64::MAX);
        let mut first = queue.join(10).unwrap();
        first.wait_for_turn(0).unwrap();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                queue
                    .join(10)
                    .map(|mut place| place.wait_for_turn(0).unwrap())
            });
            while queue.depth() < 2 {
                std::thread::yield_now();
            }
            assert!(queue.join(10).is_none(), "one running, one waiting: full");
            drop(first);
            assert!(waiter.join().unwrap().is_some(), "the waiter gets its turn");
        });
        assert_eq!(queue.depth(), 0);
    }

    #[test]
    fn turns_go_in_the_order_requests_were_ready() {
        let queue = WorkQueue::new(1, 8, u64::MAX);
        let mut first = queue.join(10).unwrap();
        first.wait_for_turn(0).unwrap();
        let served = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for arrival in 0..6 {
                let (queue, served) = (&queue, &served);
                s.spawn(move || {
                    let mut place = queue.join(10).unwrap();
                    place.wait_for_turn(0).unwrap();
                    served.lock().unwrap().push(arrival);
                });
                // The next one arrives once this one holds its place.
                while queue.lock().next_number < arrival + 2 {
                    std::thread::yield_now();
                }
            }
            drop(first);
        });
        assert_eq!(served.into_inner().unwrap(), (0..6).collect::<Vec<u64>>());
    }

    #[test]
    fn a_turn_waits_until_its_memory_fits_beside_the_others() {
        let queue = WorkQueue::new(4, 8, u64::MAX).with_memory_budget(100);
        let mut first = queue.join(1).unwrap();
        first.wait_for_turn(60).unwrap();
        std::thread::scope(|s| {
            let second = s.spawn(|| {
                let mut place = queue.join(1).unwrap();
                place.wait_for_turn(50).map(|()| queue.memory().0)
            });
            while queue.lock().memory_wanted < 50 {
                std::thread::yield_now();
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(!second.is_finished(), "60 + 50 is over 100");
            assert_eq!(queue.memory(), (60, 100));
            drop(first);
            assert_eq!(
                second.join().unwrap(),
                Ok(50),
                "room once the first is done"
            );
        });
        assert_eq!(queue.memory().0, 0);
    }

    #[test]
    fn a_request_that_can_never_fit_or_would_wait_behind_two_budgets_is_refused_at_once() {
        let queue = WorkQueue::new(1, 8, u64::MAX).with_memory_budget(100);
        let mut never = queue.join(1).unwrap();
        assert_eq!(
            never.wait_for_turn(101),
            Err(NoTurn::NeverFits { budget: 100 })
        );
        drop(never);
        let mut first = queue.join(1).unwrap();
        first.wait_for_turn(90).unwrap();
        std::thread::scope(|s| {
            let second = s.spawn(|| queue.join(1).unwrap().wait_for_turn(90));
            while queue.lock().memory_wanted < 90 {
                std::thread::yield_now();
            }
            // 90 at work and 90 in line: 30 more would be over 200.
            let mut third = queue.join(1).unwrap();
            assert_eq!(third.wait_for_turn(30), Err(NoTurn::Busy));
            drop(third);
            drop(first);
            assert_eq!(second.join().unwrap(), Ok(()));
        });
        assert_eq!(queue.memory().0, 0);
        assert_eq!(queue.depth(), 0);
    }

    #[test]
    fn an_answer_handed_over_keeps_its_memory_until_it_is_sent() {
        let queue = WorkQueue::new(1, 8, u64::MAX).with_memory_budget(100);
        let mut place = queue.join(1).unwrap();
        place.wait_for_turn(80).unwrap();
        let mut held = place.hand_over(40);
        assert_eq!(queue.depth(), 0, "its turn is over");
        assert_eq!(queue.memory().0, 40);
        held.shrink_to(30);
        assert_eq!(queue.memory().0, 30);
        let mut next = queue.join(1).unwrap();
        next.wait_for_turn(70).unwrap();
        assert_eq!(queue.memory().0, 100);
        drop(held);
        assert_eq!(queue.memory().0, 70);
    }

    #[test]
    fn uploads_are_read_only_while_they_fit_the_buffer() {
        let queue = WorkQueue::new(1, 8, 25);
        let a = queue.join(10).unwrap();
        let b = queue.join(10).unwrap();
        std::thread::scope(|s| {
            let third = s.spawn(|| queue.join(10).map(|_| ()));
            while queue.depth() < 3 {
                std::thread::yield_now();
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(!third.is_finished(), "30 bytes would not fit in 25");
            drop(a);
            assert!(third.join().unwrap().is_some(), "room once one is done");
        });
        drop(b);
        let alone = queue.join(1000).unwrap();
        assert_eq!(
            alone.upload, 1000,
            "an upload larger than the buffer still fits alone"
        );
    }

    #[test]
    fn one_accounts_uploads_leave_room_for_anothers() {
        let queue = WorkQueue::new(1, 8, 40);
        let held = [queue.join_as(Some(1), 10), queue.join_as(Some(1), 10)];
        std::thread::scope(|s| {
            let third = s.spawn(|| queue.join_as(Some(1), 10).map(|_| ()));
            while queue.depth() < 3 {
                std::thread::yield_now();
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(
                !third.is_finished(),
                "account 1 holds its half of the buffer"
            );
            let other = queue.join_as(Some(2), 10).expect("room for account 2");
            assert_eq!(queue.uploads_held(), 30);
            drop(other);
            drop(held);
            assert!(
                third.join().unwrap().is_some(),
                "room once its own are done"
            );
        });
        assert_eq!(queue.uploads_held(), 0);
        assert!(queue.lock().uploads_by.is_empty());
    }
}
