//! The admin location's JSON: the view of a key (its zone's and Redis's
//! breaker and counts) and the answer to a lift.

use core::fmt::Write;

use super::{FromRedis, LimitView, Named, StoreView};
use crate::limiter::breaker::{Block, BreakerRules, BANNED_TRIPS};

/// The JSON of a view: the key, what it names, the mode, the node's zone
/// and Redis's.
pub fn view_json(
    key: &[u8],
    named: Named,
    rules: BreakerRules,
    node: &StoreView,
    redis: &FromRedis,
) -> String {
    let mut out = String::with_capacity(512);
    head(&mut out, key, named, redis);
    out.push_str(",\"node\":");
    store_json(&mut out, node, rules);
    match redis {
        FromRedis::None => {}
        FromRedis::Answered(view) => {
            out.push_str(",\"redis\":");
            store_json(&mut out, view, rules);
        }
        FromRedis::Lifted => out.push_str(",\"redis\":{\"lifted\":true}"),
        FromRedis::Unavailable => out.push_str(",\"redis\":{\"error\":\"unavailable\"}"),
    }
    out.push_str("}\n");
    out
}

/// The JSON of a lift (`keyed`: it cleared the key's counts as a
/// `key=` value too).
pub fn lifted_json(key: &[u8], named: Named, keyed: bool, redis: &FromRedis) -> String {
    let mut out = String::with_capacity(128);
    head(&mut out, key, named, redis);
    out.push_str(",\"lifted\":{\"node\":true");
    if keyed {
        out.push_str(",\"keyed\":true");
    }
    match redis {
        FromRedis::None => {}
        FromRedis::Lifted | FromRedis::Answered(_) => out.push_str(",\"redis\":true"),
        FromRedis::Unavailable => out.push_str(",\"redis\":false"),
    }
    out.push_str("}}\n");
    out
}

/// `{"error": ...}` of a refused request.
pub fn error_json(message: &str) -> String {
    let mut out = String::from("{\"error\":");
    string(&mut out, message.as_bytes());
    out.push_str("}\n");
    out
}

fn head(out: &mut String, key: &[u8], named: Named, redis: &FromRedis) {
    out.push_str("{\"key\":");
    string(out, key);
    let mode = match redis {
        FromRedis::None => "local",
        _ => "cluster",
    };
    let _ = write!(out, ",\"as\":\"{}\",\"mode\":\"{mode}\"", named.as_str());
}

fn store_json(out: &mut String, view: &StoreView, rules: BreakerRules) {
    let b = &view.breaker;
    let (block, ends_ms) = b.block(rules);
    let block = match block {
        Block::Clear => "clear",
        Block::Blocked => "blocked",
        Block::Banned => "banned",
    };
    let banned = b.trips >= u32::from(BANNED_TRIPS);
    let _ = write!(
        out,
        "{{\"strikes\":{},\"unpaid\":{},\"strikes_expire_in_ms\":{},\"openings\":{},\
         \"openings_expire_in_ms\":{},\"ban_marked\":{banned},\"block\":\"{block}\",\
         \"block_ends_in_ms\":{ends_ms},\"limits\":[",
        b.strikes,
        b.unpaid,
        b.strikes_ms,
        if banned { 0 } else { b.trips },
        b.trips_ms
    );
    limits_json(out, &view.limits);
    out.push_str("],\"keyed\":[");
    limits_json(out, &view.keyed);
    out.push_str("]}");
}

fn limits_json(out: &mut String, limits: &[LimitView]) {
    for (i, l) in limits.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('{');
        if let Some(name) = l.name {
            let _ = write!(out, "\"limit\":\"{name}\",");
        }
        let _ = write!(
            out,
            "\"requests\":{},\"window_ms\":{},\"approx\":{},\"count\":{},\"reset_in_ms\":{}}}",
            l.limit.requests, l.limit.window_ms, l.approx, l.count, l.reset_ms
        );
    }
}

/// A JSON string of `bytes` (not UTF-8: replaced; controls escaped).
fn string(out: &mut String, bytes: &[u8]) {
    out.push('"');
    for c in String::from_utf8_lossy(bytes).chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
