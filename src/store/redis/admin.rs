//! `pow_shield_admin`'s calls to Redis (`pow_shield_core::admin` says what
//! they are and mean), on the worker's connection like every store call:
//! the view of a client or of a `key=` value (one script call each, in
//! its slot), and the lift (one `DEL` per client reading or value, each in
//! its slot). A lift also forgets this node's local refusals of the
//! client, or of the value (a /24 Redis refused); other nodes' caches hold
//! what Redis said for at most `breaker::CONFIRMED_MS` (a block) and
//! `refusals::FRESH_MS` (a local refusal).

use std::rc::Rc;

use super::RedisStore;
use crate::redis::client::{OnFrame, Unavailable};
use crate::store::zone::OWN_KEY;
use pow_shield_core::admin::{self, StoreView};
use pow_shield_core::limiter::RateLimit;
use pow_shield_core::redis::cluster::ClientSlot;
use pow_shield_core::redis::command::Frame;
use pow_shield_core::store::Counted;

impl RedisStore {
    /// Asks Redis what it holds of `whose` for `limits`; `on_reply` gets it
    /// (`None`: Redis did not answer).
    pub fn admin_show(
        &self,
        whose: Counted,
        limits: &[(RateLimit, bool)],
        on_reply: impl FnOnce(Option<StoreView>) + 'static,
    ) -> Result<(), Unavailable> {
        let (prefix, slot) = self.layout().ok_or(Unavailable::Busy)?;
        let call = admin::show_call((&prefix, slot), whose, limits);
        let limits = limits.to_vec();
        let tag = admin::tag_of(whose, slot);
        self.router.submit(
            (tag.as_bytes(), None),
            Rc::new(call),
            OnFrame::Call(Box::new(move |frame| {
                let view = frame
                    .and_then(Frame::integers)
                    .and_then(|reply| admin::show_reply(reply, &limits));
                on_reply(view);
            })),
        )
    }

    /// Deletes `whose` keys in Redis (a client's breaker; a value's counts
    /// under `limits`); `on_reply` gets whether Redis did. This node's
    /// local refusals of the client, or of the value, under `limits` go at
    /// once (they were Redis's word before the lift).
    pub fn admin_lift(
        &self,
        whose: Counted,
        limits: &[(RateLimit, bool)],
        on_reply: impl FnOnce(bool) + 'static,
    ) -> Result<(), Unavailable> {
        let (prefix, slot) = self.layout().ok_or(Unavailable::Busy)?;
        // The node keys a value's refusals as the zone its buckets.
        let refused = match whose {
            Counted::Own(value) => [OWN_KEY, value].concat(),
            Counted::Client(key) | Counted::Spends(key) => key.to_vec(),
        };
        if let (Ok(mut node), Ok(mut keys)) = (
            self.node.try_borrow_mut(),
            self.refusal_keys.try_borrow_mut(),
        ) {
            node.lift(&mut self.env(&mut keys), &refused, limits, super::now());
        }
        let tag = admin::tag_of(whose, slot);
        self.router.submit(
            (tag.as_bytes(), None),
            Rc::new(admin::lift_command((&prefix, slot), whose, limits)),
            OnFrame::Call(Box::new(move |frame| on_reply(frame.is_some()))),
        )
    }

    /// The key prefix and the slot of a client's keys (never busy: the
    /// node is not borrowed across a call).
    fn layout(&self) -> Option<(String, ClientSlot)> {
        let node = self.node.try_borrow().ok()?;
        Some((node.calls().prefix().to_owned(), self.client_slot))
    }
}
