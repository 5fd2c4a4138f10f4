//! `pow_shield_admin`'s calls to Redis (`pow_shield_core::admin` says what
//! they are and mean), on the worker's connection like every store call:
//! the view of one client (one script call), and the lift (one `DEL` of its
//! breaker keys per store key, each in its client's slot). A lift also
//! forgets this node's local refusals of the client; other nodes' caches
//! hold what Redis said for at most `breaker::CONFIRMED_MS` (a block) and
//! `refusals::FRESH_MS` (the strikes of a local refusal).

use std::rc::Rc;

use super::RedisStore;
use crate::redis::client::Unavailable;
use crate::redis::router::Rebuild;
use pow_shield_core::admin::{self, StoreView};
use pow_shield_core::limiter::RateLimit;
use pow_shield_core::redis::command::{client_tag, integers};

impl RedisStore {
    /// Asks Redis what it holds of `key` for `limits`; `on_reply` gets it
    /// (`None`: Redis did not answer).
    pub fn admin_show(
        &self,
        key: &[u8],
        limits: &[(RateLimit, bool)],
        on_reply: impl FnOnce(Option<StoreView>) + 'static,
    ) -> Result<(), Unavailable> {
        let prefix = self.prefix().ok_or(Unavailable::Busy)?;
        let (evalsha, shared) = admin::show_call(&prefix, key, limits);
        let again = evalsha.clone();
        let eval: Rebuild = Rc::new(move || admin::show_eval(&again, shared));
        let limits = limits.to_vec();
        let tag = client_tag(key);
        self.router.submit(
            tag.as_bytes(),
            evalsha,
            Some(eval),
            Box::new(move |frame| {
                let view = frame
                    .as_ref()
                    .and_then(integers)
                    .and_then(|reply| admin::show_reply(&reply, &limits));
                on_reply(view);
            }),
        )
    }

    /// Deletes `key`'s breaker keys in Redis; `on_reply` gets whether Redis
    /// did. This node's local refusals of the client under `limits` go at
    /// once (their strikes were Redis's word before the lift).
    pub fn admin_lift(
        &self,
        key: &[u8],
        limits: &[(RateLimit, bool)],
        on_reply: impl FnOnce(bool) + 'static,
    ) -> Result<(), Unavailable> {
        let prefix = self.prefix().ok_or(Unavailable::Busy)?;
        if let Ok(mut node) = self.node.try_borrow_mut() {
            node.lift(&mut self.env(), key, limits, super::now());
        }
        let tag = client_tag(key);
        self.router.submit(
            tag.as_bytes(),
            admin::lift_command(&prefix, key),
            None,
            Box::new(move |frame| on_reply(frame.is_some())),
        )
    }

    /// The key prefix (never busy: the node is not borrowed across a
    /// call).
    fn prefix(&self) -> Option<String> {
        let node = self.node.try_borrow().ok()?;
        Some(node.calls().prefix().to_owned())
    }
}
