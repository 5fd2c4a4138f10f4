//! The portable engine: one `sha2::compress256` of the last block per
//! nonce, its digits incremented in place.

use sha2::compress256;
use sha2::digest::generic_array::GenericArray;

use super::{add_decimal, meets, Block, Search};

pub(super) fn search(search: &Search, block: &Block, from: u64, to: u64) -> Option<u64> {
    let mut bytes = GenericArray::clone_from_slice(&block.bytes);
    let blocks = core::slice::from_mut(&mut bytes);
    for nonce in from..to {
        let mut state = search.midstate;
        compress256(&mut state, blocks);
        let ab = (u64::from(state[0]) << 32) | u64::from(state[1]);
        if meets(ab, search.bits) {
            return Some(nonce);
        }
        add_decimal(&mut blocks[0][block.digits.clone()], 1);
    }
    None
}
