//! The local-mode sliding window (docs/directives.md, pow_shield_limit): at
//! most `requests` in any sliding `window`, the meaning of cluster mode's
//! exact log (the window script, `cluster::scripts`), in a fixed ring of
//! [`SLOTS`] counters.
//!
//! The clock is cut into slots of `⌈window / (SLOTS − 1)⌉` ms (4 s of a
//! minute); each slot keeps how many requests it admitted and when the last
//! of them came, and counts all of them until that last one leaves the
//! window. Every request is so counted at least as long as the exact log
//! counts it, and only the slot holding the window's trailing edge can count
//! requests the log has let go. Error bound, against the exact log over the
//! same requests:
//! - never more admitted in any window (`Remaining` is never above the
//!   log's);
//! - a request the log admits is refused for less than one slot width
//!   longer, and `Reset` and `Retry-After` are the log's or later by less
//!   than one slot width, by less than the time the edge slot's requests
//!   span: a burst within one slot is counted as the log counts it, to the
//!   burst's own length.
//!
//! `SLOTS − 1` slots cover the window; the extra one lets a slot whose last
//! request is still in the window stay while the newest is written.
//!
//! Beside the ring, `total` keeps the sum of its counts (each admitted
//! request adds one, each slot emptied takes its count away), so that a
//! request reads how many are counted without summing the ring. Every
//! window is written by this code only (a zone of another layout is never
//! adopted: `src/shm`'s `MAGIC`); should a window's bytes disagree with
//! themselves all the same, nothing panics, and the total is worked out
//! from the ring again on the slot-by-slot path and once the ring empties
//! (a wrong `holds_until_ms` keeps the total as it is until the ring next
//! moves, which clears it).

use super::{RateLimit, Verdict};

/// Slots in the ring: one slot width is `window / (SLOTS − 1)`.
pub const SLOTS: usize = 16;
// The slots not empty are a `u16` of bits (`occupied_oldest_first`).
const _: () = assert!(SLOTS == 16);

/// One client's window for one limit. Plain integers so that it can live in
/// nginx shared memory (any bytes are a valid value).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlidingWindow {
    /// The newest slot's period: `now / width` when it was written. Slot
    /// `i` holds the latest period `≤ period` that is `i` modulo [`SLOTS`].
    pub period: u64,
    /// When `over` starts again from 0: two windows after the first refusal
    /// it counts (cluster mode: the refusals key's expiry).
    pub over_until_ms: u64,
    /// Requests refused since the first one of its window: how far beyond
    /// its limit the client keeps going (cluster mode: `KEYS[2]`).
    pub over: u32,
    /// The sum of `count`, kept as the slots change (in the padding the
    /// struct had: the entry's size is unchanged).
    pub total: u32,
    /// When the oldest counted slot leaves, as the last count worked it
    /// out, if that slot is older than the newest; 0: not known. Until
    /// then nothing leaves and the count is `total`: a request before it
    /// in the same period only counts itself ([`SlidingWindow::counted`]).
    /// Only a slot that leaves changes it, and slots leave only when the
    /// ring moves on (which forgets it) or a count finds one gone (which
    /// writes it again); a request counted in the newest slot leaves it
    /// alone, as that slot is never the one it names.
    pub holds_until_ms: u64,
    /// Requests each slot admitted.
    pub count: [u32; SLOTS],
    /// Milliseconds from each slot's start to its last admitted request.
    pub last: [u32; SLOTS],
}

/// The ring's shape for one limit.
#[derive(Clone, Copy)]
struct Grid {
    window: u64,
    width: u64,
}

impl Grid {
    #[inline]
    fn of(limit: RateLimit) -> Grid {
        // A zero window is not a valid limit; treat it as 1 ms, never divide by 0.
        let window = limit.window_ms.max(1);
        Grid {
            window,
            width: window.div_ceil(SLOTS as u64 - 1),
        }
    }

    fn start(self, period: u64) -> u64 {
        period.saturating_mul(self.width)
    }
}

impl SlidingWindow {
    /// The period of the slot `age` back from the newest (0 to `SLOTS − 1`).
    fn period_of(&self, age: usize) -> u64 {
        self.period.saturating_sub(age as u64)
    }

    fn slot(&self, age: usize) -> usize {
        (self.period as usize).wrapping_sub(age) % SLOTS
    }

    /// When the last request of the slot `age` back leaves the window; 0
    /// for an empty slot.
    fn slot_leaves_at(&self, grid: Grid, age: usize) -> u64 {
        let i = self.slot(age);
        if self.count[i] == 0 || age as u64 > self.period {
            return 0;
        }
        grid.start(self.period_of(age))
            .saturating_add(u64::from(self.last[i]))
            .saturating_add(grid.window)
    }

    /// Moves the ring on to `period`, emptying the slots it passes over.
    #[inline]
    fn advance(&mut self, period: u64) {
        // (The slots it empties have left: forgetting is only prudence.)
        self.holds_until_ms = 0;
        let gap = period.saturating_sub(self.period);
        if gap >= SLOTS as u64 {
            self.count = [0; SLOTS];
            self.last = [0; SLOTS];
            self.total = 0;
        } else {
            for step in 1..=gap {
                let i = (self.period.wrapping_add(step) as usize) % SLOTS;
                self.empty(i);
            }
        }
        self.period = self.period.max(period);
    }

    /// Bit `k` set for each slot `SLOTS − 1 − k` back from the newest
    /// that is not empty: oldest first from the lowest bit (the ring's
    /// slots by index, rotated: the oldest age's slot is `period + 1`,
    /// modulo [`SLOTS`]). (Inline: a window whose oldest slots are empty
    /// asks it on every request.)
    #[inline(always)]
    fn occupied_oldest_first(&self) -> u16 {
        let by_index = self
            .count
            .iter()
            .enumerate()
            .fold(0u16, |m, (i, &c)| m | (u16::from(c != 0) << i));
        by_index.rotate_right((self.period.wrapping_add(1) % SLOTS as u64) as u32)
    }

    /// Empties slot `i`, taking its count out of the total.
    fn empty(&mut self, i: usize) {
        self.total = self.total.saturating_sub(self.count[i]);
        self.count[i] = 0;
        self.last[i] = 0;
    }

    /// Requests counted at `now`, and when the oldest counted slot leaves;
    /// slots whose last request has left are emptied on the way. (Inline:
    /// every admitted request runs it, once.)
    #[inline(always)]
    fn counted(&mut self, grid: Grid, now: u64) -> (u64, Option<u64>) {
        // Nothing leaves before `holds_until_ms` (the ring has not moved
        // since it was worked out): the count stands.
        if self.holds_until_ms > now {
            return (u64::from(self.total), Some(self.holds_until_ms));
        }
        let (counted, oldest) = self.counted_afresh(grid, now);
        self.holds_until_ms = match oldest {
            Some((at, age)) if age > 0 => at,
            _ => 0,
        };
        (counted, oldest.map(|(at, _)| at))
    }

    /// [`SlidingWindow::counted`] without what the last count knew: the
    /// oldest counted slot's leaving comes with its age.
    #[inline(always)]
    fn counted_afresh(&mut self, grid: Grid, now: u64) -> (u64, Option<(u64, usize)>) {
        let oldest_age = SLOTS as u64 - 1;
        match self.period.checked_mul(grid.width) {
            // Every request runs this. With every slot's period real and no
            // sum saturating (any clock but an absurd one), and every slot's
            // last request within its slot (as `admit` writes them: checked
            // on each slot looked at), the slots leave in order, oldest
            // first, their trailing edges one width apart: the ones gone
            // are the oldest, up to the first still counted, and the rest
            // is the running total.
            Some(newest_start)
                if self.period >= oldest_age
                    && newest_start
                        .checked_add(grid.window)
                        .and_then(|edge| edge.checked_add(u64::from(u32::MAX)))
                        .is_some() =>
            {
                // When a request at the start of the oldest slot leaves.
                let oldest_edge = newest_start - oldest_age * grid.width + grid.window;
                // A busy window's oldest slot is still counted, or it
                // leaves (or left, emptied by an earlier request of this
                // period) and the next one, which starts a width later,
                // usually is (each slot's `leaves > now` is checked: with a
                // short window that one may have left too). When one
                // counts, the total stands and no slot is looked for;
                // anything else is the loop's (it finds a slot emptied here
                // empty).
                for age in [SLOTS - 1, SLOTS - 2] {
                    let i = self.slot(age);
                    let last = u64::from(self.last[i]);
                    if self.count[i] == 0 {
                        continue;
                    }
                    if last >= grid.width {
                        break;
                    }
                    let leaves = oldest_edge + (oldest_age - age as u64) * grid.width + last;
                    if leaves > now {
                        return (u64::from(self.total), Some((leaves, age)));
                    }
                    self.empty(i);
                }
                // The slots not empty, oldest first; the empty ones are
                // passed over without a look.
                let mut left = self.occupied_oldest_first();
                while left != 0 {
                    let age = SLOTS - 1 - left.trailing_zeros() as usize;
                    left &= left - 1;
                    let i = self.slot(age);
                    let last = u64::from(self.last[i]);
                    if last >= grid.width {
                        // Not as `admit` writes a slot: each slot on its
                        // own (those emptied so far left as they would
                        // there).
                        return self.counted_slot_by_slot(grid, now);
                    }
                    let edge = oldest_edge + (oldest_age - age as u64) * grid.width;
                    let leaves = edge + last;
                    if leaves > now {
                        // Every younger slot leaves later still.
                        return (u64::from(self.total), Some((leaves, age)));
                    }
                    self.empty(i);
                }
                // Nothing left: the total is 0 again.
                self.total = 0;
                (0, None)
            }
            _ => self.counted_slot_by_slot(grid, now),
        }
    }

    /// [`SlidingWindow::counted_afresh`], each slot's time worked out on
    /// its own.
    fn counted_slot_by_slot(&mut self, grid: Grid, now: u64) -> (u64, Option<(u64, usize)>) {
        let (mut total, mut oldest) = (0, None);
        for age in (0..SLOTS).rev() {
            let i = self.slot(age);
            if self.count[i] == 0 {
                continue;
            }
            let leaves = self.slot_leaves_at(grid, age);
            if leaves > now {
                total += u64::from(self.count[i]);
                oldest.get_or_insert((leaves, age));
            } else {
                self.count[i] = 0;
                self.last[i] = 0;
            }
        }
        // Worked out from the ring: it holds whatever the total said.
        self.total = u32::try_from(total).unwrap_or(u32::MAX);
        (total, oldest)
    }

    /// Until when this window carries anything (monotonic ms): its newest
    /// counted request leaves, and the refusals' window ends. The store keeps
    /// the entry until then.
    pub fn keep_until_ms(&self, limit: RateLimit) -> u64 {
        let grid = Grid::of(limit);
        // A younger slot always leaves later: the first one not empty.
        let newest = (0..SLOTS)
            .map(|age| self.slot_leaves_at(grid, age))
            .find(|&at| at > 0)
            .unwrap_or(0);
        match self.over {
            0 => newest,
            _ => newest.max(self.over_until_ms),
        }
    }
}

/// Requests counted at `now_ms` and ms until the oldest leaves, read
/// without counting or changing anything (`pow_shield_admin`).
pub fn counted_at(state: &SlidingWindow, limit: RateLimit, now_ms: u64) -> (u32, u64) {
    let (mut copy, grid) = (*state, Grid::of(limit));
    let period = (now_ms / grid.width).max(copy.period);
    copy.advance(period);
    let now = now_ms.max(grid.start(period));
    let (counted, oldest) = copy.counted(grid, now);
    let counted = u32::try_from(counted).unwrap_or(u32::MAX);
    (counted, oldest.map_or(0, |at| at.saturating_sub(now)))
}

/// Admits one request if fewer than `limit.requests` are counted in the
/// window ending at `now_ms`, and reports the headers' values and the
/// refusals counted (this one included). A refused request adds nothing to
/// the window; a limit of 0 requests admits nothing.
pub fn admit(state: &mut SlidingWindow, limit: RateLimit, now_ms: u64) -> Verdict {
    admit_on(state, Grid::of(limit), limit, now_ms, 0).map_or_else(Verdict::default, |(v, _)| v)
}

/// [`admit`] on the limit's `grid`, and when the admitted request leaves
/// the window (0 when refused). `room` above 0: `None`, and nothing
/// counted, unless at least `room` requests are free before this one
/// ([`admit_within`]); 0: always an answer.
#[inline(always)]
fn admit_on(
    state: &mut SlidingWindow,
    grid: Grid,
    limit: RateLimit,
    now_ms: u64,
    room: u64,
) -> Option<(Verdict, u64)> {
    // A clock that went backwards counts as the newest slot's start: it
    // frees nothing, and never writes into a slot of another period.
    let period = (now_ms / grid.width).max(state.period);
    // (Most requests come in the newest slot's period: nothing to move.)
    if period != state.period {
        state.advance(period);
    }
    let start = grid.start(period);
    let now = now_ms.max(start);
    let requests = u64::from(limit.requests);

    let (mut counted, mut reset_at) = state.counted(grid, now);
    // (Only slots whose requests left were emptied so far: any later
    // request of this window would empty them too.)
    if room > 0 && counted.saturating_add(room) > requests {
        return None;
    }
    let allowed = counted < requests;
    let mut leaves = 0;
    if allowed {
        let i = state.slot(0);
        let offset = u32::try_from(now - start).unwrap_or(u32::MAX);
        if state.count[i] != u32::MAX {
            state.count[i] += 1;
            state.total = state.total.wrapping_add(1);
        }
        state.last[i] = state.last[i].max(offset);
        counted += 1;
        // `slot_leaves_at(grid, 0)` of the slot just counted (not empty).
        leaves = start
            .saturating_add(u64::from(state.last[i]))
            .saturating_add(grid.window);
        reset_at.get_or_insert(leaves);
    }

    if now >= state.over_until_ms {
        state.over = 0;
    }
    let retry_after_ms = if allowed {
        0
    } else {
        // Two windows, as cluster mode's refusals key: a client that waits
        // out its Retry-After (at most a window) finds its refusal counted
        // (`take_back_refusal`).
        if state.over == 0 {
            state.over_until_ms = now.saturating_add(grid.window.saturating_mul(2));
        }
        state.over = state.over.saturating_add(1);
        match state.frees_at(grid, now, counted, requests) {
            Some(at) => (at - now).max(1),
            None => u64::MAX,
        }
    };
    let verdict = Verdict {
        allowed,
        remaining: u32::try_from(requests.saturating_sub(counted)).unwrap_or(u32::MAX),
        reset_after_ms: reset_at.map_or(0, |at| at - now),
        retry_after_ms,
        over: state.over,
        limit: 0,
    };
    Some((verdict, leaves))
}

/// [`admit`], and until when the window carries anything after it
/// ([`SlidingWindow::keep_until_ms`]): an admitted request is the newest,
/// so that is when it leaves, without looking for the newest slot.
#[inline(always)]
pub fn admit_keeping(state: &mut SlidingWindow, limit: RateLimit, now_ms: u64) -> (Verdict, u64) {
    let answered = admit_on(state, Grid::of(limit), limit, now_ms, 0);
    keeping(state, limit, answered.unwrap_or_default())
}

/// [`admit_keeping`] of a request admitted only when at least `room`
/// requests (at least 1) are free before it: `None` otherwise, and the
/// window counts nothing of it (its refusal, or the last free request
/// whose next challenge is priced, is the full check's to count). What it
/// admits, [`admit_keeping`] admits alike (`tests.rs`).
#[inline(always)]
pub fn admit_within(
    state: &mut SlidingWindow,
    limit: RateLimit,
    now_ms: u64,
    room: u32,
) -> Option<(Verdict, u64)> {
    let room = u64::from(room.max(1));
    let answered = admit_on(state, Grid::of(limit), limit, now_ms, room)?;
    Some(keeping(state, limit, answered))
}

/// A verdict and when its window's newest request leaves, with until
/// when the window carries anything.
#[inline(always)]
fn keeping(
    state: &SlidingWindow,
    limit: RateLimit,
    (verdict, newest): (Verdict, u64),
) -> (Verdict, u64) {
    if !verdict.allowed {
        return (verdict, state.keep_until_ms(limit));
    }
    match state.over {
        0 => (verdict, newest),
        _ => (verdict, newest.max(state.over_until_ms)),
    }
}

/// Takes one refusal back out of `over`, if the window counts one: its
/// client waited it out and was admitted (`store::check`). `false` if
/// there was none.
pub fn take_back_refusal(state: &mut SlidingWindow, now_ms: u64) -> bool {
    if state.over == 0 || now_ms >= state.over_until_ms {
        return false;
    }
    state.over -= 1;
    true
}

impl SlidingWindow {
    /// When a refused request would be admitted: oldest slot first, the one
    /// whose leaving brings the `counted` under `requests` (the log's entry
    /// at rank count − limit, unless the limit was lowered). `None`: never
    /// (a limit of 0).
    fn frees_at(&self, grid: Grid, now: u64, counted: u64, requests: u64) -> Option<u64> {
        let mut left = counted;
        for age in (0..SLOTS).rev() {
            let leaves = self.slot_leaves_at(grid, age);
            if leaves <= now {
                continue;
            }
            left = left.saturating_sub(u64::from(self.count[self.slot(age)]));
            if left < requests {
                return Some(leaves);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests;
