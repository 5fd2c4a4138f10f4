//! Web Bot Auth's counters (docs/metrics.md): requests whose signature
//! verified, signed requests refused as replays, and signatures naming a
//! bot's key that did not verify, by bot name. They live in the zone's
//! header beside the replay cache and are counted under its lock (the one
//! the nonce's record takes anyway); a bot is found by a hash of its name,
//! so that a reload that reorders or adds bots keeps every count.

use core::fmt::Write;

/// Bot names the zone keeps counts for, across reloads.
pub const BOT_NAMES: usize = 64;

/// The counts of every bot, as the zone holds them (plain integers: zeroed
/// memory is no bot counted).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BotCounters {
    /// A name's hash (never 0), or 0 for a free slot.
    names: [u64; BOT_NAMES],
    verified: [u64; BOT_NAMES],
    replays: [u64; BOT_NAMES],
    bad_signatures: [u64; BOT_NAMES],
}

impl Default for BotCounters {
    fn default() -> Self {
        Self::new()
    }
}

/// FNV-1a of the name, never 0 (0 marks a free slot).
fn name_hash(name: &str) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325_u64;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h | 1
}

impl BotCounters {
    pub const fn new() -> Self {
        BotCounters {
            names: [0; BOT_NAMES],
            verified: [0; BOT_NAMES],
            replays: [0; BOT_NAMES],
            bad_signatures: [0; BOT_NAMES],
        }
    }

    /// The slot of `name`, taken if new; `None` when every slot is some
    /// other name's (that bot goes uncounted).
    fn slot(&mut self, name: &str) -> Option<usize> {
        let h = name_hash(name);
        let i = self.names.iter().position(|&n| n == h || n == 0)?;
        self.names[i] = h;
        Some(i)
    }

    /// A request of `name` verified.
    pub fn verified(&mut self, name: &str) {
        if let Some(i) = self.slot(name) {
            self.verified[i] = self.verified[i].wrapping_add(1);
        }
    }

    /// A request signed by `name` came with a nonce seen before.
    pub fn replayed(&mut self, name: &str) {
        if let Some(i) = self.slot(name) {
            self.replays[i] = self.replays[i].wrapping_add(1);
        }
    }

    /// A signature naming a key of `name` did not verify (forged, or the
    /// request altered on the way): an Ed25519 verification spent.
    pub fn bad_signature(&mut self, name: &str) {
        if let Some(i) = self.slot(name) {
            self.bad_signatures[i] = self.bad_signatures[i].wrapping_add(1);
        }
    }

    /// (verified, replays, bad signatures) of `name`.
    pub fn counts(&self, name: &str) -> (u64, u64, u64) {
        let h = name_hash(name);
        match self.names.iter().position(|&n| n == h) {
            Some(i) => (self.verified[i], self.replays[i], self.bad_signatures[i]),
            None => (0, 0, 0),
        }
    }
}

/// The families of the configured bots (`names`), every bot shown (zeros
/// too); nothing without bots.
pub fn render_bots(names: &[String], counters: &BotCounters) -> String {
    let mut out = String::new();
    if names.is_empty() {
        return out;
    }
    type Count = fn((u64, u64, u64)) -> u64;
    let families: [(&str, &str, Count); 3] = [
        (
            "pow_shield_bot_requests_total",
            "Requests whose Web Bot Auth signature verified, by bot (pow_shield_bot_keys).",
            |(verified, _, _)| verified,
        ),
        (
            "pow_shield_bot_replays_total",
            "Signed requests whose nonce had been seen (left anonymous), by bot.",
            |(_, replays, _)| replays,
        ),
        (
            "pow_shield_bot_bad_signatures_total",
            "Signatures naming a key of the bot that did not verify (left anonymous; each cost a verification), by bot.",
            |(_, _, bad)| bad,
        ),
    ];
    for (family, help, count) in families {
        let _ = write!(out, "# HELP {family} {help}\n# TYPE {family} counter\n");
        for name in names {
            let _ = writeln!(
                out,
                "{family}{{bot=\"{name}\"}} {}",
                count(counters.counts(name))
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_kept_by_name_whatever_the_order() {
        let mut c = BotCounters::new();
        c.verified("a");
        c.verified("b");
        c.verified("b");
        c.replayed("a");
        c.bad_signature("b");
        assert_eq!(c.counts("b"), (2, 0, 1));
        assert_eq!(c.counts("a"), (1, 1, 0));
        assert_eq!(c.counts("c"), (0, 0, 0));
    }

    #[test]
    fn a_bot_beyond_the_slots_goes_uncounted() {
        let mut c = BotCounters::new();
        for i in 0..BOT_NAMES {
            c.verified(&format!("bot{i}"));
        }
        c.verified("late");
        assert_eq!(c.counts("late"), (0, 0, 0));
        assert_eq!(c.counts("bot0"), (1, 0, 0));
    }

    #[test]
    fn every_configured_bot_is_a_series() {
        let mut c = BotCounters::new();
        c.verified("crawler");
        c.bad_signature("idle");
        let text = render_bots(&["crawler".into(), "idle".into()], &c);
        assert!(text.contains("pow_shield_bot_requests_total{bot=\"crawler\"} 1\n"));
        assert!(text.contains("pow_shield_bot_requests_total{bot=\"idle\"} 0\n"));
        assert!(text.contains("pow_shield_bot_replays_total{bot=\"crawler\"} 0\n"));
        assert!(text.contains("pow_shield_bot_bad_signatures_total{bot=\"idle\"} 1\n"));
        assert!(text.contains("pow_shield_bot_bad_signatures_total{bot=\"crawler\"} 0\n"));
        assert!(render_bots(&[], &c).is_empty());
    }
}
