//! The configured users and the anonymous policy: the one place a login is decided.

use super::credential::{random_bytes, CredentialError, ScramCredential, DEFAULT_ITERATIONS};
use std::collections::HashMap;
use std::time::Duration;
use weir_scram::ScramHash;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("login required")]
    Anonymous,
    #[error("invalid login or passcode")]
    BadCredentials,
    /// `require_tls_for_passwords`: a password sent where others could read it is refused.
    #[error("passwords are accepted only over TLS; connect with TLS or log in with SCRAM")]
    PasswordNeedsTls,
    /// A verified client certificate names someone who is not a configured user.
    #[error("the client certificate's name is not a configured user")]
    UnknownCertificateUser,
}

/// How a user's secret is configured.
#[derive(Clone, PartialEq, Eq)]
pub enum Secret {
    /// Plain text (deprecated): turned into SCRAM credentials for both hashes at start.
    Password(String),
    Credential(ScramCredential),
}

#[derive(Debug, Clone, Default)]
struct Credentials {
    sha256: Option<ScramCredential>,
    sha512: Option<ScramCredential>,
}

impl Credentials {
    fn get(&self, hash: ScramHash) -> Option<&ScramCredential> {
        match hash {
            ScramHash::Sha256 => self.sha256.as_ref(),
            ScramHash::Sha512 => self.sha512.as_ref(),
        }
    }

    fn any(&self) -> Option<&ScramCredential> {
        self.sha256.as_ref().or(self.sha512.as_ref())
    }
}

#[derive(Debug, Clone)]
pub struct Authenticator {
    users: HashMap<String, Credentials>,
    allow_anonymous: bool,
    failure_delay: Duration,
    /// Plain passwords (SASL PLAIN, STOMP passcodes) only on TLS connections.
    passwords_need_tls: bool,
    /// Makes the decoy salt of an unknown user stable but unpredictable, so a SCRAM
    /// challenge does not tell which user names exist.
    decoy_key: Vec<u8>,
}

impl Default for Authenticator {
    fn default() -> Self {
        Self::open()
    }
}

impl Authenticator {
    pub fn new(
        users: impl IntoIterator<Item = (String, Secret)>,
        allow_anonymous: bool,
        failure_delay: Duration,
    ) -> Result<Self, CredentialError> {
        let mut map: HashMap<String, Credentials> = HashMap::new();
        for (name, secret) in users {
            let entry = map.entry(name).or_default();
            match secret {
                Secret::Password(password) => {
                    for hash in [ScramHash::Sha256, ScramHash::Sha512] {
                        let c = ScramCredential::derive(hash, &password, DEFAULT_ITERATIONS)?;
                        set(entry, c);
                    }
                }
                Secret::Credential(c) => set(entry, c),
            }
        }
        Ok(Self {
            users: map,
            allow_anonymous,
            failure_delay,
            passwords_need_tls: false,
            decoy_key: random_bytes(32)?,
        })
    }

    /// Everyone may connect.
    pub fn open() -> Self {
        Self {
            users: HashMap::new(),
            allow_anonymous: true,
            failure_delay: Duration::ZERO,
            passwords_need_tls: false,
            decoy_key: Vec::new(),
        }
    }

    /// With `yes`, plain passwords are refused on connections without TLS (SCRAM, which
    /// never sends the password, still works there).
    pub fn require_tls_for_passwords(mut self, yes: bool) -> Self {
        self.passwords_need_tls = yes;
        self
    }

    /// Whether a plain password may be sent on a connection, TLS or not.
    pub fn passwords_allowed(&self, over_tls: bool) -> bool {
        over_tls || !self.passwords_need_tls
    }

    /// A password login on a connection with or without TLS.
    pub fn authenticate_password(
        &self,
        login: Option<&str>,
        passcode: Option<&str>,
        over_tls: bool,
    ) -> Result<Option<String>, AuthError> {
        let anonymous = matches!(login, None | Some(""));
        if !anonymous && !self.passwords_allowed(over_tls) {
            return Err(AuthError::PasswordNeedsTls);
        }
        self.authenticate(login, passcode)
    }

    /// The user a verified TLS client certificate names: it must be a configured user (its
    /// password is not asked for; the certificate's CA vouches for it).
    pub fn authenticate_certified(&self, user: &str) -> Result<String, AuthError> {
        if self.users.contains_key(user) {
            Ok(user.to_owned())
        } else {
            Err(AuthError::UnknownCertificateUser)
        }
    }

    pub fn allows_anonymous(&self) -> bool {
        self.allow_anonymous
    }

    /// Whether any user is configured (SCRAM is offered only then).
    pub fn has_users(&self) -> bool {
        !self.users.is_empty()
    }

    /// How long a failed login waits before its refusal goes out, so guessing is slow.
    pub fn failure_delay(&self) -> Duration {
        self.failure_delay
    }

    /// The authenticated user name, or `None` for an anonymous connection.
    pub fn authenticate(
        &self,
        login: Option<&str>,
        passcode: Option<&str>,
    ) -> Result<Option<String>, AuthError> {
        match login {
            None | Some("") if self.allow_anonymous => Ok(None),
            None | Some("") => Err(AuthError::Anonymous),
            Some(user) => match self.users.get(user).and_then(Credentials::any) {
                Some(c) if c.verify_password(passcode.unwrap_or_default()) => {
                    Ok(Some(user.to_owned()))
                }
                Some(_) => Err(AuthError::BadCredentials),
                // An unknown user on an open broker is treated as anonymous,
                // as Artemis does with security disabled.
                None if self.allow_anonymous && self.users.is_empty() => Ok(None),
                None => {
                    // As slow as a known user's check, so timing does not tell them apart.
                    let _ = self
                        .decoy(user, ScramHash::Sha256)
                        .verify_password(passcode.unwrap_or_default());
                    Err(AuthError::BadCredentials)
                }
            },
        }
    }

    /// The user's credential for a SCRAM exchange with `hash`.
    pub(super) fn scram_credential(&self, user: &str, hash: ScramHash) -> Option<&ScramCredential> {
        self.users.get(user).and_then(|c| c.get(hash))
    }

    /// A credential no password matches, with a salt that is the same every time for
    /// `user`, for answering SCRAM exchanges of users who do not exist (RFC 5802 section 9).
    pub(super) fn decoy(&self, user: &str, hash: ScramHash) -> ScramCredential {
        let seed = hash.hmac(&self.decoy_key, user.as_bytes());
        let salt = seed[..16].to_vec();
        let mut c = ScramCredential::from_salted(hash, DEFAULT_ITERATIONS, salt, &seed);
        c.stored_key = hash.hmac(&seed, b"no client key hashes to this");
        c
    }
}

fn set(entry: &mut Credentials, c: ScramCredential) {
    match c.hash {
        ScramHash::Sha256 => entry.sha256 = Some(c),
        ScramHash::Sha512 => entry.sha512 = Some(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_users() {
        let auth = Authenticator::new(
            [("admin".to_owned(), Secret::Password("secret".to_owned()))],
            false,
            Duration::ZERO,
        )
        .unwrap();
        assert_eq!(
            auth.authenticate(Some("admin"), Some("secret")),
            Ok(Some("admin".into()))
        );
        assert_eq!(
            auth.authenticate(Some("admin"), Some("nope")),
            Err(AuthError::BadCredentials)
        );
        assert_eq!(
            auth.authenticate(Some("bob"), Some("secret")),
            Err(AuthError::BadCredentials)
        );
        assert_eq!(auth.authenticate(None, None), Err(AuthError::Anonymous));
        assert_eq!(
            Authenticator::open().authenticate(Some("x"), None),
            Ok(None)
        );
    }

    #[test]
    fn passwords_can_be_kept_to_tls_and_certificates_name_users() {
        let auth = Authenticator::new(
            [("admin".to_owned(), Secret::Password("secret".to_owned()))],
            true,
            Duration::ZERO,
        )
        .unwrap()
        .require_tls_for_passwords(true);
        assert_eq!(
            auth.authenticate_password(Some("admin"), Some("secret"), false),
            Err(AuthError::PasswordNeedsTls)
        );
        assert_eq!(
            auth.authenticate_password(Some("admin"), Some("secret"), true),
            Ok(Some("admin".into()))
        );
        assert_eq!(
            auth.authenticate_password(None, None, false),
            Ok(None),
            "anonymous sends no password"
        );
        assert_eq!(auth.authenticate_certified("admin"), Ok("admin".into()));
        assert_eq!(
            auth.authenticate_certified("mallory"),
            Err(AuthError::UnknownCertificateUser)
        );
    }

    #[test]
    fn a_stored_credential_verifies_passwords() {
        let c = ScramCredential::derive(ScramHash::Sha512, "pw", DEFAULT_ITERATIONS).unwrap();
        let auth = Authenticator::new(
            [("u".to_owned(), Secret::Credential(c))],
            false,
            Duration::ZERO,
        )
        .unwrap();
        assert_eq!(
            auth.authenticate(Some("u"), Some("pw")),
            Ok(Some("u".into()))
        );
        assert_eq!(
            auth.authenticate(Some("u"), Some("px")),
            Err(AuthError::BadCredentials)
        );
        assert!(auth.scram_credential("u", ScramHash::Sha256).is_none());
        assert!(auth.scram_credential("u", ScramHash::Sha512).is_some());
        assert_eq!(
            auth.decoy("x", ScramHash::Sha256),
            auth.decoy("x", ScramHash::Sha256)
        );
        assert_ne!(
            auth.decoy("x", ScramHash::Sha256).salt,
            auth.decoy("y", ScramHash::Sha256).salt
        );
    }
}
