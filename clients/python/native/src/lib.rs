//! `pow_shield._native`: the protocol crate's nonce search (SHA-NI lanes
//! where the CPU has them) for the Python client. The Python side keeps
//! the loop (chunks, deadline, stop event, threads); each call searches
//! one range with the GIL released, so threads solve in parallel.
#![deny(unsafe_code)]

use pow_shield_protocol::{encode_solution, Engine, EquixSolver, Search};
use pyo3::prelude::*;

/// The smallest nonce in `start..end` whose SHA-256 with `salt` starts
/// with `bits` zero bits, or None. Every candidate is confirmed by the
/// plain SHA-256 before it is returned.
#[pyfunction]
fn search(py: Python<'_>, salt: &str, bits: u32, start: u64, end: u64) -> Option<u64> {
    let salt = salt.as_bytes().to_vec();
    py.allow_threads(move || Search::new(&salt, bits).run(start, end))
}

/// The smallest nonce in `start..end` with an Equi-X solution of
/// `salt ‖ nonce` whose hash starts with `bits` zero bits: `(nonce,
/// solution)`, the solution as `X-PoW-Solution` sends it, or None. Each
/// call works in its own solver memory (about 1.9 MB) with the GIL
/// released, so threads solve in parallel.
#[pyfunction]
fn equix_search(py: Python<'_>, salt: &str, bits: u8, start: u64, end: u64) -> Option<(u64, String)> {
    let salt = salt.to_owned();
    py.allow_threads(move || {
        let mut solver = EquixSolver::new();
        (start..end).find_map(|nonce| {
            let solution = solver.try_nonce(&salt, nonce, bits)?;
            Some((nonce, encode_solution(&solution)))
        })
    })
}

/// How HashX runs for Equi-X here, `compiled` or `interpreted`, and the
/// bytes of memory one solving thread works in.
#[pyfunction]
fn equix_info() -> (String, usize) {
    (EquixSolver::new().runtime().to_owned(), EquixSolver::MEMORY)
}

/// The engine the search runs: `sha-ni` (with its lanes) or `portable`.
#[pyfunction]
fn engine() -> String {
    Engine::detect().label()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(search, m)?)?;
    m.add_function(wrap_pyfunction!(engine, m)?)?;
    m.add_function(wrap_pyfunction!(equix_search, m)?)?;
    m.add_function(wrap_pyfunction!(equix_info, m)?)?;
    Ok(())
}
