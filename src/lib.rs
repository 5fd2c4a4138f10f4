//! pow-shield: an NGINX module that rate-limits clients with a sliding window
//! and makes clients over the limit pay with a SHA-256 proof of work.
//!
//! This file only wires the module into nginx; behaviour lives below:
//! - `protocol/` (crate `pow-shield-protocol`, here `protocol`): tokens,
//!   the proof of work, the responses' shapes;
//! - `core/` (crate `pow-shield-core`): the pure logic, no nginx types:
//!   limiter maths, the decision, metrics, value parsers, the Redis
//!   client's framing, pipeline, cluster map, health and URL;
//! - `config/`: directives; `shm/`: the shared-memory zone; `store/`: the
//!   store interface and its local and Redis implementations; `redis/`: the
//!   RESP client's socket on nginx's event loop; `http/`: the request path.
//!
//! The wiring is the module table, its context, the command table (which
//! puts the request path's status handler behind `pow_shield_status`, so
//! that configuration depends on nothing of it) and the process hooks.

#[macro_use]
mod log;

pub mod config;
mod ffi;
mod http;
pub use pow_shield_protocol as protocol;
mod redis;
mod shm;
mod store;

mod module {
    use core::ffi::{c_char, c_void};
    use core::mem::offset_of;
    use core::ptr;

    use nginx_sys::{
        ngx_command_t, ngx_conf_t, ngx_cycle_t, ngx_http_module_t, ngx_int_t, ngx_module_t,
        ngx_str_t, ngx_uint_t, NGX_CONF_1MORE, NGX_CONF_FLAG, NGX_CONF_NOARGS, NGX_CONF_TAKE1,
        NGX_CONF_TAKE12, NGX_CONF_TAKE2, NGX_HTTP_LOC_CONF, NGX_HTTP_LOC_CONF_OFFSET,
        NGX_HTTP_MAIN_CONF, NGX_HTTP_MAIN_CONF_OFFSET, NGX_HTTP_MODULE, NGX_HTTP_SRV_CONF,
    };
    use ngx::core::Status;
    use ngx::http::{HttpModule, HttpModuleLocationConf, HttpModuleMainConf};
    use ngx::ngx_string;

    use crate::config::bots::set_bot_keys;
    use crate::config::http::{set_secret, set_secret_file, set_zone};
    use crate::config::location::{
        set_ban, set_block_status, set_breaker_log_level, set_challenge_ttl, set_difficulty,
        set_fail, set_headers, set_key, set_limit, set_log_level, set_log_summary, set_strikes,
        set_trap, set_work,
    };
    use crate::config::redis::set_redis;
    use crate::config::{self, LocConf, MainConf};
    use crate::ffi::{guard, PowShield};

    static MODULE_CTX: ngx_http_module_t = ngx_http_module_t {
        preconfiguration: Some(PowShield::preconfiguration),
        postconfiguration: Some(PowShield::postconfiguration),
        create_main_conf: Some(PowShield::create_main_conf),
        init_main_conf: Some(PowShield::init_main_conf),
        create_srv_conf: None,
        merge_srv_conf: None,
        create_loc_conf: Some(create_loc_conf),
        merge_loc_conf: Some(merge_loc_conf),
    };

    #[cfg(feature = "export-modules")]
    ngx::ngx_modules!(ngx_http_pow_shield_module);

    #[used]
    #[allow(non_upper_case_globals)]
    #[cfg_attr(not(feature = "export-modules"), no_mangle)]
    pub static mut ngx_http_pow_shield_module: ngx_module_t = ngx_module_t {
        ctx: ptr::addr_of!(MODULE_CTX).cast_mut().cast(),
        // SAFETY: the command table is a static that lives as long as the module.
        commands: unsafe { ptr::addr_of_mut!(COMMANDS[0]) },
        type_: NGX_HTTP_MODULE as ngx_uint_t,
        init_module: Some(init_module),
        init_process: Some(init_worker),
        exit_process: Some(exit_worker),
        ..ngx_module_t::default()
    };

    // The module type lives at the bottom (`ffi`), where every module can
    // name it; what it stands for is the wiring's: this module table and
    // the configuration types its context allocates.
    impl HttpModule for PowShield {
        fn module() -> &'static ngx_module_t {
            // SAFETY: nginx writes the module's indices once while loading it,
            // before any handler runs; afterwards it is only read.
            unsafe { &*ptr::addr_of!(ngx_http_pow_shield_module) }
        }

        unsafe extern "C" fn preconfiguration(cf: *mut ngx_conf_t) -> ngx_int_t {
            // SAFETY: nginx passes a valid configuration context.
            guard(Status::NGX_ERROR.into(), || unsafe {
                match crate::http::variables::register(&mut *cf) {
                    Status::NGX_OK => crate::http::bot::register(&mut *cf).into(),
                    other => other.into(),
                }
            })
        }

        unsafe extern "C" fn postconfiguration(cf: *mut ngx_conf_t) -> ngx_int_t {
            // SAFETY: nginx passes a valid configuration context.
            guard(Status::NGX_ERROR.into(), || unsafe {
                crate::http::install(&mut *cf).into()
            })
        }

        unsafe extern "C" fn init_main_conf(cf: *mut ngx_conf_t, conf: *mut c_void) -> *mut c_char {
            // SAFETY: `conf` is the MainConf this module created for `cf`.
            guard(ngx::core::NGX_CONF_ERROR, || unsafe {
                config::init_main_conf(&mut *cf, &mut *conf.cast::<MainConf>())
            })
        }
    }

    // SAFETY: MainConf is the type create_main_conf allocates for this module.
    unsafe impl HttpModuleMainConf for PowShield {
        type MainConf = MainConf;
    }

    // SAFETY: LocConf is the type create_loc_conf allocates for this module.
    unsafe impl HttpModuleLocationConf for PowShield {
        type LocationConf = LocConf;
    }

    unsafe extern "C" fn create_loc_conf(cf: *mut ngx_conf_t) -> *mut c_void {
        // SAFETY: nginx passes a valid configuration context; the value
        // lives in its pool (as the trait's default allocates it).
        guard(ptr::null_mut(), || unsafe {
            let pool = ngx::core::Pool::from_ngx_pool((*cf).pool);
            pool.allocate::<LocConf>(config::create_loc_conf(&*cf))
                .cast::<c_void>()
        })
    }

    unsafe extern "C" fn merge_loc_conf(
        cf: *mut ngx_conf_t,
        prev: *mut c_void,
        conf: *mut c_void,
    ) -> *mut c_char {
        // SAFETY: both pointers are LocConf values this module created.
        guard(ngx::core::NGX_CONF_ERROR, || unsafe {
            config::merge_loc_conf(
                &mut *cf,
                &*prev.cast::<LocConf>(),
                &mut *conf.cast::<LocConf>(),
            )
        })
    }

    /* the command table */

    type Setter =
        unsafe extern "C" fn(*mut ngx_conf_t, *mut ngx_command_t, *mut c_void) -> *mut c_char;

    const ANY_LEVEL: u32 = NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF;

    /// A directive of any level, stored in the location configuration
    /// (`offset` is for nginx's stock slot setters; ours ignore it).
    const fn loc(name: ngx_str_t, args: u32, set: Setter, offset: usize) -> ngx_command_t {
        command(
            name,
            ANY_LEVEL | args,
            set,
            NGX_HTTP_LOC_CONF_OFFSET,
            offset,
        )
    }

    /// A directive of `location` blocks only.
    const fn location_only(name: ngx_str_t, args: u32, set: Setter) -> ngx_command_t {
        command(
            name,
            NGX_HTTP_LOC_CONF | args,
            set,
            NGX_HTTP_LOC_CONF_OFFSET,
            0,
        )
    }

    /// A directive of the `http` block, stored in the main configuration.
    const fn main(name: ngx_str_t, args: u32, set: Setter) -> ngx_command_t {
        command(
            name,
            NGX_HTTP_MAIN_CONF | args,
            set,
            NGX_HTTP_MAIN_CONF_OFFSET,
            0,
        )
    }

    const fn command(
        name: ngx_str_t,
        type_: u32,
        set: Setter,
        conf: usize,
        offset: usize,
    ) -> ngx_command_t {
        ngx_command_t {
            name,
            type_: type_ as ngx_uint_t,
            set: Some(set),
            conf,
            offset,
            post: ptr::null_mut(),
        }
    }

    static mut COMMANDS: [ngx_command_t; 24] = [
        loc(
            ngx_string!("pow_shield_limit"),
            NGX_CONF_1MORE,
            set_limit,
            0,
        ),
        loc(
            ngx_string!("pow_shield_difficulty"),
            NGX_CONF_TAKE12,
            set_difficulty,
            0,
        ),
        loc(
            ngx_string!("pow_shield_strikes"),
            NGX_CONF_TAKE12,
            set_strikes,
            0,
        ),
        loc(ngx_string!("pow_shield_ban"), NGX_CONF_TAKE12, set_ban, 0),
        loc(
            ngx_string!("pow_shield_block_status"),
            NGX_CONF_TAKE1,
            set_block_status,
            0,
        ),
        location_only(ngx_string!("pow_shield_trap"), NGX_CONF_NOARGS, set_trap),
        location_only(
            ngx_string!("pow_shield_status"),
            NGX_CONF_NOARGS,
            set_status,
        ),
        location_only(ngx_string!("pow_shield_admin"), NGX_CONF_NOARGS, set_admin),
        loc(ngx_string!("pow_shield_key"), NGX_CONF_TAKE1, set_key, 0),
        loc(
            ngx_string!("pow_shield_challenge_ttl"),
            NGX_CONF_TAKE1,
            set_challenge_ttl,
            0,
        ),
        loc(ngx_string!("pow_shield_work"), NGX_CONF_TAKE1, set_work, 0),
        loc(
            ngx_string!("pow_shield_headers"),
            NGX_CONF_TAKE1,
            set_headers,
            0,
        ),
        loc(
            ngx_string!("pow_shield_dry_run"),
            NGX_CONF_FLAG,
            nginx_sys::ngx_conf_set_flag_slot,
            offset_of!(LocConf, dry_run),
        ),
        loc(
            ngx_string!("pow_shield_pay_ahead"),
            NGX_CONF_FLAG,
            nginx_sys::ngx_conf_set_flag_slot,
            offset_of!(LocConf, pay_ahead),
        ),
        loc(
            ngx_string!("pow_shield_log_level"),
            NGX_CONF_TAKE1,
            set_log_level,
            0,
        ),
        loc(
            ngx_string!("pow_shield_log_summary"),
            NGX_CONF_TAKE1,
            set_log_summary,
            0,
        ),
        loc(
            ngx_string!("pow_shield_breaker_log_level"),
            NGX_CONF_TAKE1,
            set_breaker_log_level,
            0,
        ),
        loc(ngx_string!("pow_shield_fail"), NGX_CONF_TAKE12, set_fail, 0),
        main(ngx_string!("pow_shield_secret"), NGX_CONF_TAKE1, set_secret),
        main(
            ngx_string!("pow_shield_secret_file"),
            NGX_CONF_TAKE1,
            set_secret_file,
        ),
        main(ngx_string!("pow_shield_zone"), NGX_CONF_TAKE1, set_zone),
        main(ngx_string!("pow_shield_redis"), NGX_CONF_1MORE, set_redis),
        main(
            ngx_string!("pow_shield_bot_keys"),
            NGX_CONF_TAKE2,
            set_bot_keys,
        ),
        ngx_command_t::empty(),
    ];

    /// `pow_shield_status`, with the request path's status handler as the
    /// location's content.
    extern "C" fn set_status(
        cf: *mut ngx_conf_t,
        cmd: *mut ngx_command_t,
        conf: *mut c_void,
    ) -> *mut c_char {
        // SAFETY: nginx passes a setter its arguments; the command's `conf`
        // offset is the location configuration's.
        unsafe { config::set_status(cf, cmd, conf, Some(crate::http::status::handler)) }
    }

    /// `pow_shield_admin`, with the request path's admin handler as the
    /// location's content.
    extern "C" fn set_admin(
        cf: *mut ngx_conf_t,
        cmd: *mut ngx_command_t,
        conf: *mut c_void,
    ) -> *mut c_char {
        // SAFETY: nginx passes a setter its arguments; the command's `conf`
        // offset is the location configuration's.
        unsafe { config::set_admin(cf, cmd, conf, Some(crate::http::admin::handler)) }
    }

    /* the process hooks */

    /// After the cycle's shared memory is ready, before workers start.
    extern "C" fn init_module(cycle: *mut ngx_cycle_t) -> ngx_int_t {
        // SAFETY: nginx passes the cycle being initialised.
        // (Its failure is fatal for nginx, even on a reload: never fail.)
        guard(Status::NGX_OK.into(), || unsafe {
            // (The zone first: the other two read the one it resolves.)
            config::http::resolve_zone(&mut *cycle);
            config::http::place_limit_names(&mut *cycle);
            config::http::adopt_zone_secret(&mut *cycle).into()
        })
    }

    /// `init_process`: a worker starts counting into its metrics slot (when
    /// a status location exists) and opens its Redis connection. Cache
    /// manager and loader processes run init_process too; they serve no
    /// requests.
    extern "C" fn init_worker(cycle: *mut ngx_cycle_t) -> ngx_int_t {
        guard(Status::NGX_OK.into(), || {
            // SAFETY: set by nginx before init_process runs; read-only
            // afterwards.
            let (process, worker) =
                unsafe { (nginx_sys::ngx_process as u32, nginx_sys::ngx_worker) };
            if process != nginx_sys::NGX_PROCESS_WORKER && process != nginx_sys::NGX_PROCESS_SINGLE
            {
                return Status::NGX_OK.into();
            }
            // Salts the master might have drawn must not repeat in workers.
            pow_shield_core::protocol::forget_random();
            // SAFETY: nginx passes the live cycle to init_process.
            let cycle = unsafe { &mut *cycle };
            let Some(mcf) = PowShield::main_conf(cycle) else {
                return Status::NGX_OK.into();
            };
            if mcf.status {
                let zone = crate::shm::SharedZone::from_conf(mcf);
                if let Some(slot) = zone.and_then(|z| z.metrics_slot(worker)) {
                    slot.adopt(std::process::id(), crate::ffi::process_alive);
                    pow_shield_core::metrics::attach(slot);
                }
            }
            crate::store::init_worker(cycle, mcf).into()
        })
    }

    extern "C" fn exit_worker(cycle: *mut ngx_cycle_t) {
        // SAFETY: nginx passes the live cycle to exit_process.
        guard((), || {
            crate::http::log_lines::exit_worker();
            // SAFETY: nginx passes the live cycle to exit_process.
            unsafe { crate::store::exit_worker(&mut *cycle) }
        })
    }
}
