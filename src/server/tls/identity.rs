//! The user a verified client certificate names, by `[tls] external_user`.

use crate::config::ExternalUser;
use rustls::pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

/// `chain` is what the client presented, already verified by the handshake; its first
/// certificate is the client's own. `None` when it has no such name.
pub fn certified_user(chain: &[CertificateDer<'_>], rule: ExternalUser) -> Option<String> {
    let (_, cert) = X509Certificate::from_der(chain.first()?.as_ref()).ok()?;
    match rule {
        ExternalUser::Cn => cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .map(str::to_owned),
        ExternalUser::SanDns | ExternalUser::SanEmail => {
            let san = cert.subject_alternative_name().ok()??;
            san.value
                .general_names
                .iter()
                .find_map(|name| match (rule, name) {
                    (ExternalUser::SanDns, GeneralName::DNSName(dns)) => Some((*dns).to_owned()),
                    (ExternalUser::SanEmail, GeneralName::RFC822Name(email)) => {
                        Some((*email).to_owned())
                    }
                    _ => None,
                })
        }
    }
    .filter(|name| !name.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert() -> CertificateDer<'static> {
        let mut params = rcgen::CertificateParams::new(vec!["svc.example.com".to_owned()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "alice");
        params.subject_alt_names.push(rcgen::SanType::Rfc822Name(
            "alice@example.com".try_into().unwrap(),
        ));
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().clone()
    }

    #[test]
    fn each_rule_picks_its_name() {
        let chain = [cert()];
        assert_eq!(
            certified_user(&chain, ExternalUser::Cn).as_deref(),
            Some("alice")
        );
        assert_eq!(
            certified_user(&chain, ExternalUser::SanDns).as_deref(),
            Some("svc.example.com")
        );
        assert_eq!(
            certified_user(&chain, ExternalUser::SanEmail).as_deref(),
            Some("alice@example.com")
        );
        assert_eq!(certified_user(&[], ExternalUser::Cn), None);
    }
}
