//! `weir user add NAME`: makes the `[[users]]` entry for a user, so passwords never have to
//! be written into the config. The password comes from the terminal (asked twice, not
//! echoed) or, when stdin is not a terminal, from its first line.

use clap::{Args, Subcommand, ValueEnum};
use std::io::{BufRead, IsTerminal};
use std::process::ExitCode;
use weir::core::security::{ScramCredential, ScramHash, DEFAULT_ITERATIONS};

#[derive(Args)]
pub struct UserArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand)]
enum Action {
    /// Print a [[users]] entry for NAME with a SCRAM credential of its password.
    Add {
        name: String,
        /// The hash of the credential: the user logs in with PLAIN, a STOMP passcode or
        /// SCRAM with this hash.
        #[arg(long, value_enum, default_value_t = Mechanism::Sha256)]
        mechanism: Mechanism,
        /// PBKDF2 iterations (4096 to 10000000); more makes a leaked config slower to crack
        /// and each PLAIN login slower to check.
        #[arg(long, default_value_t = DEFAULT_ITERATIONS)]
        iterations: u32,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Mechanism {
    #[value(name = "sha-256")]
    Sha256,
    #[value(name = "sha-512")]
    Sha512,
}

pub fn run(args: UserArgs) -> ExitCode {
    match args.action {
        Action::Add {
            name,
            mechanism,
            iterations,
        } => match add(&name, mechanism, iterations) {
            Ok(entry) => {
                print!("{entry}");
                ExitCode::SUCCESS
            }
            Err(message) => {
                eprintln!("weir user add: {message}");
                ExitCode::FAILURE
            }
        },
    }
}

fn add(name: &str, mechanism: Mechanism, iterations: u32) -> Result<String, String> {
    if name.is_empty() {
        return Err("the user name must not be empty".into());
    }
    let password = read_password()?;
    if password.is_empty() {
        return Err("the password must not be empty".into());
    }
    let hash = match mechanism {
        Mechanism::Sha256 => ScramHash::Sha256,
        Mechanism::Sha512 => ScramHash::Sha512,
    };
    let credential =
        ScramCredential::derive(hash, &password, iterations).map_err(|e| e.to_string())?;
    Ok(format!(
        "[[users]]\nname = {}\ncredential = \"{credential}\"\n",
        toml::Value::String(name.to_owned())
    ))
}

fn read_password() -> Result<String, String> {
    if std::io::stdin().is_terminal() {
        let first = rpassword::prompt_password("Password: ").map_err(|e| e.to_string())?;
        let again = rpassword::prompt_password("Again: ").map_err(|e| e.to_string())?;
        if first != again {
            return Err("the passwords differ".into());
        }
        return Ok(first);
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| format!("cannot read the password from stdin: {e}"))?;
    Ok(line.trim_end_matches(['\n', '\r']).to_owned())
}
