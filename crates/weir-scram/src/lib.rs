//! What both ends of a SCRAM exchange (RFC 5802, RFC 7677) compute from the same
//! inputs: the hash functions `H`, `HMAC` and `Hi` (PBKDF2 with HMAC), the salted
//! password after SASLprep, the client, stored and server keys, the proof (client key
//! XOR client signature), and the escaping of user names. The message parsing and the
//! checks each side makes stay with that side (the broker's server, weir-perf's client).

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256, Sha512};

/// More iterations than this and one login costs seconds of CPU: the broker refuses such
/// a credential and a client refuses a server asking for it.
pub const MAX_ITERATIONS: u32 = 10_000_000;

/// The password is not valid under SASLprep (RFC 4013).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the password is not valid under SASLprep (RFC 4013)")]
pub struct SaslprepError;

/// The hash a SCRAM mechanism is built on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScramHash {
    Sha256,
    Sha512,
}

/// The three keys RFC 5802 derives from a salted password.
#[derive(Clone, PartialEq, Eq)]
pub struct Keys {
    /// `HMAC(SaltedPassword, "Client Key")`: what the proof hides.
    pub client_key: Vec<u8>,
    /// `H(ClientKey)`: what the server keeps to check a proof.
    pub stored_key: Vec<u8>,
    /// `HMAC(SaltedPassword, "Server Key")`: what signs the server-final message.
    pub server_key: Vec<u8>,
}

impl std::fmt::Debug for Keys {
    // The keys log in (client key) or verify logins; keep them out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys").finish_non_exhaustive()
    }
}

impl ScramHash {
    /// The SASL mechanism name.
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

    /// Bytes in one digest: every key and proof has this length.
    pub fn output_len(self) -> usize {
        match self {
            ScramHash::Sha256 => 32,
            ScramHash::Sha512 => 64,
        }
    }

    /// `H(data)`.
    pub fn h(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => Sha256::digest(data).to_vec(),
            ScramHash::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// `HMAC(key, data)`.
    pub fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        // HMAC takes keys of any length, so `new_from_slice` does not fail; an empty
        // result (never a panic) would only make a proof or signature wrong.
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

    /// Whether `signature` is `HMAC(key, data)`, compared in constant time.
    pub fn verify_hmac(self, key: &[u8], data: &[u8], signature: &[u8]) -> bool {
        fn run<M: Mac + KeyInit>(key: &[u8], data: &[u8], signature: &[u8]) -> bool {
            match <M as KeyInit>::new_from_slice(key) {
                Ok(mut mac) => {
                    mac.update(data);
                    mac.verify_slice(signature).is_ok()
                }
                Err(_) => false,
            }
        }
        match self {
            ScramHash::Sha256 => run::<Hmac<Sha256>>(key, data, signature),
            ScramHash::Sha512 => run::<Hmac<Sha512>>(key, data, signature),
        }
    }

    /// `Hi(Normalize(password), salt, i)`: the salted password, with SASLprep first as
    /// every SCRAM client applies it.
    pub fn salted_password(
        self,
        password: &str,
        salt: &[u8],
        iterations: u32,
    ) -> Result<Vec<u8>, SaslprepError> {
        let prepared = saslprep(password)?;
        let mut out = vec![0; self.output_len()];
        match self {
            ScramHash::Sha256 => {
                pbkdf2::pbkdf2_hmac::<Sha256>(prepared.as_bytes(), salt, iterations, &mut out)
            }
            ScramHash::Sha512 => {
                pbkdf2::pbkdf2_hmac::<Sha512>(prepared.as_bytes(), salt, iterations, &mut out)
            }
        }
        Ok(out)
    }

    /// The client, stored and server keys of a salted password.
    pub fn keys(self, salted: &[u8]) -> Keys {
        let client_key = self.hmac(salted, b"Client Key");
        Keys {
            stored_key: self.h(&client_key),
            client_key,
            server_key: self.hmac(salted, b"Server Key"),
        }
    }

    /// `ClientSignature XOR x` with `ClientSignature = HMAC(StoredKey, AuthMessage)`: the
    /// proof from the client key (client side), and the client key back from the proof
    /// (server side).
    pub fn unmask(self, stored_key: &[u8], auth_message: &[u8], x: &[u8]) -> Vec<u8> {
        let signature = self.hmac(stored_key, auth_message);
        x.iter().zip(&signature).map(|(a, b)| a ^ b).collect()
    }
}

/// `Normalize(password)`: the password after SASLprep (RFC 4013), which a SCRAM password
/// goes through before it is hashed.
pub fn saslprep(password: &str) -> Result<std::borrow::Cow<'_, str>, SaslprepError> {
    stringprep::saslprep(password).map_err(|_| SaslprepError)
}

/// A user name as SCRAM's `n=` attribute carries it: `,` and `=` as `=2C` and `=3D`.
pub fn escape_name(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

/// The user name of an `n=` attribute; `None` for an escape other than `=2C` and `=3D`.
pub fn unescape_name(name: &str) -> Option<String> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        match rest.get(at..at + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return None,
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// RFC 7677 section 3 (user "user", password "pencil"): the salt
    /// `W22ZaJ0SNY7soEsUEjb6gQ==`, 4096 iterations, and the proof it sends.
    #[test]
    fn derives_the_rfc_7677_proof_and_signature() {
        let salt = [
            0x5b, 0x6d, 0x99, 0x68, 0x9d, 0x12, 0x35, 0x8e, 0xec, 0xa0, 0x4b, 0x14, 0x12, 0x36,
            0xfa, 0x81,
        ];
        let hash = ScramHash::Sha256;
        let salted = hash.salted_password("pencil", &salt, 4096).unwrap();
        let keys = hash.keys(&salted);
        let auth = b"n=user,r=rOprNGfwEbeRWgbNEkqO,\
                     r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,\
                     c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let proof = hash.unmask(&keys.stored_key, auth, &keys.client_key);
        // p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=
        assert_eq!(
            hex(&proof),
            "747cdb65aa56224e2352137e52d7bdcad6a0f738df30782caa69a2cfb0277554"
        );
        // The server gets the client key back from the proof.
        assert_eq!(hash.unmask(&keys.stored_key, auth, &proof), keys.client_key);
        // v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=
        let signature = hash.hmac(&keys.server_key, auth);
        assert_eq!(
            hex(&signature),
            "eabae24d1062db75a9451ff0b6ea7e98c8546549ff741e672d3251b2397de46e"
        );
        assert!(hash.verify_hmac(&keys.server_key, auth, &signature));
        let mut off = signature.clone();
        off[0] ^= 1;
        assert!(!hash.verify_hmac(&keys.server_key, auth, &off));
        assert_eq!(keys.client_key.len(), hash.output_len());
    }

    #[test]
    fn saslprep_maps_spaces_and_refuses_prohibited_characters() {
        let hash = ScramHash::Sha512;
        // U+00A0 (no-break space) maps to a space before hashing.
        assert_eq!(
            hash.salted_password("a\u{a0}b", b"salt", 4096),
            hash.salted_password("a b", b"salt", 4096)
        );
        assert_eq!(
            hash.salted_password("a\u{7}b", b"salt", 4096),
            Err(SaslprepError)
        );
        assert_eq!(hash.salted_password("x", b"salt", 1).unwrap().len(), 64);
    }

    #[test]
    fn names_escape_and_unescape() {
        assert_eq!(escape_name("a,b=c"), "a=2Cb=3Dc");
        assert_eq!(unescape_name("a=2Cb=3Dc").as_deref(), Some("a,b=c"));
        assert_eq!(unescape_name("us=er"), None);
        assert_eq!(unescape_name("x=2"), None);
        for m in [ScramHash::Sha256, ScramHash::Sha512] {
            assert_eq!(ScramHash::from_mechanism(m.mechanism()), Some(m));
        }
        assert_eq!(ScramHash::from_mechanism("PLAIN"), None);
    }
}
