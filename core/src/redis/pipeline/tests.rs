use super::*;
use crate::redis::command::encode;
use std::rc::Rc;

fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    encode(&mut out, args);
    out
}

fn handshake() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("AUTH", command(&[b"AUTH", b"pw"])),
        ("SCRIPT LOAD", command(&[b"SCRIPT", b"LOAD", b"return 1"])),
    ]
}

/// Feeds `bytes` and returns what happened, as text (handshake steps
/// but the last are left out: only their timing is of interest).
fn feed(p: &mut Pipeline<u32>, bytes: &[u8]) -> Result<Vec<String>, Broken> {
    p.input().extend_from_slice(bytes);
    let mut events = Vec::new();
    p.receive(&mut events)?;
    Ok(events
        .into_iter()
        .filter(|e| !matches!(e, Event::Step { .. }))
        .map(|e| match e {
            Event::Step { .. } => unreachable!("filtered out"),
            Event::Ready => "ready".to_owned(),
            Event::Push(frame) => format!("push={frame:?}"),
            Event::Clock(ms) => format!("clock={ms}"),
            Event::Answered {
                on_reply,
                reply: Reply::Frame(frame),
                ..
            } => format!("{on_reply:?}={:?}", frame.into_owned()),
            Event::Answered {
                on_reply,
                reply: Reply::Error(e),
                ..
            } => format!("{on_reply:?}!{e}"),
            Event::Answered {
                reply: Reply::Failed,
                ..
            } => unreachable!("never a reply read"),
        })
        .collect())
}

/// A script call whose `EVAL` is given.
struct Script(Vec<u8>);

impl Resendable for Script {
    fn bytes(&self) -> &[u8] {
        b"EVALSHA"
    }

    fn on_noscript(&self) -> Option<Vec<u8>> {
        Some(self.0.clone())
    }
}

fn open_pipeline() -> Pipeline<u32> {
    let mut p = Pipeline::default();
    p.open(&handshake(), 100, Sent::default);
    assert_eq!(
        feed(&mut p, b"+OK\r\n$40\r\n").unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(
        feed(&mut p, b"e0e1f9fabfc9d4800c877a703b823ac0578ff831\r\n").unwrap(),
        ["ready"]
    );
    p
}

#[test]
fn the_handshake_goes_out_first_and_ready_follows_its_last_reply() {
    let mut p: Pipeline<u32> = Pipeline::default();
    p.open(&handshake(), 100, Sent::default);
    p.push(b"*1\r\n$4\r\nPING\r\n", Slot::request(150, 1, None));
    let expected: Vec<u8> = handshake()
        .into_iter()
        .flat_map(|(_, c)| c)
        .chain(b"*1\r\n$4\r\nPING\r\n".iter().copied())
        .collect();
    assert_eq!(p.output(), &expected[..]);
    assert_eq!(
        feed(&mut p, b"+OK\r\n$1\r\nx\r\n:1\r\n").unwrap(),
        ["ready", "Some(1)=Integer(1)"]
    );
}

#[test]
fn only_a_command_behind_the_handshake_is_awaited_not_the_handshake_alone() {
    let mut p: Pipeline<u32> = Pipeline::default();
    assert!(!p.awaits_commands(), "idle");
    p.open(&handshake(), 100, Sent::default);
    assert!(!p.awaits_commands(), "the handshake alone");
    p.push(b"*1\r\n$4\r\nPING\r\n", Slot::request(150, 1, None));
    assert!(p.awaits_commands(), "a command behind it");
    feed(&mut p, b"+OK\r\n$1\r\nx\r\n").unwrap();
    assert!(
        p.awaits_commands(),
        "the handshake answered, the command not"
    );
    feed(&mut p, b":1\r\n").unwrap();
    assert!(!p.awaits_commands(), "all answered");
}

#[test]
fn every_command_is_stamped_when_queued_and_its_stamp_comes_back_with_the_reply() {
    let mut p: Pipeline<u32> = Pipeline::default();
    let stamped = core::cell::Cell::new(0);
    p.open(&handshake(), 100, || {
        stamped.set(stamped.get() + 1);
        Sent::default()
    });
    assert_eq!(stamped.get(), handshake().len());
    let mut request = Slot::request(150, 1, None);
    request.sent = Sent::default();
    p.push(b"*1\r\n$4\r\nPING\r\n", request);
    p.input().extend_from_slice(b"+OK\r\n$1\r\nx\r\n:1\r\n");
    let mut events = Vec::new();
    p.receive(&mut events).unwrap();
    let stamps: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::Step { sent } | Event::Answered { sent, .. } => Some(format!("{sent:?}")),
            Event::Ready | Event::Push(_) | Event::Clock(_) => None,
        })
        .collect();
    assert_eq!(stamps.len(), handshake().len() + 1);
}

#[test]
fn the_handshakes_time_tells_redis_clock_and_a_script_call_is_stamped_as_queued() {
    let mut p: Pipeline<u32> = Pipeline::default();
    p.open(&[(CLOCK_STEP, command(&[b"TIME"]))], 100, Sent::default);
    assert_eq!(
        feed(&mut p, b"*2\r\n$10\r\n1765000000\r\n$6\r\n250999\r\n").unwrap(),
        ["clock=1765000000250", "ready"]
    );
    let mut call = crate::redis::script_call::ScriptCall::new("s", 0, 1);
    call.deadline();
    let (call, _) = call.finish();
    let mut slot = Slot::request(150, 1, None);
    slot.redis_deadline = Some(1_765_000_000_399);
    p.push(&call, slot);
    assert!(p.output().ends_with(b"$13\r\n1765000000399\r\n"));
    // Without a deadline (no offset yet): sent as built.
    p.push(&call, Slot::request(150, 2, None));
    assert!(p.output().ends_with(b"$13\r\n0000000000000\r\n"));
    // A proxy that refuses TIME: ready all the same, no clock learnt.
    let mut p: Pipeline<u32> = Pipeline::default();
    p.open(&[(CLOCK_STEP, command(&[b"TIME"]))], 100, Sent::default);
    assert_eq!(
        feed(&mut p, b"-ERR unknown command 'TIME'\r\n").unwrap(),
        ["ready"]
    );
}

#[test]
fn a_role_step_that_is_not_master_breaks_the_connection() {
    let role = vec![(ROLE_STEP, command(&[b"ROLE"]))];
    let mut p: Pipeline<u32> = Pipeline::default();
    p.open(&role, 100, Sent::default);
    assert_eq!(
        feed(&mut p, b"*2\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n"),
        Err(Broken::Handshake(
            "ROLE: not the master (it is a slave)".to_owned()
        ))
    );
    let mut p: Pipeline<u32> = Pipeline::default();
    p.open(&role, 100, Sent::default);
    assert_eq!(
        feed(&mut p, b"*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n").unwrap(),
        ["ready"]
    );
}

#[test]
fn a_subscribed_connection_delivers_messages_nobody_asked_for() {
    let subscribe = vec![("SUBSCRIBE", command(&[b"SUBSCRIBE", b"ch"]))];
    let mut p: Pipeline<u32> = Pipeline::subscriber();
    p.open(&subscribe, 100, Sent::default);
    assert_eq!(
        feed(&mut p, b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n").unwrap(),
        ["ready"]
    );
    let out = feed(&mut p, b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nx\r\n").unwrap();
    assert_eq!(out.len(), 1);
    assert!(out[0].starts_with("push="), "{out:?}");
    assert!(p.is_idle());
    let mut plain: Pipeline<u32> = Pipeline::default();
    assert!(
        feed(&mut plain, b"+x\r\n").is_err(),
        "not subscribed: unasked"
    );
}

#[test]
fn a_refused_handshake_breaks_the_connection_with_its_label() {
    let mut p: Pipeline<u32> = Pipeline::default();
    p.open(&handshake(), 100, Sent::default);
    assert_eq!(
        feed(&mut p, b"-WRONGPASS invalid username-password pair\r\n"),
        Err(Broken::Handshake(
            "AUTH failed: WRONGPASS invalid username-password pair".to_owned()
        ))
    );
}

#[test]
fn a_broken_connection_reads_nothing_more_until_reopened() {
    let mut p: Pipeline<u32> = Pipeline::default();
    p.open(&handshake(), 100, Sent::default);
    p.push(b"", Slot::request(200, 1, None));
    let refused = Err(Broken::Handshake("AUTH failed: WRONGPASS x".to_owned()));
    assert_eq!(feed(&mut p, b"-WRONGPASS x\r\n"), refused);
    // The rest of the handshake and a reply arrive: not trusted.
    assert_eq!(feed(&mut p, b"$1\r\nx\r\n:1\r\n"), refused);
    assert_eq!(p.abandon(), (1, vec![1]));
    p.open(&handshake(), 100, Sent::default);
    assert_eq!(feed(&mut p, b"+OK\r\n$1\r\nx\r\n").unwrap(), ["ready"]);
}

#[test]
fn a_fragmented_reply_is_delivered_once_complete() {
    let mut p = open_pipeline();
    p.push(b"", Slot::request(200, 7, None));
    let reply = b"*2\r\n:1\r\n:42\r\n";
    for byte in &reply[..reply.len() - 1] {
        assert_eq!(feed(&mut p, &[*byte]).unwrap(), Vec::<String>::new());
    }
    assert_eq!(
        feed(&mut p, b"\n").unwrap(),
        ["Some(7)=Array([Integer(1), Integer(42)])"]
    );
    assert!(p.is_idle());
}

#[test]
fn pipelined_replies_go_to_their_slots_in_order() {
    let mut p = open_pipeline();
    for id in 1..=3 {
        p.push(b"", Slot::request(200, id, None));
    }
    assert_eq!(
        feed(&mut p, b":1\r\n:2\r\n:3").unwrap(),
        ["Some(1)=Integer(1)", "Some(2)=Integer(2)"]
    );
    assert_eq!(feed(&mut p, b"\r\n").unwrap(), ["Some(3)=Integer(3)"]);
}

#[test]
fn an_error_reply_fails_only_its_own_slot() {
    let mut p = open_pipeline();
    p.push(b"", Slot::request(200, 1, None));
    p.push(b"", Slot::request(200, 2, None));
    assert_eq!(
        feed(&mut p, b"-WRONGTYPE Operation against a key\r\n:5\r\n").unwrap(),
        [
            "Some(1)!WRONGTYPE Operation against a key",
            "Some(2)=Integer(5)"
        ]
    );
}

#[test]
fn noscript_resends_as_eval_and_the_slot_gets_the_second_reply() {
    let mut p = open_pipeline();
    p.sent(p.output().len());
    let eval = command(&[b"EVAL", b"return 1", b"0"]);
    let resend = Script(eval.clone());
    p.push(b"EVALSHA", Slot::request(200, 9, Some(Rc::new(resend))));
    p.sent(p.output().len());
    assert_eq!(
        feed(&mut p, b"-NOSCRIPT No matching script.\r\n").unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(p.output(), &eval[..]);
    assert_eq!(feed(&mut p, b":1\r\n").unwrap(), ["Some(9)=Integer(1)"]);
}

#[test]
fn noscript_after_asking_resends_asking_then_eval_and_only_the_eval_is_answered() {
    let mut p = open_pipeline();
    p.sent(p.output().len());
    let eval = command(&[b"EVAL", b"return 1", b"0"]);
    let resend = Script(eval.clone());
    p.push(b"ASKING", Slot::request(200, 8, None));
    p.push(
        b"EVALSHA",
        Slot::request(200, 9, Some(Rc::new(resend))).after_asking(),
    );
    p.sent(p.output().len());
    assert_eq!(
        feed(&mut p, b"+OK\r\n-NOSCRIPT No matching script.\r\n").unwrap(),
        ["Some(8)=SimpleString([79, 75])"]
    );
    assert_eq!(p.output(), [ASKING, &eval[..]].concat());
    assert_eq!(
        feed(&mut p, b"+OK\r\n:1\r\n").unwrap(),
        ["Some(9)=Integer(1)"],
        "the pipeline's own ASKING is nobody's"
    );
}

#[test]
fn noscript_twice_is_an_error_reply_not_a_loop() {
    let mut p = open_pipeline();
    p.push(
        b"",
        Slot::request(200, 4, Some(Rc::new(Script(b"EVAL".to_vec())))),
    );
    assert_eq!(
        feed(&mut p, b"-NOSCRIPT x\r\n-NOSCRIPT x\r\n").unwrap(),
        ["Some(4)!NOSCRIPT x"]
    );
}

#[test]
fn noscript_to_a_plain_command_is_its_error_reply_and_nothing_is_resent() {
    let mut p = open_pipeline();
    p.sent(p.output().len());
    let plain: Resend = Rc::new(b"GET k".to_vec());
    assert_eq!(plain.bytes(), b"GET k");
    p.push(plain.bytes(), Slot::request(200, 5, Some(plain.clone())));
    p.sent(p.output().len());
    assert_eq!(
        feed(&mut p, b"-NOSCRIPT x\r\n").unwrap(),
        ["Some(5)!NOSCRIPT x"]
    );
    assert!(p.output().is_empty());
}

#[test]
fn the_cluster_map_may_nest_where_other_replies_may_not() {
    let map = b"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n";
    let mut p = open_pipeline();
    p.push(b"", Slot::topology(200, 1));
    assert_eq!(feed(&mut p, map).unwrap().len(), 1);
    p.push(b"", Slot::request(200, 2, None));
    assert!(feed(&mut p, map).is_err());
}

#[test]
fn a_reply_nobody_asked_for_breaks_the_connection() {
    let mut p = open_pipeline();
    assert_eq!(
        feed(&mut p, b":1\r\n"),
        Err(Broken::Protocol("a reply nobody asked for".to_owned()))
    );
}

#[test]
fn after_a_reply_nobody_asked_for_the_next_reply_is_not_read() {
    // Found by fuzz/fuzz_targets/redis_pipeline.rs.
    let mut p = open_pipeline();
    let unsolicited = Err(Broken::Protocol("a reply nobody asked for".to_owned()));
    assert_eq!(feed(&mut p, b":1\r\n"), unsolicited);
    p.push(b"", Slot::request(200, 1, None));
    assert_eq!(feed(&mut p, b":2\r\n"), unsolicited);
}

#[test]
fn a_corrupt_stream_breaks_the_connection() {
    let mut p = open_pipeline();
    p.push(b"", Slot::request(200, 1, None));
    assert!(feed(&mut p, b"HTTP/1.1 400 Bad Request\r\n").is_err());
}

#[test]
fn abandoning_returns_every_waiting_request_but_not_the_handshake() {
    let mut p: Pipeline<u32> = Pipeline::default();
    p.open(&handshake(), 100, Sent::default);
    p.push(b"x", Slot::request(200, 1, None));
    p.push(b"y", Slot::request(200, 2, None));
    assert_eq!(p.abandon(), (2, vec![1, 2]));
    assert!(p.is_idle() && p.output().is_empty());
}

#[test]
fn the_oldest_slot_holds_the_deadline_to_watch() {
    let mut p: Pipeline<u32> = Pipeline::default();
    p.open(&handshake(), 100, Sent::default);
    assert!(p
        .oldest()
        .is_some_and(|s| s.deadline == 100 && s.is_handshake()));
}

/// One event as `feed` writes it, `step` for a handshake step.
fn named(event: Option<Event<u32>>) -> String {
    match event {
        None => "none".to_owned(),
        Some(Event::Step { .. }) => "step".to_owned(),
        Some(Event::Clock(ms)) => format!("clock={ms}"),
        Some(Event::Ready) => "ready".to_owned(),
        Some(Event::Push(frame)) => format!("push={frame:?}"),
        Some(Event::Answered { on_reply, .. }) => format!("{on_reply:?}"),
    }
}

#[test]
fn a_handshake_steps_events_come_one_at_a_time_clock_then_step_then_ready() {
    let mut p: Pipeline<u32> = Pipeline::default();
    p.open(&[(CLOCK_STEP, command(&[b"TIME"]))], 100, Sent::default);
    p.push(b"", Slot::request(150, 1, None));
    p.input()
        .extend_from_slice(b"*2\r\n$10\r\n1765000000\r\n$6\r\n250999\r\n:5\r\n");
    let events: Vec<String> = (0..5).map(|_| named(p.next_event().unwrap())).collect();
    assert_eq!(
        events,
        ["clock=1765000000250", "step", "ready", "Some(1)", "none"]
    );
}

#[test]
fn replies_handed_on_one_at_a_time_leave_only_an_incomplete_one_in_the_input() {
    let mut p = open_pipeline();
    for id in 1..=3 {
        p.push(b"", Slot::request(200, id, None));
    }
    p.input().extend_from_slice(b":1\r\n:22\r\n:3");
    assert_eq!(named(p.next_event().unwrap()), "Some(1)");
    assert_eq!(
        p.input().len(),
        b":1\r\n:22\r\n:3".len(),
        "nothing dropped while replies are handed on"
    );
    assert_eq!(named(p.next_event().unwrap()), "Some(2)");
    assert_eq!(named(p.next_event().unwrap()), "none");
    assert_eq!(p.input(), b":3", "what was read dropped, once");
    p.input().extend_from_slice(b"\r\n");
    assert_eq!(named(p.next_event().unwrap()), "Some(3)");
    assert_eq!(named(p.next_event().unwrap()), "none");
    assert!(p.input().is_empty() && p.is_idle());
}
