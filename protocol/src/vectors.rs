//! The test vectors of docs/protocol.md §10, checked against this code:
//! the hash rule (`work`), and the complete token (`token`, `verify`).
//! The document is read at compile time, so a vector edited there is
//! checked here.
//!
//! Compiled only for `cargo test`: mod.rs declares it `#[cfg(test)] mod vectors;`.

use sha2::{Digest, Sha256};

use super::token::sign_payload;
use super::*;

const PROTOCOL: &str = include_str!("../../docs/protocol.md");

/// The lines of the fenced block whose info string is `info`.
fn fenced_block(info: &str) -> Vec<&'static str> {
    let opening = format!("```{info}");
    let mut lines = PROTOCOL.lines().skip_while(|l| l.trim_end() != opening);
    assert!(
        lines.next().is_some(),
        "docs/protocol.md has no ```{info} block"
    );
    let block: Vec<&str> = lines.take_while(|l| !l.starts_with("```")).collect();
    assert!(!block.is_empty(), "the ```{info} block is empty");
    block
}

struct Vector {
    salt: &'static str,
    nonce: &'static str,
    difficulty: u8,
    hash: &'static str,
    valid: bool,
}

fn vectors() -> Vec<Vector> {
    vectors_of("pow-shield-vectors")
}

/// The bits vectors: `difficulty` holds the bits asked.
fn bits_vectors() -> Vec<Vector> {
    vectors_of("pow-shield-bits-vectors")
}

fn vectors_of(block: &str) -> Vec<Vector> {
    fenced_block(block)
        .into_iter()
        .map(|line| match line.split(' ').collect::<Vec<_>>()[..] {
            [salt, nonce, difficulty, hash, valid] => Vector {
                salt,
                nonce,
                difficulty: difficulty.parse().expect(line),
                hash,
                valid: match valid {
                    "yes" => true,
                    "no" => false,
                    _ => panic!("valid must be yes or no: {line}"),
                },
            },
            _ => panic!("expected `salt nonce difficulty hash valid`: {line}"),
        })
        .collect()
}

#[test]
fn protocol_doc_has_the_twenty_vectors() {
    assert_eq!(vectors().len(), 20);
}

#[test]
fn every_vector_hash_is_sha256_of_salt_text_then_nonce_text() {
    for v in vectors() {
        let hash = hex::encode(Sha256::digest(format!("{}{}", v.salt, v.nonce)));
        assert_eq!(hash, v.hash, "salt {} nonce {}", v.salt, v.nonce);
    }
}

#[test]
fn every_vector_is_accepted_exactly_when_the_doc_says_valid() {
    for v in vectors() {
        let accepted = is_valid_nonce(v.nonce.as_bytes())
            && meets_difficulty(v.salt.as_bytes(), v.nonce.as_bytes(), v.difficulty);
        assert_eq!(accepted, v.valid, "salt {} nonce {:?}", v.salt, v.nonce);
    }
}

#[test]
fn valid_vectors_for_difficulties_1_to_5_are_the_smallest_nonces() {
    // The 20-digit row is valid but not the smallest; every other valid one is.
    for v in vectors().iter().filter(|v| v.valid && v.nonce.len() < 20) {
        assert_eq!(
            solve(v.salt, v.difficulty).to_string(),
            v.nonce,
            "salt {}",
            v.salt
        );
    }
}

#[test]
fn every_bits_vector_hash_is_sha256_and_is_accepted_exactly_when_valid() {
    let vectors = bits_vectors();
    assert_eq!(vectors.len(), 15);
    for v in vectors {
        let hash = hex::encode(Sha256::digest(format!("{}{}", v.salt, v.nonce)));
        assert_eq!(hash, v.hash, "salt {} nonce {}", v.salt, v.nonce);
        let accepted = is_valid_nonce(v.nonce.as_bytes())
            && meets_bits(v.salt.as_bytes(), v.nonce.as_bytes(), v.difficulty);
        assert_eq!(accepted, v.valid, "salt {} nonce {}", v.salt, v.nonce);
        if v.valid {
            assert_eq!(solve_bits(v.salt, v.difficulty).to_string(), v.nonce);
        }
    }
}

/// The rows of the Markdown table whose header names `column`.
fn table_rows(column: &str) -> Vec<Vec<String>> {
    let header = format!("| salt | nonce | {column} |");
    PROTOCOL
        .lines()
        .skip_while(|l| !l.starts_with(&header))
        .skip(2)
        .take_while(|l| l.starts_with("| `"))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().trim_matches('`').to_owned())
                .collect()
        })
        .collect()
}

#[test]
fn markdown_tables_show_the_same_vectors_as_the_machine_blocks() {
    for (column, vectors) in [("difficulty", vectors()), ("bits", bits_vectors())] {
        let rows = table_rows(column);
        assert_rows_are(&rows, &vectors);
    }
}

fn assert_rows_are(rows: &[Vec<String>], vectors: &[Vector]) {
    assert_eq!(rows.len(), vectors.len());
    for (row, v) in rows.iter().zip(vectors) {
        assert_eq!(row[0], v.salt);
        assert_eq!(row[1], v.nonce);
        assert_eq!(row[2], v.difficulty.to_string());
        assert_eq!(row[3], v.hash);
        assert_eq!(row[4].starts_with("yes"), v.valid, "{row:?}");
    }
}

/// The value of the `name` line of the `pow-shield-token` block.
fn token_example(name: &str) -> &'static str {
    example_line("pow-shield-token", name)
}

fn example_line(block: &str, name: &str) -> &'static str {
    fenced_block(block)
        .into_iter()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("the token example has no `{name}` line"))
}

fn example_keys() -> SecretKeys {
    SecretKeys::single(Secret::new(token_example("key").as_bytes()).unwrap())
}

const EXAMPLE_IP: &str = "203.0.113.7";
const EXAMPLE_TS: u64 = 1_796_034_492_000;

#[test]
fn example_token_is_the_signed_example_payload() {
    let key = Secret::new(token_example("key").as_bytes()).unwrap();
    assert_eq!(
        sign_payload(&key, token_example("payload").as_bytes()),
        token_example("token")
    );
}

#[test]
fn issuing_the_example_challenge_gives_the_example_token() {
    let salt: [u8; SALT_LEN] = hex::decode("6c17a261001047c8b3e83591c3269c2e")
        .unwrap()
        .try_into()
        .unwrap();
    let c =
        issue_challenge_bits_with_salt(&example_keys(), EXAMPLE_IP, EXAMPLE_TS, 60_000, 18, salt);
    assert_eq!(c.token, token_example("token"));
}

#[test]
fn example_token_without_bits_verifies_with_its_hex_nonce_for_16_bits() {
    let key = Secret::new(example_line("pow-shield-token-hex", "key").as_bytes()).unwrap();
    let token = example_line("pow-shield-token-hex", "token");
    let payload = example_line("pow-shield-token-hex", "payload");
    assert_eq!(sign_payload(&key, payload.as_bytes()), token);
    let nonce = example_line("pow-shield-token-hex", "nonce");
    let got = verify_solution(
        &SecretKeys::single(key),
        Some(token.as_bytes()),
        Some(nonce.as_bytes()),
        EXAMPLE_IP,
        1,
        EXAMPLE_TS + 1_000,
        60_000,
    );
    assert_eq!(got.map(|s| s.bits), Ok(16));
}

#[test]
fn example_token_with_example_nonce_verifies_for_its_address() {
    let verify = |ip: &str| {
        verify_solution(
            &example_keys(),
            Some(token_example("token").as_bytes()),
            Some(token_example("nonce").as_bytes()),
            ip,
            1,
            EXAMPLE_TS + 1_000,
            60_000,
        )
    };
    assert_eq!(verify(EXAMPLE_IP).unwrap().bits, 18);
    assert_eq!(verify("203.0.113.8"), Err(Rejection::WrongIp));
}

/// The problem types table of docs/protocol.md §7.6 is `wire::PROBLEMS`,
/// row for row.
#[test]
fn protocol_doc_lists_every_problem_type() {
    let rows: Vec<(u16, String, String)> = PROTOCOL
        .lines()
        .skip_while(|l| !l.starts_with("### 7.6"))
        .skip_while(|l| !l.starts_with("| status | `error` / `title` | `type` |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(|c| c.trim().trim_matches('`')).collect();
            (
                cells[1].parse().expect(l),
                cells[2].to_owned(),
                cells[3].to_owned(),
            )
        })
        .collect();
    let code: Vec<(u16, String, String)> = wire::PROBLEMS
        .iter()
        .map(|p| (p.status, p.error.to_owned(), p.uri.to_owned()))
        .collect();
    assert_eq!(rows, code);
}

/// The Equi-X vectors (docs/protocol.md §10, "Equi-X"): each hash is
/// SHA-256 of salt, nonce and solution bytes, and the verifier accepts a
/// row exactly when the document says so.
#[cfg(feature = "equix")]
#[test]
fn every_equix_vector_hash_is_sha256_and_is_accepted_exactly_when_valid() {
    let rows = fenced_block("pow-shield-equix-vectors");
    assert_eq!(rows.len(), 7);
    for line in rows {
        let [salt, nonce, bits, solution, hash, valid] = line.split(' ').collect::<Vec<_>>()[..]
        else {
            panic!("expected `salt nonce bits solution hash valid`: {line}");
        };
        let bytes = decode_solution(solution.as_bytes()).expect(line);
        let digest = solution_hash(salt.as_bytes(), nonce.as_bytes(), &bytes);
        assert_eq!(hex::encode(digest), hash, "{line}");
        let proof = Proof {
            nonce: Some(nonce.as_bytes()),
            solution: Some(solution.as_bytes()),
        };
        let bits: u8 = bits.parse().expect(line);
        assert_eq!(
            proves(Work::Equix, salt.as_bytes(), proof, bits),
            valid == "yes",
            "{line}"
        );
    }
}
