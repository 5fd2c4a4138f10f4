//! Prints one of cluster mode's Lua scripts as Redis receives it (the
//! composer's text, `Scripts::for_mode`): for the integration suite, which
//! runs them at a clock it sets, and for the Lua peer of bench/cluster.sh.
//!
//!     scripts [--cluster] <window|approx|stacked|checks|strike|spend|gen_spend|batch|generation>
//!     scripts --list [--cluster]

use std::process::ExitCode;

use pow_shield_core::cluster::scripts::Scripts;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cluster = args.iter().any(|a| a == "--cluster");
    let scripts = Scripts::for_mode(cluster);
    let names: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if args.iter().any(|a| a == "--list") {
        for script in scripts.iter() {
            println!("{} {}", script.name, script.sha1);
        }
        return ExitCode::SUCCESS;
    }
    let [name] = names.as_slice() else {
        eprintln!("usage: scripts [--cluster] <name> | --list [--cluster]");
        return ExitCode::from(2);
    };
    match scripts.iter().find(|script| script.name == *name) {
        Some(script) => {
            print!("{}", script.text);
            ExitCode::SUCCESS
        }
        None => {
            let known: Vec<&str> = scripts.iter().map(|s| s.name).collect();
            eprintln!(
                "no script {name} in this mode (known: {})",
                known.join(", ")
            );
            ExitCode::from(2)
        }
    }
}
