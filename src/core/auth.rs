//! Who may connect. Shared by every protocol so STOMP login and AMQP SASL PLAIN
//! check the same users.

use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("login required")]
    Anonymous,
    #[error("invalid login or passcode")]
    BadCredentials,
}

#[derive(Debug, Clone, Default)]
pub struct Authenticator {
    users: HashMap<String, String>,
    allow_anonymous: bool,
}

impl Authenticator {
    pub fn new(users: impl IntoIterator<Item = (String, String)>, allow_anonymous: bool) -> Self {
        Self {
            users: users.into_iter().collect(),
            allow_anonymous,
        }
    }

    /// Everyone may connect.
    pub fn open() -> Self {
        Self::new([], true)
    }

    pub fn allows_anonymous(&self) -> bool {
        self.allow_anonymous
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
            Some(user) => match self.users.get(user) {
                Some(expected) if Some(expected.as_str()) == passcode => Ok(Some(user.to_owned())),
                // An unknown user on an open broker is treated as anonymous,
                // as Artemis does with security disabled.
                None if self.allow_anonymous && self.users.is_empty() => Ok(None),
                _ => Err(AuthError::BadCredentials),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_users() {
        let auth = Authenticator::new([("admin".to_owned(), "secret".to_owned())], false);
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
}
