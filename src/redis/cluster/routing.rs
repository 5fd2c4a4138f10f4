//! Slot → node: each command goes to its slot's master, or while the map
//! does not know it to any node that is up (its `MOVED` will tell). A
//! `MOVED` re-sends the command where it points and asks for the map; an
//! `ASK` re-sends it there after `ASKING`, once; `TRYAGAIN` (a slot half
//! migrated) re-sends it a little later. A redirection is followed at most
//! `MAX_HOPS` times and never after the first send's deadline.

use nginx_sys::{ngx_event_t, ngx_msec_t};

use super::{cluster, Cluster, OnFrame};
use crate::redis::client::{
    Client, OnReply, Pending, Reach, Replies, Reply, Resend, Unavailable, MAX_IN_FLIGHT,
};
use crate::redis::now;
use pow_shield_core::redis::cluster::{parse_redirect, route_slot, Redirect};
use pow_shield_core::redis::retries::past;

/// How long a command waits after `TRYAGAIN`, and how many times it
/// follows redirections (a migration of one slot lasts well under this).
const TRYAGAIN_MS: ngx_msec_t = 20;
const MAX_HOPS: u8 = 25;
/// Commands waiting to be tried again, at most (beyond: decided by
/// `pow_shield_fail`, like commands beyond a connection's cap).
pub(super) const MAX_RETRIES: usize = MAX_IN_FLIGHT;

/// A command on its way, possibly redirected.
pub(super) struct Job {
    slot: u16,
    /// Its bytes and what a node answering `NOSCRIPT` gets instead (a
    /// command may be sent to several nodes, so it is kept whole).
    command: Resend,
    on_reply: OnFrame,
    hops: u8,
    /// The first send's deadline: no redirection is followed after it, so
    /// a request waits at most its timeout plus one more (the last hop).
    deadline: ngx_msec_t,
}

/// A job on its way to a node: once queued it waits in the cluster's
/// `jobs`, and its reply comes back to the cluster (redirections).
struct Sending<'a> {
    cluster: &'a Cluster,
    job: Job,
}

impl Pending for Sending<'_> {
    fn on_reply(self) -> OnReply {
        let Sending { cluster, job } = self;
        let me = cluster.me.clone();
        match cluster.jobs.try_borrow_mut() {
            Ok(mut jobs) => OnReply::Of(me, jobs.insert(job)),
            Err(_) => boxed(me, job),
        }
    }
}

/// (Never: the jobs are not borrowed across a call.) A job in a box of
/// its own, out of line.
#[inline(never)]
fn boxed(me: std::rc::Weak<Cluster>, job: Job) -> OnReply {
    OnReply::Call(Box::new(move |reply: &Reply| match me.upgrade() {
        Some(cluster) => cluster.on_reply(job, reply),
        None => job.on_reply.deliver(None),
    }))
}

impl Replies for Cluster {
    /// The reply to job `id` (a stale number finds none: dropped).
    fn replied(&self, id: u32, reply: &Reply) {
        let job = self.jobs.try_borrow_mut().ok().and_then(|mut j| j.take(id));
        if let Some(job) = job {
            self.on_reply(job, reply);
        }
    }
}

/// The jobs queued on the nodes' connections, by number (numbers are
/// reused once their reply came: a connection answers each slot once;
/// never those of jobs `drain` took, whose replies may still come).
#[derive(Default)]
pub(super) struct Jobs {
    queued: Vec<Option<Job>>,
    free: Vec<u32>,
}

impl Jobs {
    fn insert(&mut self, job: Job) -> u32 {
        if let Some(id) = self.free.pop() {
            if let Some(at) = self.queued.get_mut(id as usize) {
                *at = Some(job);
                return id;
            }
        }
        self.queued.push(Some(job));
        (self.queued.len() - 1) as u32
    }

    fn take(&mut self, id: u32) -> Option<Job> {
        let job = self.queued.get_mut(id as usize)?.take()?;
        self.free.push(id);
        Some(job)
    }

    /// Every job still queued (the cluster is going). Their numbers are
    /// not given out again: a late reply to one finds nothing.
    pub(super) fn drain(&mut self) -> Vec<Job> {
        self.free.clear();
        self.queued.iter_mut().filter_map(Option::take).collect()
    }
}

impl Cluster {
    /// Sends `command`, whose keys share `key`'s slot, to that slot's node
    /// (`slot`: that slot, where the caller knows it already).
    pub(in crate::redis) fn submit(
        &self,
        (key, slot): (&[u8], Option<u16>),
        command: Resend,
        on_reply: OnFrame,
    ) -> Result<(), Unavailable> {
        // (An empty key comes only with its slot: `Router::submit`.)
        debug_assert!(slot.is_some() || !key.is_empty());
        let job = Job {
            slot: slot.unwrap_or_else(|| route_slot(key)),
            command,
            on_reply,
            hops: 0,
            deadline: now().wrapping_add(self.template.timeout_ms),
        };
        let target = self.target(job.slot);
        self.send(job, target, false).map_err(|(_, why)| why)
    }

    /// What the connection to the node for `key`'s slot (`slot`, where
    /// known) knows of Redis.
    pub(in crate::redis) fn reach(&self, key: &[u8], slot: Option<u16>) -> Reach {
        if self.closing.get() {
            return Reach::Down;
        }
        let target = self.target(slot.unwrap_or_else(|| route_slot(key)));
        match self.nodes.try_borrow() {
            Ok(nodes) => nodes.get(target).map_or(Reach::Down, |n| n.client.reach()),
            Err(_) => Reach::Down,
        }
    }

    /// Whether an unpaid refusal of a client whose keys share the slot of
    /// the key `key` makes counts a strike now: not within a grace after
    /// its master's outage. Once the slot map is known and every node in
    /// use (retired ones aside: closed for good, never routed to) says
    /// strikes count, as almost always, the key is not made.
    pub(in crate::redis) fn strikes_unpaid(&self, key: impl FnOnce() -> String) -> bool {
        let Ok(nodes) = self.nodes.try_borrow() else {
            return true;
        };
        // (Before the map, `target` first makes each connection follow
        // what other workers found of its node: the long way does that.)
        let mapped = self.routes.try_borrow().is_ok_and(|r| r.mapped());
        // (The roster borrowed once for every node, not once a node.)
        let roster = self.roster.try_borrow().ok();
        let in_use = |i: usize| roster.as_ref().is_none_or(|r| !r.is_retired(i));
        let every = nodes
            .iter()
            .enumerate()
            .all(|(i, n)| !in_use(i) || n.client.strikes_unpaid());
        drop(roster);
        if mapped && every {
            return true;
        }
        let target = self.target(route_slot(key().as_bytes()));
        nodes.get(target).is_none_or(|n| n.client.strikes_unpaid())
    }

    /// The node for a slot: its master, or while unknown any node that is
    /// up (its `MOVED` will tell). (Asked twice a request, the map almost
    /// always knowing: that look inline, the other not.)
    #[inline(always)]
    fn target(&self, slot: u16) -> usize {
        if let Some(owner) = self.routes.try_borrow().ok().and_then(|r| r.owner(slot)) {
            return owner;
        }
        self.any_up()
    }

    /// While the map does not know a slot: the first node that is up.
    #[inline(never)]
    fn any_up(&self) -> usize {
        self.each_client(Client::is_healthy)
            .iter()
            .position(|up| *up)
            .unwrap_or(0)
    }

    /// Sends a job to node `target`; gives it back if that node refuses.
    /// (Inline: measured, some 20 instructions a request less.)
    #[inline(always)]
    fn send(&self, job: Job, target: usize, asking: bool) -> Result<(), (Job, Unavailable)> {
        let down = |job| Err((job, Unavailable::Down));
        if self.closing.get() {
            return down(job);
        }
        let Ok(nodes) = self.nodes.try_borrow() else {
            return down(job);
        };
        let Some(node) = nodes.get(target) else {
            return down(job);
        };
        // (Shared, not copied: the job keeps it for a redirection.)
        let command = job.command.clone();
        let resend = Some(command.clone());
        let sending = Sending { cluster: self, job };
        // ASKING and its command go together or not at all: a lone ASKING
        // would apply to the next, unrelated, command on the connection.
        let sent = if asking {
            node.client.submit_asking(command.bytes(), resend, sending)
        } else {
            node.client.submit_pending(command.bytes(), resend, sending)
        };
        drop(nodes);
        sent.map_err(|(why, sending)| {
            // A node with a full queue is busy, not down.
            if why == Unavailable::Down {
                self.node_down();
            }
            // Refused at once: the job comes back.
            (sending.job, why)
        })
    }

    /// (A reply, almost always, handed on inline; an error reply, which
    /// may redirect, looked at out of line.)
    #[inline(always)]
    fn on_reply(&self, job: Job, reply: &Reply) {
        match reply {
            Reply::Error(text) => self.on_error(job, text),
            _ => job.on_reply.deliver(reply.frame()),
        }
    }

    /// An error reply: followed where it redirects, else handed on.
    #[inline(never)]
    fn on_error(&self, mut job: Job, text: &str) {
        let late = past(job.deadline, now());
        let redirect = match parse_redirect(text) {
            Some(redirect) if job.hops < MAX_HOPS && !self.closing.get() && !late => redirect,
            _ => return job.on_reply.deliver(None),
        };
        job.hops += 1;
        let sent = match redirect {
            Redirect::Moved { slot, node } => {
                self.request_refresh();
                match self.node_index(&node) {
                    Some(i) => {
                        if let Ok(mut routes) = self.routes.try_borrow_mut() {
                            routes.set(slot, i);
                        }
                        self.send(job, i, false)
                    }
                    None => Err((job, Unavailable::Down)),
                }
            }
            Redirect::Ask { node, .. } => match self.node_index(&node) {
                Some(i) => self.send(job, i, true),
                None => Err((job, Unavailable::Down)),
            },
            Redirect::TryAgain => {
                self.retry_later(job);
                Ok(())
            }
        };
        if let Err((job, _)) = sent {
            job.on_reply.deliver(None);
        }
    }

    fn retry_later(&self, job: Job) {
        let due = now().wrapping_add(TRYAGAIN_MS);
        if past(job.deadline, due) {
            return job.on_reply.deliver(None);
        }
        let queued = match self.retries.try_borrow_mut() {
            Ok(mut retries) => retries.push(due, job),
            Err(_) => Err(job),
        };
        if let Err(job) = queued {
            return job.on_reply.deliver(None);
        }
        // SAFETY: our retry event; nginx owns the timer tree.
        unsafe {
            let ev = self.retry_ev.get();
            if (*ev).timer_set() == 0 {
                nginx_sys::ngx_add_timer(ev, TRYAGAIN_MS);
            }
        }
    }

    fn on_retry(&self) {
        let (due, next) = match self.retries.try_borrow_mut() {
            Ok(mut retries) => retries.take_due(now()),
            Err(_) => (Vec::new(), None),
        };
        for job in due {
            let target = self.target(job.slot);
            if let Err((job, _)) = self.send(job, target, false) {
                job.on_reply.deliver(None);
            }
        }
        if let Some(left) = next {
            // SAFETY: our retry event.
            unsafe { nginx_sys::ngx_add_timer(self.retry_ev.get(), left.max(1)) };
        }
    }

    /// A master refused a command (down): the map may have changed.
    fn node_down(&self) {
        self.request_refresh();
    }

    /// Answers the commands waiting to be tried again with `None` (exit).
    pub(super) fn fail_retries(&self) {
        let waiting = self.retries.try_borrow_mut().map(|mut r| r.drain());
        fail(waiting.unwrap_or_default());
    }

    /// Answers with `None` the jobs still listed: at exit, those the
    /// closed connections could not reach; when the cluster is dropped,
    /// those whose callback found it gone.
    pub(super) fn fail_jobs(&self) {
        let queued = self.jobs.try_borrow_mut().map(|mut j| j.drain());
        fail(queued.unwrap_or_default());
    }
}

/// Answers `jobs` with `None`, each on its own.
fn fail(jobs: Vec<Job>) {
    for job in jobs {
        crate::ffi::guard((), || job.on_reply.deliver(None));
    }
}

pub(super) unsafe extern "C" fn retry_handler(ev: *mut ngx_event_t) {
    crate::ffi::guard((), || {
        // SAFETY: our retry event carries the cluster.
        let cluster = unsafe { cluster((*ev).data) };
        cluster.on_retry();
    })
}
