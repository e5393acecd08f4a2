//! TLS for the listeners: the broker's identity from `[tls]`, client certificates checked
//! against `ca_file`, and a reload (on SIGHUP, or when the files change) that new
//! connections on every TLS listener pick up.
//!
//! The `rustls` configuration is built whole from the files and swapped in one step, so a
//! connection sees either the old certificate or the new one; a reload that fails keeps
//! the old one.

mod identity;
mod rewind;
mod watch;

pub use identity::certified_user;
pub use rewind::Rewind;
pub use watch::watch;

use crate::config::{ClientAuth, Tls};
use parking_lot::{Mutex, RwLock};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;
use watch::Stamp;

/// Why the TLS identity could not be loaded; each names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("TLS: cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("TLS: {}: not valid PEM: {source}", path.display())]
    Pem {
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("TLS: {}: no {what} found (expected a PEM \"BEGIN {what}\" block)", path.display())]
    Missing { path: PathBuf, what: &'static str },
    #[error("TLS: {} with key {}: {source}", cert.display(), key.display())]
    Identity {
        cert: PathBuf,
        key: PathBuf,
        source: rustls::Error,
    },
    #[error("TLS: {}: not a usable CA certificate: {problem}", path.display())]
    Ca { path: PathBuf, problem: String },
}

/// The `[tls]` settings and the server configuration last built from their files.
pub struct TlsContext {
    settings: Tls,
    current: RwLock<Arc<ServerConfig>>,
    /// The files as they were when last read, whether or not that load worked; held
    /// through a reload, so a signal and the watcher never read the files at once.
    attempted: Mutex<Stamp>,
}

impl TlsContext {
    /// Reads the files; any problem stops here, naming the file.
    pub fn load(settings: &Tls) -> Result<Self, TlsError> {
        let stamp = stamp(settings);
        Ok(TlsContext {
            current: RwLock::new(Arc::new(server_config(settings)?)),
            settings: settings.clone(),
            attempted: Mutex::new(stamp),
        })
    }

    /// Reads the files again; on success new handshakes use them, on failure the previous
    /// identity stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let mut attempted = self.attempted.lock();
        // Taken before reading: a change made meanwhile is seen by the next poll.
        *attempted = self.stamp();
        let fresh = Arc::new(server_config(&self.settings)?);
        *self.current.write() = fresh;
        Ok(())
    }

    /// Reloads, saying in the log why and how it went: one info line, or one error line
    /// naming the file at fault.
    pub fn reload_logged(&self, cause: &str) {
        match self.reload() {
            Ok(()) => tracing::info!(
                cert = %self.settings.cert_file.display(),
                "TLS certificates reloaded ({cause}); new connections use them"
            ),
            Err(e) => tracing::error!("{e} ({cause}); keeping the previous certificate"),
        }
    }

    /// The files' metadata now.
    fn stamp(&self) -> Stamp {
        stamp(&self.settings)
    }

    /// Whether the files were last read when they looked like `stamp`.
    fn attempted(&self, stamp: &Stamp) -> bool {
        *self.attempted.lock() == *stamp
    }

    /// For one handshake: the configuration current now.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current.read().clone())
    }

    pub fn settings(&self) -> &Tls {
        &self.settings
    }
}

fn stamp(settings: &Tls) -> Stamp {
    let files = [&settings.cert_file, &settings.key_file];
    Stamp::of(
        files
            .into_iter()
            .chain(&settings.ca_file)
            .map(PathBuf::as_path),
    )
}

/// ring, explicitly: rustls picks no process-wide default when more than one provider is
/// compiled in (a dependency may bring another).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn server_config(settings: &Tls) -> Result<ServerConfig, TlsError> {
    let certs = read_certs(&settings.cert_file)?;
    let key = read_key(&settings.key_file)?;
    let provider = provider();
    // TLS 1.2 and 1.3: rustls has nothing older.
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|source| identity_error(settings, source))?;
    let builder = match (&settings.ca_file, settings.client_auth) {
        (Some(ca), auth) if auth != ClientAuth::None => {
            let mut roots = RootCertStore::empty();
            for cert in read_certs(ca)? {
                roots.add(cert).map_err(|e| TlsError::Ca {
                    path: ca.clone(),
                    problem: e.to_string(),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match auth {
                ClientAuth::Optional => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            let verifier = verifier.build().map_err(|e| TlsError::Ca {
                path: ca.clone(),
                problem: e.to_string(),
            })?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    builder
        .with_single_cert(certs, key)
        .map_err(|source| identity_error(settings, source))
}

fn identity_error(settings: &Tls, source: rustls::Error) -> TlsError {
    TlsError::Identity {
        cert: settings.cert_file.clone(),
        key: settings.key_file.clone(),
        source,
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            path: path.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::Missing {
            path: path.to_owned(),
            what: "CERTIFICATE",
        });
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|source| match source {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::Missing {
            path: path.to_owned(),
            what: "PRIVATE KEY",
        },
        source => TlsError::Pem {
            path: path.to_owned(),
            source,
        },
    })
}
