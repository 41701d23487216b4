//! TLS from a PEM certificate chain and key. Any problem stops the server at
//! start: there is no silent fallback to plaintext.

use std::path::Path;
use std::sync::Arc;

use pgwire::tokio::TlsAcceptor;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::crypto::ring;

use super::ServerError;

/// The acceptor for `--tls-cert` / `--tls-key`.
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, ServerError> {
    let fail = |what: String| ServerError::Tls(what);
    let certs = CertificateDer::pem_file_iter(cert)
        .map_err(|e| fail(format!("cannot read certificate {}: {e}", cert.display())))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(format!("bad certificate {}: {e}", cert.display())))?;
    if certs.is_empty() {
        return Err(fail(format!("no certificate in {}", cert.display())));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| fail(format!("cannot read private key {}: {e}", key.display())))?;
    let mut config = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| fail(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| fail(format!("certificate and key do not fit together: {e}")))?;
    // PostgreSQL 17 clients may negotiate TLS directly, naming this protocol.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
