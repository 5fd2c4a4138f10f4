//! A strike comes back once per refusal (SPEC §5): waiting out a 429's
//! `Retry-After` takes it back, and paying the same 429's token afterwards
//! buys the request and takes back nothing more; nothing is kept for
//! later either: after any number of such rounds, ignoring challenges
//! blocks at the sixth offence. (Cluster mode's spend script does the
//! same, `cluster::scripts` tables: `waited_then_paid`.)

use super::*;

#[test]
fn a_429_waited_out_then_paid_takes_back_one_strike_and_leaves_no_credit() {
    let mut s = MemoryStore::default();
    let on = per_second();
    assert!(checked(s.at(0).ask(OFFENCE, &on)).verdict.allowed);
    // Each round: a 429 (a strike), its Retry-After waited out (admitted,
    // the strike back), then its token paid (over the limit: accepted).
    let mut admitted_at = 0;
    for round in 1..=5u8 {
        let refused = checked(s.at(admitted_at + 10).ask(OFFENCE, &on));
        assert!(refused.struck, "round {round}: the 429's strike");
        admitted_at += 1_100;
        assert!(checked(s.at(admitted_at).ask(OFFENCE, &on)).verdict.allowed);
        if round == 1 {
            // (Later rounds' refusals count from the first of the paid
            // ones' series, two windows: their waits may come after it,
            // and then paying takes the strike back instead.)
            assert_eq!(s.strikes(KEY), 0, "waited out");
        }
        assert!(
            !checked(s.at(admitted_at + 5).ask(PAID, &on))
                .verdict
                .allowed
        );
        assert!(
            matches!(s.ask(spend(round, true), &on), Reply::Spent(Spent::Accepted(b)) if b.strikes == 0),
            "round {round}: paid, no strike left"
        );
    }
    // Ignoring every challenge now: five strikes, the sixth offence blocked.
    let blocks: Vec<Block> = (0..6)
        .map(|_| {
            checked(s.at(admitted_at + 20).ask(OFFENCE, &on))
                .breaker
                .block
        })
        .collect();
    assert_eq!(
        blocks,
        [[Block::Clear; 5].as_slice(), &[Block::Blocked]].concat()
    );
}

#[test]
fn a_solution_may_have_been_waited_out_once_its_429s_retry_after_has_ended() {
    let solution = |retry_at_ms| Solution {
        digest: [1; 32],
        spent_until_ms: 60_000,
        generation: None,
        forgive: true,
        retry_at_ms,
    };
    let rows = [
        (Some(5_000), 0, false),
        (Some(5_000), 4_999, false),
        (Some(5_000), 5_000, true),
        (Some(5_000), 60_000, true),
        // A token of a node that predates `ra`: as those nodes took it.
        (None, u64::MAX, false),
    ];
    for (retry_at_ms, now_ms, waited_out) in rows {
        assert_eq!(
            solution(retry_at_ms).may_have_been_waited_out(now_ms),
            waited_out,
            "ra {retry_at_ms:?} at {now_ms}"
        );
    }
}
