//! The byte stream under both protocols: plain TCP, or TLS over it with rustls (ring, TLS
//! 1.2 and 1.3, the stack the broker's listeners use), for `stomps://` and `amqps://`.
//!
//! The broker's certificate is checked against `--tls-ca` only (no system roots: a
//! benchmark names the CA it made), for the URL's host or `--tls-server-name`; a client
//! certificate (`--tls-cert`, `--tls-key`) is shown when given.

use crate::error::PerfError;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// The files and name a TLS connection is made with.
#[derive(Debug, Clone, Default)]
pub struct TlsFiles {
    /// PEM certificates of the authorities trusted to sign the broker's certificate.
    pub ca: Option<PathBuf>,
    /// The client's certificate chain and key (PEM), shown to the broker.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// The name the broker's certificate must carry, instead of the URL's host.
    pub server_name: Option<String>,
}

impl TlsFiles {
    fn any(&self) -> bool {
        self.ca.is_some() || self.cert.is_some() || self.key.is_some() || self.server_name.is_some()
    }
}

/// Where to connect: host:port, and the TLS client when the URL asked for TLS.
#[derive(Clone)]
pub struct Peer {
    authority: String,
    tls: Option<TlsClient>,
}

#[derive(Clone)]
struct TlsClient {
    connector: TlsConnector,
    server_name: ServerName<'static>,
    /// A client certificate is shown (SASL EXTERNAL may name its user).
    certified: bool,
}

impl Peer {
    /// A peer at `authority` (host:port); TLS with `files` when `tls`. TLS options without
    /// a TLS URL are refused, and so is a TLS URL without a CA to check the broker with.
    pub fn new(authority: &str, tls: bool, files: &TlsFiles) -> Result<Peer, PerfError> {
        if !tls {
            if files.any() {
                return Err(PerfError::BadArg {
                    flag: "--tls-*",
                    why: "only with a stomps:// or amqps:// URL",
                });
            }
            return Ok(Peer {
                authority: authority.to_owned(),
                tls: None,
            });
        }
        let ca = files.ca.as_deref().ok_or(PerfError::BadArg {
            flag: "--tls-ca",
            why: "stomps:// and amqps:// need the CA that signed the broker's certificate",
        })?;
        let mut roots = RootCertStore::empty();
        for cert in read_certs(ca)? {
            roots.add(cert).map_err(|e| PerfError::Tls {
                path: ca.to_owned(),
                why: e.to_string(),
            })?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| PerfError::Tls {
                path: ca.to_owned(),
                why: e.to_string(),
            })?
            .with_root_certificates(roots);
        let (config, certified) = match (&files.cert, &files.key) {
            (Some(cert), Some(key)) => {
                let chain = read_certs(cert)?;
                let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| PerfError::Tls {
                    path: key.clone(),
                    why: e.to_string(),
                })?;
                let config =
                    builder
                        .with_client_auth_cert(chain, key_der)
                        .map_err(|e| PerfError::Tls {
                            path: cert.clone(),
                            why: e.to_string(),
                        })?;
                (config, true)
            }
            (None, None) => (builder.with_no_client_auth(), false),
            _ => {
                return Err(PerfError::BadArg {
                    flag: "--tls-cert/--tls-key",
                    why: "give both or neither",
                })
            }
        };
        let name = files
            .server_name
            .clone()
            .unwrap_or_else(|| host(authority).to_owned());
        let server_name = ServerName::try_from(name).map_err(|_| PerfError::BadArg {
            flag: "--tls-server-name",
            why: "not a DNS name or IP address",
        })?;
        Ok(Peer {
            authority: authority.to_owned(),
            tls: Some(TlsClient {
                connector: TlsConnector::from(Arc::new(config)),
                server_name,
                certified,
            }),
        })
    }

    /// The URL's host, without the port or an IPv6 address's brackets.
    pub fn host(&self) -> &str {
        host(&self.authority)
    }

    /// Whether a client certificate is shown.
    pub fn certified(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.certified)
    }

    /// A connection, its TLS handshake done.
    pub async fn connect(&self) -> Result<Stream, PerfError> {
        let tcp = TcpStream::connect(&self.authority).await?;
        tcp.set_nodelay(true)?;
        match &self.tls {
            None => Ok(Stream::Tcp(tcp)),
            Some(tls) => {
                let stream = tls
                    .connector
                    .connect(tls.server_name.clone(), tcp)
                    .await
                    .map_err(|e| PerfError::TlsHandshake(self.authority.clone(), e))?;
                Ok(Stream::Tls(Box::new(stream)))
            }
        }
    }
}

fn host(authority: &str) -> &str {
    let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, PerfError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| PerfError::Tls {
            path: path.to_owned(),
            why: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(PerfError::Tls {
            path: path.to_owned(),
            why: "no PEM CERTIFICATE block".to_owned(),
        });
    }
    Ok(certs)
}

/// A connection to the broker, plain or TLS.
pub enum Stream {
    Tcp(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    /// A read half and a write half, used by one task: plain TCP splits without a lock.
    pub fn into_split(self) -> (ReadHalf, WriteHalf) {
        match self {
            Stream::Tcp(tcp) => {
                let (r, w) = tcp.into_split();
                (ReadHalf::Tcp(r), WriteHalf::Tcp(w))
            }
            Stream::Tls(tls) => {
                let (r, w) = tokio::io::split(*tls);
                (ReadHalf::Tls(r), WriteHalf::Tls(w))
            }
        }
    }
}

pub enum ReadHalf {
    Tcp(OwnedReadHalf),
    Tls(tokio::io::ReadHalf<TlsStream<TcpStream>>),
}

pub enum WriteHalf {
    Tcp(OwnedWriteHalf),
    Tls(tokio::io::WriteHalf<TlsStream<TcpStream>>),
}

/// Forwards `AsyncRead` to whichever stream `$ty` holds.
macro_rules! forward_read {
    ($ty:ident) => {
        impl AsyncRead for $ty {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    $ty::Tcp(s) => Pin::new(s).poll_read(cx, buf),
                    $ty::Tls(s) => Pin::new(s).poll_read(cx, buf),
                }
            }
        }
    };
}

/// Forwards `AsyncWrite` (vectored writes included) to whichever stream `$ty` holds.
macro_rules! forward_write {
    ($ty:ident) => {
        impl AsyncWrite for $ty {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    $ty::Tcp(s) => Pin::new(s).poll_write(cx, buf),
                    $ty::Tls(s) => Pin::new(s).poll_write(cx, buf),
                }
            }

            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[io::IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    $ty::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
                    $ty::Tls(s) => Pin::new(s).poll_write_vectored(cx, bufs),
                }
            }

            fn is_write_vectored(&self) -> bool {
                match self {
                    $ty::Tcp(s) => s.is_write_vectored(),
                    $ty::Tls(s) => s.is_write_vectored(),
                }
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    $ty::Tcp(s) => Pin::new(s).poll_flush(cx),
                    $ty::Tls(s) => Pin::new(s).poll_flush(cx),
                }
            }

            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    $ty::Tcp(s) => Pin::new(s).poll_shutdown(cx),
                    $ty::Tls(s) => Pin::new(s).poll_shutdown(cx),
                }
            }
        }
    };
}

forward_read!(Stream);
forward_write!(Stream);
forward_read!(ReadHalf);
forward_write!(WriteHalf);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_is_the_authority_without_port_or_brackets() {
        assert_eq!(host("127.0.0.1:5671"), "127.0.0.1");
        assert_eq!(host("localhost:61614"), "localhost");
        assert_eq!(host("[::1]:5671"), "::1");
    }

    #[test]
    fn tls_options_need_a_tls_url_and_a_tls_url_needs_a_ca() {
        let with_ca = TlsFiles {
            ca: Some("ca.pem".into()),
            ..TlsFiles::default()
        };
        assert!(matches!(
            Peer::new("h:1", false, &with_ca),
            Err(PerfError::BadArg {
                flag: "--tls-*",
                ..
            })
        ));
        assert!(matches!(
            Peer::new("h:1", true, &TlsFiles::default()),
            Err(PerfError::BadArg {
                flag: "--tls-ca",
                ..
            })
        ));
        assert!(Peer::new("h:1", false, &TlsFiles::default()).is_ok());
    }

    #[test]
    fn a_missing_ca_file_is_named() {
        let files = TlsFiles {
            ca: Some("/nonexistent/ca.pem".into()),
            ..TlsFiles::default()
        };
        match Peer::new("h:1", true, &files) {
            Err(PerfError::Tls { path, .. }) => assert_eq!(path, Path::new("/nonexistent/ca.pem")),
            Err(e) => panic!("wrong error: {e}"),
            Ok(_) => panic!("a missing CA file was accepted"),
        }
    }
}
