//! Who decides what Redis did not (docs/operations.md, "Choosing a fail
//! policy"): one rule for every request Redis failed, whether it failed
//! now (down, or its queue full) or later (the call timed out, the
//! connection dropped, a coalesced check it joined failed), and whether
//! the call reached Redis first. The module asks it in one place
//! (`src/store/mod.rs`) and carries out what it says.
//!
//! And before a request goes to Redis, whether the node answers it from
//! what Redis told it of the client ([`node_answers`]): while Redis is
//! unavailable, `pow_shield_fail` decides, not what Redis said a moment ago.

pub use crate::redis::command::Ints;
use crate::redis::command::{Frame, MAX_ELEMENTS};
pub use crate::redis::Unavailable;
use crate::store::{Offence, Op, Reply, Spent};
use crate::syntax::FailPolicy;

/// A request Redis did not answer, as the rule needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unanswered {
    pub op: Op,
    pub failure: Unavailable,
    /// The call reached Redis, which may have run it before the answer
    /// was lost (a late failure).
    pub sent: bool,
    /// `pow_shield_fail local`: the zone decides for an unavailable Redis.
    pub fail_local: bool,
    /// The node has its zone (nginx mapped it).
    pub zone: bool,
    /// A spend only Redis can decide: a solution of a challenge issued in
    /// Redis's data generation (the zone does not know what other nodes
    /// spent through Redis), or one the node cannot spend now
    /// (`ClusterNode::redis_only`).
    pub redis_only: bool,
    /// The spend's 429 counted a strike the location still counts: not
    /// spent, it is still owed (`Spent::NotRecorded::pays_back`).
    pub owed: bool,
}

// A check script's answer, with a Redis Cluster's generation, is held
// below the decoder's limit at build time (a call answered alone makes no
// list: a gathered call's answers are split into lists first,
// `stacks_reply`, `checks_reply`).
const _: () = assert!(
    crate::cluster::scripts::replies::REPLY_LEN < MAX_ELEMENTS
        && crate::cluster::scripts::replies::STACKED_REPLY_LEN < MAX_ELEMENTS,
    "a check's answer and its generation fit in Ints"
);

/// What a script call's reply is to the request that sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The script ran: its integers (read by `calls`).
    Ran(Ints),
    /// The call came after its deadline (`redis::clock`): Redis ran
    /// nothing. The same for the request as a call that timed out (the
    /// node gave up on it, or is about to): the fallback rule decides; and
    /// as one never sent, since nothing was counted, struck or spent.
    Expired,
    /// No reply of the script's (a timeout, a dropped connection, an error
    /// reply): Redis may have run it.
    Lost,
}

impl Answer {
    /// What `frame` (none: no reply came) is: its integers as the
    /// decoder read them, inline.
    pub fn of(frame: Option<&Frame>) -> Answer {
        match frame {
            Some(Frame::Integers(ints)) => Answer::Ran(**ints),
            Some(other) if other.expired_ms().is_some() => Answer::Expired,
            Some(_) | None => Answer::Lost,
        }
    }

    /// The script ran and answered `ints` (cut out of a gathered call's
    /// reply; more than [`MAX_ELEMENTS`]: not a reply of ours, lost).
    pub fn ran(ints: &[i64]) -> Answer {
        Ints::of(ints).map_or(Answer::Lost, Answer::Ran)
    }

    /// Whether Redis may have run the call, as the rule is told it
    /// (`Unanswered::sent`).
    pub fn may_have_run(&self) -> bool {
        !matches!(self, Answer::Expired)
    }

    /// The script's integers, if it ran.
    pub fn integers(self) -> Option<Ints> {
        match self {
            Answer::Ran(ints) => Some(ints),
            Answer::Expired | Answer::Lost => None,
        }
    }
}

/// What decides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decider {
    /// The zone stands in for Redis (`Op::standing_in`).
    Zone {
        /// Redis may have counted a strike for this refusal that the zone
        /// does not (it ran the check, its reply was lost): the challenge
        /// sent marks it (`Checked::maybe_struck`), so that paying it takes
        /// one back.
        maybe_struck: bool,
        /// The zone spends (or records) a token Redis must learn of: it
        /// waits in the replay queue until Redis takes commands again.
        replay: bool,
    },
    /// Nobody: `Reply::Down`, and `pow_shield_fail` (`open`, `closed`)
    /// decides in the request.
    Policy,
    /// A spend only Redis can decide, not recorded
    /// (`Spent::NotRecorded`): a fresh challenge, no strike; it pays back
    /// its 429's strike when `pays_back`: owed, and the spend never reached
    /// Redis (one that did may have taken it back there).
    NotNow { pays_back: bool },
    /// A spend only Redis can decide, whose 429's strike is owed, while
    /// Redis is down under `local`: the zone records it (refused here from
    /// now on, the zone's strike taken back) and it waits in the replay
    /// queue, whose write takes back that strike in Redis once it answers.
    /// It admits nothing: a fresh challenge that pays back nothing more.
    Record,
}

/// The one rule.
///
/// - A spend only Redis can decide is never the zone's: not now, and
///   its strike paid back by the fresh challenge unless the spend reached
///   Redis (which may have taken it back); except while Redis is down
///   under `local`, where the zone records it for Redis to take its strike
///   back there, once (`Record`; with nothing owed, nothing to record).
/// - A full queue is back-pressure, not an outage: the zone decides,
///   whatever `pow_shield_fail` says (never passed uncounted).
/// - An unavailable Redis: the zone under `local`, else the policy.
/// - Without a zone, the policy.
///
/// Only a spend the zone made is written to Redis later (`replay`): under
/// `open` or `closed` nothing was spent on the node, so there is nothing to
/// write (the replay queue skips a token the node's cache does not hold).
pub fn decider(asked: Unanswered) -> Decider {
    if asked.redis_only && matches!(asked.op, Op::Spend(_)) {
        let down = asked.failure == Unavailable::Down;
        return match asked.owed && asked.zone && asked.fail_local && down {
            true => Decider::Record,
            // A spend that reached Redis may have run and taken the strike
            // back there already: the fresh challenge must not take
            // another (the safe side: no pay back when it may have run).
            false => Decider::NotNow {
                pays_back: asked.owed && !asked.sent,
            },
        };
    }
    let zone = asked.zone && (asked.failure == Unavailable::Busy || asked.fail_local);
    if !zone {
        return Decider::Policy;
    }
    Decider::Zone {
        maybe_struck: asked.sent
            && asked.op
                == Op::Check {
                    offence: Offence::Unpaid,
                },
        replay: matches!(asked.op, Op::Spend(_)),
    }
}

/// What a spend the zone recorded for Redis ([`Decider::Record`]) answers
/// the request: it admits nothing. Recorded: a fresh challenge that pays
/// back nothing more (the 429's strike is taken back where it is, in the
/// zone now and in Redis by the replayed write); held already: a replay;
/// blocked: the block; no room for it (a full zone too): not recorded,
/// and the fresh challenge pays that strike back.
pub fn recorded(zone: Reply) -> Reply {
    let spent = match zone {
        Reply::Spent(Spent::Accepted(_)) => Spent::NotRecorded { pays_back: false },
        Reply::Spent(spent @ (Spent::Replayed | Spent::Blocked(_) | Spent::NotRecorded { .. })) => {
            spent
        }
        _ => Spent::NotRecorded { pays_back: true },
    };
    Reply::Spent(spent)
}

/// What the node's zone holds of a client from Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Known {
    /// Redis refused it until a `T` still ahead (a local refusal).
    Refusal,
    /// Redis reported a block (or ban) that still holds.
    Block,
}

/// What the worker knows of Redis (for the client's slot) as a request
/// comes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Connected, and Redis answers.
    Connected,
    /// Not known to answer, not known to be down: Redis closed the idle
    /// connection (its `timeout`, or it died: the worker cannot tell which
    /// until it calls), or the connection is on probation after an outage.
    Unknown,
    /// Unavailable: down, retried with back-off.
    Down,
}

/// Whether the node answers a request from what Redis told it of the
/// client (`known`), rather than asking Redis, whose failure the fallback
/// rule ([`decider`]) then leaves to `pow_shield_fail`.
///
/// - While Redis answers, what it said stands: refused until `T`,
///   blocked until the block ends.
/// - Otherwise a refusal is never the node's: it is only worth Redis's
///   fresh word. The call finds out whether Redis is there; if not,
///   `pow_shield_fail` decides (`open`: through, `closed`: 503 unless
///   trusted, `local`: the zone's own window).
/// - A block holds under `local` (the zone's breaker keeps what Redis
///   reported) and `closed` (both refuse; a trusted client stays blocked,
///   as it was while Redis answered), not under `open`: nothing is decided
///   on the node there (that is what `local` is for).
pub fn node_answers(known: Known, reach: Reach, policy: FailPolicy) -> bool {
    match (reach, known) {
        (Reach::Connected, _) => true,
        (Reach::Unknown | Reach::Down, Known::Refusal) => false,
        (Reach::Unknown | Reach::Down, Known::Block) => policy != FailPolicy::Open,
    }
}

/// How long an exiting worker waits, at most, for Redis to take the
/// strikes the node counted (its batches), then gives them up (logged).
pub const EXIT_GRACE_MS: u64 = 10_000;

/// Whether a worker that exits (reload, stop), `waited_ms` into it, waits
/// longer for Redis to take its batches: while Redis may answer, up to
/// [`EXIT_GRACE_MS`]; while it is down, not at all (nginx stops and reloads
/// at once whatever state Redis is in; what Redis never took is given up).
pub fn exit_waits(waited_ms: u64, reach: Reach) -> bool {
    reach != Reach::Down && waited_ms < EXIT_GRACE_MS
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Solution;
    use redis_protocol::resp2::types::OwnedFrame;

    const SPEND: Op = Op::Spend(Solution {
        digest: [0; 32],
        spent_until_ms: 0,
        generation: None,
        forgive: false,
        retry_at_ms: None,
    });
    /// A solution whose 429 struck: only Redis may spend it (of Redis's
    /// generation, or one the node cannot spend now).
    const OWED: Op = Op::Spend(Solution {
        digest: [0; 32],
        spent_until_ms: 0,
        generation: Some(7),
        forgive: true,
        retry_at_ms: None,
    });
    const UNPAID: Op = Op::Check {
        offence: Offence::Unpaid,
    };
    const PAID: Op = Op::Check {
        offence: Offence::None,
    };

    fn zone(maybe_struck: bool, replay: bool) -> Decider {
        Decider::Zone {
            maybe_struck,
            replay,
        }
    }

    #[test]
    fn a_reply_is_the_scripts_an_expired_call_or_lost() {
        let status = |s: &str| OwnedFrame::SimpleString(s.as_bytes().to_vec());
        let ints = OwnedFrame::Array(vec![OwnedFrame::Integer(1), OwnedFrame::Integer(0)]);
        // (reply, what it is, whether Redis may have run the call)
        #[rustfmt::skip]
        let table = [
            (Some(ints), Answer::Ran(Ints::of(&[1, 0]).unwrap()), true),
            (Some(status("EXPIRED 1765000000123")), Answer::Expired, false),
            // Not the script's: an error reply, a status without the clock.
            (Some(OwnedFrame::Error("ERR x".into())), Answer::Lost, true),
            (Some(status("EXPIRED")), Answer::Lost, true),
            (Some(OwnedFrame::BulkString(b"1 2".to_vec())), Answer::Lost, true),
            (Some(OwnedFrame::Array(vec![OwnedFrame::Integer(1), OwnedFrame::Null])), Answer::Lost, true),
            // A timeout, a dropped connection.
            (None, Answer::Lost, true),
        ];
        for (i, (frame, want, ran)) in table.into_iter().enumerate() {
            let answer = Answer::of(frame.map(Frame::from).as_ref());
            assert_eq!(answer, want, "row {i}");
            assert_eq!(answer.may_have_run(), ran, "row {i}");
        }
    }

    #[test]
    fn a_replys_integers_are_kept_inline_as_the_decoder_reads_them() {
        for n in [0, 1, 11, MAX_ELEMENTS] {
            let ints: Vec<i64> = (0..n as i64).map(|i| i * 1_000_003 - 7).collect();
            let frame = OwnedFrame::Array(ints.iter().copied().map(OwnedFrame::Integer).collect());
            let Answer::Ran(kept) = Answer::of(Some(&Frame::from(frame))) else {
                panic!("{n} integers");
            };
            assert_eq!(kept.to_vec(), ints);
            assert_eq!(Answer::ran(&ints), Answer::Ran(kept));
        }
        // Longer than any reply the decoder takes: not the script's.
        let long = vec![0; MAX_ELEMENTS + 1];
        assert_eq!(Answer::ran(&long), Answer::Lost);
    }

    #[test]
    fn an_expired_call_is_decided_as_a_timed_out_one_that_struck_nothing() {
        // Every op, under every policy: what the rule says of an expired
        // call is what it says of a call that failed before Redis had it.
        for op in [UNPAID, PAID, Op::Strike, SPEND, OWED] {
            for (fail_local, redis_only) in [(true, false), (false, false), (true, true)] {
                let asked = |sent| Unanswered {
                    op,
                    failure: Unavailable::Down,
                    sent,
                    fail_local,
                    zone: true,
                    redis_only,
                    owed: op == OWED,
                };
                let expired = decider(asked(Answer::Expired.may_have_run()));
                assert_eq!(expired, decider(asked(false)), "{op:?}");
                assert!(
                    !matches!(
                        expired,
                        Decider::Zone {
                            maybe_struck: true,
                            ..
                        }
                    ),
                    "{op:?}: Redis struck nothing"
                );
            }
        }
        // A timed-out unpaid check may have been struck: its challenge
        // pays one back.
        let timed_out = Unanswered {
            op: UNPAID,
            failure: Unavailable::Down,
            sent: Answer::Lost.may_have_run(),
            fail_local: true,
            zone: true,
            redis_only: false,
            owed: false,
        };
        assert_eq!(decider(timed_out), zone(true, false));
    }

    #[test]
    fn every_unanswered_request_has_one_decider() {
        use Unavailable::{Busy, Down};
        let not_now = |pays_back| Decider::NotNow { pays_back };
        // (op, failure, sent, fail_local, zone, redis_only) → decider
        // (`owed`: the op is `OWED`)
        #[rustfmt::skip]
        let table = [
            // An unavailable Redis: the zone under `local`, else the policy.
            (UNPAID, Down, false, true, true, false, zone(false, false)),
            (UNPAID, Down, false, false, true, false, Decider::Policy),
            // A late failure: Redis may have struck the refusal.
            (UNPAID, Down, true, true, true, false, zone(true, false)),
            (UNPAID, Down, true, false, true, false, Decider::Policy),
            // A paid check or a strike struck nothing unknown.
            (PAID, Down, true, true, true, false, zone(false, false)),
            (Op::Strike, Down, true, true, true, false, zone(false, false)),
            // A full queue: the zone, whatever the policy.
            (UNPAID, Busy, false, false, true, false, zone(false, false)),
            (Op::Strike, Busy, false, false, true, false, zone(false, false)),
            // The zone spends: Redis learns of it later.
            (SPEND, Down, false, true, true, false, zone(false, true)),
            (SPEND, Down, true, true, true, false, zone(false, true)),
            (SPEND, Busy, false, false, true, false, zone(false, true)),
            (SPEND, Down, false, false, true, false, Decider::Policy),
            // Only Redis may spend it: never the zone's. Nothing owed:
            // not recorded, nothing to pay back.
            (SPEND, Down, false, true, true, true, not_now(false)),
            (SPEND, Busy, false, false, true, true, not_now(false)),
            (SPEND, Down, true, true, true, true, not_now(false)),
            // Its strike owed: the zone records it for Redis while Redis
            // is down under `local`; else the fresh challenge pays it back.
            (OWED, Down, false, true, true, true, Decider::Record),
            (OWED, Down, true, true, true, true, Decider::Record),
            (OWED, Down, false, false, true, true, not_now(true)),
            // Sent and lost (`open`, `closed`): Redis may have run it and
            // taken the strike back already; the fresh one takes no other.
            (OWED, Down, true, false, true, true, not_now(false)),
            (OWED, Down, true, true, false, true, not_now(false)),
            (OWED, Busy, false, true, true, true, not_now(true)),
            (OWED, Down, false, true, false, true, not_now(true)),
            // (A check is never Redis-only.)
            (UNPAID, Down, false, true, true, true, zone(false, false)),
            // No zone: the policy.
            (UNPAID, Busy, false, true, false, false, Decider::Policy),
            (SPEND, Down, false, true, false, false, Decider::Policy),
        ];
        for (i, (op, failure, sent, fail_local, has_zone, redis_only, want)) in
            table.into_iter().enumerate()
        {
            let asked = Unanswered {
                op,
                failure,
                sent,
                fail_local,
                zone: has_zone,
                redis_only,
                owed: op == OWED,
            };
            assert_eq!(decider(asked), want, "row {i}: {asked:?}");
        }
    }

    #[test]
    fn a_spend_the_zone_records_for_redis_admits_nothing() {
        use crate::limiter::breaker::BreakerStatus;
        let blocked = BreakerStatus {
            block: crate::limiter::breaker::Block::Blocked,
            ..BreakerStatus::default()
        };
        let not_recorded = |pays_back| Reply::Spent(Spent::NotRecorded { pays_back });
        // The zone's answer → the request's
        #[rustfmt::skip]
        let table = [
            // Recorded: its strike is taken back where it is (the zone now,
            // Redis by the replayed write); the fresh one pays back nothing.
            (Reply::Spent(Spent::Accepted(BreakerStatus::default())), not_recorded(false)),
            (Reply::Spent(Spent::Replayed), Reply::Spent(Spent::Replayed)),
            (Reply::Spent(Spent::Blocked(blocked)), Reply::Spent(Spent::Blocked(blocked))),
            // No room for it: the fresh one pays it back.
            (not_recorded(true), not_recorded(true)),
            (Reply::Full { retry_after_ms: 1_000 }, not_recorded(true)),
            (Reply::Down, not_recorded(true)),
        ];
        for (i, (zone, want)) in table.into_iter().enumerate() {
            assert_eq!(recorded(zone), want, "row {i}: {zone:?}");
        }
    }

    #[test]
    fn while_redis_is_unavailable_pow_shield_fail_decides_not_what_redis_said() {
        use FailPolicy::{Closed, Local, Open};
        use Known::{Block, Refusal};
        use Reach::{Connected, Down, Unknown};
        // (known, reach, policy) → the node answers
        #[rustfmt::skip]
        let table = [
            // Redis answers: what it said stands, under every policy.
            (Refusal, Connected, Open, true),
            (Refusal, Connected, Closed, true),
            (Refusal, Connected, Local, true),
            (Block, Connected, Open, true),
            (Block, Connected, Closed, true),
            (Block, Connected, Local, true),
            // Unavailable: a refusal is the policy's (open: through,
            // closed: 503 or trusted through, local: the zone's window).
            (Refusal, Down, Open, false),
            (Refusal, Down, Closed, false),
            (Refusal, Down, Local, false),
            // An idle connection Redis closed: the call finds out.
            (Refusal, Unknown, Open, false),
            (Refusal, Unknown, Closed, false),
            (Refusal, Unknown, Local, false),
            // A block holds where the node refuses anyway, not under open.
            (Block, Down, Open, false),
            (Block, Down, Closed, true),
            (Block, Down, Local, true),
            (Block, Unknown, Open, false),
            (Block, Unknown, Closed, true),
            (Block, Unknown, Local, true),
        ];
        for (i, (known, reach, policy, want)) in table.into_iter().enumerate() {
            assert_eq!(
                node_answers(known, reach, policy),
                want,
                "row {i}: {known:?} {reach:?} {policy:?}"
            );
        }
    }

    #[test]
    fn an_exiting_worker_waits_for_a_redis_that_may_answer_never_for_a_down_one() {
        use Reach::{Connected, Down, Unknown};
        // (ms since the worker began to exit, reach) → it waits
        #[rustfmt::skip]
        let table = [
            (0, Connected, true),
            (EXIT_GRACE_MS - 1, Connected, true),
            (EXIT_GRACE_MS, Connected, false),
            // Not connected, not known down: the batch's call finds out.
            (0, Unknown, true),
            (EXIT_GRACE_MS, Unknown, false),
            // Down: given up at once.
            (0, Down, false),
            (EXIT_GRACE_MS - 1, Down, false),
        ];
        for (i, (waited_ms, reach, want)) in table.into_iter().enumerate() {
            assert_eq!(
                exit_waits(waited_ms, reach),
                want,
                "row {i}: {waited_ms} {reach:?}"
            );
        }
    }
}
