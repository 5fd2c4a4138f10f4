//! The response head as the server sent it: its status line (reason phrase
//! included) and its header names in their own case, which the `http`
//! types lower-case. A connector at the end of ureq's chain keeps the first
//! bytes each connection receives, up to the blank line.
//!
//! The same place sends `http://` requests through a forward proxy as curl
//! does (ureq tunnels everything with CONNECT, which proxies commonly allow
//! to port 443 only): [`ToProxy`] resolves every host to the proxy, and the
//! request line is rewritten to absolute form (`GET http://host/path`).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, ThreadId};

use ureq::http::Uri;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{Buffers, ConnectionDetails, Connector, NextTimeout, Transport};

/// Longest head kept; a longer one is shown with the `http` types' names.
const MAX_HEAD: usize = 64 * 1024;

/// The bytes of the latest response head of each thread (a [`Client`]
/// may send from several at once; ureq reads a response on the thread that
/// sent its request), shared by the connector and the client that reads
/// them.
///
/// [`Client`]: super::Client
#[derive(Clone, Default)]
pub struct Recorded(Arc<Mutex<HashMap<ThreadId, Vec<u8>>>>);

impl Recorded {
    fn lock(&self) -> MutexGuard<'_, HashMap<ThreadId, Vec<u8>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Forgets this thread's last head (before a request is sent).
    pub fn clear(&self) {
        self.lock().remove(&thread::current().id());
    }

    /// The status line and headers of this thread's last complete head.
    pub fn head(&self) -> Option<(String, Vec<(String, String)>)> {
        parse(self.lock().get(&thread::current().id())?)
    }

    fn append(&self, bytes: &[u8]) {
        let mut heads = self.lock();
        let head = heads.entry(thread::current().id()).or_default();
        if end_of_head(head).is_some() || head.len() >= MAX_HEAD {
            return;
        }
        head.extend_from_slice(bytes);
        if let Some(end) = end_of_head(head) {
            head.truncate(end);
        }
    }
}

impl fmt::Debug for Recorded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Recorded")
    }
}

fn end_of_head(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| at + 4)
}

/// Status line and `Name: value` lines of a complete head.
fn parse(bytes: &[u8]) -> Option<(String, Vec<(String, String)>)> {
    let end = end_of_head(bytes)?;
    let text = String::from_utf8_lossy(&bytes[..end - 4]);
    let mut lines = text.split("\r\n");
    let status = lines.next()?.to_owned();
    if !status.starts_with("HTTP/") {
        return None;
    }
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect();
    Some((status, headers))
}

/// The connector that wraps every transport in a [`Recording`].
#[derive(Debug)]
pub struct Recorder {
    /// Where heads are kept.
    pub recorded: Recorded,
    /// Connections go to a forward proxy ([`ToProxy`]): requests are sent
    /// in absolute form.
    pub forward: bool,
}

impl Connector<Box<dyn Transport>> for Recorder {
    type Out = Recording;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<Box<dyn Transport>>,
    ) -> Result<Option<Recording>, ureq::Error> {
        let absolute = self.forward.then(|| {
            let scheme = details.uri.scheme_str().unwrap_or("http");
            let authority = details.uri.authority().map_or("", |a| a.as_str());
            format!("{scheme}://{authority}").into_bytes()
        });
        Ok(chained.map(|inner| {
            self.recorded.clear();
            Recording {
                inner,
                recorded: self.recorded.clone(),
                absolute,
            }
        }))
    }
}

/// A transport that copies what it receives into [`Recorded`] until the
/// head is complete.
#[derive(Debug)]
pub struct Recording {
    inner: Box<dyn Transport>,
    recorded: Recorded,
    /// `http://host:port`, put before the path of the request line (then
    /// `None`).
    absolute: Option<Vec<u8>>,
}

impl Transport for Recording {
    fn buffers(&mut self) -> &mut dyn Buffers {
        self.inner.buffers()
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        let amount = match self.absolute.take() {
            Some(prefix) => to_absolute_form(self.inner.buffers().output(), amount, &prefix),
            None => amount,
        };
        self.inner.transmit_output(amount, timeout)
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        let before = self.inner.buffers().input().len();
        let made_progress = self.inner.await_input(timeout)?;
        let input = self.inner.buffers().input();
        self.recorded.append(&input[before.min(input.len())..]);
        Ok(made_progress)
    }

    fn is_open(&mut self) -> bool {
        self.inner.is_open()
    }

    fn is_tls(&self) -> bool {
        self.inner.is_tls()
    }
}

/// Rewrites the request line at the start of `out[..amount]` from
/// `METHOD /path` to `METHOD {prefix}/path` in place; the new amount (the
/// old one when it does not fit or is not a request line).
fn to_absolute_form(out: &mut [u8], amount: usize, prefix: &[u8]) -> usize {
    let Some(space) = out[..amount].iter().position(|b| *b == b' ') else {
        return amount;
    };
    if out.get(space + 1) != Some(&b'/') || amount + prefix.len() > out.len() {
        return amount;
    }
    out.copy_within(space + 1..amount, space + 1 + prefix.len());
    out[space + 1..space + 1 + prefix.len()].copy_from_slice(prefix);
    amount + prefix.len()
}

/// Resolves every host to the forward proxy's address: the connection for
/// an `http://` URL goes to the proxy, which looks the host up itself.
#[derive(Debug)]
pub struct ToProxy {
    proxy: Uri,
    inner: DefaultResolver,
}

impl ToProxy {
    /// A resolver for the proxy at `proxy` (`http://host:port`).
    pub fn new(proxy: Uri) -> ToProxy {
        ToProxy {
            proxy,
            inner: DefaultResolver::default(),
        }
    }
}

impl Resolver for ToProxy {
    fn resolve(
        &self,
        _: &Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        self.inner.resolve(&self.proxy, config, timeout)
    }
}

/// The head as the `http` types show it (lower-case names, the canonical
/// reason), when the recorded one is missing (never expected).
pub(super) fn canonical_head(
    response: &ureq::http::Response<ureq::Body>,
    version: &str,
) -> (String, Vec<(String, String)>) {
    let status = response.status().as_u16();
    let reason = response
        .status()
        .canonical_reason()
        .map(|r| format!(" {r}"))
        .unwrap_or_default();
    let headers = response
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    (format!("{version} {status}{reason}"), headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_keeps_the_reason_phrase_and_the_names_case() {
        let r = Recorded::default();
        r.append(b"HTTP/1.1 422 Unprocessable Content\r\nX-PoW-Challenge: a.b\r\n");
        assert_eq!(r.head(), None, "not complete yet");
        r.append(b"content-type:  application/json \r\n\r\n{\"body\":1}");
        assert_eq!(
            r.head(),
            Some((
                "HTTP/1.1 422 Unprocessable Content".to_owned(),
                vec![
                    ("X-PoW-Challenge".to_owned(), "a.b".to_owned()),
                    ("content-type".to_owned(), "application/json".to_owned()),
                ]
            ))
        );
        r.append(b"HTTP/1.1 200 OK\r\n\r\n");
        assert_eq!(r.head().unwrap().0, "HTTP/1.1 422 Unprocessable Content");
        r.clear();
        assert_eq!(r.head(), None);
    }

    #[test]
    fn the_request_line_is_put_in_absolute_form() {
        let mut out = [0u8; 64];
        let line = b"GET /a?b HTTP/1.1\r\nHost: h\r\n\r\n";
        out[..line.len()].copy_from_slice(line);
        let n = to_absolute_form(&mut out, line.len(), b"http://h:8");
        assert_eq!(&out[..n], b"GET http://h:8/a?b HTTP/1.1\r\nHost: h\r\n\r\n");
        let mut small = *b"GET / HTTP/1.1\r\n";
        assert_eq!(
            to_absolute_form(&mut small, 16, b"http://h"),
            16,
            "no room: unchanged"
        );
    }

    #[test]
    fn what_is_not_an_http_head_is_none() {
        let r = Recorded::default();
        r.append(b"SSH-2.0-OpenSSH\r\n\r\n");
        assert_eq!(r.head(), None);
    }
}
