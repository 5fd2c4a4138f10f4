//! The setter framework: every setter of ours runs in [`run_setter`], which
//! keeps panics out of nginx, decodes the words, and logs a refusal in the
//! one format `pow_shield_core::config::DirectiveError` gives
//! (`invalid value "<v>" in "<directive>" directive: <reason>`), to which
//! nginx appends the file and line.

use core::ffi::{c_char, c_void};

use nginx_sys::{
    ngx_command_t, ngx_conf_t, ngx_flag_t, ngx_http_compile_complex_value_t,
    ngx_http_complex_value_t, ngx_str_t, NGX_LOG_EMERG,
};
use ngx::core::{NGX_CONF_ERROR, NGX_CONF_OK};
use ngx::ngx_conf_log_error;

use crate::ffi::{bytes, guard};
pub use pow_shield_core::config::directive_error::{set_once, set_once_of};
pub use pow_shield_core::config::DirectiveError;

/// nginx's `NGX_CONF_UNSET` (a cast macro bindgen does not carry): what a
/// field set by a stock slot setter holds until its directive is read.
pub const NGX_CONF_UNSET: ngx_flag_t = -1;

/// What a setter sees: the configuration context and the directive's
/// arguments as text (its name excluded).
pub struct Directive<'a> {
    pub cf: &'a mut ngx_conf_t,
    pub args: Vec<&'a str>,
}

impl<'a> Directive<'a> {
    /// The first argument (nginx has checked the argument count).
    pub fn value(&self) -> &'a str {
        pow_shield_core::config::args::first(&self.args)
    }
}

/// Shared frame of every setter: panics stay here, arguments are decoded,
/// refusals are logged with the directive, the value, file and line.
///
/// # Safety
/// `cf`, `cmd` and `conf` are what nginx passes to a setter, and `conf` points
/// to a `T` (the command's `conf` offset selects it).
pub unsafe fn run_setter<T>(
    cf: *mut ngx_conf_t,
    cmd: *mut ngx_command_t,
    conf: *mut c_void,
    apply: impl FnOnce(&mut Directive, &mut T) -> Result<(), DirectiveError>,
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
                    log_error(
                        cf,
                        name,
                        &DirectiveError::invalid(&shown, "not valid UTF-8"),
                    );
                    return NGX_CONF_ERROR;
                }
            }
        }
        let cf_ptr: *mut ngx_conf_t = cf;
        let mut directive = Directive { cf, args };
        match apply(&mut directive, conf) {
            Ok(()) => NGX_CONF_OK,
            Err(error) => {
                // SAFETY: cf_ptr is the live configuration context.
                log_error(unsafe { &mut *cf_ptr }, name, &error);
                NGX_CONF_ERROR
            }
        }
    })
}

fn log_error(cf: &mut ngx_conf_t, name: &str, error: &DirectiveError) {
    if let Some(message) = error.message(name) {
        ngx_conf_log_error!(NGX_LOG_EMERG, cf, "{message}");
    }
}

/// Defines a directive setter. The command's `conf` offset in the command
/// table (src/lib.rs) decides which configuration nginx passes: `$conf`
/// must match it.
macro_rules! setter {
    ($(#[$doc:meta])* $name:ident, $conf:ty, |$d:ident, $c:ident| $body:block) => {
        $(#[$doc])*
        pub(crate) extern "C" fn $name(
            cf: *mut nginx_sys::ngx_conf_t,
            cmd: *mut nginx_sys::ngx_command_t,
            conf: *mut core::ffi::c_void,
        ) -> *mut core::ffi::c_char {
            // SAFETY: nginx passes a setter its arguments, and `conf` is the
            // `$conf` this module created for the command's level.
            unsafe {
                $crate::config::setters::run_setter(
                    cf,
                    cmd,
                    conf,
                    |$d: &mut $crate::config::setters::Directive,
                     $c: &mut $conf|
                     -> Result<(), $crate::config::setters::DirectiveError> { $body },
                )
            }
        }
    };
}
pub(crate) use setter;

/// Compiles `value` (with `$variables`) into the configuration pool;
/// nginx logs its own errors.
pub fn compile_complex_value(
    cf: &mut ngx_conf_t,
    value: &str,
) -> Result<*mut ngx_http_complex_value_t, DirectiveError> {
    // SAFETY: the pool outlives the configuration; the struct is plain data.
    let cv = unsafe { ngx::core::Pool::from_ngx_pool(cf.pool) }
        .calloc_type::<ngx_http_complex_value_t>();
    if cv.is_null() {
        return Err(DirectiveError::Logged);
    }
    // SAFETY: copies `value` into the configuration pool, which outlives it.
    let Some(mut text) = (unsafe { ngx_str_t::from_bytes(cf.pool, value.as_bytes()) }) else {
        return Err(DirectiveError::Logged);
    };
    // SAFETY: a zeroed compile struct is its documented initial state.
    let mut ccv: ngx_http_compile_complex_value_t = unsafe { core::mem::zeroed() };
    ccv.cf = cf;
    ccv.value = &mut text;
    ccv.complex_value = cv;
    // SAFETY: ccv is fully initialised above; nginx logs its own errors.
    if unsafe { nginx_sys::ngx_http_compile_complex_value(&mut ccv) } != nginx_sys::NGX_OK as isize
    {
        return Err(DirectiveError::Logged);
    }
    Ok(cv)
}

/// Resolves a path relative to the configuration prefix, as nginx does.
pub fn full_path(cf: &mut ngx_conf_t, path: &str) -> Option<String> {
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
