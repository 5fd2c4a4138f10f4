//! The access phase run again for a request that has a state: a store
//! answered, or nginx sent the request to another location (an internal
//! redirect, an error page, `post_action`). What to do is
//! `pow_shield_core::decision::redirect`'s; here are nginx's side of it:
//! why the phase runs, and the request's keys under the new location's
//! policy.

use core::ptr::{self, NonNull};

use nginx_sys::ngx_http_request_t;
use ngx::core::Status;
use ngx::http::Request;

use super::key::{evaluate_key, pooled};
use super::request::{evaluate_key_values, pooled_values, values_of};
use super::state::RequestState;
use crate::config::Policy;
use pow_shield_core::decision::redirect::{self, Again, Counting, Entry};
use pow_shield_core::decision::Outcome;
use pow_shield_core::limiter::MAX_LIMITS;
use pow_shield_core::store::KeyValues;

/// The phase runs again for a request with a state, in a location under
/// `policy`: `Ok` to go on deciding (under `policy`, when a redirect
/// brought the request to a policy that has not decided it), `Err` with
/// what to return.
pub(super) fn run_again(
    r: &Request,
    state: NonNull<RequestState>,
    policy: &Policy,
) -> Result<(), Status> {
    // SAFETY: the state lives in the request's pool; each borrow is short
    // (evaluating a key may read the state, in `bot::bot_value`).
    let st = || unsafe { &mut *state.as_ptr() };
    let (mut here, mut failed) = (None, false);
    let again = redirect::again(st().resolution, entry(r), || {
        if ptr::eq(st().policy(), policy) {
            return true;
        }
        let values = match policy.key_plan.is_empty() {
            true => Some(None),
            false => {
                let mut made = [None; MAX_LIMITS];
                evaluate_key_values(r, policy, &mut made).map(|()| Some(made))
            }
        };
        let (Some(key), Some(values)) = (evaluate_key(r, policy), values) else {
            failed = true;
            return true;
        };
        // The decision so far joins the earlier ones (once).
        let passed = st().outcome() == Some(Outcome::Pass);
        let before = st().policy();
        let kept = st().key_values.map(|kept| pooled_values(&kept, before));
        let so_far = counting(
            before,
            st().key.map_or(&[][..], pooled),
            values_of(before, kept.as_ref()),
        );
        let earlier = st().earlier.get_or_insert_with(Box::default);
        if !earlier.record(&so_far, passed) {
            // (Decided more often than nginx redirects: nothing more.)
            return true;
        }
        here = Some((key, values));
        let evaluated = values.map(|made| pooled_values(&made, policy));
        earlier.decided_alike(&counting(
            policy,
            pooled(key),
            values_of(policy, evaluated.as_ref()),
        ))
    });
    if failed {
        return Err(Status::NGX_ERROR);
    }
    match (again, here) {
        (Again::Continue, _) => Ok(()),
        (Again::Pass, _) => Err(Status::NGX_DECLINED),
        (Again::Answer(status), _) => Err(Status(status as isize)),
        (Again::Decide, Some((key, values))) => {
            st().decide_again(policy, key, values);
            Ok(())
        }
        (Again::Decide, None) => Err(Status::NGX_ERROR),
    }
}

/// Which of the limits of the request's decision under way counted it in
/// an earlier decision of it (`Earlier::counted_before`): they are left
/// out of this one.
pub(super) fn counted_before(
    state: &RequestState,
    key: &[u8],
    values: KeyValues,
) -> [bool; MAX_LIMITS] {
    match &state.earlier {
        Some(earlier) => earlier.counted_before(&counting(state.policy(), key, values)),
        None => [false; MAX_LIMITS],
    }
}

/// Why nginx runs the phase again (`r->post_action`; `r->error_page` with
/// the status it fixed, `r->err_status`; else a redirect, or a store's
/// answer).
fn entry(r: &Request) -> Entry {
    let raw: &ngx_http_request_t = r.as_ref();
    if raw.post_action() != 0 {
        Entry::PostAction
    } else if raw.error_page() != 0 && raw.err_status != 0 {
        Entry::ErrorPage
    } else {
        Entry::Redirect
    }
}

/// What `policy` counts the request under with these keys, and asks.
fn counting<'a>(policy: &'a Policy, key: &'a [u8], key_values: KeyValues<'a>) -> Counting<'a> {
    Counting {
        key,
        limits: &policy.limits,
        key_values,
        difficulty: policy.difficulty,
        dry_run: policy.dry_run,
        trap: policy.trap,
    }
}
