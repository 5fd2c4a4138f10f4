//! The directive table, the configuration structs and their setters.
//!
//! Every setter validates its value and reports
//! `invalid value "<v>" in "<directive>" directive: <reason>`; nginx appends
//! the file and line.

use core::ffi::{c_char, c_void};
use core::fmt::Display;
use core::ptr;

use nginx_sys::{
    ngx_addr_t, ngx_command_t, ngx_conf_t, ngx_http_compile_complex_value_t,
    ngx_http_complex_value_t, ngx_shm_zone_t, ngx_str_t, ngx_uint_t, ngx_url_t, NGX_CONF_FLAG,
    NGX_CONF_NOARGS, NGX_CONF_TAKE1, NGX_CONF_TAKE12, NGX_CONF_TAKE123, NGX_HTTP_LOC_CONF,
    NGX_HTTP_LOC_CONF_OFFSET, NGX_HTTP_MAIN_CONF, NGX_HTTP_MAIN_CONF_OFFSET, NGX_HTTP_SRV_CONF,
    NGX_LOG_EMERG, NGX_LOG_ERR, NGX_LOG_INFO, NGX_LOG_NOTICE, NGX_LOG_WARN,
};
use ngx::core::{NGX_CONF_ERROR, NGX_CONF_OK};
use ngx::http::{HttpModuleLocationConf, HttpModuleMainConf, NgxHttpCoreModule};
use ngx::{ngx_conf_log_error, ngx_string};

use crate::ffi::{bytes, guard};
use crate::protocol::{Secret, SecretKeys};
use crate::PowShield;
use pow_shield_core::decision::{DifficultyRule, Rules};
use pow_shield_core::limiter::strikes::{BanRule, RedRules, StrikeRule};
use pow_shield_core::limiter::RateLimit;
use pow_shield_core::redis::cluster::NodeAddr;
use pow_shield_core::redis::url::{self, RedisAddr, RedisOptions, RedisTarget};
use pow_shield_core::values::{self, FailPolicy, HeadersMode};

/// Defaults (docs/directives.md).
const DEFAULT_DIFFICULTY: u8 = 4;
const DEFAULT_STRIKES: StrikeRule = StrikeRule {
    threshold: 5,
    ttl_ms: 60_000,
};
const DEFAULT_BLOCK_STATUS: u16 = 403;
const DEFAULT_CHALLENGE_TTL_MS: u64 = 60_000;
const DEFAULT_ZONE_SIZE: usize = 10 * 1024 * 1024;
/// IPv4 per address, IPv6 per /64 (`limiter::client`), behind a NUL byte:
/// no request can carry one, so no key a client controls (a header, an
/// argument) can equal an address's and spend its strikes or its count.
const DEFAULT_KEY: &str = "\0$pow_shield_client";
/// The shared zone's name; one per configuration.
const ZONE_NAME: &str = "pow_shield";

/// Redis settings of `pow_shield_redis`.
pub struct RedisConf {
    pub target: RedisTarget,
    /// The address resolved at configuration time (nginx resolves names
    /// once, like `proxy_pass` without a resolver).
    pub addr: ngx_addr_t,
    pub options: RedisOptions,
    /// The `host:port` or `unix:` text, for log lines.
    pub display: String,
    /// `rediss://`: the TLS context (configuration pool; null without TLS).
    pub ssl: *mut nginx_sys::ngx_ssl_t,
    /// Every URL's node, resolved (with `cluster`: the seed nodes).
    pub seeds: Vec<(NodeAddr, ngx_addr_t)>,
}

/// http-level configuration.
pub struct MainConf {
    /// `pow_shield_zone`.
    pub zone_size: Option<usize>,
    /// The zone, added when some location enables the shield.
    pub zone: *mut ngx_shm_zone_t,
    /// `pow_shield_secret` / `pow_shield_secret_file`; `None` until the zone
    /// supplies the random key of this start.
    pub keys: Option<SecretKeys>,
    /// Whether `keys` came from the configuration (else: random).
    pub keys_configured: bool,
    /// `pow_shield_redis`; `Some(None)` is an explicit `off`.
    pub redis: Option<Option<RedisConf>>,
    /// Some location has `pow_shield_limit` on.
    pub shielded: bool,
    /// Some location has `pow_shield_status`: workers count metrics.
    pub status: bool,
    /// The longest `pow_shield_challenge_ttl` of any shielded location (the
    /// default counts where it applies): how long a token may be accepted
    /// somewhere, so how long its spent record must be kept.
    pub longest_challenge_ttl_ms: u64,
    /// `$pow_shield_client`, compiled once and shared by every location
    /// that doesn't set `pow_shield_key`.
    default_key: *mut ngx_http_complex_value_t,
}

impl Default for MainConf {
    fn default() -> Self {
        Self {
            zone_size: None,
            zone: ptr::null_mut(),
            keys: None,
            keys_configured: false,
            redis: None,
            shielded: false,
            status: false,
            longest_challenge_ttl_ms: 0,
            default_key: ptr::null_mut(),
        }
    }
}

impl MainConf {
    pub fn redis(&self) -> Option<&RedisConf> {
        self.redis.as_ref().and_then(Option::as_ref)
    }
}

/// Directive values as written at one level (`None`: not set here).
#[derive(Default)]
struct Settings {
    /// The limit, and whether it counts `approx` (cluster mode).
    limit: Option<Option<(RateLimit, bool)>>,
    difficulty: Option<DifficultyRule>,
    strikes: Option<Option<StrikeRule>>,
    ban: Option<Option<BanRule>>,
    block_status: Option<u16>,
    trap: Option<bool>,
    key: Option<*mut ngx_http_complex_value_t>,
    challenge_ttl_ms: Option<u64>,
    headers: Option<HeadersMode>,
    dry_run: Option<bool>,
    log_level: Option<ngx_uint_t>,
    breaker_log_level: Option<ngx_uint_t>,
    fail: Option<(FailPolicy, *mut ngx_http_complex_value_t)>,
    /// `pow_shield_status` in this very location (not inherited).
    status: bool,
}

/// What the request path reads: every setting resolved after merging.
#[derive(Clone, Copy)]
pub struct Policy {
    pub limit: Option<RateLimit>,
    /// `pow_shield_limit ... approx`: cluster mode counts with the O(1)
    /// sliding-window counter instead of the exact log.
    pub approx: bool,
    pub difficulty: DifficultyRule,
    /// `pow_shield_strikes` and `pow_shield_ban`.
    pub red: RedRules,
    /// `pow_shield_block_status`.
    pub block_status: u16,
    /// `pow_shield_trap`.
    pub trap: bool,
    pub key: *mut ngx_http_complex_value_t,
    pub challenge_ttl_ms: u64,
    pub headers: HeadersMode,
    pub dry_run: bool,
    pub log_level: ngx_uint_t,
    /// `pow_shield_breaker_log_level`: the lines of breaker openings and
    /// bans (for fail2ban).
    pub breaker_log_level: ngx_uint_t,
    /// The key is the default, `$pow_shield_client` (a client address).
    pub default_key: bool,
    pub fail: FailPolicy,
    /// `trusted=` of `pow_shield_fail closed`; null when not set.
    pub trusted: *mut ngx_http_complex_value_t,
    /// Header texts fixed by the limit, made once: `X-RateLimit-Limit`'s
    /// value and `RateLimit-Policy`'s (configuration pool memory).
    pub limit_text: ngx_str_t,
    pub ietf_policy: ngx_str_t,
}

impl Policy {
    /// What the pure decision needs of the policy.
    pub fn rules(&self) -> Rules {
        Rules {
            limit: self.limit,
            difficulty: self.difficulty,
            red: self.red,
            fail: self.fail,
            dry_run: self.dry_run,
            trap: self.trap,
        }
    }
}

/// http/server/location configuration.
pub struct LocConf {
    settings: Settings,
    pub policy: Policy,
}

impl Default for LocConf {
    fn default() -> Self {
        Self {
            settings: Settings::default(),
            policy: Policy {
                limit: None,
                approx: false,
                difficulty: DifficultyRule::fixed(DEFAULT_DIFFICULTY),
                red: RedRules {
                    strikes: Some(DEFAULT_STRIKES),
                    ban: None,
                },
                block_status: DEFAULT_BLOCK_STATUS,
                trap: false,
                key: ptr::null_mut(),
                challenge_ttl_ms: DEFAULT_CHALLENGE_TTL_MS,
                headers: HeadersMode::Both,
                dry_run: false,
                log_level: NGX_LOG_WARN as ngx_uint_t,
                breaker_log_level: NGX_LOG_ERR as ngx_uint_t,
                default_key: true,
                fail: FailPolicy::Local,
                trusted: ptr::null_mut(),
                limit_text: ngx_str_t::default(),
                ietf_policy: ngx_str_t::default(),
            },
        }
    }
}

/// Fills what `conf` leaves unset from `prev`, then resolves the policy.
pub fn merge_loc_conf(cf: &mut ngx_conf_t, prev: &LocConf, conf: &mut LocConf) -> *mut c_char {
    let Some(mcf) = PowShield::main_conf_mut(cf) else {
        return NGX_CONF_ERROR;
    };
    let (s, p) = (&mut conf.settings, &prev.settings);
    s.limit = s.limit.or(p.limit);
    s.difficulty = s.difficulty.or(p.difficulty);
    s.strikes = s.strikes.or(p.strikes);
    s.ban = s.ban.or(p.ban);
    s.block_status = s.block_status.or(p.block_status);
    s.trap = s.trap.or(p.trap);
    s.key = s.key.or(p.key);
    s.challenge_ttl_ms = s.challenge_ttl_ms.or(p.challenge_ttl_ms);
    s.headers = s.headers.or(p.headers);
    s.dry_run = s.dry_run.or(p.dry_run);
    s.log_level = s.log_level.or(p.log_level);
    s.breaker_log_level = s.breaker_log_level.or(p.breaker_log_level);
    s.fail = s.fail.or(p.fail);
    // A status location is never shielded, whatever it inherits.
    if s.status {
        s.limit = Some(None);
        s.trap = Some(false);
    }

    let defaults = LocConf::default().policy;
    let (fail, trusted) = s.fail.unwrap_or((defaults.fail, ptr::null_mut()));
    conf.policy = Policy {
        limit: s.limit.flatten().map(|(limit, _)| limit),
        approx: s.limit.flatten().is_some_and(|(_, approx)| approx),
        difficulty: s.difficulty.unwrap_or(defaults.difficulty),
        red: RedRules {
            strikes: s.strikes.unwrap_or(defaults.red.strikes),
            ban: s.ban.unwrap_or(defaults.red.ban),
        },
        block_status: s.block_status.unwrap_or(defaults.block_status),
        trap: s.trap.unwrap_or(defaults.trap),
        key: s.key.unwrap_or(mcf.default_key),
        challenge_ttl_ms: s.challenge_ttl_ms.unwrap_or(defaults.challenge_ttl_ms),
        headers: s.headers.unwrap_or(defaults.headers),
        dry_run: s.dry_run.unwrap_or(defaults.dry_run),
        log_level: s.log_level.unwrap_or(defaults.log_level),
        breaker_log_level: s.breaker_log_level.unwrap_or(defaults.breaker_log_level),
        default_key: s.key.is_none(),
        fail,
        trusted,
        limit_text: ngx_str_t::default(),
        ietf_policy: ngx_str_t::default(),
    };
    if let Some(limit) = conf.policy.limit {
        mcf.longest_challenge_ttl_ms = mcf
            .longest_challenge_ttl_ms
            .max(conf.policy.challenge_ttl_ms);
        let texts = [
            limit.requests.to_string(),
            format!(
                "\"pow-shield\";q={};w={}",
                limit.requests,
                limit.window_ms.div_ceil(1000)
            ),
        ];
        // SAFETY: copies into the configuration pool, which outlives requests.
        let [Some(limit_text), Some(ietf_policy)] =
            texts.map(|t| unsafe { ngx_str_t::from_bytes(cf.pool, t.as_bytes()) })
        else {
            return NGX_CONF_ERROR;
        };
        conf.policy.limit_text = limit_text;
        conf.policy.ietf_policy = ietf_policy;
    }
    NGX_CONF_OK
}

/// Runs after the http block is parsed and before locations are merged:
/// compiles the default key and adds the shared zone if anything is shielded.
pub fn init_main_conf(cf: &mut ngx_conf_t, mcf: &mut MainConf) -> *mut c_char {
    match compile_complex_value(cf, DEFAULT_KEY) {
        Ok(cv) => mcf.default_key = cv,
        Err(()) => return NGX_CONF_ERROR,
    }
    // The status location reads the zone even where nothing is shielded.
    if !mcf.shielded && !mcf.status {
        return NGX_CONF_OK;
    }
    let size = mcf.zone_size.unwrap_or(DEFAULT_ZONE_SIZE);
    match crate::shm::add_zone(cf, ZONE_NAME, size, mcf) {
        Ok(zone) => mcf.zone = zone,
        Err(()) => return NGX_CONF_ERROR,
    }
    if mcf.shielded && !mcf.keys_configured {
        log_at!(
            NGX_LOG_NOTICE,
            cf.log,
            "pow_shield: no \"pow_shield_secret\" or \"pow_shield_secret_file\": challenges \
             are signed with a random key made at start, which other nodes cannot verify"
        );
    }
    NGX_CONF_OK
}

/* the directive table */

const ANY_LEVEL: u32 = NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF;

const fn loc_directive(
    name: ngx_str_t,
    args: u32,
    set: unsafe extern "C" fn(*mut ngx_conf_t, *mut ngx_command_t, *mut c_void) -> *mut c_char,
) -> ngx_command_t {
    ngx_command_t {
        name,
        type_: (ANY_LEVEL | args) as ngx_uint_t,
        set: Some(set),
        conf: NGX_HTTP_LOC_CONF_OFFSET,
        offset: 0,
        post: ptr::null_mut(),
    }
}

const fn main_directive(
    name: ngx_str_t,
    args: u32,
    set: unsafe extern "C" fn(*mut ngx_conf_t, *mut ngx_command_t, *mut c_void) -> *mut c_char,
) -> ngx_command_t {
    ngx_command_t {
        name,
        type_: (NGX_HTTP_MAIN_CONF | args) as ngx_uint_t,
        set: Some(set),
        conf: NGX_HTTP_MAIN_CONF_OFFSET,
        offset: 0,
        post: ptr::null_mut(),
    }
}

pub static mut COMMANDS: [ngx_command_t; 19] = [
    loc_directive(ngx_string!("pow_shield_limit"), NGX_CONF_TAKE123, set_limit),
    loc_directive(
        ngx_string!("pow_shield_difficulty"),
        NGX_CONF_TAKE12,
        set_difficulty,
    ),
    loc_directive(
        ngx_string!("pow_shield_strikes"),
        NGX_CONF_TAKE12,
        set_strikes,
    ),
    loc_directive(ngx_string!("pow_shield_ban"), NGX_CONF_TAKE12, set_ban),
    loc_directive(
        ngx_string!("pow_shield_block_status"),
        NGX_CONF_TAKE1,
        set_block_status,
    ),
    ngx_command_t {
        name: ngx_string!("pow_shield_trap"),
        type_: (NGX_HTTP_LOC_CONF | NGX_CONF_NOARGS) as ngx_uint_t,
        set: Some(set_trap),
        conf: NGX_HTTP_LOC_CONF_OFFSET,
        offset: 0,
        post: ptr::null_mut(),
    },
    ngx_command_t {
        name: ngx_string!("pow_shield_status"),
        type_: (NGX_HTTP_LOC_CONF | NGX_CONF_NOARGS) as ngx_uint_t,
        set: Some(set_status),
        conf: NGX_HTTP_LOC_CONF_OFFSET,
        offset: 0,
        post: ptr::null_mut(),
    },
    loc_directive(ngx_string!("pow_shield_key"), NGX_CONF_TAKE1, set_key),
    loc_directive(
        ngx_string!("pow_shield_challenge_ttl"),
        NGX_CONF_TAKE1,
        set_challenge_ttl,
    ),
    loc_directive(
        ngx_string!("pow_shield_headers"),
        NGX_CONF_TAKE1,
        set_headers,
    ),
    loc_directive(
        ngx_string!("pow_shield_dry_run"),
        NGX_CONF_FLAG,
        set_dry_run,
    ),
    loc_directive(
        ngx_string!("pow_shield_log_level"),
        NGX_CONF_TAKE1,
        set_log_level,
    ),
    loc_directive(
        ngx_string!("pow_shield_breaker_log_level"),
        NGX_CONF_TAKE1,
        set_breaker_log_level,
    ),
    loc_directive(ngx_string!("pow_shield_fail"), NGX_CONF_TAKE12, set_fail),
    main_directive(ngx_string!("pow_shield_secret"), NGX_CONF_TAKE1, set_secret),
    main_directive(
        ngx_string!("pow_shield_secret_file"),
        NGX_CONF_TAKE1,
        set_secret_file,
    ),
    main_directive(ngx_string!("pow_shield_zone"), NGX_CONF_TAKE1, set_zone),
    main_directive(
        ngx_string!("pow_shield_redis"),
        nginx_sys::NGX_CONF_1MORE,
        set_redis,
    ),
    ngx_command_t::empty(),
];

/* the setter frame */

/// Why a directive was refused.
enum Refusal {
    Duplicate,
    Invalid {
        value: String,
        reason: String,
    },
    /// Already logged (e.g. by nginx's complex value compiler).
    Logged,
}

fn invalid(value: &str, reason: impl Display) -> Refusal {
    Refusal::Invalid {
        value: value.to_owned(),
        reason: reason.to_string(),
    }
}

/// What a setter sees: the directive's name and its arguments as text.
struct Directive<'a> {
    cf: &'a mut ngx_conf_t,
    args: Vec<&'a str>,
}

impl<'a> Directive<'a> {
    /// The first argument (nginx has checked the argument count).
    fn value(&self) -> &'a str {
        self.args.first().copied().unwrap_or("")
    }
}

/// Shared frame of every setter: panics stay here, arguments are decoded,
/// refusals are logged with the directive, the value, file and line.
///
/// # Safety
/// `cf`, `cmd` and `conf` are what nginx passes to a setter, and `conf` points
/// to a `T` (the command's `conf` offset selects it).
unsafe fn run_setter<T>(
    cf: *mut ngx_conf_t,
    cmd: *mut ngx_command_t,
    conf: *mut c_void,
    apply: impl FnOnce(&mut Directive, &mut T) -> Result<(), Refusal>,
) -> *mut c_char {
    guard(NGX_CONF_ERROR, || {
        // SAFETY: nginx hands setters valid pointers (see the function's contract).
        let (cf, cmd, conf) = unsafe { (&mut *cf, &*cmd, &mut *conf.cast::<T>()) };
        let name = core::str::from_utf8(bytes(&cmd.name)).unwrap_or("pow_shield");
        // SAFETY: cf->args is an array of ngx_str_t holding the directive's words.
        let words: &[ngx_str_t] = unsafe { (*cf.args).as_slice() };
        let mut args = Vec::with_capacity(words.len());
        for word in words.iter().skip(1) {
            match core::str::from_utf8(bytes(word)) {
                Ok(s) => args.push(s),
                Err(_) => {
                    let shown = String::from_utf8_lossy(bytes(word)).into_owned();
                    log_refusal(cf, name, &invalid(&shown, "not valid UTF-8"));
                    return NGX_CONF_ERROR;
                }
            }
        }
        let cf_ptr: *mut ngx_conf_t = cf;
        let mut directive = Directive { cf, args };
        match apply(&mut directive, conf) {
            Ok(()) => NGX_CONF_OK,
            Err(refusal) => {
                // SAFETY: cf_ptr is the live configuration context.
                log_refusal(unsafe { &mut *cf_ptr }, name, &refusal);
                NGX_CONF_ERROR
            }
        }
    })
}

fn log_refusal(cf: &mut ngx_conf_t, name: &str, refusal: &Refusal) {
    match refusal {
        Refusal::Duplicate => {
            ngx_conf_log_error!(NGX_LOG_EMERG, cf, "\"{name}\" directive is duplicate");
        }
        Refusal::Invalid { value, reason } => {
            ngx_conf_log_error!(
                NGX_LOG_EMERG,
                cf,
                "invalid value \"{value}\" in \"{name}\" directive: {reason}"
            );
        }
        Refusal::Logged => {}
    }
}

/// Stores `value` into an unset slot, refusing a second occurrence.
fn set_once<T>(slot: &mut Option<T>, value: T) -> Result<(), Refusal> {
    if slot.is_some() {
        return Err(Refusal::Duplicate);
    }
    *slot = Some(value);
    Ok(())
}

fn compile_complex_value(
    cf: &mut ngx_conf_t,
    value: &str,
) -> Result<*mut ngx_http_complex_value_t, ()> {
    // SAFETY: the pool outlives the configuration; the struct is plain data.
    let cv = unsafe { ngx::core::Pool::from_ngx_pool(cf.pool) }
        .calloc_type::<ngx_http_complex_value_t>();
    if cv.is_null() {
        return Err(());
    }
    // SAFETY: copies `value` into the configuration pool, which outlives it.
    let Some(mut text) = (unsafe { ngx_str_t::from_bytes(cf.pool, value.as_bytes()) }) else {
        return Err(());
    };
    // SAFETY: a zeroed compile struct is its documented initial state.
    let mut ccv: ngx_http_compile_complex_value_t = unsafe { core::mem::zeroed() };
    ccv.cf = cf;
    ccv.value = &mut text;
    ccv.complex_value = cv;
    // SAFETY: ccv is fully initialised above; nginx logs its own errors.
    if unsafe { nginx_sys::ngx_http_compile_complex_value(&mut ccv) } != nginx_sys::NGX_OK as isize
    {
        return Err(());
    }
    Ok(cv)
}

/// Defines a directive setter. The command's `conf` offset in `COMMANDS`
/// decides which configuration nginx passes: `$conf` must match it.
macro_rules! setter {
    ($name:ident, $conf:ty, |$d:ident, $c:ident| $body:block) => {
        extern "C" fn $name(
            cf: *mut ngx_conf_t,
            cmd: *mut ngx_command_t,
            conf: *mut c_void,
        ) -> *mut c_char {
            // SAFETY: nginx passes a setter its arguments, and `conf` is the
            // `$conf` this module created for the command's level.
            unsafe {
                run_setter(
                    cf,
                    cmd,
                    conf,
                    |$d: &mut Directive, $c: &mut $conf| -> Result<(), Refusal> { $body },
                )
            }
        }
    };
}

/* location-level setters */

setter!(set_limit, LocConf, |d, lcf| {
    let (requests, window, approx) = match d.args.as_slice() {
        ["off"] => return set_once(&mut lcf.settings.limit, None),
        [requests, window] => (requests, window, false),
        [requests, window, "approx"] => (requests, window, true),
        [_, _, other] => return Err(invalid(other, "expected \"approx\" or nothing")),
        [other] => {
            return Err(invalid(
                other,
                "expected \"<requests> <window> [approx]\" or \"off\"",
            ))
        }
        _ => {
            return Err(invalid(
                "",
                "expected \"<requests> <window> [approx]\" or \"off\"",
            ))
        }
    };
    let limit = values::parse_limit(requests, window).map_err(|e| {
        // Name the argument at fault.
        let count_ok = requests
            .parse::<u32>()
            .is_ok_and(|n| (values::MIN_LIMIT_REQUESTS..=values::MAX_LIMIT_REQUESTS).contains(&n));
        invalid(if count_ok { window } else { requests }, e)
    })?;
    if let Some(mcf) = PowShield::main_conf_mut(d.cf) {
        mcf.shielded = true;
    }
    set_once(&mut lcf.settings.limit, Some((limit, approx)))
});

setter!(set_difficulty, LocConf, |d, lcf| {
    let v = d.value();
    let base = values::parse_difficulty(v).map_err(|e| invalid(v, e))?;
    let max = match d.args.get(1) {
        Some(m) => values::parse_difficulty_max(m, base).map_err(|e| invalid(m, e))?,
        None => base,
    };
    set_once(&mut lcf.settings.difficulty, DifficultyRule { base, max })
});

setter!(set_strikes, LocConf, |d, lcf| {
    let rule = match d.args.as_slice() {
        ["off"] => None,
        [count, time] => Some(values::parse_strikes(count, time).map_err(|e| {
            let count_ok = values::parse_strikes(count, "1m").is_ok();
            invalid(if count_ok { time } else { count }, e)
        })?),
        [other, ..] => return Err(invalid(other, "expected \"<count> <time>\" or \"off\"")),
        [] => return Err(invalid("", "expected \"<count> <time>\" or \"off\"")),
    };
    set_once(&mut lcf.settings.strikes, rule)
});

setter!(set_ban, LocConf, |d, lcf| {
    let rule = match d.args.as_slice() {
        ["off"] => None,
        [time, after] => Some(values::parse_ban(time, after).map_err(|e| {
            let time_ok = values::parse_ban(time, "after=1").is_ok();
            invalid(if time_ok { after } else { time }, e)
        })?),
        [other, ..] => {
            return Err(invalid(
                other,
                "expected \"<time> after=<count>\" or \"off\"",
            ))
        }
        [] => return Err(invalid("", "expected \"<time> after=<count>\" or \"off\"")),
    };
    set_once(&mut lcf.settings.ban, rule)
});

setter!(set_block_status, LocConf, |d, lcf| {
    let v = d.value();
    let status = values::parse_block_status(v).map_err(|e| invalid(v, e))?;
    set_once(&mut lcf.settings.block_status, status)
});

setter!(set_trap, LocConf, |d, lcf| {
    // Strikes need the zone (and Redis, in cluster mode).
    if let Some(mcf) = PowShield::main_conf_mut(d.cf) {
        mcf.shielded = true;
    }
    set_once(&mut lcf.settings.trap, true)
});

setter!(set_status, LocConf, |d, lcf| {
    if lcf.settings.status {
        return Err(Refusal::Duplicate);
    }
    lcf.settings.status = true;
    // Counting starts in every worker once a status location exists.
    if let Some(mcf) = PowShield::main_conf_mut(d.cf) {
        mcf.status = true;
    }
    // The location's content is the metrics (as `stub_status` does).
    let Some(clcf) = NgxHttpCoreModule::location_conf_mut(d.cf) else {
        return Err(Refusal::Logged);
    };
    clcf.handler = Some(crate::http::status::handler);
    Ok(())
});

setter!(set_key, LocConf, |d, lcf| {
    if lcf.settings.key.is_some() {
        return Err(Refusal::Duplicate);
    }
    let cv = compile_complex_value(d.cf, d.value()).map_err(|()| Refusal::Logged)?;
    set_once(&mut lcf.settings.key, cv)
});

setter!(set_challenge_ttl, LocConf, |d, lcf| {
    let v = d.value();
    let ttl = values::parse_time_ms(v).map_err(|e| invalid(v, e))?;
    // At least a second (clients need time to solve), at most a day
    // (the replay cache must hold every spent token that long).
    if !(1_000..=86_400_000).contains(&ttl) {
        return Err(invalid(v, "must be between 1s and 1d"));
    }
    set_once(&mut lcf.settings.challenge_ttl_ms, ttl)
});

setter!(set_headers, LocConf, |d, lcf| {
    let v = d.value();
    let mode = values::parse_headers_mode(v).map_err(|e| invalid(v, e))?;
    set_once(&mut lcf.settings.headers, mode)
});

setter!(set_dry_run, LocConf, |d, lcf| {
    let on = match d.value() {
        v if v.eq_ignore_ascii_case("on") => true,
        v if v.eq_ignore_ascii_case("off") => false,
        v => return Err(invalid(v, "expected \"on\" or \"off\"")),
    };
    set_once(&mut lcf.settings.dry_run, on)
});

setter!(set_log_level, LocConf, |d, lcf| {
    set_once(&mut lcf.settings.log_level, log_level(d.value())?)
});

setter!(set_breaker_log_level, LocConf, |d, lcf| {
    set_once(&mut lcf.settings.breaker_log_level, log_level(d.value())?)
});

fn log_level(v: &str) -> Result<ngx_uint_t, Refusal> {
    let level = match v {
        "info" => NGX_LOG_INFO,
        "notice" => NGX_LOG_NOTICE,
        "warn" => NGX_LOG_WARN,
        "error" => NGX_LOG_ERR,
        v => return Err(invalid(v, "expected info, notice, warn or error")),
    };
    Ok(level as ngx_uint_t)
}

setter!(set_fail, LocConf, |d, lcf| {
    if lcf.settings.fail.is_some() {
        return Err(Refusal::Duplicate);
    }
    let v = d.value();
    let policy = values::parse_fail_policy(v).map_err(|e| invalid(v, e))?;
    let mut trusted = ptr::null_mut();
    if let Some(&extra) = d.args.get(1) {
        let Some(value) = extra.strip_prefix("trusted=") else {
            return Err(invalid(extra, "expected \"trusted=<value>\""));
        };
        if policy != FailPolicy::Closed {
            return Err(invalid(extra, "\"trusted=\" only goes with \"closed\""));
        }
        if value.is_empty() {
            return Err(invalid(extra, "\"trusted=\" needs a value"));
        }
        trusted = compile_complex_value(d.cf, value).map_err(|()| Refusal::Logged)?;
    }
    set_once(&mut lcf.settings.fail, (policy, trusted))
});

/* http-level setters */

setter!(set_secret, MainConf, |d, mcf| {
    if mcf.keys_configured {
        return Err(Refusal::Duplicate);
    }
    let v = d.value();
    // Never echo the secret itself into the log.
    let current = Secret::new(v.as_bytes()).map_err(|e| invalid("...", e))?;
    mcf.keys = Some(SecretKeys {
        current,
        previous: None,
    });
    mcf.keys_configured = true;
    Ok(())
});

setter!(set_secret_file, MainConf, |d, mcf| {
    if mcf.keys_configured {
        return Err(Refusal::Duplicate);
    }
    let v = d.value();
    let path = full_path(d.cf, v).ok_or_else(|| invalid(v, "cannot resolve the path"))?;
    // Reading a file while parsing the configuration is what nginx
    // itself does (certificates, maps); no request is being served.
    let contents = std::fs::read(&path)
        .map_err(|e| invalid(v, format_args!("cannot read \"{path}\": {e}")))?;
    let keys = SecretKeys::from_file_contents(&contents)
        .map_err(|e| invalid(v, format_args!("\"{path}\": {e}")))?;
    mcf.keys = Some(keys);
    mcf.keys_configured = true;
    Ok(())
});

/// Resolves a path relative to the configuration prefix, as nginx does.
fn full_path(cf: &mut ngx_conf_t, path: &str) -> Option<String> {
    // SAFETY: copies the path into the configuration pool.
    let mut name = unsafe { ngx_str_t::from_bytes(cf.pool, path.as_bytes()) }?;
    // SAFETY: cf->cycle is the cycle being configured; `name` is pool memory.
    if unsafe { nginx_sys::ngx_conf_full_name(cf.cycle, &mut name, 1) }
        != nginx_sys::NGX_OK as isize
    {
        return None;
    }
    core::str::from_utf8(bytes(&name)).ok().map(str::to_owned)
}

setter!(set_zone, MainConf, |d, mcf| {
    let v = d.value();
    let size = values::parse_size(v).map_err(|e| invalid(v, e))?;
    let min = crate::shm::min_zone_size();
    if size < min {
        return Err(invalid(
            v,
            format_args!("the zone needs at least {}k", min / 1024),
        ));
    }
    set_once(&mut mcf.zone_size, size)
});

setter!(set_redis, MainConf, |d, mcf| {
    if mcf.redis.is_some() {
        return Err(Refusal::Duplicate);
    }
    let url = d.value();
    if url == "off" {
        if let Some(extra) = d.args.get(1) {
            return Err(invalid(extra, "\"off\" takes no options"));
        }
        mcf.redis = Some(None);
        return Ok(());
    }
    // The URL may hold a password: show only what precedes it.
    let targets = url::parse_redis_urls(url).map_err(|e| invalid(&redact(url), e))?;
    let mut options = RedisOptions::default();
    for arg in d.args.iter().skip(1) {
        url::apply_redis_option(&mut options, arg).map_err(|e| invalid(arg, e))?;
    }
    url::check_cluster(&targets, &options).map_err(|e| invalid(&redact(url), e))?;
    let mut seeds = Vec::with_capacity(targets.len());
    for t in &targets {
        if let RedisAddr::Tcp { host, port } = &t.addr {
            let node = NodeAddr {
                host: host.clone(),
                port: *port,
            };
            let addr = resolve(d.cf, &node.to_string()).map_err(|e| invalid(&redact(url), e))?;
            seeds.push((node, addr));
        }
    }
    // parse_redis_urls yields at least one URL (split never yields none).
    let Some(target) = targets.into_iter().next() else {
        return Err(invalid(url, "no URL"));
    };
    url::check_options(&target, &options).map_err(|url::Conflict(name, e)| {
        // Show the argument at fault (the last one given, as applied).
        let prefix = format!("{name}=");
        let arg = d.args.iter().skip(1).rev().find(|a| a.starts_with(&prefix));
        invalid(arg.copied().unwrap_or(name), e)
    })?;
    let display = match &target.addr {
        RedisAddr::Tcp { host, port } if host.contains(':') => {
            format!("[{host}]:{port}")
        }
        RedisAddr::Tcp { host, port } => format!("{host}:{port}"),
        RedisAddr::Unix { path } => format!("unix:{path}"),
    };
    let addr = resolve(d.cf, &display).map_err(|e| invalid(&redact(url), e))?;
    let ssl = if target.tls {
        tls_context(d, &redact(url), &options)?
    } else {
        ptr::null_mut()
    };
    mcf.redis = Some(Some(RedisConf {
        target,
        addr,
        options,
        display,
        ssl,
        seeds,
    }));
    Ok(())
});

/// The TLS context of a `rediss://` URL: every file is checked here, so a
/// missing one fails `nginx -t` with the option that names it.
fn tls_context(
    d: &mut Directive,
    url: &str,
    options: &RedisOptions,
) -> Result<*mut nginx_sys::ngx_ssl_t, Refusal> {
    let tls = &options.tls;
    // The argument as written, for messages.
    let arg = |name: &str| {
        let prefix = format!("{name}=");
        d.args
            .iter()
            .skip(1)
            .rev()
            .find(|a| a.starts_with(&prefix))
            .map_or_else(|| name.to_owned(), |a| (*a).to_owned())
    };
    let mut readable = |name: &str, path: &str| -> Result<String, Refusal> {
        let full =
            full_path(d.cf, path).ok_or_else(|| invalid(&arg(name), "cannot resolve the path"))?;
        std::fs::File::open(&full)
            .map_err(|e| invalid(&arg(name), format_args!("cannot read \"{full}\": {e}")))?;
        Ok(full)
    };
    let ca = match (&tls.ca, tls.verify) {
        (_, false) => None,
        (Some(ca), true) => Some(readable("tls_ca", ca)?),
        (None, true) => {
            // Without tls_ca=, the system's CA bundle (OpenSSL's default file).
            let system = crate::redis::tls::default_ca_file().unwrap_or_default();
            if std::fs::File::open(&system).is_err() {
                return Err(invalid(
                    url,
                    format_args!(
                        "TLS verification needs \"tls_ca=<file>\": no system CA bundle at \"{system}\" (or \"tls_verify=off\")"
                    ),
                ));
            }
            Some(system)
        }
    };
    let cert = match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => Some((readable("tls_cert", cert)?, readable("tls_key", key)?)),
        _ => None,
    };
    let files = crate::redis::tls::Files {
        ca: ca.as_deref(),
        cert: cert.as_ref().map(|(c, k)| (c.as_str(), k.as_str())),
    };
    crate::redis::tls::context(d.cf, &files).map_err(|why| {
        let at = if why.contains("client") {
            arg("tls_cert")
        } else if why.contains("CA") {
            ca.as_deref()
                .filter(|_| tls.ca.is_some())
                .map_or_else(|| url.to_owned(), |_| arg("tls_ca"))
        } else {
            url.to_owned()
        };
        invalid(&at, why)
    })
}

/// Resolves `host:port` or `unix:/path` with nginx's own URL parser.
fn resolve(cf: &mut ngx_conf_t, text: &str) -> Result<ngx_addr_t, String> {
    // SAFETY: a zeroed ngx_url_t is its documented initial state; the text
    // is copied into the configuration pool, where nginx also puts results.
    unsafe {
        let mut u: ngx_url_t = core::mem::zeroed();
        u.url = ngx_str_t::from_bytes(cf.pool, text.as_bytes()).ok_or("out of memory")?;
        u.default_port = 6379;
        if nginx_sys::ngx_parse_url(cf.pool, &mut u) != nginx_sys::NGX_OK as isize {
            let why = if u.err.is_null() {
                "cannot parse the address".to_owned()
            } else {
                core::ffi::CStr::from_ptr(u.err)
                    .to_string_lossy()
                    .into_owned()
            };
            return Err(why);
        }
        match u.addrs.as_ref() {
            Some(addr) if u.naddrs > 0 => Ok(*addr),
            _ => Err("host not found".to_owned()),
        }
    }
}

/// Hides the credentials of a Redis URL for log lines.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***{}", &url[..scheme], &url[at..])
        }
        _ => url.to_owned(),
    }
}
