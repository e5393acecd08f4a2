//! The two hash functions SCRAM is offered with, and the three primitives RFC 5802 builds
//! on them: `H`, `HMAC` and `Hi` (PBKDF2 with HMAC).

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256, Sha512};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScramHash {
    Sha256,
    Sha512,
}

impl ScramHash {
    /// The SASL mechanism name, which is also the credential's text prefix.
    pub fn mechanism(self) -> &'static str {
        match self {
            ScramHash::Sha256 => "SCRAM-SHA-256",
            ScramHash::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_mechanism(name: &str) -> Option<Self> {
        match name {
            "SCRAM-SHA-256" => Some(ScramHash::Sha256),
            "SCRAM-SHA-512" => Some(ScramHash::Sha512),
            _ => None,
        }
    }

    /// Bytes in one digest: every key of a credential has this length.
    pub fn output_len(self) -> usize {
        match self {
            ScramHash::Sha256 => 32,
            ScramHash::Sha512 => 64,
        }
    }

    pub(super) fn h(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => Sha256::digest(data).to_vec(),
            ScramHash::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    pub(super) fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        // HMAC takes keys of any length, so `new_from_slice` cannot fail here; the
        // fallback keeps a malformed key from panicking all the same.
        fn run<M: Mac + KeyInit>(key: &[u8], data: &[u8]) -> Vec<u8> {
            match <M as KeyInit>::new_from_slice(key) {
                Ok(mut mac) => {
                    mac.update(data);
                    mac.finalize().into_bytes().to_vec()
                }
                Err(_) => Vec::new(),
            }
        }
        match self {
            ScramHash::Sha256 => run::<Hmac<Sha256>>(key, data),
            ScramHash::Sha512 => run::<Hmac<Sha512>>(key, data),
        }
    }

    /// `Hi(password, salt, i)`: the salted password.
    pub(super) fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0; self.output_len()];
        match self {
            ScramHash::Sha256 => {
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out)
            }
            ScramHash::Sha512 => {
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out)
            }
        }
        out
    }
}
