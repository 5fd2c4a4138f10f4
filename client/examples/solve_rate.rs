//! `solve_rate DIFFICULTY SALT...`: solves each salt with the library's
//! `solve` (every core, the default options but no time limit) and prints
//! `<nonce> <seconds>` per salt: bench/solvers.sh compares this with the
//! CLI, the Python and the Node clients on the same challenges.

use std::process::ExitCode;
use std::time::Instant;

use pow_shield_client::{solve, SolveOptions};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(difficulty) = args.first().and_then(|d| d.parse::<u8>().ok()) else {
        eprintln!("usage: solve_rate DIFFICULTY SALT...");
        return ExitCode::from(2);
    };
    let options = SolveOptions {
        max_solve_time: None,
        ..SolveOptions::default()
    };
    for salt in &args[1..] {
        let start = Instant::now();
        match solve(salt, difficulty, &options) {
            Ok(nonce) => println!("{nonce} {:.6}", start.elapsed().as_secs_f64()),
            Err(e) => {
                eprintln!("solve_rate: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
