//! What cluster mode decides without I/O: the Lua scripts Redis runs for
//! every operation (`scripts`: their parts, the one composer, each mode's
//! set, and the decoding of their replies).

pub mod scripts;
