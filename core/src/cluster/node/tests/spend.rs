//! The node's spend path (SPEC §5): whether a correct solution can be
//! spent now is the node's to say, from its data generations and Redis's
//! health, never the request's decision's; and what it answers is one of
//! the store's answers to a spend (`store::Spent`), or the fallback
//! rule's to decide (`fallback::decider`).

use super::*;
use crate::cluster::fallback::{self, Decider, Unanswered};
use crate::cluster::generation::{self, slot_of_tag};
use crate::cluster::keys::ClientKey;
use crate::redis::command::client_tag;
use crate::store::Spent;

const CLIENT: &[u8] = b"\x00203.0.113.9";

/// What became of a spend of `solution` by `CLIENT` under `fail`, Redis
/// answering every call; and how many script calls Redis ran for it.
fn spend(rig: &mut Rig, solution: Solution, fail: FailPolicy) -> (Fate, u32) {
    let calls = rig.calls_run;
    let (n, answered) = rig.ask(Op::Spend(solution), CLIENT, Limits::one(LIMIT), fail);
    rig.run_all();
    let fate = match answered {
        Answered::FallBack(failure) => Fate::FellBack {
            failure,
            sent: false,
        },
        _ => rig.fate(n).cloned().expect("answered"),
    };
    (fate, rig.calls_run - calls)
}

/// A solution of `digest` issued in `generation`; `struck`: its 429
/// counted a strike (the token's `st`).
fn issued(rig: &Rig, digest: u8, generation: Option<u64>, struck: bool) -> Solution {
    Solution {
        generation,
        forgive: struck,
        ..rig.solution([digest; 32])
    }
}

/// The single Redis's generation, as the node read it on connecting.
fn redis_generation(rig: &Rig) -> u64 {
    rig.node.generations(&rig.zone).redis.expect("read")
}

/// A Redis Cluster rig whose client Redis refused (its third request):
/// the reply told the node the slot's generation, returned.
fn refused_in_slot(test: &str) -> Option<(Rig, u64)> {
    let mut rig = Rig::cluster(test)?;
    for _ in 0..3 {
        rig.unpaid(CLIENT);
        rig.run_all();
    }
    let slot = slot_of_tag(client_tag(CLIENT).as_bytes());
    let generation = rig.node.slot_generation(slot).expect("answered");
    Some((rig, generation))
}

fn answered(spent: Spent) -> Fate {
    Fate::Answered(Reply::Spent(spent))
}

fn not_recorded(pays_back: bool) -> Fate {
    answered(Spent::NotRecorded { pays_back })
}

fn accepted(fate: &Fate) -> bool {
    matches!(fate, Fate::Answered(Reply::Spent(Spent::Accepted(_))))
}

#[test]
fn every_spend_has_one_answer_from_the_node() {
    let Some(mut rig) = Rig::new("spend_table") else {
        return;
    };
    let redis = redis_generation(&rig);
    let local = rig.node.local_generation();
    let down = Fate::FellBack {
        failure: Unavailable::Down,
        sent: false,
    };
    // (case, solution, Redis down, answer, script calls)
    let solutions = [
        (
            "of Redis's generation, first used",
            issued(&rig, 1, Some(redis), true),
        ),
        (
            "of the node's own outage generation",
            issued(&rig, 2, Some(local), true),
        ),
        (
            "without one (a node that predates them)",
            issued(&rig, 3, None, true),
        ),
        (
            "used before: the node holds Redis's record",
            issued(&rig, 1, Some(redis), true),
        ),
        (
            "used before through another node: Redis holds it",
            issued(&rig, 1, Some(redis), true),
        ),
        (
            "of another generation (a flush since, another node's outage)",
            issued(&rig, 4, Some(redis + 1), true),
        ),
        (
            "of another generation, its 429 struck nothing",
            issued(&rig, 5, Some(redis + 1), false),
        ),
        (
            "of Redis's generation while Redis is down, its strike owed",
            issued(&rig, 6, Some(redis), true),
        ),
        (
            "of Redis's generation while Redis is down, nothing owed",
            issued(&rig, 7, Some(redis), false),
        ),
        (
            "of the node's own while Redis is down",
            issued(&rig, 8, Some(local), false),
        ),
    ];
    #[rustfmt::skip]
    let want = [
        (false, None, 1),
        (false, None, 1),
        (false, None, 1),
        (false, Some(answered(Spent::Replayed)), 0),
        (false, Some(answered(Spent::Replayed)), 1),
        // No offence: a fresh challenge that pays back the 429's strike
        // (no spend sent; the one call reads Redis's generation again: it
        // may be one another node just renewed).
        (false, Some(not_recorded(true)), 1),
        (false, Some(not_recorded(false)), 1),
        // The fallback rule decides (`local`: the zone records it for
        // Redis, whose write takes that strike back once it answers).
        (true, Some(down.clone()), 0),
        (true, Some(not_recorded(false)), 0),
        // Spendable: sent (the router refuses it while Redis is down, and
        // the fallback rule has the zone spend it: its spends are all
        // there are of it).
        (true, None, 1),
    ];
    for ((case, solution), (redis_down, answer, calls)) in solutions.into_iter().zip(want) {
        if case.contains("another node") {
            rig.zone.spent.clear();
        }
        rig.zone.reach = match redis_down {
            true => Reach::Down,
            false => Reach::Connected,
        };
        let (fate, ran) = spend(&mut rig, solution, FailPolicy::Local);
        match answer {
            Some(want) => assert_eq!(fate, want, "{case}"),
            None => assert!(accepted(&fate), "{case}: {fate:?}"),
        }
        assert_eq!(ran, calls, "{case}: script calls");
    }
}

#[test]
fn a_solution_spent_on_the_node_during_an_outage_is_a_replay_answered_there_whatever_its_generation(
) {
    let Some(mut rig) = Rig::new("spend_here") else {
        return;
    };
    let redis = redis_generation(&rig);
    // Of Redis's generation; of one this worker has not heard of (another
    // node just renewed it): a replay (409), not a fresh challenge that
    // pays back a strike.
    for (digest, generation) in [(9, redis), (10, redis + 1)] {
        let solution = issued(&rig, digest, Some(generation), true);
        rig.zone
            .spent
            .insert(solution.digest, solution.spent_until_ms);
        let (fate, ran) = spend(&mut rig, solution, FailPolicy::Local);
        assert_eq!((fate, ran), (answered(Spent::Replayed), 0), "{generation}");
    }
}

#[test]
fn a_spend_in_a_generation_redis_lost_is_a_replay_and_the_next_challenge_carries_the_new_one() {
    let Some(mut rig) = Rig::new("spend_lost") else {
        return;
    };
    let before = redis_generation(&rig);
    // Redis loses its data (a flush, an empty restart).
    let gen_key = rig.node.calls().gen_key().to_owned();
    rig.redis.call(&[b"DEL", gen_key.as_bytes()]);
    let solution = issued(&rig, 1, Some(before), true);
    let (fate, _) = spend(&mut rig, solution, FailPolicy::Local);
    assert_eq!(fate, answered(Spent::Replayed), "what was spent is unknown");
    // The node read (renewed) it again: the next challenge carries it.
    let mut out = Vec::new();
    let now = rig.now;
    let next = rig
        .node
        .challenge_generation(&rig.zone, (CLIENT, None), now, &mut out);
    assert_eq!(next, Some(redis_generation(&rig)));
    assert_ne!(next, Some(before));
}

#[test]
fn in_a_redis_cluster_a_solution_of_an_older_slot_generation_is_not_recorded_and_no_offence() {
    let Some((mut rig, slot_gen)) = refused_in_slot("spend_slot") else {
        return;
    };
    // Issued before the slot was flushed or renewed: a fresh challenge of
    // the slot's, no call.
    let solution = issued(&rig, 1, Some(slot_gen - 1), true);
    let (fate, ran) = spend(&mut rig, solution, FailPolicy::Local);
    assert_eq!((fate, ran), (not_recorded(true), 0));
    // Of the slot's: spent.
    let solution = issued(&rig, 2, Some(slot_gen), true);
    let (fate, ran) = spend(&mut rig, solution, FailPolicy::Local);
    assert!(accepted(&fate) && ran == 1, "{fate:?}");
}

#[test]
fn in_a_redis_cluster_a_solution_of_a_slot_generation_newer_than_the_worker_knows_is_spent_in_redis(
) {
    let Some((mut rig, known)) = refused_in_slot("spend_slot_newer") else {
        return;
    };
    assert_eq!(rig.redis_int(CLIENT, ClientKey::Strikes), 1, "the 429's");
    // The slot was renewed since (a failover) and another node's check
    // answered the new one, which this worker has not heard of: its
    // challenge carries it.
    let slot = slot_of_tag(client_tag(CLIENT).as_bytes());
    let key = generation::slot_key(&rig.prefix, slot);
    let OwnedFrame::BulkString(value) = rig.redis.call(&[b"GET", key.as_bytes()]) else {
        panic!("no slot generation in Redis");
    };
    let run = String::from_utf8_lossy(&value);
    let (run, _) = run.rsplit_once(':').expect("run:generation");
    let newer = known + 1;
    let renewed = format!("{run}:{newer}");
    rig.redis
        .call(&[b"SET", key.as_bytes(), renewed.as_bytes()]);
    // Redis's generation spend decides it: spent, the strike taken back.
    let solution = issued(&rig, 1, Some(newer), true);
    let (fate, ran) = spend(&mut rig, solution, FailPolicy::Local);
    assert!(accepted(&fate) && ran == 1, "{fate:?}");
    assert_eq!(rig.redis_int(CLIENT, ClientKey::Strikes), 0, "paid back");
    // And the worker knows the slot's now.
    assert_eq!(rig.node.slot_generation(slot), Some(newer));
}

#[test]
fn in_a_redis_cluster_a_solution_of_a_generation_newer_than_the_slots_is_not_recorded_and_no_offence(
) {
    let Some((mut rig, slot_gen)) = refused_in_slot("spend_slot_never") else {
        return;
    };
    // Another node's outage generation (random), above the slot's: never
    // the slot's. Redis's spend says so and spends nothing: a fresh
    // challenge that pays back the 429's strike, not a 409.
    let other_node = slot_gen + 1_000_000_000_000;
    let solution = issued(&rig, 1, Some(other_node), true);
    let (fate, ran) = spend(&mut rig, solution, FailPolicy::Local);
    assert_eq!((fate, ran), (not_recorded(true), 1));
    assert_eq!(rig.redis_int(CLIENT, ClientKey::Strikes), 1, "none taken");
    let slot = slot_of_tag(client_tag(CLIENT).as_bytes());
    assert_eq!(rig.node.slot_generation(slot), Some(slot_gen));
}

#[test]
fn in_a_redis_cluster_a_spend_that_finds_the_slot_renewed_is_a_replay_and_the_409_carries_the_new_one(
) {
    let Some((mut rig, slot_gen)) = refused_in_slot("spend_renewed") else {
        return;
    };
    // Another run of Redis wrote the slot's generation (a failover).
    let slot = slot_of_tag(client_tag(CLIENT).as_bytes());
    let key = generation::slot_key(&rig.prefix, slot);
    rig.redis.call(&[b"SET", key.as_bytes(), b"another-run:5"]);
    let solution = issued(&rig, 1, Some(slot_gen), true);
    let (fate, _) = spend(&mut rig, solution, FailPolicy::Local);
    assert_eq!(fate, answered(Spent::Replayed));
    let renewed = rig.node.slot_generation(slot).expect("renewed");
    assert_ne!(renewed, slot_gen);
    // The request's check answered the old one: its challenge carries the
    // one the spend found.
    let mut out = Vec::new();
    let now = rig.now;
    let carried = rig
        .node
        .challenge_generation(&rig.zone, (CLIENT, Some(slot_gen)), now, &mut out);
    assert_eq!(carried, Some(renewed));
}

/// What the module does with a spend the node left to the fallback rule
/// under `local` with its zone (`src/store/mod.rs`, `Late::decide`), on
/// the rig's zone model: the rule's decider, and the request's answer.
fn fall_back_locally(rig: &mut Rig, solution: Solution) -> (Decider, Reply) {
    let mut out = Vec::new();
    let now = rig.now;
    let redis_only = rig
        .node
        .redis_only(&rig.zone, &solution, CLIENT, now, &mut out);
    rig.carry(out);
    let (_, answered) = rig.ask(
        Op::Spend(solution),
        CLIENT,
        Limits::one(LIMIT),
        FailPolicy::Local,
    );
    let Answered::FallBack(failure) = answered else {
        panic!("not the fallback rule's: {answered:?}");
    };
    let decider = fallback::decider(Unanswered {
        op: Op::Spend(solution),
        failure,
        sent: false,
        fail_local: true,
        zone: true,
        redis_only,
        owed: solution.owed(RULES),
    });
    if decider != Decider::Record {
        return (decider, Reply::Down);
    }
    // The zone's spend (`Op::standing_in`): recorded, its strike there
    // taken back; a replay if held.
    let zone = match rig
        .zone
        .record_spent(&solution.digest, solution.spent_until_ms, now.epoch_ms)
    {
        Ok(true) => {
            rig.zone.forgive(CLIENT, RULES, now.monotonic_ms);
            Reply::Spent(Spent::Accepted(BreakerStatus::default()))
        }
        Ok(false) => Reply::Spent(Spent::Replayed),
        Err(_) => Reply::Spent(Spent::NotRecorded { pays_back: true }),
    };
    let mut out = Vec::new();
    rig.node.replay_later(CLIENT, &solution, now, &mut out);
    rig.carry(out);
    (decider, fallback::recorded(zone))
}

#[test]
fn under_local_an_owed_spend_while_redis_is_down_is_recorded_and_redis_takes_its_strike_back_once()
{
    let Some(mut rig) = Rig::new("spend_recorded") else {
        return;
    };
    // Two strikes in Redis: the third request's refusal there, the
    // fourth's refused here and sent in the batch.
    for _ in 0..4 {
        rig.unpaid(CLIENT);
        rig.run_all();
    }
    rig.after(crate::cluster::refusals::BATCH_MS).tick(false);
    rig.run_all();
    assert_eq!(rig.redis_int(CLIENT, ClientKey::Strikes), 2);
    // Redis goes down; the client pays a 429 of Redis's generation.
    let solution = issued(&rig, 1, Some(redis_generation(&rig)), true);
    rig.zone.reach = Reach::Down;
    let (decider, reply) = fall_back_locally(&mut rig, solution);
    assert_eq!(decider, Decider::Record);
    // Recorded: admits nothing, and its fresh challenge pays back nothing
    // more (the strike is taken back where it is).
    assert_eq!(reply, Reply::Spent(Spent::NotRecorded { pays_back: false }));
    assert!(rig.zone.is_spent(&solution.digest, rig.now.epoch_ms));
    assert!(rig.held.is_empty(), "nothing goes while Redis is down");
    // Sent again during the outage: a replay (409), answered here.
    let (fate, ran) = spend(&mut rig, solution, FailPolicy::Local);
    assert_eq!((fate, ran), (answered(Spent::Replayed), 0));
    assert_eq!(rig.redis_int(CLIENT, ClientKey::Strikes), 2);
    // Redis is back: the queued write takes the strike back there.
    rig.zone.reach = Reach::Connected;
    rig.after(10);
    let mut out = Vec::new();
    rig.node.connected(&mut rig.zone, rig.now, &mut out);
    rig.carry(out);
    rig.run_all();
    assert_eq!(rig.redis_int(CLIENT, ClientKey::Strikes), 1, "taken back");
    // Sent again: a replay, whose write (queued again, carried by the next
    // request's call) takes nothing more back.
    let (fate, ran) = spend(&mut rig, solution, FailPolicy::Local);
    assert_eq!((fate, ran), (answered(Spent::Replayed), 0));
    rig.after(1_000);
    let paid = Op::Check {
        offence: Offence::None,
    };
    let calls = rig.calls_run;
    rig.ask(
        paid,
        b"\x00203.0.113.10",
        Limits::one(LIMIT),
        FailPolicy::Local,
    );
    rig.run_all();
    assert_eq!(rig.calls_run - calls, 2, "the replay's write and the check");
    assert_eq!(rig.redis_int(CLIENT, ClientKey::Strikes), 1, "once");
}
