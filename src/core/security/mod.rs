//! Who may connect, and what they may do, shared by every protocol so STOMP logins, SASL
//! PLAIN and SASL SCRAM check the same users and every protocol the same permissions.
//!
//! Users are kept as SCRAM credentials (salt, iterations, stored key, server key), never as
//! passwords: a credential verifies a plain password (PLAIN, STOMP passcodes) as well as a
//! SCRAM proof, and reveals nothing a client could log in with.

pub mod audit;
mod credential;
pub mod permissions;
mod principal;
pub mod scram;
mod users;

pub use credential::{CredentialError, ScramCredential, DEFAULT_ITERATIONS};
pub use permissions::{Denied, Grants, Permission, Permissions, RoleNames, RoleSet};
pub use principal::{Authorizer, Principal, QueueLimit, QueueSlot, UserPolicy};
pub use users::{AuthError, Authenticator, Secret};
pub use weir_scram::ScramHash;
