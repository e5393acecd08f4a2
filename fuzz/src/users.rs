//! The fuzzing broker's users, roles and permissions, and how a script names them.

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use weir::core::security::{ScramCredential, ScramHash, DEFAULT_ITERATIONS};

/// alice: SCRAM-SHA-256 credential; carol: SCRAM-SHA-512 credential; bob: a plain-text
/// password (both SCRAM hashes). Anonymous clients are allowed too, as guests, so every
/// mechanism is offered; passwords need TLS, so both sides of that check are reached.
pub const USERS: [(&str, &str); 3] = [
    ("alice", "wonderland"),
    ("bob", "builder"),
    ("carol", "christmas"),
];

pub fn config() -> String {
    let credential = |hash, password| {
        ScramCredential::derive(hash, password, DEFAULT_ITERATIONS).expect("credential")
    };
    format!(
        r##"
[security]
allow_anonymous = true
login_failure_delay = "0s"
require_tls_for_passwords = true
anonymous_roles = ["guest"]

[security.permissions."#"]
send = ["ops", "guest"]
consume = ["ops", "guest"]
browse = ["ops", "guest"]
create_address = ["ops", "guest"]
create_durable_queue = ["ops"]
delete_durable_queue = ["ops"]
create_non_durable_queue = ["ops", "guest"]

[security.permissions."q.1.#"]
send = ["ops"]
consume = ["audit"]
browse = ["audit", "guest"]

[[users]]
name = "alice"
credential = "{}"
roles = ["ops"]

[[users]]
name = "bob"
password = "builder"
roles = ["audit"]
max_connections = 3
max_queues = 4

[[users]]
name = "carol"
credential = "{}"
roles = ["ops", "audit"]

# Queues grow across the whole run: keep each small.
[address_settings."#"]
max_size_bytes = 262144
address_full_policy = "DROP"
max_memory_messages = 100
"##,
        credential(ScramHash::Sha256, "wonderland"),
        credential(ScramHash::Sha512, "christmas"),
    )
}

/// A user name in a script: mostly the configured ones, so logins succeed often.
#[derive(Arbitrary, Debug, Clone)]
pub enum UserName {
    Alice,
    Bob,
    Carol,
    Unknown,
    Other(String),
}

impl UserName {
    pub fn name(&self) -> &str {
        match self {
            UserName::Alice => USERS[0].0,
            UserName::Bob => USERS[1].0,
            UserName::Carol => USERS[2].0,
            UserName::Unknown => "mallory",
            UserName::Other(name) => name,
        }
    }

    /// The user's configured password, or one that is wrong.
    pub fn password(&self) -> &str {
        USERS
            .iter()
            .find(|(name, _)| *name == self.name())
            .map_or("guess", |(_, password)| password)
    }
}

/// A password in a script: right for the user, or anything.
#[derive(Arbitrary, Debug, Clone)]
pub enum Password {
    Right,
    Other(String),
}

impl Password {
    pub fn for_user<'a>(&'a self, user: &'a UserName) -> &'a str {
        match self {
            Password::Right => user.password(),
            Password::Other(p) => p,
        }
    }
}
