//! The Node client's Equi-X solver for WebAssembly (docs/protocol.md §5),
//! where the native addon does not load: the `equix` crate (Tor's; HashX
//! interpreted, as WebAssembly cannot map the code its compiler makes) for
//! the challenge string `salt ‖ nonce`, and a solution pays when
//! `SHA-256(salt ‖ nonce ‖ solution)` starts with `bits` zero bits.
//! lib/wasm.js confirms that hash with node:crypto before it sends one,
//! and the server checks everything.
//!
//! The interface (lib/equix.js): write the salt at `salt_buffer()` (at
//! most `salt_capacity()` bytes), then `search(len, bits, from, to)`: the
//! smallest nonce of `from..to` with a paying solution, its 16 bytes at
//! `solution_buffer()`; -1 for none, -2 for arguments it does not take.
//! Nonces are f64 (exact below 2^53).

use equix::{EquiXBuilder, RuntimeOption, SolverMemory};
use sha2::{Digest, Sha256};

/// The longest salt taken (the module's are 32 hex characters).
const SALT_CAPACITY: usize = 1024;
/// Most digits of a nonce (every u64).
const MAX_DIGITS: usize = 20;

struct State {
    salt: [u8; SALT_CAPACITY],
    solution: [u8; 16],
    memory: Option<SolverMemory>,
}

/// WebAssembly runs one thread per instance: this state is the instance's.
static mut STATE: State = State {
    salt: [0; SALT_CAPACITY],
    solution: [0; 16],
    memory: None,
};

fn state() -> &'static mut State {
    // SAFETY: an instance runs on one thread and no export re-enters
    // another, so this is the only live reference.
    unsafe { &mut *core::ptr::addr_of_mut!(STATE) }
}

#[no_mangle]
pub extern "C" fn salt_buffer() -> *mut u8 {
    state().salt.as_mut_ptr()
}

#[no_mangle]
pub extern "C" fn salt_capacity() -> u32 {
    SALT_CAPACITY as u32
}

#[no_mangle]
pub extern "C" fn solution_buffer() -> *const u8 {
    state().solution.as_ptr()
}

/// Bytes of memory a solve works in.
#[no_mangle]
pub extern "C" fn memory_size() -> u32 {
    SolverMemory::SIZE as u32
}

fn zero_bits(digest: &[u8]) -> u32 {
    let mut zeros = 0;
    for byte in digest {
        if *byte != 0 {
            return zeros + byte.leading_zeros();
        }
        zeros += 8;
    }
    zeros
}

fn decimal(mut n: u64, buf: &mut [u8; MAX_DIGITS]) -> &[u8] {
    let mut start = MAX_DIGITS;
    loop {
        start -= 1;
        buf[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[start..];
        }
    }
}

#[no_mangle]
pub extern "C" fn search(len: u32, bits: u32, from: f64, to: f64) -> f64 {
    let st = state();
    let len = len as usize;
    let valid = |x: f64| x.is_finite() && (0.0..=9_007_199_254_740_991.0).contains(&x);
    if len == 0 || len > SALT_CAPACITY || !(1..=48).contains(&bits) || !valid(from) || !valid(to) {
        return -2.0;
    }
    let mut builder = EquiXBuilder::new();
    builder.runtime(RuntimeOption::InterpretOnly);
    let memory = st.memory.get_or_insert_with(SolverMemory::new);
    let salt = &st.salt[..len];
    let mut digits = [0u8; MAX_DIGITS];
    let mut challenge = Vec::with_capacity(len + MAX_DIGITS);
    for nonce in from as u64..to as u64 {
        let nonce_digits = decimal(nonce, &mut digits);
        challenge.clear();
        challenge.extend_from_slice(salt);
        challenge.extend_from_slice(nonce_digits);
        let Ok(equix) = builder.build(&challenge) else {
            continue;
        };
        for solution in equix.solve_with_memory(memory) {
            let bytes = solution.to_bytes();
            let mut hasher = Sha256::new();
            hasher.update(&challenge);
            hasher.update(bytes);
            if zero_bits(&hasher.finalize()) >= bits {
                st.solution = bytes;
                return nonce as f64;
            }
        }
    }
    -1.0
}
