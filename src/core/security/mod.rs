//! Who may connect, shared by every protocol so STOMP logins, SASL PLAIN and SASL SCRAM
//! check the same users.
//!
//! Users are kept as SCRAM credentials (salt, iterations, stored key, server key), never as
//! passwords: a credential verifies a plain password (PLAIN, STOMP passcodes) as well as a
//! SCRAM proof, and reveals nothing a client could log in with.

mod credential;
mod hash;
pub mod scram;
mod users;

pub use credential::{CredentialError, ScramCredential, DEFAULT_ITERATIONS};
pub use hash::ScramHash;
pub use users::{AuthError, Authenticator, Secret};
