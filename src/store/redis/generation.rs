//! The data generation (docs/operations.md, "Choosing a fail policy"): the
//! one a challenge issued now carries, whether a solution of one may be
//! spent, and the reads that keep this worker's knowledge of it fresh.
//! What they decide is the core's (`pow_shield_core::cluster::tracker`);
//! this file sends the reads.

use redis_protocol::resp2::types::OwnedFrame;

use super::RedisStore;
use crate::ffi::monotonic_ms;
use pow_shield_core::cluster::generation::{self, Generations};
use pow_shield_core::redis::command::{client_tag, encode};
use pow_shield_core::store::Spendable;

impl RedisStore {
    /// The generation a challenge issued now carries. Another node may
    /// have renewed it (a flush): read again at most once a second, so
    /// that the challenges after this one carry the new one.
    pub fn challenge_generation(&self) -> Option<u64> {
        let check = self
            .generations
            .try_borrow_mut()
            .is_ok_and(|mut t| t.check_now(monotonic_ms()));
        if check {
            self.check_generation();
        }
        self.generations().for_challenge()
    }

    /// What this worker knows of the data generations now.
    pub fn generations(&self) -> Generations {
        let redis_up = self.router.is_healthy();
        match self.generations.try_borrow() {
            Ok(tracker) => tracker.now(redis_up),
            // (Never borrowed across a call; nothing of Redis's known
            // meanwhile, the node's own always.)
            Err(_) => Generations {
                redis: None,
                local: self.local_generation,
                redis_up,
                cluster: self.cluster,
            },
        }
    }

    /// Whether a solution of a challenge issued in `generation` may be
    /// spent now by the client `key` (`Tracker::accepts`).
    pub fn accepts(&self, generation: Option<u64>, key: &[u8]) -> Spendable {
        let tag = client_tag(key);
        let redis_up = self.router.is_healthy();
        let (spendable, ask) = match self.generations.try_borrow() {
            Ok(tracker) => tracker.accepts(generation, tag.as_bytes(), redis_up),
            Err(_) => (Spendable::NotNow, false),
        };
        if ask {
            self.ask_generation();
        }
        spendable
    }

    /// Notes the generation a reply of Redis gave for `slot`.
    pub(super) fn note_slot_generation(&self, slot: u16, generation: Option<u64>) {
        if let Ok(mut tracker) = self.generations.try_borrow_mut() {
            tracker.note_slot(slot, generation);
        }
    }

    /// The generation of `slot` this worker last heard of, if any.
    pub(super) fn slot_generation(&self, slot: u16) -> Option<u64> {
        self.generations.try_borrow().ok()?.slot(slot)
    }

    /// A spend found its generation gone: a Redis Cluster's slot has
    /// `renewed` now; a single Redis's is read (renewed) again.
    pub(super) fn generation_gone(&self, slot: u16, renewed: Option<u64>) {
        if self.cluster {
            return self.note_slot_generation(slot, renewed);
        }
        if let Ok(mut tracker) = self.generations.try_borrow_mut() {
            tracker.forget();
        }
        self.ask_generation();
    }

    /// Reads the generation key (a plain `GET`): if it is not what this
    /// worker knows (another node renewed it, or it is gone), asks again.
    fn check_generation(&self) {
        let mut get = Vec::new();
        encode(&mut get, &[b"GET", self.calls.gen_key().as_bytes()]);
        let me = self.me.clone();
        let _ = self.router.submit(
            self.calls.gen_key().as_bytes(),
            get,
            None,
            Box::new(move |frame: Option<OwnedFrame>| {
                let Some(store) = me.upgrade() else {
                    return;
                };
                let value = match &frame {
                    Some(OwnedFrame::BulkString(value)) => Some(value.as_slice()),
                    // No answer: nothing learnt.
                    None => return,
                    _ => None,
                };
                let again = store
                    .generations
                    .try_borrow()
                    .is_ok_and(|tracker| tracker.checked(value));
                if again {
                    store.ask_generation();
                }
            }),
        );
    }

    /// Reads (or renews) Redis's data generation: after each handshake and
    /// when a spend found it gone. A Redis Cluster has none.
    pub(super) fn ask_generation(&self) {
        let ask = self
            .generations
            .try_borrow_mut()
            .is_ok_and(|mut t| t.ask_now(monotonic_ms()));
        if !ask {
            return;
        }
        let mut fresh = [0u8; 8];
        if getrandom::getrandom(&mut fresh).is_err() {
            return self.asked_generation(None);
        }
        // (A Redis Cluster has none: `ask_now` said no.)
        let Some(call) = self.calls.generation(u64::from_le_bytes(fresh) >> 11) else {
            return self.asked_generation(None);
        };
        let me = self.me.clone();
        let sent = self.send(
            self.calls.gen_key().as_bytes(),
            call,
            Box::new(move |frame: Option<OwnedFrame>| {
                if let Some(store) = me.upgrade() {
                    store.asked_generation(frame.as_ref().and_then(generation::from_reply));
                }
            }),
        );
        if sent.is_err() {
            self.asked_generation(None);
        }
    }

    fn asked_generation(&self, learnt: Option<(Vec<u8>, u64)>) {
        if let Ok(mut tracker) = self.generations.try_borrow_mut() {
            tracker.answered(learnt);
        }
    }
}
