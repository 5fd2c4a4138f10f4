//! Directives (docs/directives.md). Values are parsed once, at
//! configuration time, by the pure code of `pow_shield_core::config`; the
//! request path only reads the resolved
//! [`Policy`]. This file holds the configuration structs and the merge;
//! `setters` the setter framework, `location`, `http` and `redis` the
//! setters of each level. The command table is the module's wiring
//! (src/lib.rs).

pub mod bots;
pub mod http;
pub(crate) mod key_values;
pub mod location;
pub mod redis;
mod setters;
mod warnings;

use core::ffi::c_char;
use core::ptr;
use std::sync::LazyLock;

use nginx_sys::{
    ngx_conf_t, ngx_flag_t, ngx_http_complex_value_t, ngx_shm_zone_t, ngx_str_t, ngx_uint_t,
    NGX_LOG_ERR, NGX_LOG_INFO, NGX_LOG_NOTICE, NGX_LOG_WARN,
};
use ngx::core::{NGX_CONF_ERROR, NGX_CONF_OK};
use ngx::http::HttpModuleMainConf;
use pow_shield_core::config::settings::policy_header;
use pow_shield_core::config::{LogLevel, Resolved, Settings};
use pow_shield_core::decision::straight::Straight;
use pow_shield_core::decision::{price_policy, DifficultyRule, Rules};
use pow_shield_core::headers::rate_limit_item;
use pow_shield_core::limiter::breaker::BreakerRules;
use pow_shield_core::limiter::key_plan::KeyPlan;
use pow_shield_core::limiter::{KeyId, Limits, MAX_LIMITS};
use pow_shield_core::syntax::{FailPolicy, HeadersMode};

pub use self::location::{set_admin, set_status};
pub use self::redis::{RedisConf, Resolver};
use self::setters::{compile_complex_value, NGX_CONF_UNSET};
use crate::ffi::PowShield;
use crate::protocol::SecretKeys;

/// IPv4 per address, IPv6 per /64 (`limiter::client`), behind a NUL byte:
/// no request can carry one, so no key a client controls (a header, an
/// argument) can equal an address's and spend its strikes or its count.
/// The handler makes the same bytes directly (`http::key::default_key`;
/// the straight path reads the address text in place: `http::key::default_key_text`).
const DEFAULT_KEY: &str = "\0$pow_shield_client";

/// A compiled complex value (configuration pool).
type ComplexValue = *mut ngx_http_complex_value_t;

/// http-level configuration.
pub struct MainConf {
    /// `pow_shield_zone`.
    pub zone_size: Option<usize>,
    /// The zone, added when some location enables the shield.
    pub zone: *mut ngx_shm_zone_t,
    /// The zone as nginx initialised it, resolved once by `init_module`
    /// (`http::resolve_zone`): a request reads it without checking the
    /// shared memory's header again.
    pub(crate) resolved_zone: Option<crate::shm::SharedZone>,
    /// `pow_shield_secret` / `pow_shield_secret_file`; `None` until the zone
    /// supplies the random key of this start.
    pub keys: Option<SecretKeys>,
    /// The directive `keys` came from (`pow_shield_secret` or
    /// `pow_shield_secret_file`); `None`: the zone's random key.
    pub secret_from: Option<&'static str>,
    /// `pow_shield_redis`; `Some(None)` is an explicit `off`.
    pub redis: Option<Option<RedisConf>>,
    /// Some location has `pow_shield_limit` on.
    pub shielded: bool,
    /// Some `pow_shield_limit` has a `key=` that may count per network
    /// (`traps::may_count_per_network`): for the warning of `slot=net`.
    pub per_network_key: bool,
    /// The names of named or stacked limits, in the order first met: the
    /// `limit` label of the metrics (at most `metrics::LIMIT_NAMES`).
    pub limit_names: Vec<String>,
    /// Each of `limit_names`' place in the metrics slots (`LimitPlaces`,
    /// kept by name in the zone across reloads; set by `init_module`).
    pub limit_places: Vec<Option<u8>>,
    /// Some location has `pow_shield_status`: workers count metrics.
    pub status: bool,
    /// The distinct limits of shielded locations counted per client key
    /// (no `key=`), with `approx`: what `pow_shield_admin` shows a client's
    /// counts under (at most `ADMIN_LIMITS`).
    pub admin_limits: Vec<(pow_shield_core::limiter::RateLimit, bool)>,
    /// The distinct limits counted by their own `key=`, named: what
    /// `pow_shield_admin` shows a `key=` value's counts under.
    pub admin_keyed: Vec<pow_shield_core::admin::KeyedLimit>,
    /// `pow_shield_bot_keys`: every bot's keys.
    pub bots: pow_shield_bots::Registry,
    /// The longest `pow_shield_challenge_ttl` of any shielded location (the
    /// default counts where it applies): how long a token may be accepted
    /// somewhere, so how long its spent record must be kept.
    pub longest_challenge_ttl_ms: u64,
    /// `$pow_shield_client`, compiled once and shared by every location
    /// that doesn't set `pow_shield_key`.
    default_key: ComplexValue,
    /// The (ban, strikes) directive pairs warned of (`nginx -t` says each
    /// once).
    warned: Vec<((usize, ngx_uint_t), (usize, ngx_uint_t))>,
    /// The directives and locations `config::warnings` warned of.
    warned_at: Vec<(usize, ngx_uint_t)>,
}

impl Default for MainConf {
    fn default() -> Self {
        Self {
            zone_size: None,
            zone: ptr::null_mut(),
            resolved_zone: None,
            keys: None,
            secret_from: None,
            redis: None,
            shielded: false,
            per_network_key: false,
            limit_names: Vec::new(),
            limit_places: Vec::new(),
            status: false,
            admin_limits: Vec::new(),
            admin_keyed: Vec::new(),
            bots: pow_shield_bots::Registry::default(),
            longest_challenge_ttl_ms: 0,
            default_key: ptr::null_mut(),
            warned: Vec::new(),
            warned_at: Vec::new(),
        }
    }
}

impl MainConf {
    pub fn redis(&self) -> Option<&RedisConf> {
        self.redis.as_ref().and_then(Option::as_ref)
    }

    /// The metrics place of the limit name at `at` in `limit_names`
    /// (where it was before a reload; its position until `init_module`
    /// placed them).
    pub fn limit_place(&self, at: u8) -> Option<u8> {
        match self.limit_places.get(usize::from(at)) {
            Some(place) => *place,
            None => Some(at),
        }
    }
}

/// What the request path reads: every setting resolved after merging.
#[derive(Clone, Copy)]
pub struct Policy {
    /// `pow_shield_limit`, one per line, in order: each its numbers, how
    /// it counts (cluster mode: exact log, or `approx` counter), its name,
    /// whose count it is and its metrics label. A request borrows them.
    pub limits: Limits,
    /// Where each keyed limit's value comes from: its compiled `key=`
    /// (null: none compiled, which the request takes for an error), the
    /// client's network, or the value of a limit before it.
    pub key_plan: KeyPlan<ComplexValue>,
    pub difficulty: DifficultyRule,
    /// `pow_shield_strikes` and `pow_shield_ban`.
    pub breaker: BreakerRules,
    /// `pow_shield_block_status`.
    pub block_status: u16,
    /// `pow_shield_trap`.
    pub trap: bool,
    pub key: ComplexValue,
    pub challenge_ttl_ms: u64,
    pub headers: HeadersMode,
    pub dry_run: bool,
    /// `pow_shield_pay_ahead`.
    pub pay_ahead: bool,
    pub log_level: ngx_uint_t,
    /// `pow_shield_breaker_log_level`: the lines of breaker openings and
    /// bans (for fail2ban).
    pub breaker_log_level: ngx_uint_t,
    /// `pow_shield_log_summary` (milliseconds); `None`: `off`.
    pub log_summary_ms: Option<u64>,
    /// The key is the default, `$pow_shield_client` (a client address).
    pub default_key: bool,
    pub fail: FailPolicy,
    /// `trusted=` of `pow_shield_fail closed`; null when not set.
    pub trusted: ComplexValue,
    /// `RateLimit-Policy`, fixed by the limits, made once (configuration
    /// pool memory).
    pub ietf_policy: ngx_str_t,
    /// Each limit's `X-RateLimit-Limit` (its requests), made once the
    /// same way (empty: made per response).
    pub x_limits: [ngx_str_t; MAX_LIMITS],
    /// Each limit's start of `RateLimit`, `"<name>";r=`, made once the
    /// same way (empty: made per response).
    pub rate_limit_items: [ngx_str_t; MAX_LIMITS],
    /// The price policy its challenges are bound to
    /// (`pow_shield_core::decision::price_policy`).
    pub price_id: u64,
    /// `pow_shield_work`: what pays its challenges.
    pub work: pow_shield_core::protocol::Work,
    /// What the pure decision needs of the policy (the settings above,
    /// made once: a request's decision reads them in place).
    pub rules: Rules,
    /// Local mode's straight path for the common request, if the
    /// location has one (`pow_shield_core::decision::straight`).
    pub straight: Option<Straight>,
}

impl Policy {
    /// The policy of merged settings; `default_key` where none is set.
    /// The header texts are left empty.
    fn new(r: Resolved<ComplexValue>, default_key: ComplexValue) -> Policy {
        let rules = Rules {
            limits: r.limits,
            difficulty: r.difficulty,
            breaker: r.breaker,
            fail: r.fail,
            dry_run: r.dry_run,
            trap: r.trap,
            pay_ahead: r.pay_ahead,
        };
        Policy {
            limits: r.limits,
            key_plan: KeyPlan::of(&r.limits, *NET_KEY, |id| {
                r.key_sources.get(id).unwrap_or(ptr::null_mut())
            }),
            difficulty: r.difficulty,
            breaker: r.breaker,
            block_status: r.block_status,
            trap: r.trap,
            key: r.key.unwrap_or(default_key),
            challenge_ttl_ms: r.challenge_ttl_ms,
            headers: r.headers,
            dry_run: r.dry_run,
            pay_ahead: r.pay_ahead,
            log_level: nginx_level(r.log_level),
            breaker_log_level: nginx_level(r.breaker_log_level),
            log_summary_ms: r.log_summary_ms,
            default_key: r.key.is_none(),
            fail: r.fail,
            trusted: r.trusted.unwrap_or(ptr::null_mut()),
            ietf_policy: ngx_str_t::default(),
            x_limits: [ngx_str_t::default(); MAX_LIMITS],
            rate_limit_items: [ngx_str_t::default(); MAX_LIMITS],
            price_id: price_policy(&r.limits, r.difficulty, r.work),
            work: r.work,
            straight: Straight::of(&rules),
            rules,
        }
    }
}

/// The identity of `key=$pow_shield_net` (the variable alone), as
/// configuration gives it to its limits (`Limit::key`): such a limit's
/// value is the client's network, which the request makes without nginx's
/// complex-value machinery (`http::key::net_key`; the variable cannot be
/// redefined: nginx refuses a second variable of its name).
static NET_KEY: LazyLock<KeyId> = LazyLock::new(|| KeyId::of("$pow_shield_net"));

fn nginx_level(level: LogLevel) -> ngx_uint_t {
    (match level {
        LogLevel::Info => NGX_LOG_INFO,
        LogLevel::Notice => NGX_LOG_NOTICE,
        LogLevel::Warn => NGX_LOG_WARN,
        LogLevel::Error => NGX_LOG_ERR,
    }) as ngx_uint_t
}

/// Where a directive was written, for a warning the merge logs: the
/// file's name (nginx keeps it for the cycle) and the line.
#[derive(Clone, Copy)]
pub(crate) struct ConfAt {
    file: ngx_str_t,
    line: ngx_uint_t,
}

impl ConfAt {
    /// The directive being read.
    pub(crate) fn of(cf: &ngx_conf_t) -> Option<ConfAt> {
        // SAFETY: while a directive is read, conf_file is the file being
        // parsed; its name lives in cycle memory.
        let file = unsafe { cf.conf_file.as_ref() }?;
        Some(ConfAt {
            file: file.file.name,
            line: file.line,
        })
    }
}

impl ConfAt {
    /// The same directive, for telling warnings apart.
    fn key(&self) -> (usize, ngx_uint_t) {
        (self.file.data as usize, self.line)
    }
}

impl core::fmt::Display for ConfAt {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let file = String::from_utf8_lossy(crate::ffi::bytes(&self.file));
        write!(f, "{file}:{}", self.line)
    }
}

/// http/server/location configuration.
pub struct LocConf {
    /// Directive values as written at this level.
    settings: Settings<ComplexValue>,
    /// Where this level's `pow_shield_strikes` and `pow_shield_ban` are.
    pub(crate) strikes_at: Option<ConfAt>,
    pub(crate) ban_at: Option<ConfAt>,
    /// Where `pow_shield_key` and `pow_shield_limit` (or `pow_shield_trap`)
    /// are, inherited as they are, and where this level's block starts
    /// (`create_loc_conf`): for the warnings of `config::warnings`.
    pub(crate) key_at: Option<ConfAt>,
    pub(crate) limit_at: Option<ConfAt>,
    pub(crate) created_at: Option<ConfAt>,
    /// `pow_shield_admin` in this very location.
    pub(crate) admin: bool,
    /// `pow_shield_dry_run`, written by nginx's flag slot (src/lib.rs):
    /// `NGX_CONF_UNSET` until set.
    pub(crate) dry_run: ngx_flag_t,
    /// `pow_shield_pay_ahead`, the same way.
    pub(crate) pay_ahead: ngx_flag_t,
    pub policy: Policy,
}

impl Default for LocConf {
    fn default() -> Self {
        Self {
            settings: Settings::default(),
            strikes_at: None,
            ban_at: None,
            key_at: None,
            limit_at: None,
            created_at: None,
            admin: false,
            dry_run: NGX_CONF_UNSET,
            pay_ahead: NGX_CONF_UNSET,
            policy: Policy::new(Settings::default().resolve(), ptr::null_mut()),
        }
    }
}

/// Fills what `conf` leaves unset from `prev` (the precedence is
/// `Settings::inherit`), then resolves the policy.
pub fn merge_loc_conf(cf: &mut ngx_conf_t, prev: &LocConf, conf: &mut LocConf) -> *mut c_char {
    let Some(mcf) = PowShield::main_conf_mut(cf) else {
        return NGX_CONF_ERROR;
    };
    // ngx_conf_merge_value, without a default: that comes with the rest.
    if conf.dry_run == NGX_CONF_UNSET {
        conf.dry_run = prev.dry_run;
    }
    conf.settings.dry_run = (conf.dry_run != NGX_CONF_UNSET).then_some(conf.dry_run != 0);
    if conf.pay_ahead == NGX_CONF_UNSET {
        conf.pay_ahead = prev.pay_ahead;
    }
    conf.settings.pay_ahead = (conf.pay_ahead != NGX_CONF_UNSET).then_some(conf.pay_ahead != 0);
    if conf.settings.strikes.is_none() {
        conf.strikes_at = prev.strikes_at;
    }
    if conf.settings.ban.is_none() {
        conf.ban_at = prev.ban_at;
    }
    if conf.settings.key.is_none() {
        conf.key_at = prev.key_at;
    }
    if conf.limit_at.is_none() {
        conf.limit_at = prev.limit_at;
    }
    conf.settings.inherit(&prev.settings);
    warn(cf, mcf, conf);
    conf.policy = Policy::new(conf.settings.resolve(), mcf.default_key);
    if !conf.policy.limits.is_empty() {
        mcf.longest_challenge_ttl_ms = mcf
            .longest_challenge_ttl_ms
            .max(conf.policy.challenge_ttl_ms);
        let text = policy_header(&conf.policy.limits);
        // SAFETY: copies into the configuration pool, which outlives requests.
        let Some(ietf_policy) = (unsafe { ngx_str_t::from_bytes(cf.pool, text.as_bytes()) }) else {
            return NGX_CONF_ERROR;
        };
        conf.policy.ietf_policy = ietf_policy;
        for (i, limit) in conf.policy.limits.rates().enumerate() {
            let text = limit.requests.to_string();
            // SAFETY: as above.
            let Some(x_limit) = (unsafe { ngx_str_t::from_bytes(cf.pool, text.as_bytes()) }) else {
                return NGX_CONF_ERROR;
            };
            conf.policy.x_limits[i] = x_limit;
            let text = rate_limit_item(&conf.policy.limits, i);
            // SAFETY: as above.
            let Some(item) = (unsafe { ngx_str_t::from_bytes(cf.pool, text.as_bytes()) }) else {
                return NGX_CONF_ERROR;
            };
            conf.policy.rate_limit_items[i] = item;
        }
        if !conf.policy.limits.is_plain() {
            for i in 0..conf.policy.limits.len() {
                let name = conf.policy.limits.name(i).to_string();
                // (set_limit noted every name)
                let at = mcf.limit_names.iter().position(|n| *n == name);
                let label = at.and_then(|at| u8::try_from(at).ok());
                conf.policy.limits.set_label(i, label);
            }
        }
    }
    note_admin_limits(mcf, &conf.policy);
    warnings::warn_traps(cf, mcf, conf);
    NGX_CONF_OK
}

/// The limits `pow_shield_admin` shows counts under.
const ADMIN_LIMITS: usize = 32;

fn note_admin_limits(mcf: &mut MainConf, policy: &Policy) {
    for limit in policy.limits.as_slice() {
        let seen = (limit.rate, limit.approx);
        if limit.is_keyed() {
            let keyed = pow_shield_core::admin::KeyedLimit {
                name: limit.name(),
                limit: limit.rate,
                approx: limit.approx,
            };
            pow_shield_core::admin::note_keyed(&mut mcf.admin_keyed, keyed, ADMIN_LIMITS);
        } else if !mcf.admin_limits.contains(&seen) && mcf.admin_limits.len() < ADMIN_LIMITS {
            mcf.admin_limits.push(seen);
        }
    }
}

/// A location's (or server's) configuration, noting where its block starts.
pub fn create_loc_conf(cf: &ngx_conf_t) -> LocConf {
    LocConf {
        created_at: ConfAt::of(cf),
        ..LocConf::default()
    }
}

/// `nginx -t` accepts what can never act once merged, with a warning
/// naming where the directives are: once per pair of them, however many
/// locations inherit it.
fn warn(cf: &ngx_conf_t, mcf: &mut MainConf, conf: &LocConf) {
    let Some(warning) = conf.settings.warning() else {
        return;
    };
    let (Some(ban_at), Some(strikes_at)) = (conf.ban_at, conf.strikes_at) else {
        return;
    };
    let pair = (ban_at.key(), strikes_at.key());
    if mcf.warned.contains(&pair) {
        return;
    }
    mcf.warned.push(pair);
    let message = warning.message(&strikes_at.to_string());
    log_at!(NGX_LOG_WARN, cf.log, "pow_shield: {message} in {ban_at}");
}

/// Runs after the http block is parsed and before locations are merged:
/// compiles the default key and adds the shared zone if anything is shielded.
pub fn init_main_conf(cf: &mut ngx_conf_t, mcf: &mut MainConf) -> *mut c_char {
    match compile_complex_value(cf, DEFAULT_KEY) {
        Ok(cv) => mcf.default_key = cv,
        Err(_) => return NGX_CONF_ERROR,
    }
    if let Some(Some(redis)) = mcf.redis.as_mut() {
        if !redis::adopt_resolver(cf, redis) {
            return NGX_CONF_ERROR;
        }
    }
    warnings::warn_slot_net(cf, mcf);
    match http::add_zone(cf, mcf) {
        Ok(()) => NGX_CONF_OK,
        Err(()) => NGX_CONF_ERROR,
    }
}
