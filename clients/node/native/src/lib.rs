//! The Node client's native solver: the protocol crate's nonce search
//! (`Search`: SHA-NI with interleaved lanes where the CPU has it, else
//! `sha2`'s compression) as a Node-API addon, loaded by lib/native.js and
//! run by the solver's worker threads. Written against Node-API's C
//! functions directly (resolved from the node binary when it loads the
//! addon), so it needs no crate beyond the protocol's.
//!
//! Exports: `search(salt, bits, from, to)`: the smallest nonce in
//! `from..to` meeting `bits`, -1 for none, -2 for arguments it does not
//! take (the caller's other search runs then); `engine()`: the search's
//! label, e.g. `sha-ni (4 lanes)`; `equixSearch(salt, bits, from, to)`:
//! the smallest nonce in `from..to` with an Equi-X solution whose hash
//! meets `bits`, as `nonce:solution` (the solution as `X-PoW-Solution`
//! sends it), `""` for none or for arguments it does not take;
//! `equixInfo()`: `compiled` or `interpreted` (how HashX runs) and the
//! solver's bytes of memory, e.g. `compiled 1900000`.

use std::ffi::c_void;
use std::os::raw::c_char;
use std::ptr;

use pow_shield_protocol::{encode_solution, Engine, EquixSolver, Search};

type Env = *mut c_void;
type Value = *mut c_void;
type CallbackInfo = *mut c_void;
type Callback = unsafe extern "C" fn(Env, CallbackInfo) -> Value;

const NAPI_OK: i32 = 0;
/// The longest salt taken (the module's are 32 hex characters).
const MAX_SALT: usize = 4096;
/// Nonces are f64 on the JavaScript side: exact below 2^53.
const MAX_NONCE: f64 = 9_007_199_254_740_991.0;

extern "C" {
    fn napi_get_cb_info(
        env: Env,
        info: CallbackInfo,
        argc: *mut usize,
        argv: *mut Value,
        this: *mut Value,
        data: *mut *mut c_void,
    ) -> i32;
    fn napi_get_value_string_utf8(
        env: Env,
        value: Value,
        buf: *mut c_char,
        size: usize,
        len: *mut usize,
    ) -> i32;
    fn napi_get_value_uint32(env: Env, value: Value, result: *mut u32) -> i32;
    fn napi_get_value_double(env: Env, value: Value, result: *mut f64) -> i32;
    fn napi_create_double(env: Env, value: f64, result: *mut Value) -> i32;
    fn napi_create_string_utf8(env: Env, s: *const c_char, len: usize, result: *mut Value) -> i32;
    fn napi_create_function(
        env: Env,
        name: *const c_char,
        len: usize,
        cb: Callback,
        data: *mut c_void,
        result: *mut Value,
    ) -> i32;
    fn napi_set_named_property(env: Env, object: Value, name: *const c_char, value: Value) -> i32;
}

/// The arguments of `search`, or None for ones it does not take.
struct Args {
    salt: Vec<u8>,
    bits: u32,
    from: u64,
    to: u64,
}

/// Reads `search`'s four arguments.
///
/// # Safety
/// `env` and `info` are the ones Node-API passed to the callback.
unsafe fn args(env: Env, info: CallbackInfo) -> Option<Args> {
    let mut argc = 4usize;
    let mut argv: [Value; 4] = [ptr::null_mut(); 4];
    // SAFETY: env and info are this callback's (the caller's contract);
    // argv has room for argc (4) values, and Node-API writes at most argc
    // of them; the null this_arg and data pointers ask for neither.
    let status = unsafe {
        napi_get_cb_info(
            env,
            info,
            &mut argc,
            argv.as_mut_ptr(),
            ptr::null_mut(),
            ptr::null_mut(),
        )
    };
    if status != NAPI_OK || argc < 4 {
        return None;
    }
    let mut salt = vec![0u8; MAX_SALT + 1];
    let mut len = 0usize;
    // SAFETY: argv[0] is a value of this call; the buffer is salt.len()
    // bytes, the size passed, and Node-API writes at most that many (with
    // the NUL), and the copied length into len.
    let status = unsafe {
        napi_get_value_string_utf8(env, argv[0], salt.as_mut_ptr().cast(), salt.len(), &mut len)
    };
    // A salt that filled the buffer may have been cut: not taken.
    if status != NAPI_OK || len >= MAX_SALT {
        return None;
    }
    salt.truncate(len);
    let mut bits = 0u32;
    let (mut from, mut to) = (0f64, 0f64);
    // SAFETY: argv[1..4] are values of this call; each result points to
    // a live local of the type Node-API writes.
    let read = unsafe {
        napi_get_value_uint32(env, argv[1], &mut bits) == NAPI_OK
            && napi_get_value_double(env, argv[2], &mut from) == NAPI_OK
            && napi_get_value_double(env, argv[3], &mut to) == NAPI_OK
    };
    if !read {
        return None;
    }
    let nonce = |x: f64| (x.is_finite() && (0.0..=MAX_NONCE).contains(&x)).then_some(x as u64);
    if !(1..=64).contains(&bits) {
        return None;
    }
    Some(Args {
        salt,
        bits,
        from: nonce(from)?,
        to: nonce(to)?,
    })
}

unsafe extern "C" fn search(env: Env, info: CallbackInfo) -> Value {
    // SAFETY: env and info come from Node-API for this call.
    let answer = match unsafe { args(env, info) } {
        None => -2.0,
        Some(a) => Search::new(&a.salt, a.bits)
            .run(a.from, a.to)
            .map_or(-1.0, |n| n as f64),
    };
    let mut out = ptr::null_mut();
    // SAFETY: env is this call's; out is written by Node-API.
    unsafe { napi_create_double(env, answer, &mut out) };
    out
}

unsafe extern "C" fn engine(env: Env, _info: CallbackInfo) -> Value {
    // SAFETY: env is this call's.
    unsafe { string(env, &Engine::detect().label()) }
}

unsafe extern "C" fn equix_search(env: Env, info: CallbackInfo) -> Value {
    // SAFETY: env and info come from Node-API for this call.
    let found = match unsafe { args(env, info) } {
        Some(a) if a.bits <= 48 => {
            let salt = String::from_utf8_lossy(&a.salt).into_owned();
            let mut solver = EquixSolver::new();
            (a.from..a.to).find_map(|nonce| {
                let solution = solver.try_nonce(&salt, nonce, a.bits as u8)?;
                Some(format!("{nonce}:{}", encode_solution(&solution)))
            })
        }
        _ => None,
    };
    // SAFETY: env is this call's.
    unsafe { string(env, found.as_deref().unwrap_or("")) }
}

unsafe extern "C" fn equix_info(env: Env, _info: CallbackInfo) -> Value {
    let solver = EquixSolver::new();
    let text = format!("{} {}", solver.runtime(), EquixSolver::MEMORY);
    // SAFETY: env is this call's.
    unsafe { string(env, &text) }
}

/// A JavaScript string of `text`.
///
/// # Safety
/// `env` is the one Node-API passed to the running callback.
unsafe fn string(env: Env, text: &str) -> Value {
    let mut out = ptr::null_mut();
    // SAFETY: env is the caller's; the text outlives the call, which copies it.
    unsafe { napi_create_string_utf8(env, text.as_ptr().cast(), text.len(), &mut out) };
    out
}

/// Node-API's entry: called by Node (on each thread that loads the addon)
/// with the module's `exports`.
///
/// # Safety
/// Called by Node-API only, with a valid `env` and `exports`.
#[no_mangle]
pub unsafe extern "C" fn napi_register_module_v1(env: Env, exports: Value) -> Value {
    let functions: [(&[u8], Callback); 4] = [
        (b"search\0", search),
        (b"engine\0", engine),
        (b"equixSearch\0", equix_search),
        (b"equixInfo\0", equix_info),
    ];
    for (name, cb) in functions {
        let mut f = ptr::null_mut();
        // SAFETY: env and exports are Node-API's; name is NUL-terminated.
        unsafe {
            if napi_create_function(
                env,
                name.as_ptr().cast(),
                name.len() - 1,
                cb,
                ptr::null_mut(),
                &mut f,
            ) == NAPI_OK
            {
                napi_set_named_property(env, exports, name.as_ptr().cast(), f);
            }
        }
    }
    exports
}
