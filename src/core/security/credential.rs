//! One user's SCRAM credential and its text form, PostgreSQL's
//! `SCRAM-SHA-256$<iterations>:<salt>$<stored key>:<server key>` (base64 fields).

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use std::fmt;
use std::str::FromStr;
use subtle::ConstantTimeEq;
use weir_scram::{ScramHash, MAX_ITERATIONS};

/// RFC 7677's minimum, and PostgreSQL's default.
pub const DEFAULT_ITERATIONS: u32 = 4096;
const SALT_LEN: usize = 16;
/// Below this, PBKDF2 no longer slows down guessing from a leaked config.
const MIN_ITERATIONS: u32 = 4096;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error("expected SCRAM-SHA-256$<iterations>:<salt>$<stored key>:<server key> (or SCRAM-SHA-512$...), as printed by `weir user add`")]
    Format,
    #[error("unknown mechanism '{0}': SCRAM-SHA-256 or SCRAM-SHA-512")]
    Mechanism(String),
    #[error("iterations must be {MIN_ITERATIONS} to {MAX_ITERATIONS}")]
    Iterations,
    #[error("{0} is not valid base64")]
    Base64(&'static str),
    #[error("{field} must be {expected} bytes for this mechanism")]
    KeyLength {
        field: &'static str,
        expected: usize,
    },
    #[error("the password is not valid under SASLprep (RFC 4013)")]
    Saslprep,
    #[error("no random numbers from the operating system: {0}")]
    Random(String),
}

#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub hash: ScramHash,
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl fmt::Debug for ScramCredential {
    // The keys verify logins; keep them out of logs that print the config.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramCredential")
            .field("hash", &self.hash)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

pub(super) fn random_bytes(n: usize) -> Result<Vec<u8>, CredentialError> {
    let mut out = vec![0; n];
    getrandom::fill(&mut out).map_err(|e| CredentialError::Random(e.to_string()))?;
    Ok(out)
}

/// The salted password for `password` as SCRAM clients compute it (SASLprep first).
pub(super) fn salted_password(
    hash: ScramHash,
    password: &str,
    salt: &[u8],
    iterations: u32,
) -> Result<Vec<u8>, CredentialError> {
    hash.salted_password(password, salt, iterations)
        .map_err(|_| CredentialError::Saslprep)
}

impl ScramCredential {
    /// A new credential for `password` with a fresh random salt.
    pub fn derive(
        hash: ScramHash,
        password: &str,
        iterations: u32,
    ) -> Result<Self, CredentialError> {
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(CredentialError::Iterations);
        }
        let salt = random_bytes(SALT_LEN)?;
        let salted = salted_password(hash, password, &salt, iterations)?;
        Ok(Self::from_salted(hash, iterations, salt, &salted))
    }

    pub(super) fn from_salted(
        hash: ScramHash,
        iterations: u32,
        salt: Vec<u8>,
        salted: &[u8],
    ) -> Self {
        let keys = hash.keys(salted);
        Self {
            hash,
            iterations,
            salt,
            stored_key: keys.stored_key,
            server_key: keys.server_key,
        }
    }

    /// Whether `password` is the one this credential was made from (PLAIN, STOMP passcodes).
    pub fn verify_password(&self, password: &str) -> bool {
        let Ok(salted) = salted_password(self.hash, password, &self.salt, self.iterations) else {
            return false;
        };
        self.verify_client_key(&self.hash.keys(&salted).client_key)
    }

    /// `H(ClientKey) == StoredKey`, in constant time.
    pub(super) fn verify_client_key(&self, client_key: &[u8]) -> bool {
        bool::from(self.hash.h(client_key).ct_eq(&self.stored_key))
    }
}

impl fmt::Display for ScramCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}${}:{}${}:{}",
            self.hash.mechanism(),
            self.iterations,
            BASE64.encode(&self.salt),
            BASE64.encode(&self.stored_key),
            BASE64.encode(&self.server_key)
        )
    }
}

impl FromStr for ScramCredential {
    type Err = CredentialError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut parts = text.split('$');
        let (Some(mechanism), Some(params), Some(keys), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(CredentialError::Format);
        };
        let hash = ScramHash::from_mechanism(mechanism)
            .ok_or_else(|| CredentialError::Mechanism(mechanism.to_owned()))?;
        let (iterations, salt) = params.split_once(':').ok_or(CredentialError::Format)?;
        let (stored, server) = keys.split_once(':').ok_or(CredentialError::Format)?;
        let iterations: u32 = iterations.parse().map_err(|_| CredentialError::Format)?;
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(CredentialError::Iterations);
        }
        let decode = |field: &'static str, text: &str| {
            BASE64
                .decode(text)
                .map_err(|_| CredentialError::Base64(field))
        };
        let salt = decode("salt", salt)?;
        if salt.is_empty() {
            return Err(CredentialError::Format);
        }
        let key = |field: &'static str, text: &str| {
            let key = decode(field, text)?;
            if key.len() == hash.output_len() {
                Ok(key)
            } else {
                Err(CredentialError::KeyLength {
                    field,
                    expected: hash.output_len(),
                })
            }
        };
        Ok(Self {
            hash,
            iterations,
            salt,
            stored_key: key("stored key", stored)?,
            server_key: key("server key", server)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 section 3: user "user", password "pencil", the salt and iteration count of
    /// its example exchange give the keys that exchange proves.
    #[test]
    fn matches_the_rfc_7677_example() {
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let salted = salted_password(ScramHash::Sha256, "pencil", &salt, 4096).unwrap();
        let c = ScramCredential::from_salted(ScramHash::Sha256, 4096, salt, &salted);
        let server_signature = c.hash.hmac(
            &c.server_key,
            b"n=user,r=rOprNGfwEbeRWgbNEkqO,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
        );
        assert_eq!(
            BASE64.encode(server_signature),
            "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        assert!(c.verify_password("pencil"));
        assert!(!c.verify_password("pencil "));
    }

    #[test]
    fn text_form_round_trips_and_rejects_damage() {
        for hash in [ScramHash::Sha256, ScramHash::Sha512] {
            let c = ScramCredential::derive(hash, "s3cret", DEFAULT_ITERATIONS).unwrap();
            let text = c.to_string();
            assert!(text.starts_with(hash.mechanism()));
            let back: ScramCredential = text.parse().unwrap();
            assert_eq!(back, c);
            assert!(back.verify_password("s3cret"));
            assert!(!back.verify_password("s3cre"));
        }
        let good = ScramCredential::derive(ScramHash::Sha256, "x", 4096)
            .unwrap()
            .to_string();
        assert_eq!(
            good.replacen("4096", "12", 1).parse::<ScramCredential>(),
            Err(CredentialError::Iterations)
        );
        assert_eq!(
            good.replacen("SCRAM-SHA-256", "SCRAM-SHA-1", 1)
                .parse::<ScramCredential>(),
            Err(CredentialError::Mechanism("SCRAM-SHA-1".into()))
        );
        assert_eq!(
            good.replacen("SCRAM-SHA-256", "SCRAM-SHA-512", 1)
                .parse::<ScramCredential>(),
            Err(CredentialError::KeyLength {
                field: "stored key",
                expected: 64
            })
        );
        assert_eq!(
            "plain".parse::<ScramCredential>(),
            Err(CredentialError::Format)
        );
        assert!(!format!("{:?}", good.parse::<ScramCredential>().unwrap()).contains("key:"));
    }
}
