//! http-level settings: the secret (`pow_shield_secret`,
//! `pow_shield_secret_file`, or the zone's random key) and the zone
//! (`pow_shield_zone`).

use nginx_sys::{ngx_conf_t, ngx_cycle_t, NGX_LOG_NOTICE};
use ngx::core::Status;
use ngx::http::HttpModuleMainConf;
use pow_shield_core::config::args;
use pow_shield_core::config::settings::DEFAULT_ZONE_SIZE;

use super::setters::{full_path, set_once, set_once_of, setter, DirectiveError};
use super::MainConf;
use crate::ffi::PowShield;
use crate::protocol::{Secret, SecretKeys};
use crate::shm::{self, SharedZone};

/// The shared zone's name; one per configuration.
const ZONE_NAME: &str = "pow_shield";

// One of pow_shield_secret and pow_shield_secret_file sets the key: a
// second of the same is a duplicate, the other one a conflict naming both.
setter!(set_secret, MainConf, |d, mcf| {
    set_once_of(&mut mcf.secret_from, "pow_shield_secret")?;
    mcf.keys = Some(args::secret(d.value())?);
    Ok(())
});

setter!(set_secret_file, MainConf, |d, mcf| {
    set_once_of(&mut mcf.secret_from, "pow_shield_secret_file")?;
    let v = d.value();
    let path =
        full_path(d.cf, v).ok_or_else(|| DirectiveError::invalid(v, "cannot resolve the path"))?;
    // Reading a file while parsing the configuration is what nginx
    // itself does (certificates, maps); no request is being served.
    let contents = std::fs::read(&path)
        .map_err(|e| DirectiveError::invalid(v, format_args!("cannot read \"{path}\": {e}")))?;
    mcf.keys = Some(args::secret_file(v, &path, &contents)?);
    Ok(())
});

setter!(set_zone, MainConf, |d, mcf| {
    let size = args::zone_size(d.value(), shm::min_zone_size())?;
    set_once(&mut mcf.zone_size, size)
});

/// Adds the zone if anything is shielded or a status location reads it,
/// and says when challenges will be signed with a random key.
pub(super) fn add_zone(cf: &mut ngx_conf_t, mcf: &mut MainConf) -> Result<(), ()> {
    // The status location reads the zone even where nothing is shielded,
    // and bots' nonces are recorded there.
    if !mcf.shielded && !mcf.status && mcf.bots.is_empty() {
        return Ok(());
    }
    let size = mcf.zone_size.unwrap_or(DEFAULT_ZONE_SIZE);
    mcf.zone = shm::add_zone(cf, ZONE_NAME, size, mcf.status)?;
    if mcf.shielded && mcf.secret_from.is_none() {
        log_at!(
            NGX_LOG_NOTICE,
            cf.log,
            "pow_shield: no \"pow_shield_secret\" or \"pow_shield_secret_file\": challenges \
             are signed with a random key made at start, which other nodes cannot verify"
        );
    }
    Ok(())
}

/// `init_module`, first, once nginx has initialised the zones: the zone
/// resolved for every later reader (`SharedZone::from_conf`), so that no
/// request checks the shared memory's header again.
pub(crate) fn resolve_zone(cycle: &mut ngx_cycle_t) {
    let Some(mcf) = PowShield::main_conf_mut(cycle) else {
        return;
    };
    // SAFETY: `zone` is null or what shm::add_zone returned, and nginx has
    // initialised the cycle's zones before init_module.
    mcf.resolved_zone = unsafe { SharedZone::from_shm_zone(mcf.zone) };
}

/// `init_module`, once nginx has initialised the zones: without a
/// configured secret, challenges are signed with the zone's random key
/// (kept across reloads with the zone, so outstanding challenges stay
/// valid).
pub(crate) fn adopt_zone_secret(cycle: &mut ngx_cycle_t) -> Status {
    let Some(mcf) = PowShield::main_conf_mut(cycle) else {
        return Status::NGX_OK;
    };
    if mcf.secret_from.is_some() || mcf.zone.is_null() {
        return Status::NGX_OK;
    }
    // Neither can fail (nginx initialised the zone; its key is 32 bytes,
    // the shortest accepted); if one did, init_module must still succeed:
    // nginx treats its failure as fatal, on a reload too. Challenges are
    // then not issued (500) until the next reload.
    let secret = SharedZone::from_conf(mcf).and_then(|zone| Secret::new(zone.random_secret()).ok());
    match secret {
        Some(current) => {
            mcf.keys = Some(SecretKeys {
                current,
                previous: None,
            })
        }
        None => error!(
            cycle.log,
            "pow_shield: the zone's random secret could not be read; no challenge can be issued"
        ),
    }
    Status::NGX_OK
}

/// `init_module`: places the configuration's limit names in the zone's
/// metrics slots (`LimitPlaces`): a name counted before a reload counts on
/// where it did, a new one starts at 0 (a place taken over from a name
/// gone is zeroed; a reload's old workers, finishing their requests, may
/// still add to it under the old name).
pub(crate) fn place_limit_names(cycle: &mut ngx_cycle_t) {
    let Some(mcf) = PowShield::main_conf_mut(cycle) else {
        return;
    };
    let Some(zone) = SharedZone::from_conf(mcf) else {
        return;
    };
    let placed = zone.with_locked(|z, _| z.limit_places.place(&mcf.limit_names));
    for &place in &placed.cleared {
        for slot in zone.metrics_slots() {
            slot.clear_limit(place);
        }
    }
    mcf.limit_places = placed.places;
}

// Here rather than in shm/, so that the zone needs nothing of the
// configuration.
impl SharedZone {
    /// The zone of a configuration, as `init_module` resolved it (none
    /// before: nothing reads it before nginx initialised the cycle's
    /// zones).
    #[inline]
    pub fn from_conf(mcf: &MainConf) -> Option<Self> {
        mcf.resolved_zone.clone()
    }
}
