//! The green path (`decision::green`) answers as the decision does: for
//! every rule, payment and reply of the table, its first operation is the
//! decision's, and what it decides (or hands to the decision) ends as the
//! decision's own steps end.

use super::*;
use crate::decision::green::{admitted, first, quiet};
use crate::limiter::breaker::Tripped;

fn each_rules() -> Vec<Rules> {
    let mut out = Vec::new();
    let two = {
        let mut limits = Limits::one(LIMIT_2);
        let _ = limits.push(
            RateLimit {
                requests: 9,
                window_ms: 3_600_000,
            },
            None,
        );
        limits
    };
    for limits in [Limits::NONE, Limits::one(LIMIT_2), two] {
        for (pay_ahead, dry_run, trap) in (0..8).map(|b| (b & 1 != 0, b & 2 != 0, b & 4 != 0)) {
            for fail in [FailPolicy::Local, FailPolicy::Open, FailPolicy::Closed] {
                out.push(Rules {
                    limits,
                    pay_ahead,
                    dry_run,
                    trap,
                    fail,
                    ..rules()
                });
            }
        }
    }
    out
}

fn payments() -> [Payment; 4] {
    [Payment::Unpaid, WRONG, VALID(1), Payment::PaidBefore]
}

fn replies() -> Vec<Reply> {
    let mut out = vec![
        Reply::Down,
        Reply::Full {
            retry_after_ms: 1_000,
        },
        Reply::Spent(Spent::Replayed),
    ];
    for bits in 0..256u32 {
        let bit = |n: u32| bits & (1 << n) != 0;
        let block = match (bit(0), bit(1)) {
            (false, false) => Block::Clear,
            (true, false) => Block::Blocked,
            _ => Block::Banned,
        };
        out.push(Reply::Checked(Checked {
            verdict: Verdict {
                allowed: bit(2),
                remaining: if bit(3) { 0 } else { 3 },
                reset_after_ms: 500,
                retry_after_ms: if bit(2) { 0 } else { 700 },
                over: u32::from(bit(4)),
                limit: u8::from(bit(4)),
            },
            breaker: BreakerStatus {
                strikes: if bit(5) { 2 } else { 0 },
                block,
                block_ms: if block == Block::Clear { 0 } else { 9_000 },
                tripped: bit(5).then_some(Tripped::Opened),
            },
            struck: bit(6),
            generation: bit(7).then_some(4),
            maybe_struck: bit(5) && bit(6),
        }));
    }
    out
}

#[test]
fn fast_path_answers_as_the_decision() {
    let (mut fired, mut handed) = (0, 0);
    for rules in each_rules() {
        for payment in payments() {
            for exempt in [false, true] {
                let mut decision = Decision::of(&rules, payment, exempt);
                let started = decision.next(None, || false);
                let Some(op) = first(&rules, payment, exempt) else {
                    // Left to the decision: all but the plain unpaid check.
                    assert!(
                        started
                            != Next::Ask(Op::Check {
                                offence: Offence::Unpaid
                            })
                            || payment != Payment::Unpaid,
                        "{rules:?} {payment:?} {exempt}"
                    );
                    continue;
                };
                assert_eq!(started, Next::Ask(op), "{rules:?} {payment:?} {exempt}");
                assert_eq!(Decision::after_first(&rules, exempt), decision);
                for reply in replies() {
                    for trusted in [false, true] {
                        let want = { decision }.next(Some(reply), || trusted);
                        match admitted(&rules, &reply) {
                            Some(done) => {
                                fired += 1;
                                assert_eq!(Next::Done(done), want, "{rules:?} {reply:?}");
                            }
                            None => {
                                handed += 1;
                                let mut after = Decision::after_first(&rules, exempt);
                                assert_eq!(after.next(Some(reply), || trusted), want);
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(fired > 0 && handed > 0, "{fired} {handed}");
}

#[test]
fn a_green_request_without_a_solution_takes_the_fast_path() {
    let rules = rules();
    let op = first(&rules, Payment::Unpaid, false);
    assert_eq!(
        op,
        Some(Op::Check {
            offence: Offence::Unpaid
        })
    );
    let mut store = MemoryStore::default();
    let subject = Subject {
        key: b"a",
        limits: &rules.limits,
        key_values: crate::store::CLIENT_KEYS,
        rules: rules.breaker,
        rising: false,
    };
    let reply = store.ask(op.unwrap(), &subject);
    let done = admitted(&rules, &reply).expect("admitted on the fast path");
    assert_eq!(done.outcome, Outcome::Pass);
    assert_eq!(done.answer, None);
    assert_eq!(done.verdict.map(|v| v.remaining), Some(1));
    // The last free request: its next challenge is the decision's to price.
    let reply = store.ask(op.unwrap(), &subject);
    assert_eq!(admitted(&rules, &reply), None);
    // A solution, an exempt key, a trap: the decision's.
    assert_eq!(first(&rules, VALID(1), false), None);
    assert_eq!(first(&rules, Payment::Unpaid, true), None);
    let trap = Rules {
        trap: true,
        ..rules
    };
    assert_eq!(first(&trap, Payment::Unpaid, false), None);
}

#[test]
fn only_a_pass_with_nothing_to_log_or_summarize_is_quiet() {
    let rules = rules();
    let checked = |tripped| Checked {
        verdict: Verdict {
            allowed: true,
            remaining: 3,
            reset_after_ms: 500,
            retry_after_ms: 0,
            over: 0,
            limit: 0,
        },
        breaker: BreakerStatus {
            strikes: 1,
            block: Block::Clear,
            block_ms: 0,
            tripped,
        },
        struck: false,
        generation: None,
        maybe_struck: false,
    };
    let pass = admitted(&rules, &Reply::Checked(checked(None))).expect("admitted");
    assert!(quiet(&pass, false) && quiet(&pass, true));
    // A breaker opened: its line is written (fail2ban reads it).
    let opened = Final {
        breaker: Some(checked(Some(Tripped::Opened)).breaker),
        ..pass
    };
    assert!(!quiet(&opened, false));
    // A paid challenge counts in the client's summary, where kept.
    let solved = Final {
        outcome: Outcome::Solved,
        ..pass
    };
    assert!(quiet(&solved, false) && !quiet(&solved, true));
    // A reason is logged; an answer is sent.
    assert!(!quiet(
        &Final {
            reason: "r",
            ..pass
        },
        false
    ));
    let answered = Final {
        answer: Some(Answer::NotFound),
        ..pass
    };
    assert!(!quiet(&answered, false));
}
