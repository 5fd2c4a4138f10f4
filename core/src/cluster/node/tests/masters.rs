//! A Redis Cluster's stacked checks gathered per master (`stacks.rs`,
//! `MASTER_GATE`): the parts of every slot one master serves go in one
//! call (`Calls::node_stacks`), each answered as its own slot's call; a
//! slot the master no longer serves goes again in a call of its own,
//! counted once; a master's call that fails falls each request back.

use super::stacks::{address, decided, from, net_count, NET_A, NET_B};
use super::*;

/// A node of a Redis Cluster whose slot table knows one master (every
/// slot its), so that every stacked check gathers with every other.
fn one_master(test: &str) -> Option<Rig> {
    let mut rig = Rig::cluster(test)?;
    rig.zone.masters = 1;
    Some(rig)
}

fn node_script() -> &'static str {
    let parts = crate::cluster::scripts::Scripts::for_mode(true)
        .parts
        .as_ref();
    parts.expect("a Redis Cluster's").node.text
}

fn is_masters_call(command: &Command) -> bool {
    matches!(command, Command::Script(c) if c.script == node_script())
}

/// How many slots a master's call holds (its first argument).
fn slots_of(command: &Command) -> usize {
    let Command::Script(call) = command else {
        panic!("{command:?}")
    };
    let text = String::from_utf8_lossy(&call.evalsha).into_owned();
    // *n, $7 EVALSHA, $40 sha, $1 0, $k slots
    let words: Vec<&str> = text.split("\r\n").collect();
    words[8].parse().expect("the slots' count")
}

/// Requests from three addresses of one /24 and one of another: eight
/// parts in six slots (each address's, each /24's).
fn four_requests(rig: &mut Rig) -> Vec<u32> {
    let mut asked = vec![];
    for (net, n) in [(NET_A, 1), (NET_A, 2), (NET_A, 3), (NET_B, 1)] {
        asked.push(from(rig, net, n).0);
    }
    asked
}

#[test]
fn a_redis_cluster_gathers_the_parts_of_every_slot_one_master_serves_in_one_call() {
    let Some(mut rig) = one_master("masters_gather") else {
        return;
    };
    let asked = four_requests(&mut rig);
    // The first request's two parts at once, in one call (its master's
    // gathering was free: a lone request never waits behind itself); the
    // six others behind it.
    assert_eq!(rig.held.len(), 1, "{:?}", rig.held);
    let (_, command) = rig.held.front().expect("a master's call");
    assert!(is_masters_call(command));
    assert_eq!(slots_of(command), 2);
    rig.run_one();
    assert!(rig.admitted(asked[0]), "{:?}", rig.fate(asked[0]));
    // The six in one call: three addresses' slots, each /24's (the first
    // /24's two parts in its slot's place).
    assert_eq!(rig.held.len(), 1, "the six in one call");
    let (_, command) = rig.held.front().expect("a master's call");
    assert!(is_masters_call(command));
    assert_eq!(slots_of(command), 5, "five slots");
    rig.run_all();
    assert_eq!(rig.calls_run, 2);
    for &n in &asked {
        assert!(rig.admitted(n), "{:?}", rig.fate(n));
    }
    assert_eq!(
        (net_count(&mut rig, NET_A), net_count(&mut rig, NET_B)),
        (3, 1)
    );
    for (net, n) in [(NET_A, 1), (NET_A, 2), (NET_A, 3), (NET_B, 1)] {
        assert_eq!(rig.window(&address(net, n)), 1);
    }
    // A fourth address of the first /24, with a new one of the second:
    // refused by its /24 (3 a minute), what its own slot counted taken
    // back; the other admitted.
    let (refused, _) = from(&mut rig, NET_A, 4);
    let (admitted, _) = from(&mut rig, NET_B, 2);
    rig.run_all();
    assert_eq!(decided(&rig, refused), Some((false, 1, false)));
    assert!(rig.admitted(admitted), "{:?}", rig.fate(admitted));
    assert_eq!(rig.window(&address(NET_A, 4)), 0, "taken back");
    assert_eq!(
        (net_count(&mut rig, NET_A), net_count(&mut rig, NET_B)),
        (3, 2)
    );
}

#[test]
fn a_slot_its_master_no_longer_serves_goes_again_in_a_call_of_its_own_counted_once() {
    let Some(mut rig) = one_master("masters_not_local") else {
        return;
    };
    let asked = four_requests(&mut rig);
    rig.run_one();
    let (id, command) = rig.held.pop_front().expect("a master's call");
    assert!(is_masters_call(&command));
    // The master serves none of them (a stale table): nothing ran.
    let k = slots_of(&command);
    let not_local = OwnedFrame::SimpleString(b"NOTLOCAL".to_vec());
    rig.reply(id, Some(&OwnedFrame::Array(vec![not_local; k])));
    assert_eq!(rig.held.len(), k, "each slot's call of its own");
    assert!(rig.held.iter().all(|(_, c)| !is_masters_call(c)));
    rig.run_all();
    for &n in &asked {
        assert!(rig.admitted(n), "{:?}", rig.fate(n));
    }
    assert_eq!(
        (net_count(&mut rig, NET_A), net_count(&mut rig, NET_B)),
        (3, 1)
    );
    for (net, n) in [(NET_A, 1), (NET_A, 2), (NET_A, 3), (NET_B, 1)] {
        assert_eq!(rig.window(&address(net, n)), 1, "counted once");
    }
}

#[test]
fn a_masters_call_that_fails_falls_each_of_its_requests_back() {
    let Some(mut rig) = one_master("masters_failed") else {
        return;
    };
    let asked = four_requests(&mut rig);
    rig.run_one();
    let (id, command) = rig.held.pop_front().expect("a master's call");
    assert!(is_masters_call(&command));
    let error = OwnedFrame::Error("ERR Error running script".into());
    rig.reply(id, Some(&error));
    assert!(
        rig.admitted(asked[0]),
        "its own call: {:?}",
        rig.fate(asked[0])
    );
    for &n in &asked[1..] {
        assert!(
            matches!(rig.fate(n), Some(Fate::FellBack { .. })),
            "{:?}",
            rig.fate(n)
        );
    }
    rig.run_all();
    assert_eq!(rig.node.in_flight(), 0);
}
