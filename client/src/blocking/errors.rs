//! What a failed transfer means: ureq's and OpenSSL's errors as the
//! crate's [`Error`], and the CA certificates of `Trust::CaPem`.

use ureq::tls::PemItem;

use crate::Error;

/// The certificates of a PEM bundle (private keys in it are skipped).
pub(super) fn ca_certificates(pem: &[u8]) -> Result<Vec<ureq::tls::Certificate<'static>>, Error> {
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(pem) {
        match item {
            Ok(PemItem::Certificate(c)) => certs.push(c),
            Ok(_) => {}
            Err(e) => return Err(Error::CaCert(e.to_string())),
        }
    }
    if certs.is_empty() {
        return Err(Error::CaCert("no PEM certificate found".to_owned()));
    }
    Ok(certs)
}

/// A failed read of a response body (ureq reports its timeouts as
/// `TimedOut` I/O errors there).
pub(super) fn body_error(e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::TimedOut {
        Error::TimedOut(e.to_string())
    } else {
        Error::Transport(e.to_string())
    }
}

pub(super) fn transport_error(e: ureq::Error) -> Error {
    use std::io::ErrorKind;
    match e {
        ureq::Error::Timeout(_) => Error::TimedOut(e.to_string()),
        ureq::Error::Io(ref io) if io.kind() == ErrorKind::TimedOut => {
            Error::TimedOut(e.to_string())
        }
        ureq::Error::HostNotFound => Error::Resolve(e.to_string()),
        // std's resolver reports getaddrinfo's failures as plain I/O errors.
        ureq::Error::Io(ref io) if io.to_string().contains("failed to lookup address") => {
            Error::Resolve(io.to_string())
        }
        ureq::Error::ConnectionFailed => Error::Connect(e.to_string()),
        ureq::Error::BadUri(_) | ureq::Error::Http(_) => Error::Request(e.to_string()),
        ureq::Error::Io(ref io)
            if matches!(
                io.kind(),
                ErrorKind::UnexpectedEof
                    | ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
            ) =>
        {
            Error::Closed
        }
        ureq::Error::Io(ref io) if io.kind() == ErrorKind::ConnectionRefused => {
            Error::Connect(e.to_string())
        }
        ureq::Error::NativeTls(ref tls) => tls_error(&tls.to_string()),
        ureq::Error::Tls(what) => Error::Tls(what.to_owned()),
        _ => Error::Transport(e.to_string()),
    }
}

/// A failed TLS handshake: a certificate OpenSSL would not accept, or
/// anything else. OpenSSL tells the two apart only in its message: its
/// reason text for a rejected chain or host name, followed by the check
/// that failed, e.g. `(unable to get local issuer certificate)`.
fn tls_error(message: &str) -> Error {
    match message.find("certificate verify failed") {
        Some(at) => {
            let why = message[at..]
                .rsplit_once('(')
                .and_then(|(_, why)| why.strip_suffix(')'))
                .unwrap_or("certificate verify failed");
            Error::Certificate(why.to_owned())
        }
        None => Error::Tls(message.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openssl_verify_failure_is_a_certificate_error_with_its_reason() {
        let msg = "error:0A000086:SSL routines:tls_post_process_server_certificate:\
                   certificate verify failed:../ssl/statem/statem_clnt.c:1889: \
                   (unable to get local issuer certificate)";
        assert_eq!(
            tls_error(msg),
            Error::Certificate("unable to get local issuer certificate".into())
        );
        assert_eq!(
            tls_error("error:0A000086:SSL routines::certificate verify failed"),
            Error::Certificate("certificate verify failed".into())
        );
    }

    #[test]
    fn other_handshake_failures_are_tls_errors() {
        let msg = "error:0A00010B:SSL routines:ssl3_get_record:wrong version number";
        assert_eq!(tls_error(msg), Error::Tls(msg.into()));
    }

    #[test]
    fn ca_pem_without_a_certificate_is_refused() {
        assert!(matches!(ca_certificates(b""), Err(Error::CaCert(_))));
        assert!(matches!(
            ca_certificates(b"just text\n"),
            Err(Error::CaCert(_))
        ));
    }
}
