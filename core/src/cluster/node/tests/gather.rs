//! Several clients' checks gathered into one call (`gather.rs`): a lone
//! check goes at once; those that come while a check is on its way go
//! together when its reply comes, each answered its own; a call that
//! fails, times out or comes too late falls each back, counting nothing.

use super::*;
use crate::cluster::generation::slot_of_tag;
use crate::cluster::node::gather::MAX_HELD;
use crate::cluster::scripts::Scripts;
use crate::redis::clock;
use crate::redis::command::client_tag;

const FIRST: &[u8] = b"\x00192.0.2.1";
const A: &[u8] = b"\x00192.0.2.10";
const B: &[u8] = b"\x00192.0.2.11";

/// A rig whose client `FIRST`'s check is on its way (not yet run).
fn one_on_its_way(test: &str) -> Option<(Rig, u32)> {
    let mut rig = Rig::new(test)?;
    let (first, _) = rig.unpaid(FIRST);
    assert_eq!(rig.held.len(), 1, "a lone check goes at once");
    Some((rig, first))
}

/// The script names of the held calls, in order.
fn held_scripts(rig: &Rig) -> Vec<&'static str> {
    let scripts = Scripts::for_mode(false);
    rig.held
        .iter()
        .map(|(_, command)| match command {
            Command::Script(call) if call.script == scripts.checks.text => "checks",
            Command::Script(call) if call.script == scripts.window.text => "window",
            Command::Script(_) => "other",
            Command::Plain(_) => "plain",
        })
        .collect()
}

#[test]
fn checks_that_come_while_one_is_on_its_way_go_in_one_call_each_answered_its_own() {
    let Some((mut rig, first)) = one_on_its_way("gather_two") else {
        return;
    };
    let (a, answered_a) = rig.unpaid(A);
    let (b, answered_b) = rig.unpaid(B);
    assert_eq!((answered_a, answered_b), (Answered::Later, Answered::Later));
    assert_eq!(rig.held.len(), 1, "they wait behind the first");
    let calls = rig.calls_run;
    rig.run_one();
    assert!(rig.admitted(first));
    assert_eq!(held_scripts(&rig), ["checks"], "both in one call");
    rig.run_all();
    assert_eq!(rig.calls_run, calls + 2);
    assert!(rig.admitted(a) && rig.admitted(b), "{:?}", rig.fates);
    assert_eq!((rig.window(A), rig.window(B)), (1, 1));
    assert_eq!(rig.node.in_flight(), 0);
    // Nothing on its way: the next check goes at once, alone.
    rig.unpaid(A);
    assert_eq!(held_scripts(&rig), ["window"]);
}

#[test]
fn a_gathered_call_refuses_one_client_and_admits_another() {
    let Some(mut rig) = Rig::new("gather_refuse") else {
        return;
    };
    // B used its two requests.
    for _ in 0..2 {
        rig.unpaid(B);
        rig.run_all();
    }
    rig.unpaid(FIRST);
    let (a, _) = rig.unpaid(A);
    let (b, _) = rig.unpaid(B);
    rig.run_one();
    assert_eq!(held_scripts(&rig), ["checks"]);
    rig.run_all();
    assert!(rig.admitted(a), "{:?}", rig.fate(a));
    assert!(rig.refused(b), "{:?}", rig.fate(b));
    let Some(Fate::Answered(Reply::Checked(c))) = rig.fate(b) else {
        panic!();
    };
    assert!(c.struck && c.verdict.retry_after_ms > 0, "{c:?}");
    assert_eq!(rig.redis_int(B, ClientKey::Strikes), 1);
    assert_eq!(rig.redis_int(A, ClientKey::Strikes), 0);
    // Redis's refusal of B holds on the node: its next request is refused
    // here, without a call.
    let (_, answered) = rig.unpaid(B);
    assert!(
        matches!(answered, Answered::Now(Reply::Checked(c)) if !c.verdict.allowed),
        "{answered:?}"
    );
    assert!(rig.held.is_empty());
}

#[test]
fn a_gathered_call_redis_never_answers_falls_each_check_and_its_joiners_back() {
    let Some((mut rig, _)) = one_on_its_way("gather_timeout") else {
        return;
    };
    let (a, _) = rig.unpaid(A);
    let (a_joined, _) = rig.unpaid(A);
    let (b, _) = rig.unpaid(B);
    rig.run_one();
    rig.time_out_first();
    for n in [a, a_joined, b] {
        assert_eq!(rig.fate(n), Some(&TIMED_OUT), "{n}");
    }
    assert_eq!(rig.node.in_flight(), 0);
    // Nothing is left on its way: the next check goes at once.
    rig.unpaid(B);
    assert_eq!(held_scripts(&rig), ["window"]);
}

#[test]
fn a_gathered_call_redis_runs_after_its_deadline_counts_nothing_for_any() {
    let Some((mut rig, _)) = one_on_its_way("gather_late") else {
        return;
    };
    let (a, _) = rig.unpaid(A);
    let (b, _) = rig.unpaid(B);
    rig.run_one();
    let Some((id, Command::Script(call))) = rig.held.pop_front() else {
        panic!("no gathered call");
    };
    let checks = Scripts::for_mode(false).checks.text.as_bytes();
    rig.redis.call(&[b"SCRIPT", b"LOAD", checks]);
    let frame = rig.run_late(&call, 1_000);
    assert!(clock::expired_ms(&frame).is_some(), "{frame:?}");
    rig.reply(id, Some(&frame));
    let never_ran = Fate::FellBack {
        failure: Unavailable::Down,
        sent: false,
    };
    assert_eq!(rig.fate(a), Some(&never_ran));
    assert_eq!(rig.fate(b), Some(&never_ran));
    assert_eq!((rig.window(A), rig.window(B)), (0, 0));
}

#[test]
fn checks_waiting_behind_a_check_that_times_out_fall_back_never_sent() {
    let Some((mut rig, first)) = one_on_its_way("gather_behind_timeout") else {
        return;
    };
    let (a, _) = rig.unpaid(A);
    // (It joins A's check, gathered behind FIRST's.)
    let (a_joined, _) = rig.unpaid(A);
    rig.time_out_first();
    assert!(matches!(
        rig.fate(first),
        Some(Fate::FellBack { sent: true, .. })
    ));
    assert_eq!(rig.fate(a), Some(&NEVER_SENT));
    assert_eq!(
        rig.fate(a_joined),
        Some(&NEVER_SENT),
        "a request that joined a check never sent: Redis ran nothing for it"
    );
    assert!(rig.held.is_empty());
    assert_eq!(rig.window(A), 0);
}

#[test]
fn a_redis_cluster_gathers_only_checks_of_one_slot() {
    let Some(mut rig) = Rig::cluster("gather_slots") else {
        return;
    };
    let slot = |key: &[u8]| slot_of_tag(client_tag(key).as_bytes());
    let same_1 = A;
    let same_2 = (0..1_000_000u32)
        .map(|i| format!("client {i}").into_bytes())
        .find(|k| slot(k) == slot(A))
        .expect("a key in A's slot");
    let same_2 = same_2.as_slice();
    assert_ne!(slot(FIRST), slot(A));
    rig.unpaid(same_1);
    rig.unpaid(FIRST);
    assert_eq!(rig.held.len(), 2, "another slot: at once");
    let (n, _) = rig.unpaid(same_2);
    assert_eq!(rig.held.len(), 2, "the same slot: it waits");
    rig.run_all();
    assert!(rig.admitted(n), "{:?}", rig.fate(n));
}

#[test]
fn beyond_four_full_calls_held_a_check_goes_alone_for_the_routers_cap() {
    let Some((mut rig, _)) = one_on_its_way("gather_cap") else {
        return;
    };
    let clients: Vec<Vec<u8>> = (0..=MAX_HELD)
        .map(|i| format!("c{i}").into_bytes())
        .collect();
    for client in &clients[..MAX_HELD] {
        rig.unpaid(client);
    }
    // Each full gathering went at once: four calls behind the first.
    assert_eq!(
        held_scripts(&rig),
        ["window", "checks", "checks", "checks", "checks"]
    );
    let (last, _) = rig.unpaid(&clients[MAX_HELD]);
    assert_eq!(held_scripts(&rig).last(), Some(&"window"), "alone");
    assert_eq!(rig.held.len(), 6);
    rig.run_all();
    assert!(rig.admitted(last));
    assert!(clients.iter().all(|c| rig.window(c) == 1));
    // Nothing held: the next check waits behind one on its way again.
    rig.unpaid(FIRST);
    rig.unpaid(A);
    assert_eq!(held_scripts(&rig), ["window"]);
}
