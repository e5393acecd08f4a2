//! The client side of SASL SCRAM (RFC 5802, RFC 7677) for `--sasl-mechanism
//! SCRAM-SHA-256|SCRAM-SHA-512`: the client-first message, the proof computed from the
//! server's nonce, salt and iteration count, and the server's signature checked at the
//! end, so a broker that does not hold the user's credential is refused. No channel
//! binding (GS2 flag `n`).

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
pub use weir_scram::ScramHash;
use weir_scram::{escape_name, saslprep, MAX_ITERATIONS};

/// Random bytes in our nonce (24 base64 characters).
const NONCE_BYTES: usize = 18;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    #[error("malformed server-first message: {0}")]
    ServerFirst(&'static str),
    #[error("the server's nonce does not start with ours")]
    Nonce,
    #[error("the server asks for {0} iterations (1 to {MAX_ITERATIONS} accepted)")]
    Iterations(String),
    #[error("malformed server-final message (or none)")]
    ServerFinal,
    #[error("the server answered error {0:?}")]
    ServerError(String),
    #[error("wrong server signature: the broker does not hold this user's credential")]
    ServerSignature,
    #[error("the password is not valid under SASLprep (RFC 4013)")]
    Saslprep,
    #[error("no random numbers from the operating system")]
    Random,
}

/// An exchange before the server-first message.
pub struct ScramClient {
    hash: ScramHash,
    /// The SASLprep'd password.
    password: String,
    nonce: String,
    /// `n=<user>,r=<nonce>`: the client-first message without its GS2 header.
    first_bare: String,
}

impl std::fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramClient")
            .field("hash", &self.hash)
            .finish_non_exhaustive()
    }
}

/// What checks the server-final message once the proof is sent.
#[derive(Debug)]
pub struct ServerCheck {
    hash: ScramHash,
    server_key: Vec<u8>,
    auth_message: String,
}

/// No channel binding, no authorization identity.
const GS2_HEADER: &str = "n,,";

impl ScramClient {
    pub fn new(hash: ScramHash, user: &str, password: &str) -> Result<Self, ScramError> {
        let mut random = [0u8; NONCE_BYTES];
        getrandom::fill(&mut random).map_err(|_| ScramError::Random)?;
        Self::with_nonce(hash, user, password, BASE64.encode(random))
    }

    fn with_nonce(
        hash: ScramHash,
        user: &str,
        password: &str,
        nonce: String,
    ) -> Result<Self, ScramError> {
        let password = saslprep(password)
            .map_err(|_| ScramError::Saslprep)?
            .into_owned();
        Ok(ScramClient {
            hash,
            password,
            first_bare: format!("n={},r={nonce}", escape_name(user)),
            nonce,
        })
    }

    /// The initial response of sasl-init.
    pub fn client_first(&self) -> String {
        format!("{GS2_HEADER}{}", self.first_bare)
    }

    /// Reads the server-first message (the challenge) and answers with the client-final
    /// message, which carries the proof.
    pub fn client_final(self, server_first: &[u8]) -> Result<(String, ServerCheck), ScramError> {
        let text =
            std::str::from_utf8(server_first).map_err(|_| ScramError::ServerFirst("not UTF-8"))?;
        let mut attrs = text.split(',');
        let nonce =
            attrs
                .next()
                .and_then(|a| a.strip_prefix("r="))
                .ok_or(ScramError::ServerFirst(
                    "no nonce (or a mandatory extension)",
                ))?;
        if nonce.len() <= self.nonce.len() || !nonce.starts_with(&self.nonce) {
            return Err(ScramError::Nonce);
        }
        let salt = attrs
            .next()
            .and_then(|a| a.strip_prefix("s="))
            .ok_or(ScramError::ServerFirst("no salt"))?;
        let salt = BASE64
            .decode(salt)
            .map_err(|_| ScramError::ServerFirst("salt is not base64"))?;
        let iterations = attrs
            .next()
            .and_then(|a| a.strip_prefix("i="))
            .ok_or(ScramError::ServerFirst("no iteration count"))?;
        let iterations = iterations
            .parse::<u32>()
            .ok()
            .filter(|i| (1..=MAX_ITERATIONS).contains(i))
            .ok_or_else(|| ScramError::Iterations(iterations.to_owned()))?;
        let hash = self.hash;
        let salted = hash
            .salted_password(&self.password, &salt, iterations)
            .map_err(|_| ScramError::Saslprep)?;
        let keys = hash.keys(&salted);
        let without_proof = format!("c={},r={nonce}", BASE64.encode(GS2_HEADER));
        let auth_message = format!("{},{text},{without_proof}", self.first_bare);
        let proof = hash.unmask(&keys.stored_key, auth_message.as_bytes(), &keys.client_key);
        let check = ServerCheck {
            hash,
            server_key: keys.server_key,
            auth_message,
        };
        Ok((format!("{without_proof},p={}", BASE64.encode(proof)), check))
    }
}

impl ServerCheck {
    /// Checks the server-final message: `v=<server signature>`, or `e=<error>`.
    pub fn verify(&self, server_final: &[u8]) -> Result<(), ScramError> {
        let text = std::str::from_utf8(server_final).map_err(|_| ScramError::ServerFinal)?;
        let first = text.split(',').next().unwrap_or_default();
        if let Some(error) = first.strip_prefix("e=") {
            return Err(ScramError::ServerError(error.to_owned()));
        }
        let signature = first
            .strip_prefix("v=")
            .and_then(|v| BASE64.decode(v).ok())
            .ok_or(ScramError::ServerFinal)?;
        if self
            .hash
            .verify_hmac(&self.server_key, self.auth_message.as_bytes(), &signature)
        {
            Ok(())
        } else {
            Err(ScramError::ServerSignature)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RFC_SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";

    fn rfc_client() -> ScramClient {
        ScramClient::with_nonce(
            ScramHash::Sha256,
            "user",
            "pencil",
            "rOprNGfwEbeRWgbNEkqO".into(),
        )
        .unwrap()
    }

    /// RFC 7677 section 3: the client's messages, and the server's signature accepted.
    #[test]
    fn replays_the_rfc_7677_example() {
        let client = rfc_client();
        assert_eq!(client.client_first(), "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let (last, check) = client.client_final(RFC_SERVER_FIRST.as_bytes()).unwrap();
        assert_eq!(
            last,
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
             p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        assert_eq!(
            check.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),
            Ok(())
        );
    }

    #[test]
    fn refuses_a_wrong_server_signature_or_an_error() {
        let (_, check) = rfc_client()
            .client_final(RFC_SERVER_FIRST.as_bytes())
            .unwrap();
        // One bit off in the first byte of the signature.
        assert_eq!(
            check.verify(b"v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),
            Err(ScramError::ServerSignature)
        );
        assert_eq!(check.verify(b"v="), Err(ScramError::ServerSignature));
        assert_eq!(check.verify(b""), Err(ScramError::ServerFinal));
        assert_eq!(check.verify(b"v=***"), Err(ScramError::ServerFinal));
        assert_eq!(
            check.verify(b"e=invalid-proof"),
            Err(ScramError::ServerError("invalid-proof".into()))
        );
    }

    #[test]
    fn refuses_a_bad_server_first_message() {
        for (bad, want) in [
            // The nonce must extend ours.
            (
                "r=other,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
                ScramError::Nonce,
            ),
            (
                "r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
                ScramError::Nonce,
            ),
            (
                "m=ext,r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
                ScramError::ServerFirst("no nonce (or a mandatory extension)"),
            ),
            (
                "r=rOprNGfwEbeRWgbNEkqOx,i=4096",
                ScramError::ServerFirst("no salt"),
            ),
            (
                "r=rOprNGfwEbeRWgbNEkqOx,s=!!,i=4096",
                ScramError::ServerFirst("salt is not base64"),
            ),
            (
                "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==",
                ScramError::ServerFirst("no iteration count"),
            ),
            (
                "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=0",
                ScramError::Iterations("0".into()),
            ),
            (
                "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4000000000",
                ScramError::Iterations("4000000000".into()),
            ),
        ] {
            assert_eq!(
                rfc_client().client_final(bad.as_bytes()).err(),
                Some(want),
                "{bad}"
            );
        }
    }

    #[test]
    fn escapes_the_user_name_and_makes_fresh_nonces() {
        let a = ScramClient::new(ScramHash::Sha512, "a,b=c", "p").unwrap();
        let b = ScramClient::new(ScramHash::Sha512, "a,b=c", "p").unwrap();
        assert!(a.client_first().starts_with("n,,n=a=2Cb=3Dc,r="));
        assert_ne!(a.client_first(), b.client_first());
        assert_eq!(a.nonce.len(), 24);
    }
}
