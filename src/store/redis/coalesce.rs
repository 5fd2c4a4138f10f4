//! Coalescing (docs/operations.md, "What is decided where"): while a
//! client's check is on its way to Redis, the client's further unpaid
//! requests (same limit, exact window) join it instead of sending their
//! own. When its answer comes, a refusal leaves `T` in the zone and the
//! joined requests are refused locally; otherwise they go together in one
//! call for `k` requests (the script admits up to the free slots and
//! reports the rest), which later requests join in turn. A burst of one
//! client costs one or two script calls, not one per request.

use core::cell::RefCell;
use std::rc::Rc;

use redis_protocol::resp2::types::OwnedFrame;

use super::{failure, RedisStore};
use crate::ffi::monotonic_ms;
use crate::store::{Failure, NewLate, NewWaiter, Waiter};
use pow_shield_core::cluster::fallback::Answer;
use pow_shield_core::cluster::generation::slot_of_tag;
use pow_shield_core::cluster::scripts::replies::{self, MAX_COALESCED};
use pow_shield_core::limiter::breaker::opened_block;
use pow_shield_core::limiter::breaker::{Block, BreakerRules};
use pow_shield_core::limiter::{Limits, RateLimit};
use pow_shield_core::redis::command::client_tag;
use pow_shield_core::store::{Checked, Offence, Reply, Subject};

/// The requests waiting for a client's check on its way.
pub(super) struct Group {
    rules: BreakerRules,
    /// The joiners' `Subject::rising`.
    rising: bool,
    /// Each keeps what its request asked (`Waiter::keep`).
    joiners: Vec<Rc<Waiter>>,
}

type Joiners = Rc<RefCell<Vec<Rc<Waiter>>>>;

impl RedisStore {
    /// Joins the check of `refusal` on its way, if there is one for the
    /// same rules with room: the request then waits for it (`true`).
    /// `false`: none; the request asks on its own.
    pub(super) fn join(
        &self,
        refusal: &[u8],
        rules: BreakerRules,
        rising: bool,
        late: &mut NewLate,
        waiter: &mut NewWaiter,
    ) -> bool {
        let Ok(mut groups) = self.groups.try_borrow_mut() else {
            return false;
        };
        match groups.get_mut(refusal) {
            Some(group) if group.rules == rules && group.rising == rising => {
                let waiter = waiter();
                waiter.keep(late());
                group.joiners.push(waiter);
                true
            }
            _ => false,
        }
    }

    /// A check of `refusal` is on its way: later requests join it (unless
    /// they already join another one).
    pub(super) fn open_group(&self, refusal: &[u8], rules: BreakerRules, rising: bool) {
        if let Ok(mut groups) = self.groups.try_borrow_mut() {
            groups.entry(refusal.to_vec()).or_insert(Group {
                rules,
                rising,
                joiners: Vec::new(),
            });
        }
    }

    /// The check of `refusal` was answered (`answered`) or failed: the
    /// requests that joined it are decided, by what the answer left in the
    /// zone (a block, a refusal until `T`), or together in one more call;
    /// after a failure each is asked of the fallback, as a late failure is.
    pub(super) fn release(
        &self,
        refusal: &[u8],
        key: &[u8],
        limit: RateLimit,
        rules: BreakerRules,
        answered: bool,
    ) {
        let group = match self.groups.try_borrow_mut() {
            Ok(mut groups) => groups.remove(refusal),
            Err(_) => None,
        };
        let Some(group) = group else {
            return;
        };
        let rising = group.rising;
        let subject = joiners_subject(key, limit, rules, rising);
        let mut rest = Vec::new();
        for waiter in group.joiners {
            // A request gone meanwhile is neither counted nor struck.
            if !waiter.is_waiting() {
                continue;
            }
            if !answered {
                // (A check: nothing to write later.)
                let _ = waiter.fall_back(Failure::Down, true);
            } else if let Some(breaker) = self.known_block(key, rules) {
                waiter.deliver(Reply::Checked(Checked {
                    breaker,
                    ..Checked::default()
                }));
            } else if let Some(refused) = self.refuse_locally(&subject, limit) {
                waiter.deliver(Reply::Checked(refused.checked));
            } else {
                rest.push(waiter);
            }
        }
        if rest.is_empty() {
            return;
        }
        // Later requests join these calls (sent in order on one
        // connection: each decides what the previous ones left).
        self.open_group(refusal, rules, rising);
        let mut sent = false;
        while !rest.is_empty() {
            let chunk: Vec<_> = rest.drain(..rest.len().min(MAX_COALESCED)).collect();
            sent |= self.check_together(refusal, key, limit, (rules, rising), chunk);
        }
        // Nothing on its way: nothing to join.
        if !sent {
            if let Ok(mut groups) = self.groups.try_borrow_mut() {
                groups.remove(refusal);
            }
        }
    }

    /// One call of the window script for the unpaid requests of one client
    /// in `joiners` (in arrival order); `false` if it could not be sent
    /// (each was then asked of the fallback).
    fn check_together(
        &self,
        refusal: &[u8],
        key: &[u8],
        limit: RateLimit,
        (rules, rising): (BreakerRules, bool),
        joiners: Vec<Rc<Waiter>>,
    ) -> bool {
        // What the node counted for the client goes first (the joiners
        // refused here just now among it): Redis decides on every strike.
        let subject = joiners_subject(key, limit, rules, rising);
        self.send_batch_now(&subject);
        let k = joiners.len() as u32;
        let tag = client_tag(key);
        let call = self.calls.check(
            tag.as_bytes(),
            &subject,
            Offence::Unpaid,
            k,
            self.next_seq(),
        );
        let asked_ms = monotonic_ms();
        let joiners: Joiners = Rc::new(RefCell::new(joiners));
        let waiting = joiners.clone();
        let store = self.me.clone();
        let remember = self.block_keeper(key, rules);
        let (owned_refusal, owned_key) = (refusal.to_vec(), key.to_vec());
        let (cluster, slot) = (self.cluster, slot_of_tag(tag.as_bytes()));
        let on_reply = Box::new(move |frame: Option<OwnedFrame>| {
            let answer = Answer::of(frame.as_ref());
            let ran = answer.may_have_run();
            let reply = answer.integers().unwrap_or_default();
            // A Redis Cluster's refusal answers the slot's generation too.
            let (reply, generation) = replies::split_generation(&reply, cluster);
            let decided = replies::coalesced_from_reply(reply, limit, k).ok();
            let joiners = waiting.take();
            let Some(store) = store.upgrade() else {
                return;
            };
            store.note_slot_generation(slot, generation);
            match decided {
                Some(c) => {
                    if c.breaker.block != Block::Clear {
                        remember(c.breaker);
                        store.forget_refusal(&owned_refusal);
                    } else if let Some(block) = opened_block(&c.breaker, rules) {
                        // The breaker opened in this call: the requests
                        // after it are blocked, and so are the next ones.
                        remember(block);
                        store.forget_refusal(&owned_refusal);
                    } else if c.admitted < k {
                        store.learn_refusal(&owned_refusal, &c.verdict, &c.breaker, asked_ms);
                    }
                    for (i, waiter) in joiners.into_iter().enumerate() {
                        let checked = Checked {
                            generation,
                            ..c.nth(i as u32, k, rules)
                        };
                        waiter.deliver(Reply::Checked(checked));
                    }
                }
                None => {
                    for waiter in joiners {
                        let _ = waiter.fall_back(Failure::Down, ran);
                    }
                }
            }
            store.release(&owned_refusal, &owned_key, limit, rules, decided.is_some());
        });
        let Err(unavailable) = self.send(tag.as_bytes(), call, on_reply) else {
            return true;
        };
        // Not sent: the fallback rule decides each.
        for waiter in joiners.take() {
            let _ = waiter.fall_back(failure(unavailable), false);
        }
        false
    }
}

/// The subject of a group's requests: one client under one exact limit.
fn joiners_subject(key: &[u8], limit: RateLimit, rules: BreakerRules, rising: bool) -> Subject<'_> {
    Subject {
        key,
        limits: Limits::one(limit),
        limit_keys: pow_shield_core::store::CLIENT_KEYS,
        approx: false,
        rules,
        rising,
    }
}
