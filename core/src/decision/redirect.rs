//! When the access phase runs again for a request the shield has seen
//! (docs/directives.md, "Internal redirects"): `index`, `try_files`,
//! `rewrite ... last`, `X-Accel-Redirect`, a named location or an
//! `error_page` send it to another location, or `post_action` runs after
//! its response.
//!
//! The rule: a request is decided once per shield policy it reaches. A
//! redirect into a location whose policy counts and prices the request as
//! one that decided it already changes nothing (never counted twice under
//! the same policy), nor one whose limits all admitted it already (the
//! same limit at another price); into another policy, the request is
//! decided again there, as if asked for directly (a cheap location's
//! `try_files` does not serve a dear location's content for free), the
//! buckets that admitted it before left out (one request counts once in a
//! bucket, which locations with the same limit share). Not decided again: a
//! request the shield refused (the refusal again, never the content: no
//! loop, no second count), an error page with its status fixed
//! (`error_page 404 /404.html`, or `=404`: it presents an answer already
//! given, e.g. a 403 of `deny`), and `post_action` (the response has gone
//! out). A redirect into an unshielded location costs nothing (the
//! handler returns before asking). `limit_req` decides once per request
//! whatever the redirects, and misses the dear location; `error_page ... =`
//! without a status serves the target's content as its own, so it counts
//! as a redirect.

use sha2::{Digest, Sha256};

use super::{DifficultyRule, Payment};
use crate::limiter::{Limits, MAX_LIMITS};
use crate::protocol::Rejection;
use crate::store::KeyValues;

/// How the shield resolved a request the last time its phase ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// Not yet: nothing asked, or waiting for a store's answer.
    Pending,
    /// Let through (its content, or nginx's own answer such as a trap's
    /// 404, is served).
    Passed,
    /// Answered with this status.
    Answered(u16),
}

/// Why the access phase runs again, as nginx says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// The same location again (a store answered), or a redirect whose
    /// target serves its own content: `index`, `try_files`,
    /// `rewrite ... last`, `X-Accel-Redirect`, a named location,
    /// `error_page ... =` without a status.
    Redirect,
    /// An error page whose status is fixed: `error_page` without `=`, or
    /// with `=<code>`.
    ErrorPage,
    /// `post_action`, after the response.
    PostAction,
}

/// What the phase does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Again {
    /// Carry on with the decision under way (a store answered).
    Continue,
    /// Let the request through (`NGX_DECLINED`).
    Pass,
    /// Answer this status again.
    Answer(u16),
    /// Decide the request under the new location's policy.
    Decide,
}

/// What the phase does for a request last left at `resolution`, run again
/// for `entry`. `decided_alike` says whether the location's policy counts
/// and prices the request as one that decided it already ([`PolicyId`]);
/// it is asked only for a redirect of a passed request.
pub fn again(resolution: Resolution, entry: Entry, decided_alike: impl FnOnce() -> bool) -> Again {
    match (resolution, entry) {
        (Resolution::Pending, _) => Again::Continue,
        // The response went out: the operator's action runs.
        (_, Entry::PostAction) => Again::Pass,
        (Resolution::Answered(status), _) => Again::Answer(status),
        (Resolution::Passed, Entry::ErrorPage) => Again::Pass,
        (Resolution::Passed, Entry::Redirect) if decided_alike() => Again::Pass,
        (Resolution::Passed, Entry::Redirect) => Again::Decide,
    }
}

/// What a policy counts a request under and asks of it, with the request's
/// keys evaluated there.
#[derive(Clone, Copy, Debug)]
pub struct Counting<'a> {
    /// The client key (empty: exempt).
    pub key: &'a [u8],
    pub limits: &'a Limits,
    /// Each limit's `key=` value (`None`: the client key's count).
    pub key_values: KeyValues<'a>,
    pub difficulty: DifficultyRule,
    /// A dry run counts under keys of its own.
    pub dry_run: bool,
    pub trap: bool,
}

/// The identity of a [`Counting`]: equal when the two count the request in
/// the same buckets under the same breaker key, at the same price (a
/// limit's name does not count). SHA-256 over a length-prefixed encoding,
/// cut to 128 bits: the keys are the client's to choose, so no two
/// different ones may be made to collide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyId([u8; 16]);

impl PolicyId {
    pub fn of(c: &Counting) -> PolicyId {
        let mut h = Sha256::new();
        let field = |h: &mut Sha256, bytes: &[u8]| {
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        field(&mut h, c.key);
        h.update([
            u8::from(c.dry_run),
            u8::from(c.trap),
            c.difficulty.base,
            c.difficulty.max,
            c.difficulty.step,
        ]);
        for (i, limit) in c.limits.as_slice().iter().enumerate() {
            h.update(u64::from(limit.rate.requests).to_le_bytes());
            h.update(limit.rate.window_ms.to_le_bytes());
            h.update([u8::from(limit.approx)]);
            match c.key_values.get(i).copied().flatten() {
                None => h.update([0]),
                Some(value) => {
                    h.update([1]);
                    field(&mut h, value);
                }
            }
        }
        let digest = h.finalize();
        let mut id = [0; 16];
        id.copy_from_slice(&digest[..16]);
        PolicyId(id)
    }
}

/// Most decisions a request keeps: nginx changes a request's URI at most
/// 10 times, so a request is decided at most 11 times.
pub const MAX_DECISIONS: usize = 11;

/// One bucket a decision counts the request in: a limit's numbers, whose
/// count (the client key's or a `key=` value's), and a dry run's keys, but
/// not `approx`: the zone counts an `approx` limit in the same window as
/// the exact one of the same numbers and key, so across a redirect they
/// are one bucket, as one context refuses the pair (`Limits::add`). (With
/// Redis they are two, and such a redirect is counted in the first only.)
/// run's keys). Two locations with the same limit count the same bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BucketId([u8; 16]);

impl Counting<'_> {
    /// The buckets this policy counts the request in (a limit whose `key=`
    /// value is empty counts it in none).
    pub fn buckets(&self) -> impl Iterator<Item = BucketId> + '_ {
        self.limits
            .as_slice()
            .iter()
            .enumerate()
            .filter_map(move |(i, limit)| {
                let (own, key) = match self.key_values.get(i).copied().flatten() {
                    None => (0, self.key),
                    Some([]) => return None,
                    Some(value) => (1, value),
                };
                let mut h = Sha256::new();
                h.update(u64::from(limit.rate.requests).to_le_bytes());
                h.update(limit.rate.window_ms.to_le_bytes());
                h.update([u8::from(self.dry_run), own]);
                h.update(key);
                let mut id = [0; 16];
                id.copy_from_slice(&h.finalize()[..16]);
                Some(BucketId(id))
            })
    }
}

/// What the decisions of a request so far did: the policies that decided
/// it, and the buckets that admitted it (of the decisions that passed it).
#[derive(Clone, Debug, Default)]
pub struct Earlier {
    policies: Vec<PolicyId>,
    buckets: Vec<BucketId>,
}

impl Earlier {
    /// Records a decision made (`passed`: it let the request through, so
    /// its buckets counted it). Recording one twice changes nothing;
    /// `false` when [`MAX_DECISIONS`] are kept (nginx never gets there;
    /// the caller then decides nothing more).
    pub fn record(&mut self, decided: &Counting, passed: bool) -> bool {
        let id = PolicyId::of(decided);
        if !self.policies.contains(&id) {
            if self.policies.len() >= MAX_DECISIONS {
                return false;
            }
            self.policies.push(id);
        }
        if passed {
            for bucket in decided.buckets() {
                if !self.buckets.contains(&bucket) {
                    self.buckets.push(bucket);
                }
            }
        }
        true
    }

    /// Whether `here` would decide the request as a decision made already:
    /// the same policy, or (no trap) limits whose buckets all admitted the
    /// request already, where its price does not matter.
    pub fn decided_alike(&self, here: &Counting) -> bool {
        if self.policies.contains(&PolicyId::of(here)) {
            return true;
        }
        let mut buckets = here.buckets().peekable();
        !here.trap && buckets.peek().is_some() && buckets.all(|b| self.buckets.contains(&b))
    }

    /// Which of `here`'s limits counted the request already (a decision
    /// that passed it counted it in the same bucket): deciding it again,
    /// those are left out (one request counts once in a bucket).
    pub fn counted_before(&self, here: &Counting) -> [bool; MAX_LIMITS] {
        let mut counted = [false; MAX_LIMITS];
        let mut buckets = here.buckets();
        for (i, flag) in counted.iter_mut().enumerate().take(here.limits.len()) {
            if here.key_values.get(i).copied().flatten() == Some(&[][..]) {
                continue;
            }
            if let Some(bucket) = buckets.next() {
                *flag = self.buckets.contains(&bucket);
            }
        }
        counted
    }
}

/// The payment a request offers the policy it is redirected into (its
/// `X-PoW-*` headers verified there). The token may be the payment of the
/// policy that decided it before: one issued for another policy, key or
/// address is no payment here and no offence. And a request that paid
/// there is no challenge-ignoring client: over this limit its 429 counts
/// no strike ([`Payment::PaidBefore`]), so its token, sent back to the
/// first location, is no offence either.
pub fn after_redirect(payment: Payment, paid_before: bool) -> Payment {
    let payment = match payment {
        Payment::Invalid(Rejection::WrongPolicy | Rejection::WrongClient | Rejection::WrongIp) => {
            Payment::Unpaid
        }
        payment => payment,
    };
    match payment {
        Payment::Unpaid if paid_before => Payment::PaidBefore,
        payment => payment,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::RateLimit;
    use crate::store::{Solution, CLIENT_KEYS};

    #[test]
    fn a_request_is_decided_again_only_by_a_redirect_into_another_policy() {
        use Again::*;
        use Entry::*;
        use Resolution::*;
        for (resolution, entry, alike, expected) in [
            (Pending, Redirect, false, Continue),
            (Passed, Redirect, true, Pass),
            (Passed, Redirect, false, Decide),
            (Passed, ErrorPage, false, Pass),
            (Passed, PostAction, false, Pass),
            (Answered(429), Redirect, false, Answer(429)),
            (Answered(403), ErrorPage, false, Answer(403)),
            (Answered(429), PostAction, false, Pass),
        ] {
            assert_eq!(
                again(resolution, entry, || alike),
                expected,
                "{resolution:?} {entry:?} alike={alike}"
            );
        }
    }

    #[test]
    fn the_policy_is_compared_only_for_a_redirect_of_a_passed_request() {
        let never = || -> bool { panic!("compared") };
        for (resolution, entry) in [
            (Resolution::Pending, Entry::Redirect),
            (Resolution::Answered(429), Entry::Redirect),
            (Resolution::Passed, Entry::ErrorPage),
            (Resolution::Passed, Entry::PostAction),
        ] {
            let _ = again(resolution, entry, never);
        }
    }

    fn limits(list: &[(u32, u64)]) -> &'static Limits {
        let mut limits = Limits::NONE;
        for &(requests, window_ms) in list {
            let limit = RateLimit {
                requests,
                window_ms,
            };
            let name = crate::limiter::LimitName::new(&format!("l{requests}x{window_ms}")).ok();
            limits.push(limit, name).unwrap();
        }
        Box::leak(Box::new(limits))
    }

    const CHEAP: Counting = Counting {
        key: b"198.51.100.7",
        limits: &Limits::one(RateLimit {
            requests: 100,
            window_ms: 60_000,
        }),
        key_values: CLIENT_KEYS,
        difficulty: DifficultyRule::hex(4),
        dry_run: false,
        trap: false,
    };

    #[test]
    fn policies_that_count_and_price_alike_are_one() {
        let id = PolicyId::of(&CHEAP);
        // (another location with the same settings: the same buckets)
        assert_eq!(PolicyId::of(&CHEAP.clone()), id);
        let named = Counting {
            limits: limits(&[(100, 60_000)]),
            ..CHEAP
        };
        assert_eq!(PolicyId::of(&named), id, "a limit's name does not count");
    }

    #[test]
    fn anything_counted_or_priced_otherwise_is_another_policy() {
        let id = PolicyId::of(&CHEAP);
        let own = &[Some(&b"198.51.100.0/24"[..])][..];
        let left_out = &[Some(&b""[..])][..];
        let approx = Limits::of(
            crate::limiter::Limit::new(RateLimit {
                requests: 100,
                window_ms: 60_000,
            })
            .approx(),
        );
        for (what, other) in [
            (
                "limit",
                Counting {
                    limits: limits(&[(1, 3_600_000)]),
                    ..CHEAP
                },
            ),
            (
                "stacked limit",
                Counting {
                    limits: limits(&[(100, 60_000), (1000, 3_600_000)]),
                    ..CHEAP
                },
            ),
            (
                "difficulty",
                Counting {
                    difficulty: DifficultyRule::bits(20),
                    ..CHEAP
                },
            ),
            (
                "client key",
                Counting {
                    key: b"api:5000",
                    ..CHEAP
                },
            ),
            (
                "key= value",
                Counting {
                    key_values: own,
                    ..CHEAP
                },
            ),
            (
                "empty key= value",
                Counting {
                    key_values: left_out,
                    ..CHEAP
                },
            ),
            (
                "approx",
                Counting {
                    limits: &approx,
                    ..CHEAP
                },
            ),
            (
                "dry run",
                Counting {
                    dry_run: true,
                    ..CHEAP
                },
            ),
            (
                "trap",
                Counting {
                    trap: true,
                    ..CHEAP
                },
            ),
        ] {
            assert_ne!(PolicyId::of(&other), id, "{what}");
        }
    }

    const DEAR: Counting = Counting {
        limits: &Limits::one(RateLimit {
            requests: 1,
            window_ms: 3_600_000,
        }),
        difficulty: DifficultyRule::bits(20),
        ..CHEAP
    };

    #[test]
    fn a_redirect_into_a_policy_that_decided_the_request_decides_nothing() {
        let mut earlier = Earlier::default();
        assert!(!earlier.decided_alike(&CHEAP));
        assert!(earlier.record(&CHEAP, true));
        assert!(earlier.decided_alike(&CHEAP));
        assert!(!earlier.decided_alike(&DEAR));
        assert!(earlier.record(&CHEAP, true), "recorded twice: once");
        assert!(earlier.record(&DEAR, false));
        assert!(earlier.decided_alike(&DEAR));
    }

    #[test]
    fn a_policy_whose_buckets_all_admitted_the_request_decides_nothing() {
        let mut earlier = Earlier::default();
        earlier.record(&CHEAP, true);
        // the same limit at another price: green there, green here
        let pricier = Counting {
            difficulty: DifficultyRule::bits(20),
            ..CHEAP
        };
        assert!(earlier.decided_alike(&pricier));
        // ... unless the request was paid for (over the limit: counted in
        // no bucket), and the price here matters
        let mut paid = Earlier::default();
        paid.record(&CHEAP, false);
        assert!(!paid.decided_alike(&pricier));
        // a trap still strikes
        let trap = Counting {
            trap: true,
            ..CHEAP
        };
        assert!(!earlier.decided_alike(&trap));
    }

    #[test]
    fn deciding_again_leaves_out_the_buckets_that_counted_the_request() {
        let mut earlier = Earlier::default();
        earlier.record(&CHEAP, true);
        let stacked = Counting {
            limits: limits(&[(1, 3_600_000), (100, 60_000)]),
            ..CHEAP
        };
        let mut second = [false; MAX_LIMITS];
        second[1] = true;
        assert_eq!(
            earlier.counted_before(&stacked),
            second,
            "100 a minute counted it already"
        );
        let other_key = Counting {
            key: b"api:5000",
            ..stacked
        };
        assert_eq!(earlier.counted_before(&other_key), [false; MAX_LIMITS]);
        let dry = Counting {
            dry_run: true,
            ..stacked
        };
        assert_eq!(earlier.counted_before(&dry), [false; MAX_LIMITS]);
        let mut refused = Earlier::default();
        refused.record(&CHEAP, false);
        assert_eq!(refused.counted_before(&stacked), [false; MAX_LIMITS]);
    }

    #[test]
    fn an_approx_limit_and_the_same_limit_exact_are_one_bucket_across_a_redirect() {
        let mut earlier = Earlier::default();
        let approx = Limits::of(
            crate::limiter::Limit::new(RateLimit {
                requests: 100,
                window_ms: 60_000,
            })
            .approx(),
        );
        earlier.record(
            &Counting {
                limits: &approx,
                ..CHEAP
            },
            true,
        );
        let mut first = [false; MAX_LIMITS];
        first[0] = true;
        assert_eq!(
            earlier.counted_before(&CHEAP),
            first,
            "the zone counted it once in that window: not twice"
        );
    }

    #[test]
    fn a_request_is_decided_at_most_eleven_times() {
        let mut earlier = Earlier::default();
        for requests in 1..=MAX_DECISIONS as u32 {
            let c = Counting {
                limits: limits(&[(requests, 60_000)]),
                ..CHEAP
            };
            assert!(earlier.record(&c, true));
        }
        assert!(!earlier.record(&DEAR, true));
    }

    #[test]
    fn a_redirected_request_offers_another_policys_token_as_no_payment_and_no_offence() {
        let solution = Solution {
            digest: [7; 32],
            spent_until_ms: 60_000,
            generation: None,
            forgive: true,
            retry_at_ms: None,
        };
        let wrong = |r| Payment::Invalid(r);
        for (payment, paid_before, expected) in [
            (Payment::Unpaid, false, Payment::Unpaid),
            (Payment::Unpaid, true, Payment::PaidBefore),
            (wrong(Rejection::WrongPolicy), false, Payment::Unpaid),
            (wrong(Rejection::WrongPolicy), true, Payment::PaidBefore),
            (wrong(Rejection::WrongClient), false, Payment::Unpaid),
            (wrong(Rejection::WrongIp), true, Payment::PaidBefore),
            // a token of this policy is paid or refused as anywhere
            (Payment::Valid(solution), true, Payment::Valid(solution)),
            (
                wrong(Rejection::WrongSolution),
                true,
                wrong(Rejection::WrongSolution),
            ),
            (
                wrong(Rejection::BadSignature),
                false,
                wrong(Rejection::BadSignature),
            ),
        ] {
            assert_eq!(
                after_redirect(payment, paid_before),
                expected,
                "{payment:?} paid_before={paid_before}"
            );
        }
    }
}
