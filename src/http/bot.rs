//! `$pow_shield_bot` (docs/bots.md): the name of the bot whose Web Bot Auth
//! signature this request carries (`pow_shield_bot_keys`), else empty.
//!
//! Evaluated when first read (a `map` on it for `pow_shield_key`, a log
//! line) and cached for the main request: subrequests share its
//! variables and internal redirects keep them, so a request's nonce is
//! recorded once. A request without `Signature-Input` costs one scan of its
//! headers; one of an http block without bots, nothing. The verification
//! is `pow_shield_bots::verify` at nginx's cached time; a verified nonce
//! goes through the zone's replay cache (`store::record_bot_nonce`).
//!
//! A blocked client's signature is never verified (docs/bots.md, "Blocked
//! clients"; `decision::signature`): the access handler first evaluates
//! the request's keys with the variable empty ([`evaluate_keys`]), looks
//! that anonymous client's breaker up, and only if it is not blocked puts
//! the request's variables back as they were and evaluates the keys again,
//! verifying. Read after a decision that blocked, the variable is empty.

use core::mem::size_of;
use core::ptr::{self, NonNull};

use nginx_sys::{
    ngx_conf_t, ngx_http_add_variable, ngx_http_request_t, ngx_int_t, ngx_str_t,
    ngx_variable_value_t, NGX_OK,
};

use ngx::core::Status;
use ngx::http::{HttpModuleMainConf, NgxHttpCoreModule, Request};
use ngx::ngx_string;
use sha2::{Digest, Sha256};

use super::request::{client_key, keep_key_values};
use super::state::{RequestState, SignatureCheck};
use crate::config::MainConf;
use crate::ffi::bytes;
use crate::ffi::PowShield;
use crate::shm::SharedZone;
use crate::store::{record_bot_nonce, Stores};
use pow_shield_bots::{Anonymous, Message, CLOCK_ALLOWANCE_S};
use pow_shield_core::decision::signature::{self, Signature};
use pow_shield_core::store::{Now, Recorded};

/// `preconfiguration`: declares `$pow_shield_bot` (cacheable: one
/// verification per request).
pub fn register(cf: &mut ngx_conf_t) -> Status {
    let mut name = ngx_string!("pow_shield_bot");
    // SAFETY: cf is the configuration being parsed; the name is static.
    let var = unsafe { ngx_http_add_variable(cf, &mut name, 0) };
    if var.is_null() {
        return Status::NGX_ERROR;
    }
    // SAFETY: nginx returned a valid variable slot.
    unsafe { (*var).get_handler = Some(get_bot) };
    Status::NGX_OK
}

unsafe extern "C" fn get_bot(
    r: *mut ngx_http_request_t,
    v: *mut ngx_variable_value_t,
    _data: usize,
) -> ngx_int_t {
    crate::ffi::guard(nginx_sys::NGX_ERROR as ngx_int_t, || {
        // SAFETY: nginx passes a live request, whose main request lives at
        // least as long, and a value slot to fill.
        let (main, v) = unsafe { (Request::from_ngx_http_request((*r).main), &mut *v) };
        let Some((name, cacheable)) = bot_value(main) else {
            return nginx_sys::NGX_ERROR as ngx_int_t;
        };
        // SAFETY: copies the name into the request pool, which outlives
        // the value.
        let Some(s) = (unsafe { ngx_str_t::from_bytes(main.as_ref().pool, name.as_bytes()) })
        else {
            return nginx_sys::NGX_ERROR as ngx_int_t;
        };
        super::variables::set_found(v, s, cacheable);
        NGX_OK as ngx_int_t
    })
}

/// `$pow_shield_bot` of the main request `r`, and whether nginx may keep
/// it; `None`: no memory for the copy of its variables.
fn bot_value(r: &mut Request) -> Option<(String, bool)> {
    let Some(state) = RequestState::find(r) else {
        return Some((bot_of(r).unwrap_or_default(), true));
    };
    // SAFETY: the state lives in the request's pool; this borrow is the
    // only one while the variable is evaluated.
    let st = unsafe { &mut *state.as_ptr() };
    match st.signature {
        // Its keys are being evaluated as if unsigned: empty, and not
        // kept, so that the keys read it again if it is verified after all.
        SignatureCheck::Anonymous { saved } => {
            if !signed(r) {
                // (What verifying would say, without the request's keys
                // evaluated twice.)
                return Some((String::new(), true));
            }
            if saved.is_null() {
                st.signature = SignatureCheck::Anonymous {
                    saved: save_variables(r)?,
                };
            }
            Some((String::new(), false))
        }
        SignatureCheck::Skipped => Some((String::new(), true)),
        SignatureCheck::Verify => match signature::after_decision(st.outcome()) {
            Signature::Skip => Some((String::new(), true)),
            Signature::Verify => Some((bot_of(r).unwrap_or_default(), true)),
        },
    }
}

/// Evaluates the client key and the limits' keys of a shielded request
/// (cached in its state), a signed request's signature verified only if
/// the client it is without it is not blocked (`decision::signature`).
/// `None`: a key could not be evaluated.
pub(super) fn evaluate_keys(
    r: &Request,
    mcf: &MainConf,
    state: NonNull<RequestState>,
    stores: &Stores,
) -> Option<()> {
    // SAFETY: the state lives in the request's pool; each borrow is short
    // (evaluating a key reads the state too, in `bot_value`).
    let st = || unsafe { &mut *state.as_ptr() };
    let anonymous_first = !mcf.bots.is_empty()
        && st().key.is_none()
        && matches!(st().signature, SignatureCheck::Verify);
    if !anonymous_first {
        // (The `key=` values are evaluated next, by the handler: no
        // signature to verify comes between.)
        return client_key(r, state).map(drop);
    }
    st().signature = SignatureCheck::Anonymous {
        saved: ptr::null_mut(),
    };
    let anonymous = client_key(r, state);
    let keys = keep_key_values(r, state);
    let saved = match core::mem::replace(&mut st().signature, SignatureCheck::Verify) {
        SignatureCheck::Anonymous { saved } => saved,
        _ => ptr::null_mut(),
    };
    let (anonymous, _) = (anonymous?, keys?);
    if saved.is_null() {
        // No key read the variable of a signed request: they are final.
        return Some(());
    }
    let policy = st().policy();
    let check = signature::before_decision(anonymous, policy.dry_run, |key| {
        stores.known_block(key, policy.breaker)
    });
    match check {
        Signature::Skip => st().signature = SignatureCheck::Skipped,
        Signature::Verify => {
            restore_variables(r, saved)?;
            st().key = None;
            st().key_values = None;
            client_key(r, state).and(keep_key_values(r, state))?;
        }
    }
    Some(())
}

/// A copy of the request's variables (in its pool), for
/// [`restore_variables`].
fn save_variables(r: &Request) -> Option<*mut ngx_variable_value_t> {
    let count = NgxHttpCoreModule::main_conf(r)?.variables.nelts;
    let raw: &ngx_http_request_t = r.as_ref();
    // SAFETY: `r->variables` has one value per variable of the core
    // module's list (ngx_http_create_request); the copy is as many values
    // of the request's pool, aligned (ngx_palloc), written before read.
    unsafe {
        let saved = nginx_sys::ngx_palloc(raw.pool, count * size_of::<ngx_variable_value_t>())
            .cast::<ngx_variable_value_t>();
        if saved.is_null() {
            return None;
        }
        ptr::copy_nonoverlapping(raw.variables, saved, count);
        Some(saved)
    }
}

/// Puts back the request's variables as [`save_variables`] copied them:
/// what was evaluated since (with `$pow_shield_bot` empty) is evaluated
/// again when read.
fn restore_variables(r: &Request, saved: *mut ngx_variable_value_t) -> Option<()> {
    let count = NgxHttpCoreModule::main_conf(r)?.variables.nelts;
    let raw: &ngx_http_request_t = r.as_ref();
    // SAFETY: `saved` is a copy of `count` values made by `save_variables`
    // for this request; `r->variables` has room for as many.
    unsafe { ptr::copy_nonoverlapping(saved, raw.variables, count) };
    Some(())
}

/// The bot that signed `r`, if its signature verifies and its nonce is new.
fn bot_of(r: &Request) -> Option<String> {
    let mcf = PowShield::main_conf(r)?;
    if mcf.bots.is_empty() || !signed(r) {
        return None;
    }
    let message = NginxMessage::of(r);
    let now = Now {
        monotonic_ms: crate::ffi::monotonic_ms(),
        epoch_ms: crate::ffi::now_ms(),
    };
    let now_s = i64::try_from(now.epoch_ms / 1000).ok()?;
    let zone = SharedZone::from_conf(mcf)?;
    let verified = match pow_shield_bots::verify(&message, &mcf.bots, now_s) {
        Ok(verified) => verified,
        Err(Anonymous::BadSignature(bot)) => {
            if let Some(name) = mcf.bots.names().get(bot) {
                zone.with_locked(|zone, _| zone.bots.bad_signature(name));
            }
            return None;
        }
        Err(_) => return None,
    };
    let name = mcf.bots.names().get(verified.bot)?;
    let mut digest = Sha256::new();
    for part in [
        "pow_shield web-bot-auth nonce",
        &verified.keyid,
        &verified.nonce,
    ] {
        digest.update(part.as_bytes());
        digest.update([0]);
    }
    let digest: [u8; 32] = digest.finalize().into();
    let until_s = verified.expires.saturating_add(CLOCK_ALLOWANCE_S);
    let until_ms = u64::try_from(until_s).ok()?.saturating_mul(1000);
    match record_bot_nonce(&zone, name, &digest, until_ms, now) {
        Recorded::New => Some(name.clone()),
        Recorded::Held | Recorded::NoRoom => None,
    }
}

/// The request has a `Signature-Input` field (one pass, no allocation).
pub(super) fn signed(r: &Request) -> bool {
    r.headers_in_iterator()
        .any(|(key, _)| key.as_bytes().eq_ignore_ascii_case(b"signature-input"))
}

/// nginx's request as a signature covers it.
struct NginxMessage<'r> {
    fields: Vec<(&'r [u8], &'r str)>,
    authority: Option<String>,
    method: &'r str,
    scheme: &'static str,
    path: &'r str,
    query: Option<&'r str>,
}

impl<'r> NginxMessage<'r> {
    fn of(r: &'r Request) -> Self {
        let raw: &ngx_http_request_t = r.as_ref();
        // SAFETY: a request's connection is live while the request is.
        let tls = unsafe { !(*raw.connection).ssl.is_null() };
        let scheme = if tls { "https" } else { "http" };
        let fields: Vec<(&[u8], &str)> = r
            .headers_in_iterator()
            .filter_map(|(k, v)| Some((k.as_bytes(), v.to_str().ok()?)))
            .collect();
        let host = fields
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(b"host"))
            .map(|(_, v)| *v)
            .or_else(|| core::str::from_utf8(bytes(&raw.headers_in.server)).ok())
            .filter(|h| !h.is_empty());
        let authority = host.map(|h| authority(h, scheme));
        let target = core::str::from_utf8(bytes(&raw.unparsed_uri)).unwrap_or("");
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (target, None),
        };
        NginxMessage {
            fields,
            authority,
            method: core::str::from_utf8(bytes(&raw.method_name)).unwrap_or(""),
            scheme,
            path,
            query,
        }
    }
}

/// `@authority` of a Host value: lower-case, without the scheme's default
/// port (RFC 9421 §2.2.3).
fn authority(host: &str, scheme: &str) -> String {
    let host = host.trim().to_ascii_lowercase();
    let default = if scheme == "https" { ":443" } else { ":80" };
    match host.strip_suffix(default) {
        Some(h) if !h.is_empty() && !h.ends_with(':') => h.to_owned(),
        _ => host,
    }
}

impl Message for NginxMessage<'_> {
    fn field(&self, name: &str) -> Vec<&str> {
        self.fields
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| *v)
            .collect()
    }
    fn authority(&self) -> Option<&str> {
        self.authority.as_deref()
    }
    fn method(&self) -> &str {
        self.method
    }
    fn scheme(&self) -> &str {
        self.scheme
    }
    fn path(&self) -> &str {
        self.path
    }
    fn query(&self) -> Option<&str> {
        self.query
    }
}
