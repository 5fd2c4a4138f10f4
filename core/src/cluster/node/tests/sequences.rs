//! Each path of the node, as a sequence of requests, replies, timeouts
//! and ticks, its calls run by a real Redis.

use super::*;
use crate::cluster::refusals::BATCH_MS;
use crate::redis::clock;
use crate::store::Spent;

const CLIENT: &[u8] = b"\x00198.51.100.7";

/// Asks an unpaid request of `CLIENT` and lets Redis answer every call.
fn unpaid_now(rig: &mut Rig) -> u32 {
    let (n, _) = rig.unpaid(CLIENT);
    rig.run_all();
    n
}

/// A rig whose client Redis refused once (its third request, struck).
fn refused_once(test: &str) -> Option<Rig> {
    let mut rig = Rig::new(test)?;
    let (a, b, c) = (
        unpaid_now(&mut rig),
        unpaid_now(&mut rig),
        unpaid_now(&mut rig),
    );
    assert!(rig.admitted(a) && rig.admitted(b), "{:?}", rig.fates);
    assert!(rig.refused(c), "{:?}", rig.fate(c));
    Some(rig)
}

/// Whether `answered` is the node's own refusal, struck.
fn refused_here(answered: &Answered) -> bool {
    matches!(answered, Answered::Now(Reply::Checked(c))
        if !c.verdict.allowed && c.struck && c.breaker.block == Block::Clear)
}

#[test]
fn a_client_redis_refused_is_refused_on_the_node_until_t_and_its_strikes_go_in_one_batch() {
    let Some(mut rig) = refused_once("refuse_on_node") else {
        return;
    };
    let calls = rig.calls_run;
    assert_eq!(rig.redis_int(CLIENT, ClientKey::Strikes), 1);
    // Five more: refused here, struck at once in the zone, no call.
    for _ in 0..5 {
        let (_, answered) = rig.unpaid(CLIENT);
        assert!(refused_here(&answered), "{answered:?}");
    }
    assert!(rig.held.is_empty());
    assert_eq!(rig.calls_run, calls);
    assert!(rig.timers > 0, "the batch timer is armed");
    // The timer sends the five strikes in one call.
    rig.after(BATCH_MS).tick(false);
    assert_eq!(rig.held.len(), 1);
    rig.run_all();
    assert_eq!(rig.calls_run, calls + 1);
    assert_eq!(rig.redis_int(CLIENT, ClientKey::Strikes), 6);
    // Nothing more to send.
    rig.after(BATCH_MS).tick(false);
    assert!(rig.held.is_empty());
}

#[test]
fn a_refusal_that_would_reach_the_strike_threshold_is_redis_to_count() {
    let Some(mut rig) = refused_once("threshold_is_redis") else {
        return;
    };
    // Strikes 1 in Redis; the node refuses up to 8 more (9 in all), and
    // the one that would make the 10th goes to Redis, with the batch first.
    for _ in 0..8 {
        let (_, answered) = rig.unpaid(CLIENT);
        assert!(refused_here(&answered), "{answered:?}");
    }
    let (n, answered) = rig.unpaid(CLIENT);
    assert_eq!(answered, Answered::Later);
    assert_eq!(rig.held.len(), 2, "the batch, then the check");
    rig.run_all();
    assert_eq!(rig.redis_int(CLIENT, ClientKey::Strikes), 10);
    let Some(Fate::Answered(Reply::Checked(c))) = rig.fate(n) else {
        panic!("{:?}", rig.fate(n));
    };
    assert!(c.struck && c.breaker.tripped.is_some(), "{c:?}");
    // The next one is blocked on the node.
    let (_, answered) = rig.unpaid(CLIENT);
    assert!(
        matches!(answered, Answered::Now(Reply::Checked(c)) if c.breaker.block == Block::Blocked),
        "{answered:?}"
    );
}

#[test]
fn requests_of_a_client_whose_check_is_on_its_way_join_it_and_go_together() {
    let Some(mut rig) = Rig::new("join") else {
        return;
    };
    let asked: Vec<_> = (0..4).map(|_| rig.unpaid(CLIENT)).collect();
    assert!(asked.iter().all(|(_, a)| *a == Answered::Later));
    assert_eq!(rig.held.len(), 1, "one call; three joined it");
    rig.run_one();
    assert!(rig.admitted(asked[0].0));
    assert_eq!(rig.held.len(), 1, "the three together in one call");
    rig.run_all();
    assert_eq!(rig.calls_run, 2 + 1, "the generation, and two checks");
    assert!(rig.admitted(asked[1].0));
    assert!(rig.refused(asked[2].0) && rig.refused(asked[3].0));
    assert_eq!(rig.window(CLIENT), 2);
    assert_eq!(rig.redis_int(CLIENT, ClientKey::Strikes), 2);
}

#[test]
fn a_request_gone_while_it_waited_is_neither_counted_nor_struck() {
    let Some(mut rig) = Rig::new("gone") else {
        return;
    };
    let (a, _) = rig.unpaid(CLIENT);
    let (b, _) = rig.unpaid(CLIENT);
    let (c, _) = rig.unpaid(CLIENT);
    rig.gone(c);
    rig.run_all();
    assert!(rig.admitted(a) && rig.admitted(b));
    assert_eq!(rig.fate(c), None);
    assert_eq!(rig.window(CLIENT), 2);
    assert_eq!(rig.redis_int(CLIENT, ClientKey::Strikes), 0);
}

#[test]
fn a_check_redis_never_answers_falls_back_with_the_requests_that_joined_it() {
    let Some(mut rig) = Rig::new("timeout") else {
        return;
    };
    let (a, _) = rig.unpaid(CLIENT);
    let (b, _) = rig.unpaid(CLIENT);
    rig.time_out_first();
    assert_eq!(rig.fate(a), Some(&TIMED_OUT));
    assert_eq!(rig.fate(b), Some(&TIMED_OUT));
    // Nothing is left to join: the next request asks on its own.
    rig.unpaid(CLIENT);
    assert_eq!(rig.held.len(), 1);
}

#[test]
fn a_call_the_router_refuses_is_decided_at_once_and_leaves_nothing_to_join() {
    let Some(mut rig) = Rig::new("unsent") else {
        return;
    };
    let (a, _) = rig.unpaid(CLIENT);
    let Some((id, _)) = rig.held.pop_front() else {
        panic!("no call");
    };
    let mut out = Vec::new();
    rig.node
        .unsent(&mut rig.zone, id, Unavailable::Busy, rig.now, &mut out);
    rig.carry(out);
    let never_sent = Fate::FellBack {
        failure: Unavailable::Busy,
        sent: false,
    };
    assert_eq!(rig.fate(a), Some(&never_sent));
    assert_eq!(rig.node.in_flight(), 0);
    rig.unpaid(CLIENT);
    assert_eq!(rig.held.len(), 1, "a call of its own");
}

#[test]
fn a_call_redis_runs_after_its_deadline_changes_nothing_and_counts_as_never_sent() {
    let Some(mut rig) = refused_once("late_call") else {
        return;
    };
    // Past `T`'s freshness: Redis decides the next request.
    rig.after(3_000);
    let (n, _) = rig.unpaid(CLIENT);
    let Some((id, Command::Script(call))) = rig.held.pop_front() else {
        panic!("no script call");
    };
    let frame = rig.run_late(&call, 1_000);
    assert!(clock::expired_ms(&frame).is_some(), "{frame:?}");
    rig.reply(id, Some(&frame));
    let never_ran = Fate::FellBack {
        failure: Unavailable::Down,
        sent: false,
    };
    assert_eq!(rig.fate(n), Some(&never_ran));
    // Neither counted nor struck.
    assert_eq!(rig.window(CLIENT), 2);
    assert_eq!(rig.redis_int(CLIENT, ClientKey::Strikes), 1);
}

#[test]
fn a_payer_with_requests_in_flight_through_a_stall_is_never_blocked() {
    let Some(mut rig) = refused_once("stall") else {
        return;
    };
    let mut paid = 0u8;
    let mut pay = |rig: &mut Rig| {
        paid += 1;
        let (n, _) = rig.spend(CLIENT, [paid; 32]);
        rig.run_all();
        n
    };
    let n = pay(&mut rig);
    assert!(
        matches!(
            rig.fate(n),
            Some(Fate::Answered(Reply::Spent(Spent::Accepted(_))))
        ),
        "{:?}",
        rig.fate(n)
    );
    assert_eq!(rig.redis_int(CLIENT, ClientKey::Strikes), 0, "paid back");
    // Redis stalls with four unpaid requests of the payer in flight (one
    // call, three joined): the node gives up on them at its timeout.
    rig.after(3_000);
    let stalled: Vec<_> = (0..4).map(|_| rig.unpaid(CLIENT).0).collect();
    let Some((id, Command::Script(call))) = rig.held.pop_front() else {
        panic!("no script call");
    };
    rig.reply(id, None);
    for n in &stalled {
        assert!(matches!(rig.fate(*n), Some(Fate::FellBack { .. })));
    }
    // Redis resumes and runs the call it held, past its deadline: it
    // changes nothing, and its reply finds nothing to decide.
    let frame = rig.run_late(&call, 1);
    rig.reply(id, Some(&frame));
    assert_eq!(rig.redis_int(CLIENT, ClientKey::Strikes), 0);
    // After it the payer goes on paying every challenge: refused, paid,
    // never blocked.
    for _ in 0..20 {
        let n = unpaid_now(&mut rig);
        pay(&mut rig);
        let Some(Fate::Answered(Reply::Checked(c))) = rig.fate(n) else {
            panic!("{:?}", rig.fate(n));
        };
        assert_eq!(c.breaker.block, Block::Clear);
        rig.after(10);
    }
    assert!(rig.redis_int(CLIENT, ClientKey::Strikes) < 2);
}

#[test]
fn spends_the_zone_made_during_an_outage_are_written_to_redis_once_it_answers() {
    let Some(mut rig) = Rig::new("write_back") else {
        return;
    };
    rig.zone.reach = Reach::Down;
    // The `local` fallback spent a token in the zone meanwhile.
    let solution = rig.solution([9; 32]);
    rig.zone
        .spent
        .insert(solution.digest, solution.spent_until_ms);
    let mut out = Vec::new();
    rig.node.replay_later(CLIENT, &solution, rig.now, &mut out);
    rig.carry(out);
    assert!(rig.held.is_empty(), "nothing goes while Redis is down");
    // Redis is back: the spend goes first.
    rig.zone.reach = Reach::Connected;
    rig.after(10);
    let mut out = Vec::new();
    rig.node.connected(&mut rig.zone, rig.now, &mut out);
    rig.carry(out);
    rig.run_all();
    let spent_key = keys::spent(&rig.prefix, &solution.digest, CLIENT, false);
    assert_eq!(
        rig.redis.call(&[b"EXISTS", spent_key.as_bytes()]),
        OwnedFrame::Integer(1)
    );
    // The token is a replay here, answered by the node.
    let (_, answered) = rig.spend(CLIENT, solution.digest);
    assert_eq!(answered, Answered::Now(Reply::Spent(Spent::Replayed)));
}

#[test]
fn after_an_outage_redis_decides_again_what_it_refused_before() {
    let Some(mut rig) = refused_once("recovery") else {
        return;
    };
    let (_, answered) = rig.unpaid(CLIENT);
    assert!(refused_here(&answered));
    // A new connection after an outage: Redis may have lost its data.
    let mut out = Vec::new();
    rig.node.connected(&mut rig.zone, rig.now, &mut out);
    rig.carry(out);
    rig.run_all();
    let (_, answered) = rig.unpaid(CLIENT);
    assert_eq!(answered, Answered::Later);
}

#[test]
fn a_lift_forgets_the_nodes_refusals_of_the_client() {
    let Some(mut rig) = refused_once("lift") else {
        return;
    };
    rig.node
        .lift(&mut rig.zone, CLIENT, &[(LIMIT, false)], rig.now);
    let (_, answered) = rig.unpaid(CLIENT);
    assert_eq!(answered, Answered::Later);
}

#[test]
fn what_redis_said_answers_on_the_node_only_while_redis_answers_unless_it_blocks() {
    use FailPolicy::{Closed, Local, Open};
    use Reach::{Connected, Down, Unknown};
    let Some(mut rig) = refused_once("node_answers") else {
        return;
    };
    let blocked = BreakerStatus {
        strikes: 10,
        block: Block::Blocked,
        block_ms: 60_000,
        tripped: None,
    };
    // (reach, policy) → a refusal answered here, a block answered here
    #[rustfmt::skip]
    let table = [
        (Connected, Open, true, true),
        (Connected, Local, true, true),
        (Unknown, Open, false, false),
        (Unknown, Closed, false, true),
        (Down, Open, false, false),
        (Down, Closed, false, true),
        (Down, Local, false, true),
    ];
    for (i, (reach, fail, refusal_here, block_here)) in table.into_iter().enumerate() {
        rig.zone.reach = reach;
        let (_, answered) = rig.ask(UNPAID, CLIENT, Limits::one(LIMIT), fail);
        assert_eq!(
            refused_here(&answered),
            refusal_here,
            "row {i}: {answered:?}"
        );
        rig.held.clear();
        rig.node = ClusterNode::new(Calls::new(&rig.prefix, 7, 1, false), 1, 99, 7);
        let other = b"\x00203.0.113.9";
        rig.zone
            .remember(other, blocked, RULES, rig.now.monotonic_ms);
        let (_, answered) = rig.ask(UNPAID, other, Limits::one(LIMIT), fail);
        let here = matches!(answered, Answered::Now(Reply::Checked(c)) if c.breaker.block == Block::Blocked);
        assert_eq!(here, block_here, "row {i}: {answered:?}");
        rig.held.clear();
    }
}

#[test]
fn an_exiting_worker_gives_up_its_batches_at_once_while_redis_is_down() {
    let Some(mut rig) = refused_once("exit_down") else {
        return;
    };
    for _ in 0..3 {
        rig.unpaid(CLIENT);
    }
    rig.zone.reach = Reach::Down;
    rig.after(BATCH_MS).tick(true);
    assert_eq!(rig.alerts, vec![Alert::BatchesLost { lost: 3 }]);
}

#[test]
fn a_check_the_router_refuses_leaves_another_checks_joiners_waiting() {
    let Some(mut rig) = Rig::new("unsent_keeps_group") else {
        return;
    };
    let (_, _) = rig.unpaid(CLIENT);
    let (joined, _) = rig.unpaid(CLIENT);
    assert_eq!(rig.held.len(), 1, "the second joined the first");
    // The same client under a rising price: a check of its own.
    let mut rising = Rig::subject_of(CLIENT);
    rising.rising = true;
    let (_, answered) = rig.ask_subject(UNPAID, rising, FailPolicy::Local);
    assert_eq!(answered, Answered::Later);
    // It waits behind the first check (`gather.rs`); that one's answer
    // sends the joined request's call, then the rising check's own.
    assert_eq!(rig.held.len(), 1);
    rig.run_one();
    assert_eq!(rig.held.len(), 2);
    let (id, _) = rig.held.pop_back().expect("its own call");
    let mut out = Vec::new();
    rig.node
        .unsent(&mut rig.zone, id, Unavailable::Busy, rig.now, &mut out);
    rig.carry(out);
    assert_eq!(rig.fate(joined), None, "it still waits for the first check");
    rig.run_all();
    assert!(rig.admitted(joined));
}
