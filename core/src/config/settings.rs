//! Merge precedence: a location takes every value it leaves unset from its
//! server, a server from the http block (nginx merges top down, so each
//! level inherits from its parent already merged), and what no level sets
//! takes the defaults of docs/directives.md.

use crate::decision::DifficultyRule;
use crate::limiter::breaker::{BanRule, BreakerRules, StrikeRule};
use crate::limiter::{KeyId, Limits, MAX_LIMITS};
use crate::protocol::Work;
use crate::syntax::{FailPolicy, HeadersMode};

/// `pow_shield_difficulty` when no level sets it.
pub const DEFAULT_DIFFICULTY: u8 = 4;
/// `pow_shield_difficulty` when no level sets it where the work is
/// `equix`: 4 bits, about 8 Equi-X solves (docs/equix.md, the cost
/// table); SHA-256's 16 bits would be minutes of Equi-X.
pub const DEFAULT_EQUIX_BITS: u8 = 4;
/// `pow_shield_strikes` when no level sets it.
pub const DEFAULT_STRIKES: StrikeRule = StrikeRule {
    threshold: 5,
    ttl_ms: 60_000,
};
/// `pow_shield_block_status` when no level sets it.
pub const DEFAULT_BLOCK_STATUS: u16 = 403;
/// `pow_shield_challenge_ttl` when no level sets it.
pub const DEFAULT_CHALLENGE_TTL_MS: u64 = 60_000;
/// `pow_shield_zone` when the http block does not set it.
pub const DEFAULT_ZONE_SIZE: usize = 10 * 1024 * 1024;
/// `pow_shield_log_level` when no level sets it.
pub const DEFAULT_LOG_LEVEL: LogLevel = LogLevel::Warn;
/// `pow_shield_breaker_log_level` when no level sets it.
pub const DEFAULT_BREAKER_LOG_LEVEL: LogLevel = LogLevel::Error;

/// The levels `pow_shield_log_level` and `pow_shield_breaker_log_level`
/// take; the module maps them to nginx's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    Info,
    Notice,
    Warn,
    Error,
}

/// Directive values as written at one level (`None`: not set here). `V`
/// is the module's compiled complex value, a handle this crate only copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings<V> {
    /// The limits (one per `pow_shield_limit` line, each counting exact
    /// or `approx`); `Some(None)` is an explicit `off`.
    pub limit: Option<Option<Limits>>,
    /// The compiled `key=` values the limits name, inherited with them.
    pub key_sources: KeySources<V>,
    pub difficulty: Option<DifficultyRule>,
    /// `pow_shield_work`.
    pub work: Option<Work>,
    pub strikes: Option<Option<StrikeRule>>,
    pub ban: Option<Option<BanRule>>,
    pub block_status: Option<u16>,
    pub trap: Option<bool>,
    pub key: Option<V>,
    pub challenge_ttl_ms: Option<u64>,
    pub headers: Option<HeadersMode>,
    pub dry_run: Option<bool>,
    pub pay_ahead: Option<bool>,
    pub log_level: Option<LogLevel>,
    pub breaker_log_level: Option<LogLevel>,
    /// `pow_shield_log_summary`; `Some(None)` is `off`.
    pub log_summary: Option<Option<u64>>,
    /// The policy and its `trusted=` value.
    pub fail: Option<(FailPolicy, Option<V>)>,
    /// `pow_shield_status` in this very location (not inherited).
    pub status: bool,
}

impl<V: Copy> Default for Settings<V> {
    fn default() -> Self {
        Self {
            limit: None,
            key_sources: KeySources::NONE,
            difficulty: None,
            work: None,
            strikes: None,
            ban: None,
            block_status: None,
            trap: None,
            key: None,
            challenge_ttl_ms: None,
            headers: None,
            dry_run: None,
            pay_ahead: None,
            log_level: None,
            breaker_log_level: None,
            log_summary: None,
            fail: None,
            status: false,
        }
    }
}

/// Where a context's `key=` values come from: each compiled once, found
/// by the identity of its text that its limits carry ([`crate::limiter::Limit::key`]),
/// however many limits count per it. `V` is the module's compiled value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeySources<V> {
    list: [Option<(KeyId, V)>; MAX_LIMITS],
}

impl<V: Copy> KeySources<V> {
    pub const NONE: KeySources<V> = KeySources {
        list: [None; MAX_LIMITS],
    };

    /// Notes `source` for `id` (a second limit with the same `key=` text
    /// shares the first one's). `false`: no room (more distinct keys than
    /// limits, which the stack refuses first).
    pub fn add(&mut self, id: KeyId, source: V) -> bool {
        if self.get(id).is_some() {
            return true;
        }
        match self.list.iter_mut().find(|s| s.is_none()) {
            Some(free) => {
                *free = Some((id, source));
                true
            }
            None => false,
        }
    }

    /// The source of the `key=` whose text is `id`.
    pub fn get(&self, id: KeyId) -> Option<V> {
        self.list
            .iter()
            .flatten()
            .find(|(at, _)| *at == id)
            .map(|(_, source)| *source)
    }

    /// No limit counts per a `key=`.
    pub fn is_empty(&self) -> bool {
        self.list[0].is_none()
    }
}

impl<V: Copy> Default for KeySources<V> {
    fn default() -> Self {
        KeySources::NONE
    }
}

/// What `nginx -t` accepts but warns of: a setting that can never act.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Warning {
    /// `pow_shield_ban` on where `pow_shield_strikes` is off: a ban follows
    /// breaker openings, and without strikes no breaker opens.
    BanWithoutStrikes,
}

impl Warning {
    /// The line nginx logs; `strikes_at` is where strikes are set off (the
    /// module appends where the ban is, as nginx ends its lines).
    pub fn message(self, strikes_at: &str) -> String {
        match self {
            Warning::BanWithoutStrikes => format!(
                "\"pow_shield_ban\" can never act where \"pow_shield_strikes\" is off \
                 ({strikes_at}): a ban follows breaker openings, which need strikes,"
            ),
        }
    }
}

/// Every setting of a location once merged, defaults applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolved<V> {
    pub limits: Limits,
    /// The compiled `key=` values its limits name.
    pub key_sources: KeySources<V>,
    pub difficulty: DifficultyRule,
    /// `pow_shield_work` (default `sha256`).
    pub work: Work,
    /// `pow_shield_strikes` and `pow_shield_ban`.
    pub breaker: BreakerRules,
    pub block_status: u16,
    pub trap: bool,
    /// `None`: the default key (`$pow_shield_client`, a client address).
    pub key: Option<V>,
    pub challenge_ttl_ms: u64,
    pub headers: HeadersMode,
    pub dry_run: bool,
    /// `pow_shield_pay_ahead` (default on).
    pub pay_ahead: bool,
    pub log_level: LogLevel,
    pub breaker_log_level: LogLevel,
    /// `pow_shield_log_summary` (milliseconds); `None`: every rejection
    /// its own line.
    pub log_summary_ms: Option<u64>,
    pub fail: FailPolicy,
    /// `trusted=` of `pow_shield_fail closed`.
    pub trusted: Option<V>,
}

impl<V: Copy> Settings<V> {
    /// Takes from `parent` every value this level leaves unset. A status
    /// location is never shielded, whatever it inherits (and locations
    /// inside it inherit that).
    pub fn inherit(&mut self, parent: &Settings<V>) {
        if self.limit.is_none() {
            self.limit = parent.limit;
            self.key_sources = parent.key_sources;
        }
        self.difficulty = self.difficulty.or(parent.difficulty);
        self.work = self.work.or(parent.work);
        self.strikes = self.strikes.or(parent.strikes);
        self.ban = self.ban.or(parent.ban);
        self.block_status = self.block_status.or(parent.block_status);
        self.trap = self.trap.or(parent.trap);
        self.key = self.key.or(parent.key);
        self.challenge_ttl_ms = self.challenge_ttl_ms.or(parent.challenge_ttl_ms);
        self.headers = self.headers.or(parent.headers);
        self.dry_run = self.dry_run.or(parent.dry_run);
        self.pay_ahead = self.pay_ahead.or(parent.pay_ahead);
        self.log_level = self.log_level.or(parent.log_level);
        self.breaker_log_level = self.breaker_log_level.or(parent.breaker_log_level);
        self.log_summary = self.log_summary.or(parent.log_summary);
        self.fail = self.fail.or(parent.fail);
        if self.status {
            self.limit = Some(None);
            self.trap = Some(false);
        }
    }

    /// What `nginx -t` warns of in a location (or server) whose merged
    /// values are `self`: a ban where strikes are off, where it would
    /// matter (the location is shielded: a limit or a trap). The module
    /// says it once per pair of directives, however many locations inherit
    /// them.
    pub fn warning(&self) -> Option<Warning> {
        let shielded = matches!(self.limit, Some(Some(_))) || self.trap == Some(true);
        let ban_on = matches!(self.ban, Some(Some(_)));
        let strikes_off = matches!(self.strikes, Some(None));
        (shielded && ban_on && strikes_off).then_some(Warning::BanWithoutStrikes)
    }

    /// The values of this level, the defaults where none is set.
    pub fn resolve(&self) -> Resolved<V> {
        let limit = self.limit.flatten();
        let (fail, trusted) = self.fail.unwrap_or((FailPolicy::Local, None));
        let work = self.work.unwrap_or_default();
        Resolved {
            limits: limit.unwrap_or(Limits::NONE),
            key_sources: match limit {
                Some(_) => self.key_sources,
                None => KeySources::NONE,
            },
            difficulty: self.difficulty.unwrap_or(match work {
                Work::Sha256 => DifficultyRule::hex(DEFAULT_DIFFICULTY),
                Work::Equix => DifficultyRule::bits(DEFAULT_EQUIX_BITS),
            }),
            work,
            breaker: BreakerRules {
                strikes: self.strikes.unwrap_or(Some(DEFAULT_STRIKES)),
                ban: self.ban.unwrap_or(None),
            },
            block_status: self.block_status.unwrap_or(DEFAULT_BLOCK_STATUS),
            trap: self.trap.unwrap_or(false),
            key: self.key,
            challenge_ttl_ms: self.challenge_ttl_ms.unwrap_or(DEFAULT_CHALLENGE_TTL_MS),
            headers: self.headers.unwrap_or(HeadersMode::Both),
            dry_run: self.dry_run.unwrap_or(false),
            pay_ahead: self.pay_ahead.unwrap_or(true),
            log_level: self.log_level.unwrap_or(DEFAULT_LOG_LEVEL),
            breaker_log_level: self.breaker_log_level.unwrap_or(DEFAULT_BREAKER_LOG_LEVEL),
            log_summary_ms: self
                .log_summary
                .unwrap_or(Some(crate::log_summary::DEFAULT_INTERVAL_MS)),
            fail,
            trusted,
        }
    }
}

/// The `RateLimit-Policy` a location's limits fix, made once per
/// location: an item per limit, in the order written (the window in whole
/// seconds, rounded up), named as [`crate::headers::item_name`] says.
pub fn policy_header(limits: &Limits) -> String {
    (0..limits.len())
        .filter_map(|i| {
            let limit = limits.get(i)?;
            Some(format!(
                "\"{}\";q={};w={}",
                crate::headers::item_name(limits, i),
                limit.requests,
                limit.window_ms.div_ceil(1000)
            ))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::{Limit, RateLimit};

    /// A stand-in for a compiled complex value.
    type Key = &'static str;

    const TEN_PER_MINUTE: Limits = Limits::one(RateLimit {
        requests: 10,
        window_ms: 60_000,
    });
    const TEN_PER_MINUTE_APPROX: Limits = Limits::of(
        Limit::new(RateLimit {
            requests: 10,
            window_ms: 60_000,
        })
        .approx(),
    );
    const FIVE_PER_10S: Limits = Limits::one(RateLimit {
        requests: 5,
        window_ms: 10_000,
    });

    /// `location` inside `server` inside `http`, merged as nginx does.
    fn merged(
        http: Settings<Key>,
        server: Settings<Key>,
        location: Settings<Key>,
    ) -> (Settings<Key>, Resolved<Key>) {
        let mut server = server;
        server.inherit(&http);
        let mut location = location;
        location.inherit(&server);
        (location, location.resolve())
    }

    fn with(f: impl FnOnce(&mut Settings<Key>)) -> Settings<Key> {
        let mut s = Settings::default();
        f(&mut s);
        s
    }

    #[test]
    fn nothing_set_anywhere_gives_the_documented_defaults() {
        let (_, p) = merged(
            Settings::default(),
            Settings::default(),
            Settings::default(),
        );
        assert_eq!(
            p,
            Resolved {
                limits: Limits::NONE,
                key_sources: KeySources::NONE,
                difficulty: DifficultyRule::hex(4),
                work: Work::Sha256,
                breaker: BreakerRules {
                    strikes: Some(StrikeRule {
                        threshold: 5,
                        ttl_ms: 60_000
                    }),
                    ban: None,
                },
                block_status: 403,
                trap: false,
                key: None,
                challenge_ttl_ms: 60_000,
                headers: HeadersMode::Both,
                dry_run: false,
                pay_ahead: true,
                log_level: LogLevel::Warn,
                breaker_log_level: LogLevel::Error,
                log_summary_ms: Some(10_000),
                fail: FailPolicy::Local,
                trusted: None,
            }
        );
    }

    #[test]
    fn an_equix_location_without_a_difficulty_asks_4_bits_and_one_with_keeps_its_own() {
        let http = with(|s| s.work = Some(Work::Equix));
        let (_, p) = merged(http, Settings::default(), Settings::default());
        assert_eq!(
            (p.work, p.difficulty),
            (Work::Equix, DifficultyRule::bits(4))
        );
        let set = with(|s| s.difficulty = Some(DifficultyRule::bits(6)));
        let (_, p) = merged(http, Settings::default(), set);
        assert_eq!(
            (p.work, p.difficulty),
            (Work::Equix, DifficultyRule::bits(6))
        );
        let sha = with(|s| s.work = Some(Work::Sha256));
        let (_, p) = merged(http, Settings::default(), sha);
        assert_eq!(
            (p.work, p.difficulty),
            (Work::Sha256, DifficultyRule::hex(4))
        );
    }

    #[test]
    fn the_location_wins_over_its_server_and_the_http_block() {
        let http = with(|s| s.difficulty = Some(DifficultyRule::hex(3)));
        let server = with(|s| s.difficulty = Some(DifficultyRule::hex(2)));
        let location = with(|s| s.difficulty = Some(DifficultyRule::hex(1)));
        let (_, p) = merged(http, server, location);
        assert_eq!(p.difficulty, DifficultyRule::hex(1));
    }

    #[test]
    fn an_unset_location_takes_its_server_value_before_the_http_one() {
        let http = with(|s| s.challenge_ttl_ms = Some(300_000));
        let server = with(|s| s.challenge_ttl_ms = Some(30_000));
        let (_, p) = merged(http, server, Settings::default());
        assert_eq!(p.challenge_ttl_ms, 30_000);
    }

    #[test]
    fn an_unset_server_passes_the_http_value_down() {
        let http = with(|s| {
            s.limit = Some(Some(TEN_PER_MINUTE_APPROX));
            s.dry_run = Some(true);
            s.log_level = Some(LogLevel::Notice);
        });
        let (_, p) = merged(http, Settings::default(), Settings::default());
        assert_eq!(p.limits, TEN_PER_MINUTE_APPROX);
        assert!(p.limits.approx(0));
        assert!(p.dry_run);
        assert_eq!(p.log_level, LogLevel::Notice);
    }

    #[test]
    fn log_summary_off_in_a_location_overrides_the_http_interval() {
        let http = with(|s| s.log_summary = Some(Some(60_000)));
        let (_, p) = merged(http, Settings::default(), Settings::default());
        assert_eq!(p.log_summary_ms, Some(60_000));
        let location = with(|s| s.log_summary = Some(None));
        let (_, p) = merged(http, Settings::default(), location);
        assert_eq!(p.log_summary_ms, None);
    }

    #[test]
    fn off_in_a_location_is_a_value_not_an_absence() {
        let http = with(|s| {
            s.limit = Some(Some(TEN_PER_MINUTE));
            s.strikes = Some(Some(DEFAULT_STRIKES));
        });
        let location = with(|s| {
            s.limit = Some(None);
            s.strikes = Some(None);
        });
        let (_, p) = merged(http, Settings::default(), location);
        assert_eq!(p.limits, Limits::NONE);
        assert_eq!(p.breaker.strikes, None);
    }

    #[test]
    fn key_sources_are_inherited_with_their_limits_and_only_with_them() {
        let net = KeyId::of("$pow_shield_net");
        let server = with(|s| {
            s.limit = Some(Some(TEN_PER_MINUTE));
            assert!(s.key_sources.add(net, "$pow_shield_net"));
        });
        let (_, inherited) = merged(Settings::default(), server, Settings::default());
        assert_eq!(inherited.key_sources.get(net), Some("$pow_shield_net"));
        let own = with(|s| s.limit = Some(Some(FIVE_PER_10S)));
        let (_, replaced) = merged(Settings::default(), server, own);
        assert!(replaced.key_sources.is_empty(), "its own lines, none keyed");
        let off = with(|s| s.limit = Some(None));
        let (_, p) = merged(Settings::default(), server, off);
        assert!(p.key_sources.is_empty());
    }

    #[test]
    fn limits_with_the_same_key_text_share_its_one_source() {
        let (net, site) = (KeyId::of("$pow_shield_net"), KeyId::of("site"));
        let mut sources = KeySources::NONE;
        assert!(sources.add(net, "first"));
        assert!(sources.add(net, "second"));
        assert!(sources.add(site, "site"));
        assert_eq!(
            (sources.get(net), sources.get(site)),
            (Some("first"), Some("site"))
        );
        assert_eq!(sources.get(KeyId::of("$other")), None);
    }

    #[test]
    fn a_location_limit_replaces_the_inherited_one_with_its_own_approx() {
        let server = with(|s| s.limit = Some(Some(TEN_PER_MINUTE_APPROX)));
        let location = with(|s| s.limit = Some(Some(FIVE_PER_10S)));
        let (_, p) = merged(Settings::default(), server, location);
        assert_eq!(p.limits, FIVE_PER_10S);
        assert!(!p.limits.approx(0));
    }

    #[test]
    fn an_inherited_key_is_not_the_default_key() {
        let server = with(|s| s.key = Some("$http_x_api_key"));
        let (_, p) = merged(Settings::default(), server, Settings::default());
        assert_eq!(p.key, Some("$http_x_api_key"));
    }

    #[test]
    fn fail_and_its_trusted_value_are_inherited_together() {
        let http = with(|s| s.fail = Some((FailPolicy::Closed, Some("$trusted"))));
        let (_, p) = merged(http, Settings::default(), Settings::default());
        assert_eq!((p.fail, p.trusted), (FailPolicy::Closed, Some("$trusted")));
        let location = with(|s| s.fail = Some((FailPolicy::Open, None)));
        let (_, p) = merged(http, Settings::default(), location);
        assert_eq!((p.fail, p.trusted), (FailPolicy::Open, None));
    }

    #[test]
    fn a_status_location_is_never_shielded_whatever_it_inherits() {
        let http = with(|s| {
            s.limit = Some(Some(TEN_PER_MINUTE));
            s.trap = Some(true);
        });
        let status = with(|s| s.status = true);
        let (status, p) = merged(http, Settings::default(), status);
        assert_eq!((p.limits, p.trap), (Limits::NONE, false));
        // A location nested in it inherits the unshielded values.
        let mut nested = Settings::default();
        nested.inherit(&status);
        let p = nested.resolve();
        assert_eq!((p.limits, p.trap), (Limits::NONE, false));
    }

    #[test]
    fn status_is_not_inherited() {
        let parent = with(|s| s.status = true);
        let mut child = Settings::<Key>::default();
        child.inherit(&parent);
        assert!(!child.status);
    }

    const BAN: BanRule = BanRule {
        after: 3,
        ttl_ms: 3_600_000,
    };

    #[test]
    fn a_ban_where_strikes_are_off_in_a_shielded_location_is_warned_of() {
        let http = with(|s| {
            s.ban = Some(Some(BAN));
            s.strikes = Some(None);
        });
        let limited = with(|s| s.limit = Some(Some(TEN_PER_MINUTE)));
        let (_, p) = merged(http, Settings::default(), limited);
        assert!(p.breaker.ban.is_some() && p.breaker.strikes.is_none());
        let mut location = limited;
        location.inherit(&http);
        assert_eq!(location.warning(), Some(Warning::BanWithoutStrikes));
        // the two from different levels, and in a trap
        let ban = with(|s| s.ban = Some(Some(BAN)));
        let mut trap = with(|s| {
            s.trap = Some(true);
            s.strikes = Some(None);
        });
        trap.inherit(&ban);
        assert_eq!(trap.warning(), Some(Warning::BanWithoutStrikes));
        let message = Warning::BanWithoutStrikes.message("nginx.conf:12");
        assert!(message.contains("\"pow_shield_strikes\" is off (nginx.conf:12)"));
        assert!(message.starts_with("\"pow_shield_ban\" can never act"));
    }

    #[test]
    fn a_ban_with_strikes_on_or_by_default_no_ban_or_nothing_shielded_is_no_warning() {
        let limit = Some(Some(TEN_PER_MINUTE));
        let by_default = with(|s| {
            s.limit = limit;
            s.ban = Some(Some(BAN));
        });
        assert_eq!(by_default.warning(), None);
        let on = with(|s| {
            s.limit = limit;
            s.ban = Some(Some(BAN));
            s.strikes = Some(Some(DEFAULT_STRIKES));
        });
        assert_eq!(on.warning(), None);
        let no_ban = with(|s| {
            s.limit = limit;
            s.ban = Some(None);
            s.strikes = Some(None);
        });
        assert_eq!(no_ban.warning(), None);
        // the http block's pair for locations that turn strikes on again
        let http = with(|s| {
            s.ban = Some(Some(BAN));
            s.strikes = Some(None);
        });
        assert_eq!(http.warning(), None, "the http block is not shielded");
        let mut strikes_on = with(|s| {
            s.limit = limit;
            s.strikes = Some(Some(DEFAULT_STRIKES));
        });
        strikes_on.inherit(&http);
        assert_eq!(strikes_on.warning(), None);
        // nor a status location, whatever it inherits
        let mut status = with(|s| s.status = true);
        status.inherit(&with(|s| {
            s.limit = limit;
            s.ban = Some(Some(BAN));
            s.strikes = Some(None);
        }));
        assert_eq!(status.warning(), None);
    }

    #[test]
    fn the_limit_fixes_its_header_texts_with_the_window_in_seconds() {
        assert_eq!(policy_header(&TEN_PER_MINUTE), "\"pow-shield\";q=10;w=60");
    }

    #[test]
    fn stacked_limits_list_every_policy_by_name() {
        let mut limits = Limits::NONE;
        let burst = crate::limiter::LimitName::new("burst").ok();
        limits
            .push(
                RateLimit {
                    requests: 10,
                    window_ms: 1_000,
                },
                burst,
            )
            .unwrap();
        limits
            .push(
                RateLimit {
                    requests: 1000,
                    window_ms: 3_600_000,
                },
                None,
            )
            .unwrap();
        assert_eq!(
            policy_header(&limits),
            "\"burst\";q=10;w=1, \"1000r/h\";q=1000;w=3600"
        );
    }
}
