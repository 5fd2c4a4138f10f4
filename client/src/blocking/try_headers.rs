//! The headers of one try of a request.

use pow_shield_protocol::wire;

use crate::Proof;

/// The headers of one try: the caller's, with a fresh solution replacing
/// any `X-PoW-*` the caller gave (which are kept on the first try only).
pub(super) fn headers_for(
    given: &[(String, String)],
    solution: Option<&(String, Proof)>,
    first: bool,
) -> Vec<(String, String)> {
    let is_pow = |name: &str| {
        name.eq_ignore_ascii_case(wire::HEADER_CHALLENGE)
            || name.eq_ignore_ascii_case(wire::HEADER_NONCE)
            || name.eq_ignore_ascii_case(wire::HEADER_SOLUTION)
    };
    let mut headers: Vec<(String, String)> = given
        .iter()
        .filter(|(k, _)| first || !is_pow(k))
        .cloned()
        .collect();
    if let Some((token, proof)) = solution {
        headers.push((wire::HEADER_CHALLENGE.to_owned(), token.clone()));
        for (name, value) in proof.headers() {
            headers.push((name.to_owned(), value));
        }
    }
    headers
}
