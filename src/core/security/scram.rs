//! The server side of a SCRAM exchange (RFC 5802, RFC 7677), independent of the protocol
//! that carries its three messages: client-first → server-first, client-final →
//! server-final. Channel binding is not offered (the `n` and `y` GS2 flags are accepted).

use super::credential::{random_bytes, ScramCredential};
use super::users::Authenticator;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use weir_scram::unescape_name;
use weir_scram::ScramHash;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    #[error("channel binding is not supported")]
    ChannelBinding,
    #[error("the client's nonce does not match")]
    Nonce,
    #[error("invalid proof")]
    InvalidProof,
    #[error("no random numbers from the operating system")]
    Random,
}

/// An exchange after the server-first message, waiting for the client-final one.
pub struct ScramServer {
    user: String,
    known: bool,
    credential: ScramCredential,
    gs2_header: String,
    nonce: String,
    /// `client-first-bare "," server-first`: the start of the AuthMessage.
    auth_prefix: String,
}

impl std::fmt::Debug for ScramServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramServer")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// The outcome of a good proof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramSuccess {
    pub user: String,
    /// `v=<server signature>`, which proves to the client that we hold its credential.
    pub server_final: String,
}

/// Reads a client-first message and answers with the server-first message. An unknown user
/// gets a decoy salt and fails only at the proof, so the exchange does not reveal which
/// users exist.
pub fn start(
    auth: &Authenticator,
    hash: ScramHash,
    client_first: &[u8],
) -> Result<(ScramServer, String), ScramError> {
    let text = std::str::from_utf8(client_first).map_err(|_| ScramError::Malformed("not UTF-8"))?;
    let (gs2_header, bare) = split_gs2(text)?;
    let mut attrs = bare.split(',');
    let user = attrs
        .next()
        .and_then(|a| a.strip_prefix("n="))
        .ok_or(ScramError::Malformed("no user name"))?;
    let user = unescape_name(user).ok_or(ScramError::Malformed("bad escape in user name"))?;
    let client_nonce = attrs
        .next()
        .and_then(|a| a.strip_prefix("r="))
        .filter(|n| !n.is_empty())
        .ok_or(ScramError::Malformed("no nonce"))?;
    if attrs.any(|a| a.starts_with("m=")) {
        return Err(ScramError::Malformed("mandatory extension"));
    }
    let (credential, known) = match auth.scram_credential(&user, hash) {
        Some(c) => (c.clone(), true),
        None => (auth.decoy(&user, hash), false),
    };
    let ours = random_bytes(18).map_err(|_| ScramError::Random)?;
    let nonce = format!("{client_nonce}{}", BASE64.encode(ours));
    let server_first = format!(
        "r={nonce},s={},i={}",
        BASE64.encode(&credential.salt),
        credential.iterations
    );
    let server = ScramServer {
        auth_prefix: format!("{bare},{server_first}"),
        user,
        known,
        credential,
        gs2_header: gs2_header.to_owned(),
        nonce,
    };
    Ok((server, server_first))
}

impl ScramServer {
    /// Checks the client-final message's proof.
    pub fn finish(self, client_final: &[u8]) -> Result<ScramSuccess, ScramError> {
        let text =
            std::str::from_utf8(client_final).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or(ScramError::Malformed("no proof"))?;
        let mut attrs = without_proof.split(',');
        let binding = attrs
            .next()
            .and_then(|a| a.strip_prefix("c="))
            .ok_or(ScramError::Malformed("no channel binding attribute"))?;
        if BASE64.decode(binding).ok().as_deref() != Some(self.gs2_header.as_bytes()) {
            return Err(ScramError::ChannelBinding);
        }
        let nonce = attrs
            .next()
            .and_then(|a| a.strip_prefix("r="))
            .ok_or(ScramError::Malformed("no nonce"))?;
        if nonce != self.nonce {
            return Err(ScramError::Nonce);
        }
        let proof = BASE64
            .decode(proof)
            .map_err(|_| ScramError::Malformed("proof is not base64"))?;
        let hash = self.credential.hash;
        if proof.len() != hash.output_len() {
            return Err(ScramError::InvalidProof);
        }
        let auth_message = format!("{},{without_proof}", self.auth_prefix);
        let client_key = hash.unmask(&self.credential.stored_key, auth_message.as_bytes(), &proof);
        if !self.credential.verify_client_key(&client_key) || !self.known {
            return Err(ScramError::InvalidProof);
        }
        let server_signature = hash.hmac(&self.credential.server_key, auth_message.as_bytes());
        Ok(ScramSuccess {
            user: self.user,
            server_final: format!("v={}", BASE64.encode(server_signature)),
        })
    }

    pub fn user(&self) -> &str {
        &self.user
    }
}

/// Splits `gs2-cbind-flag "," [authzid] "," client-first-bare`.
fn split_gs2(text: &str) -> Result<(&str, &str), ScramError> {
    let mut parts = text.splitn(3, ',');
    let (Some(flag), Some(authzid), Some(_)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(ScramError::Malformed("no GS2 header"));
    };
    match flag {
        "n" | "y" => {}
        f if f.starts_with("p=") => return Err(ScramError::ChannelBinding),
        _ => return Err(ScramError::Malformed("bad GS2 flag")),
    }
    if !(authzid.is_empty() || authzid.starts_with("a=")) {
        return Err(ScramError::Malformed("bad authzid"));
    }
    let header_len = flag.len() + authzid.len() + 2;
    Ok((&text[..header_len], &text[header_len..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::security::Secret;
    use std::time::Duration;

    fn rfc_user() -> Authenticator {
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let salted =
            super::super::credential::salted_password(ScramHash::Sha256, "pencil", &salt, 4096)
                .unwrap();
        let c = ScramCredential::from_salted(ScramHash::Sha256, 4096, salt, &salted);
        Authenticator::new(
            [("user".to_owned(), Secret::Credential(c))],
            false,
            Duration::ZERO,
        )
        .unwrap()
    }

    /// Replays RFC 7677's example with its server nonce.
    #[test]
    fn accepts_the_rfc_7677_proof() {
        let auth = rfc_user();
        let (mut server, first) = start(
            &auth,
            ScramHash::Sha256,
            b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
        )
        .unwrap();
        assert!(first.starts_with("r=rOprNGfwEbeRWgbNEkqO"));
        assert!(first.ends_with(",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"));
        let nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        server.nonce = nonce.into();
        server.auth_prefix =
            format!("n=user,r=rOprNGfwEbeRWgbNEkqO,r={nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096");
        let done = server
            .finish(
                format!("c=biws,r={nonce},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
                    .as_bytes(),
            )
            .unwrap();
        assert_eq!(done.user, "user");
        assert_eq!(
            done.server_final,
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
    }

    #[test]
    fn refuses_bad_messages() {
        let auth = rfc_user();
        for bad in [
            &b"n=user,r=x"[..],
            b"p=tls-unique,,n=user,r=x",
            b"n,,n=us=er,r=x",
            b"n,,n=user",
            b"n,,n=user,r=x,m=ext",
            b"\xff",
        ] {
            assert!(start(&auth, ScramHash::Sha256, bad).is_err(), "{bad:?}");
        }
        let (server, first) = start(&auth, ScramHash::Sha256, b"n,,n=user,r=abc").unwrap();
        let nonce = first.split(',').next().unwrap();
        let wrong = format!("c=biws,{nonce},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=");
        assert_eq!(
            server.finish(wrong.as_bytes()),
            Err(ScramError::InvalidProof)
        );
        let (server, _) = start(&auth, ScramHash::Sha256, b"n,,n=user,r=abc").unwrap();
        assert_eq!(
            server.finish(b"c=biws,r=abcdef,p=AAAA"),
            Err(ScramError::Nonce)
        );
    }

    #[test]
    fn unknown_users_get_a_stable_decoy_salt() {
        let auth = rfc_user();
        let salt = |first: String| first.split(',').nth(1).unwrap().to_owned();
        let (_, a) = start(&auth, ScramHash::Sha256, b"n,,n=ghost,r=1").unwrap();
        let (_, b) = start(&auth, ScramHash::Sha256, b"n,,n=ghost,r=2").unwrap();
        assert_eq!(salt(a), salt(b));
    }
}
