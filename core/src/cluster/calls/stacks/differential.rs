//! A stacked call, and a gathered one, encoded by the way a request takes
//! (kept texts, the call's start copied, keys written whole in
//! `WideKeys`, an IPv4 client's tag in fixed-size copies) are the bytes
//! the plain encoder writes word by word (d01781c's way, whose pieces
//! remain as the fallback): random prefixes, clients, keyed values, sets
//! of limits (more than are kept, so texts are found, missed and dropped),
//! breaker rules and members, one Redis and a Redis Cluster.

use super::{part_args, part_words, Call, Calls, Part, ScriptCall};
use crate::cluster::keys::ipv4_last_dot;
use crate::limiter::breaker::{BanRule, BreakerRules, StrikeRule};
use crate::limiter::{KeyId, Limit, Limits, RateLimit};
use crate::redis::cluster::ClientSlot;
use crate::redis::command::Tag;
use crate::store::{Offence, Subject};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }
    fn bool(&mut self) -> bool {
        self.next() & 1 == 1
    }
}

fn old_member(calls: &Calls, w: &mut Vec<u8>, seq: u64) {
    w.extend_from_slice(&calls.member_head);
    w.extend_from_slice(format!("{seq:x}").as_bytes());
}

fn old_part_keys(calls: &Calls, call: &mut ScriptCall, part: &Part) {
    calls.breaker_keys(call, &part.route);
    for c in part.counts.iter() {
        calls.count_keys(call, (part, c));
    }
}

fn old_stacked(calls: &Calls, part: &Part, seq: u64) -> Call {
    let n = part.counts.len();
    let keys = 3 + 2 * n + usize::from(calls.cluster);
    let script = &calls.scripts.stacked;
    let mut call = ScriptCall::new(&script.sha1, keys, 2 + part_words(part));
    old_part_keys(calls, &mut call, part);
    calls.slot_key_of(&mut call, || part.slot());
    call.push(|w| old_member(calls, w, seq));
    part_args(&mut call, part);
    call.deadline();
    Call::of(script, call)
}

fn old_stacks(calls: &Calls, parts: &[(&Part, u64)]) -> Call {
    let script = &calls.scripts.stacked;
    let sets = parts.chunk_by(|(a, _), (b, _)| a.same_set(b));
    let keys: usize = parts.iter().map(|(p, _)| 3 + 2 * p.counts.len()).sum();
    let set_args: usize = sets.clone().map(|s| 8 + 2 * s[0].0.counts.len()).sum();
    let argc = 2 + set_args + parts.len() + 1;
    let mut call = ScriptCall::new(&script.sha1, keys + usize::from(calls.cluster), argc);
    for (part, _) in parts {
        old_part_keys(calls, &mut call, part);
    }
    if let Some((first, _)) = parts.first() {
        calls.slot_key_of(&mut call, || first.slot());
    }
    call.push(|w| w.push(b'*')).num(sets.clone().count() as u64);
    for set in sets {
        let (part, _) = set[0];
        call.num(set.len() as u64);
        part_args(&mut call, part);
    }
    for (_, seq) in parts {
        call.push(|w| old_member(calls, w, *seq));
    }
    call.deadline();
    Call::of(script, call)
}

fn old_tag(calls: &Calls, key: &[u8]) -> Tag {
    if calls.client_slot == ClientSlot::Net {
        if let Some(id) = key.strip_prefix(&[0u8]) {
            if let Some(last) = ipv4_last_dot(id) {
                return Tag::of_bytes(&[b"@key=", &id[..=last], b"0/24}{@", id]);
            }
        }
    }
    calls.tag(key)
}

fn random_bytes(r: &mut Rng, len: usize) -> Vec<u8> {
    let chars: &[u8] = b"ab{}{}%:@ .-_\x00\xff\x7fZ9";
    (0..len).map(|_| *r.pick(chars)).collect()
}

fn client(r: &mut Rng) -> Vec<u8> {
    let mut k = vec![0u8];
    match r.below(8) {
        0 | 1 => {
            let o: Vec<String> = (0..4).map(|_| r.below(256).to_string()).collect();
            k.extend_from_slice(o.join(".").as_bytes());
        }
        2 => {
            let mut s = String::new();
            for i in 0..4 {
                if i > 0 {
                    s.push('.');
                }
                for _ in 0..=r.below(6) {
                    s.push((b'0' + r.below(10) as u8) as char);
                }
            }
            k.extend_from_slice(s.as_bytes());
        }
        3 => {
            let segs: Vec<String> = (0..4)
                .map(|_| match r.below(3) {
                    0 => "0".to_string(),
                    1 => format!("{:x}", r.below(65536)),
                    _ => "ffff".to_string(),
                })
                .collect();
            let a: std::net::Ipv6Addr = format!("{}::", segs.join(":")).parse().unwrap();
            k.extend_from_slice(format!("{a}/64").as_bytes());
        }
        4 => k.extend_from_slice(b"unix:"),
        _ => {
            let len = 1 + r.below(130) as usize;
            k = random_bytes(r, len);
            if k.is_empty() {
                k.push(b'x');
            }
        }
    }
    k
}

fn limits(r: &mut Rng) -> (Limits, Vec<u8>) {
    // which values each keyed limit takes: 0 net, 1 empty, 2 short, 3 long, 4 braces
    let ids = [
        KeyId::of("$pow_shield_net"),
        KeyId::of("$site"),
        KeyId::of("$other"),
    ];
    let mut limits = Limits::NONE;
    let mut kinds = Vec::new();
    let n = 1 + r.below(8);
    for _ in 0..n {
        let x = r.below(1000) as u32;
        let requests = *r.pick(&[1u32, 5, 60, 99, 100, 1_000_000, u32::MAX, x]);
        let y = r.below(1 << 40);
        let window = *r.pick(&[
            1u64,
            1000,
            60_000,
            86_400_000,
            u64::MAX,
            10_000_000_000_000_000_000,
            y,
        ]);
        let mut l = Limit::new(RateLimit {
            requests,
            window_ms: window,
        });
        if r.bool() {
            l = l.approx();
        }
        let mut kind = 255;
        if r.below(3) > 0 {
            l = l.keyed(*r.pick(&ids));
            kind = r.below(6) as u8;
        }
        if limits.add(l).is_ok() {
            kinds.push(kind);
        }
    }
    (limits, kinds)
}

fn value(r: &mut Rng, kind: u8, key: &[u8]) -> Option<Vec<u8>> {
    let id = key.strip_prefix(&[0u8]).unwrap_or(key);
    Some(match kind {
        255 => return None,
        0 => match ipv4_last_dot(id) {
            Some(last) => [&id[..=last], b"0/24"].concat(),
            None => b"2001:db8:1::/48".to_vec(),
        },
        1 => Vec::new(),
        2 => b"203.0.113.0/24".to_vec(),
        3 => {
            let len = 40 + r.below(200) as usize;
            random_bytes(r, len)
        }
        _ => {
            let len = r.below(70) as usize;
            random_bytes(r, len)
        }
    })
}

fn rules(r: &mut Rng) -> BreakerRules {
    BreakerRules {
        strikes: r.bool().then(|| StrikeRule {
            threshold: *r.pick(&[1u32, 3, 99, 100, u32::MAX]),
            ttl_ms: *r.pick(&[1u64, 86_400_000, u64::MAX]),
        }),
        ban: r.bool().then(|| BanRule {
            after: *r.pick(&[1u32, 2, 1000]),
            ttl_ms: *r.pick(&[1u64, 3_600_000, u64::MAX]),
        }),
    }
}

#[test]
fn a_request_s_call_is_what_the_plain_encoder_writes() {
    let iters: u64 = std::env::var("DIFFERENTIAL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let mut checked = (0usize, 0usize);
    for round in 0..iters {
        let plen = *r.pick(&[0usize, 3, 10, 40, 55, 60, 61, 62, 63, 64, 65, 70]);
        let prefix: String = (0..plen)
            .map(|_| *r.pick(&['p', ':', '{', '}', 'x']))
            .collect();
        let cluster = r.bool();
        let slot = *r.pick(&[ClientSlot::Own, ClientSlot::Net]);
        let z = r.next();
        let node = *r.pick(&[0u64, 1, 0xdead_beef, u64::MAX, z]);
        let pid = r.next() as u32;
        let calls = Calls::new(&prefix, node, pid, cluster).with_client_slot(slot);
        assert_eq!(calls.member_head, format!("{node:x}:{pid:x}:").into_bytes());
        // A small pool of sets (more than KEPT) so texts are kept, hit and evicted.
        let pool: Vec<(Limits, Vec<u8>, BreakerRules, Offence)> = (0..6)
            .map(|_| {
                let (l, k) = limits(&mut r);
                let off = *r.pick(&[Offence::None, Offence::Unpaid, Offence::Failed]);
                (l, k, rules(&mut r), off)
            })
            .collect();
        let mut recent: Vec<Part> = Vec::new();
        for _ in 0..60 {
            let (limits, kinds, rules, offence) = r.pick(&pool).clone();
            let key = client(&mut r);
            let values: Vec<Option<Vec<u8>>> =
                kinds.iter().map(|&k| value(&mut r, k, &key)).collect();
            let values: Vec<Option<&[u8]>> = values.iter().map(|v| v.as_deref()).collect();
            let subject = Subject {
                key: &key,
                limits: &limits,
                key_values: &values,
                rules,
                rising: false,
            };
            let tag = calls.tag(&key);
            assert_eq!(tag, old_tag(&calls, &key), "{key:?}");
            assert_eq!(tag.as_bytes(), old_tag(&calls, &key).as_bytes());
            let mut parts = calls.parts(&tag, &subject, offence);
            parts.push(calls.whole(&tag, &subject, offence));
            for part in &parts {
                let (a, b) = (r.next(), r.below(1 << 20));
                let seq = *r.pick(&[0u64, 7, 0xffff_ffff, 0x1_0000_0000, u64::MAX, a, b]);
                let new = calls.stacked(part, seq);
                let old = old_stacked(&calls, part, seq);
                assert_eq!(
                    String::from_utf8_lossy(&new.evalsha),
                    String::from_utf8_lossy(&old.evalsha),
                    "round {round} prefix {prefix:?} key {key:?}"
                );
                assert_eq!(new, old);
                assert_eq!(new.eval(), old.eval());
                checked.0 += 1;
                recent.push(part.clone());
            }
            if recent.len() > 12 {
                recent.drain(..recent.len() - 12);
            }
            // A gathered call of some recent parts (sets in a row shared).
            let k = 1 + r.below(recent.len() as u64) as usize;
            let mut gathered: Vec<(&Part, u64)> = Vec::new();
            for i in 0..k {
                let p = &recent[r.below(recent.len() as u64) as usize];
                gathered.push((p, i as u64 * 0x1_0000_0001));
                if r.bool() {
                    gathered.push((p, i as u64 + 3));
                }
            }
            let gathered = &gathered[..gathered.len().min(super::super::MAX_GATHERED)];
            assert_eq!(calls.stacks(gathered), old_stacks(&calls, gathered));
            checked.1 += 1;
        }
    }
    assert!(checked.0 > 1000 && checked.1 > 1000, "{checked:?}");
}
