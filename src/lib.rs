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

#[cfg(not(test))]
#[macro_use]
mod log;

pub mod config;
#[cfg(not(test))]
mod ffi;
#[cfg(not(test))]
mod http;
pub use pow_shield_protocol as protocol;
mod redis;
#[cfg(not(test))]
mod shm;
#[cfg(not(test))]
mod store;

#[cfg(not(test))]
mod module {
    use core::ffi::{c_char, c_void};
    use core::ptr;

    use nginx_sys::{
        ngx_conf_t, ngx_cycle_t, ngx_http_module_t, ngx_int_t, ngx_module_t, ngx_uint_t,
        NGX_HTTP_MODULE,
    };
    use ngx::core::Status;
    use ngx::http::{HttpModule, HttpModuleLocationConf, HttpModuleMainConf};

    use crate::config::{self, LocConf, MainConf};
    use crate::ffi::guard;

    /// The module type the `ngx` traits hang off.
    pub struct PowShield;

    static MODULE_CTX: ngx_http_module_t = ngx_http_module_t {
        preconfiguration: Some(PowShield::preconfiguration),
        postconfiguration: Some(PowShield::postconfiguration),
        create_main_conf: Some(PowShield::create_main_conf),
        init_main_conf: Some(PowShield::init_main_conf),
        create_srv_conf: None,
        merge_srv_conf: None,
        create_loc_conf: Some(PowShield::create_loc_conf),
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
        commands: unsafe { ptr::addr_of_mut!(config::COMMANDS[0]) },
        type_: NGX_HTTP_MODULE as ngx_uint_t,
        init_process: Some(init_worker),
        exit_process: Some(exit_worker),
        ..ngx_module_t::default()
    };

    impl HttpModule for PowShield {
        fn module() -> &'static ngx_module_t {
            // SAFETY: nginx writes the module's indices once while loading it,
            // before any handler runs; afterwards it is only read.
            unsafe { &*ptr::addr_of!(ngx_http_pow_shield_module) }
        }

        unsafe extern "C" fn preconfiguration(cf: *mut ngx_conf_t) -> ngx_int_t {
            // SAFETY: nginx passes a valid configuration context.
            guard(Status::NGX_ERROR.into(), || unsafe {
                crate::http::variables::register(&mut *cf).into()
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
            // SAFETY: nginx passes the live cycle to init_process.
            let cycle = unsafe { &mut *cycle };
            let Some(mcf) = PowShield::main_conf(cycle) else {
                return Status::NGX_OK.into();
            };
            if mcf.status {
                let zone = crate::shm::SharedZone::from_conf(mcf);
                if let Some(slot) = zone.and_then(|z| z.metrics_slot(worker)) {
                    pow_shield_core::metrics::attach(slot);
                }
            }
            crate::store::init_worker(cycle, mcf).into()
        })
    }

    extern "C" fn exit_worker(cycle: *mut ngx_cycle_t) {
        // SAFETY: nginx passes the live cycle to exit_process.
        guard((), || unsafe { crate::store::exit_worker(&mut *cycle) })
    }
}

#[cfg(not(test))]
pub use module::PowShield;
