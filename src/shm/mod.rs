//! The shared-memory zone (`pow_shield_zone`): one slab pool holding the
//! local-mode sliding windows, the circuit breakers, the replay cache and the
//! workers' metrics slots, kept across `nginx -s reload` when its size is
//! unchanged (as `limit_req` does).

pub mod health;
mod table;

use core::ffi::c_void;
use core::ptr::{self, NonNull};

use nginx_sys::{ngx_conf_t, ngx_int_t, ngx_shm_zone_t, ngx_slab_pool_t, ngx_str_t};
use ngx::core::{Pool, SlabPool, Status};
use ngx::http::HttpModule;

pub use self::table::{Entry, Table, TableKey};
use crate::ffi::PowShield;
use pow_shield_core::limiter::window::SlidingWindow;
use pow_shield_core::metrics::{BotCounters, LimitPlaces, Slot, Slots, ZoneStats, SLOTS};
use pow_shield_core::store::SpentRoom;

/// Layout version: a zone written by another layout is never adopted. A
/// reload may load a newer module into a zone an older one wrote, so the
/// sizes that shape the memory (header, entries, metrics slots and the
/// counters in each) and where an entry keeps its key and a window its
/// fields are part of it, not only the hand-bumped version: a field moved
/// within the same size changes it too.
const MAGIC: u64 = layout_magic(
    // "powshi" v11: a table's insertions (the breaker table's
    // generation), a bucket's remembered generation in its tree node's
    // padding (v10: a window's hint, `holds_until_ms`; the key's length
    // in the tree node)
    0x706f_7773_6869_000b,
    &[
        core::mem::size_of::<Zone>(),
        core::mem::size_of::<table::Entry>(),
        core::mem::size_of::<Slots>(),
        pow_shield_core::metrics::at::LEN,
        table::KEY_OFFSET,
        table::GENERATION_OFFSET,
        core::mem::offset_of!(SlidingWindow, period),
        core::mem::offset_of!(SlidingWindow, over_until_ms),
        core::mem::offset_of!(SlidingWindow, over),
        core::mem::offset_of!(SlidingWindow, total),
        core::mem::offset_of!(SlidingWindow, holds_until_ms),
        core::mem::offset_of!(SlidingWindow, count),
        core::mem::offset_of!(SlidingWindow, last),
    ],
);

/// `version` mixed with `sizes` (FNV-1a over their bytes).
const fn layout_magic(version: u64, sizes: &[usize]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325_u64 ^ version;
    let mut i = 0;
    while i < sizes.len() {
        let bytes = (sizes[i] as u64).to_le_bytes();
        let mut j = 0;
        while j < bytes.len() {
            h = (h ^ bytes[j] as u64).wrapping_mul(0x0100_0000_01b3);
            j += 1;
        }
        i += 1;
    }
    h
}

/// The zone's header, at the start of the slab pool's data.
#[repr(C)]
pub struct Zone {
    magic: u64,
    /// Local-mode sliding windows, one per (limit, client key).
    pub buckets: Table,
    /// Spent challenges, by SHA-256 of the token, until they expire.
    pub spent: Table,
    /// Circuit breakers, one per client key.
    pub strikes: Table,
    /// Cluster mode: clients Redis refused, until a slot frees (one per
    /// limit and client key); the first thing given up for room.
    pub refusals: Table,
    /// Solutions refused because the zone had no room for their spent
    /// record (all workers; for metrics).
    pub spent_refused: u64,
    /// Requests refused because the zone had no room for their bucket.
    pub buckets_refused: u64,
    /// Web Bot Auth's counts by bot (their nonces are in `spent`).
    pub bots: BotCounters,
    /// Where each limit name counts in the metrics slots (kept by name
    /// across reloads; the master places a configuration's names).
    pub limit_places: LimitPlaces,
    /// The workers' metrics slots, allocated by the first configuration
    /// with a `pow_shield_status` location (null before).
    metrics: *mut Slots,
    /// The random HMAC key used when no secret is configured; kept across
    /// reloads so that outstanding challenges stay valid.
    secret: [u8; 32],
    /// Cluster mode: whether each Redis is down, as the node's workers
    /// share it.
    redis_health: health::Peers,
}

impl Zone {
    pub fn buckets_mut(&mut self) -> &mut Table {
        &mut self.buckets
    }

    pub fn spent_mut(&mut self) -> &mut Table {
        &mut self.spent
    }

    pub fn strikes_mut(&mut self) -> &mut Table {
        &mut self.strikes
    }
}

/// Smallest zone we accept: the header plus room for a useful number of
/// entries (nginx's own zones want 8 pages).
pub fn min_zone_size() -> usize {
    // SAFETY: ngx_pagesize is set by nginx before configuration parsing.
    unsafe { nginx_sys::ngx_pagesize * 8 }
}

/// What the configuration asks of the zone: `init_zone` reads it from the
/// zone's `data` before it puts the header there.
#[derive(Clone, Copy)]
struct Wants {
    /// A status location exists: make the workers' metrics slots.
    metrics: bool,
}

/// Adds the zone of `size` bytes to the configuration being parsed (with
/// the workers' metrics slots when `metrics`); `init_zone` makes it later,
/// with the random key [`SharedZone::random_secret`] returns.
pub fn add_zone(
    cf: &mut ngx_conf_t,
    name: &str,
    size: usize,
    metrics: bool,
) -> Result<*mut ngx_shm_zone_t, ()> {
    // SAFETY: copies the name into the configuration pool.
    let Some(mut name) = (unsafe { ngx_str_t::from_bytes(cf.pool, name.as_bytes()) }) else {
        return Err(());
    };
    // SAFETY: the configuration pool outlives the zone's initialisation.
    let wants = unsafe { Pool::from_ngx_pool(cf.pool) }.alloc_type::<Wants>();
    if wants.is_null() {
        return Err(());
    }
    // SAFETY: fresh pool memory of the right size and alignment.
    unsafe { wants.write(Wants { metrics }) };
    let tag = ptr::from_ref(PowShield::module()).cast_mut().cast();
    // SAFETY: cf is the configuration being parsed; nginx logs its own errors
    // (e.g. the name already used with another size or by another module).
    let zone = unsafe { nginx_sys::ngx_shared_memory_add(cf, &mut name, size, tag) };
    let Some(zone) = NonNull::new(zone) else {
        return Err(());
    };
    // SAFETY: the zone was just returned by nginx and is not yet initialised.
    unsafe {
        let zone = &mut *zone.as_ptr();
        zone.init = Some(init_zone);
        // Until init runs, `data` carries what the configuration wants.
        zone.data = wants.cast();
    }
    Ok(zone.as_ptr())
}

/// nginx's zone init: creates the header, or adopts the previous cycle's.
///
/// `old` is the previous cycle's `shm_zone->data` when nginx kept the same
/// memory (same name, size and tag), else null.
extern "C" fn init_zone(shm_zone: *mut ngx_shm_zone_t, old: *mut c_void) -> ngx_int_t {
    crate::ffi::guard(Status::NGX_ERROR.into(), || {
        // SAFETY: nginx passes the zone being initialised; its data is the
        // `Wants` set by add_zone, in the configuration pool.
        let (shm_zone, wants) = unsafe { (&mut *shm_zone, *(*shm_zone).data.cast::<Wants>()) };
        // SAFETY: a zone's memory starts with its slab pool once mapped.
        let Some(pool) = (unsafe { SlabPool::from_shm_zone(shm_zone) }) else {
            return Status::NGX_ERROR.into();
        };
        let log = shm_zone.shm.log;
        let zone = if !old.is_null() {
            let zone = old.cast::<Zone>();
            // SAFETY: `old` is the header this function returned last cycle.
            if unsafe { (*zone).magic } != MAGIC {
                error!(
                    log,
                    "pow_shield: zone \"pow_shield\" has an unknown layout; restart nginx"
                );
                return Status::NGX_ERROR.into();
            }
            zone
        } else {
            match create_header(&pool) {
                Some(zone) => zone,
                None => return Status::NGX_ERROR.into(),
            }
        };
        // SAFETY: the header is initialised; only this master writes it here.
        if wants.metrics && unsafe { (*zone).metrics.is_null() } {
            let Some(slots) = create_slots(&pool) else {
                error!(
                    log,
                    "pow_shield: zone \"pow_shield\" has no room for the metrics of \
                     \"pow_shield_status\" ({} bytes); make \"pow_shield_zone\" larger",
                    core::mem::size_of::<Slots>()
                );
                return Status::NGX_ERROR.into();
            };
            // SAFETY: as above; workers read it only after they fork.
            unsafe { (*zone).metrics = slots };
        }
        shm_zone.data = zone.cast();
        Status::NGX_OK.into()
    })
}

fn create_header(pool: &SlabPool) -> Option<*mut Zone> {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes).ok()?;
    let shpool: *mut ngx_slab_pool_t = ptr::from_ref(pool.as_ref()).cast_mut();
    let locked = pool.lock();
    // SAFETY: the pool is locked; the size is that of the header.
    let zone = unsafe { nginx_sys::ngx_slab_alloc_locked(shpool, core::mem::size_of::<Zone>()) }
        .cast::<Zone>();
    if zone.is_null() {
        return None;
    }
    // SAFETY: `zone` is fresh, suitably aligned slab memory of the right size;
    // the tables are initialised in place because they are self-referential.
    unsafe {
        ptr::addr_of_mut!((*zone).magic).write(MAGIC);
        ptr::addr_of_mut!((*zone).secret).write(bytes);
        ptr::addr_of_mut!((*zone).spent_refused).write(0);
        ptr::addr_of_mut!((*zone).buckets_refused).write(0);
        ptr::addr_of_mut!((*zone).bots).write(BotCounters::new());
        ptr::addr_of_mut!((*zone).limit_places).write(LimitPlaces::new());
        ptr::addr_of_mut!((*zone).metrics).write(ptr::null_mut());
        // Zero atomics: every slot free, every Redis up.
        ptr::write_bytes(ptr::addr_of_mut!((*zone).redis_health), 0, 1);
        Table::init(ptr::addr_of_mut!((*zone).buckets));
        Table::init(ptr::addr_of_mut!((*zone).spent));
        Table::init(ptr::addr_of_mut!((*zone).strikes));
        Table::init(ptr::addr_of_mut!((*zone).refusals));
        (*shpool).data = zone.cast();
        // The zone evicts on exhaustion; nginx need not log every failure.
        (*shpool).set_log_nomem(0);
    }
    drop(locked);
    Some(zone)
}

/// Zeroed slots for every worker, from the slab (page-aligned: larger than
/// half a page).
fn create_slots(pool: &SlabPool) -> Option<*mut Slots> {
    let shpool: *mut ngx_slab_pool_t = ptr::from_ref(pool.as_ref()).cast_mut();
    let size = core::mem::size_of::<Slots>();
    let locked = pool.lock();
    // SAFETY: the pool is locked (old workers may still use it).
    let slots = unsafe { nginx_sys::ngx_slab_alloc_locked(shpool, size) }.cast::<Slots>();
    drop(locked);
    if slots.is_null() || !(slots as usize).is_multiple_of(core::mem::align_of::<Slots>()) {
        return None;
    }
    // SAFETY: fresh memory of the slots' size; zero bytes are zero atomics.
    unsafe { ptr::write_bytes(slots.cast::<u8>(), 0, size) };
    Some(slots)
}

/// A worker's handle on the zone: the header and its slab pool.
#[derive(Clone)]
pub struct SharedZone {
    pool: SlabPool,
    zone: NonNull<Zone>,
    /// The zone's size (`pow_shield_zone`).
    size: usize,
}

impl SharedZone {
    /// The zone `add_zone` returned, once nginx has initialised it (null:
    /// none was added).
    ///
    /// # Safety
    /// `shm_zone` is null or what [`add_zone`] returned, and nginx has run
    /// its `init` (the cycle's zones are initialised before `init_module`).
    pub unsafe fn from_shm_zone(shm_zone: *mut ngx_shm_zone_t) -> Option<Self> {
        // SAFETY: after init, a zone added by add_zone is mapped for the
        // process's lifetime and its data is the header (the contract).
        unsafe {
            let shm_zone = shm_zone.as_ref()?;
            let pool = SlabPool::from_shm_zone(shm_zone)?;
            let zone = NonNull::new(shm_zone.data.cast::<Zone>())?;
            if zone.as_ref().magic != MAGIC {
                return None;
            }
            Some(Self {
                pool,
                zone,
                size: shm_zone.shm.size,
            })
        }
    }

    /// The random HMAC key made with the zone, for configurations without
    /// a secret: kept across reloads with the zone, so outstanding
    /// challenges stay valid.
    pub fn random_secret(&self) -> &[u8; 32] {
        // SAFETY: written once when the header is made, before any worker
        // exists, and never again: a plain read needs no lock.
        unsafe { &self.zone.as_ref().secret }
    }

    /// The metrics slot of worker `index` (workers beyond `SLOTS` share),
    /// if a status location made the slots.
    pub fn metrics_slot(&self, index: usize) -> Option<&'static Slot> {
        // SAFETY: the slots, once made, live as long as the zone, which is
        // mapped for the life of the process; they are atomics only.
        unsafe { self.zone.as_ref().metrics.as_ref() }.and_then(|s| s.get(index % SLOTS))
    }

    /// The node's words on Redis's health (`health`).
    pub fn redis_health(&self) -> &'static health::Peers {
        // SAFETY: zeroed when the header is made and only ever accessed
        // through atomics; the header lives as long as the zone, which is
        // mapped for the life of the process.
        unsafe { &(*self.zone.as_ptr()).redis_health }
    }

    /// Every worker's slots (none before a status location made them).
    pub fn metrics_slots(&self) -> &[Slot] {
        // SAFETY: as in `metrics_slot`.
        unsafe { self.zone.as_ref().metrics.as_ref() }.map_or(&[], |s| &s[..])
    }

    /// The tables' numbers, read under the lock.
    pub fn stats(&self) -> ZoneStats {
        self.with_locked(|zone, _| {
            let tables = [&zone.buckets, &zone.spent, &zone.strikes].map(|t| t.stats());
            ZoneStats {
                entries: tables.map(|(entries, _)| entries),
                evictions: tables.map(|(_, evictions)| evictions),
                spent_refused: zone.spent_refused,
                buckets_refused: zone.buckets_refused,
                size_bytes: self.size as u64,
            }
        })
    }

    /// The part of the zone spent records may take: a share of the
    /// entries its pages hold (`store::spent`), for spent challenges whose
    /// records live at most `token_lifetime_ms`.
    pub fn spent_room(&self, token_lifetime_ms: u64) -> SpentRoom {
        let pool = self.pool.as_ref();
        let bytes = (pool.end as usize).saturating_sub(pool.start as usize);
        SpentRoom::of_store((bytes / table::ENTRY_SLOT) as u64, token_lifetime_ms)
    }

    /// Runs `f` on the header's tables with the zone locked. (Inline: `f`'s
    /// answer is made where the caller reads it, not copied out.)
    #[inline(always)]
    pub fn with_locked<R>(&self, f: impl FnOnce(&mut Zone, &Allocator) -> R) -> R {
        let locked = self.pool.lock();
        let alloc = Allocator {
            pool: ptr::from_ref(self.pool.as_ref()).cast_mut(),
        };
        // SAFETY: the header lives as long as the zone, and the slab mutex we
        // hold serialises every access to it across workers.
        let zone = unsafe { &mut *self.zone.as_ptr() };
        let result = f(zone, &alloc);
        drop(locked);
        result
    }
}

/// Allocation in a pool whose lock the caller holds.
pub struct Allocator {
    pool: *mut ngx_slab_pool_t,
}

impl Allocator {
    fn alloc(&self, size: usize) -> *mut c_void {
        // SAFETY: only constructed inside `with_locked`, so the lock is held.
        unsafe { nginx_sys::ngx_slab_alloc_locked(self.pool, size) }
    }

    fn free(&self, p: *mut c_void) {
        // SAFETY: as above; `p` came from `alloc` on this pool.
        unsafe { nginx_sys::ngx_slab_free_locked(self.pool, p) }
    }
}
