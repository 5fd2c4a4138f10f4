//! A small blocking HTTP client that pays its way (the CLI's engine):
//! send, read the answer, solve or wait, send again.

use std::io::Read;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use pow_shield_protocol::wire;
use ureq::tls::{RootCerts, TlsConfig, TlsProvider};
use ureq::unversioned::resolver::DefaultResolver;
use ureq::unversioned::transport::{Connector, DefaultConnector};

use crate::ahead::{refused_ahead, Ahead, Ticket};
use crate::bot::BotSigner;
use crate::challenge::{may_be_challenge, read_answer, Challenge};
use crate::gate::{remaining, Gate};
use crate::retry::{Policy, Retrier, Step};
use crate::{solve_work_until, Error, Nonce, Proof};

mod deadline;
mod errors;
mod head;
use deadline::{explain, Deadline};
use errors::{body_error, ca_certificates, transport_error};
use head::{Recorded, Recorder, ToProxy};

/// Most bytes read from a challenge response whose token is not in a
/// header (the body then has to be parsed).
const MAX_CHALLENGE_BODY: u64 = 64 * 1024;

/// One request, resent as often as the policy allows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, ...
    pub method: String,
    /// An `http://` or `https://` URL.
    pub url: String,
    /// Headers in order; a caller's `X-PoW-Challenge`/`X-PoW-Nonce` are
    /// sent on the first try only.
    pub headers: Vec<(String, String)>,
    /// The body, sent on every try.
    pub body: Option<Vec<u8>>,
}

/// The final response.
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// `HTTP/1.1` and the like.
    pub version: String,
    /// The status line as the server sent it (its reason phrase, not a
    /// canonical one), e.g. `HTTP/1.1 422 Unprocessable Content`.
    pub status_line: String,
    /// Response headers in order, names in the server's case.
    pub headers: Vec<(String, String)>,
    /// The body, not yet read.
    pub body: Box<dyn Read + Send>,
}

/// A request given up on: the server refused it for good (the circuit
/// breaker's answer: [`Error::Blocked`], [`Error::Banned`]), or the client
/// gave up on an answer (a challenge too dear, the retries or the time run
/// out), with that response when there was one, for callers that show it
/// as curl would (the CLI's `-i`, `-w '%{http_code}'`).
pub struct Refused {
    /// Why.
    pub error: Error,
    /// The refusing response, when there was one.
    pub reply: Option<Box<Reply>>,
}

impl From<Error> for Refused {
    fn from(error: Error) -> Refused {
        Refused { error, reply: None }
    }
}

/// What happened, for `-v`.
#[derive(Debug)]
pub enum Event<'a> {
    /// A request is being sent.
    Sending {
        /// The request (headers as sent).
        method: &'a str,
        /// The URL.
        url: &'a str,
        /// Headers as sent.
        headers: &'a [(String, String)],
    },
    /// A response arrived.
    Received {
        /// The status line as sent.
        status_line: &'a str,
        /// Status.
        status: u16,
        /// Headers, names in the server's case.
        headers: &'a [(String, String)],
    },
    /// A challenge is being solved.
    Solving(&'a Challenge),
    /// Solved.
    Solved {
        /// The solution.
        nonce: Nonce,
        /// Time spent.
        elapsed: Duration,
    },
    /// Sleeping `Retry-After` before trying again.
    Waiting(Duration),
    /// Pacing (`Policy::pace`): no free request left, sleeping until the
    /// reset before sending.
    Pacing(Duration),
    /// Sending a solution paid ahead: of this token, a previous
    /// response's `X-PoW-Next-Challenge`.
    PayingAhead(&'a str),
}

/// Whom an `https://` request trusts. TLS is the system's OpenSSL, which
/// checks the certificate chain and that it names the URL's host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Trust {
    /// The system's CA store (OpenSSL's: `/etc/ssl/certs`, or the
    /// `SSL_CERT_FILE` / `SSL_CERT_DIR` environment variables).
    #[default]
    System,
    /// Only the CA certificates of this PEM text (curl's `--cacert`).
    CaPem(Vec<u8>),
    /// Any certificate, for any host (curl's `-k`): encrypted, but to
    /// whoever answers.
    Insecure,
}

/// How long one request may take (curl's `--connect-timeout`, `--max-time`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Opening the connection (TCP and TLS); `None`: no limit.
    pub connect: Option<Duration>,
    /// The whole of one request, as curl's `-m`: from the first connect to
    /// the last byte of the answer's body, every try, solve and wait
    /// between them included (a wait that would not end in time is paid
    /// instead); `None`: no limit.
    pub transfer: Option<Duration>,
}

impl Default for Timeouts {
    /// 10 s to connect, as long as it takes to transfer (curl has no
    /// default `--max-time` either).
    fn default() -> Self {
        Timeouts {
            connect: Some(Duration::from_secs(10)),
            transfer: None,
        }
    }
}

/// Everything about a [`Client`] but its [`Policy`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Whom `https://` trusts.
    pub trust: Trust,
    /// Time limits of one request.
    pub timeouts: Timeouts,
    /// An HTTP proxy (curl's `-x`): `http://host:port`, or `host:port`;
    /// `None`: the `http_proxy`/`https_proxy`/`ALL_PROXY` environment, as
    /// curl.
    pub proxy: Option<String>,
}

/// A paying HTTP client. It may send from several threads at once; all
/// its requests share one per-origin [`Gate`] (at most `policy.in_flight`
/// in flight per origin until the server's `Remaining` shows room) and one
/// [`Ahead`]: the next challenge a response carries is solved on a solver
/// thread while the caller reads the body, and sent with the next request
/// to that origin (waited for if not ready yet).
pub struct Client {
    agent: ureq::Agent,
    /// For `http://` URLs through a proxy: sent to it in absolute form, as
    /// curl does (`agent` tunnels `https://` with CONNECT).
    forward: Option<ureq::Agent>,
    policy: Policy,
    recorded: Recorded,
    gate: Arc<Gate>,
    /// Signs every try as a known bot (`sign_with`).
    signer: Option<BotSigner>,
    /// Solutions paid ahead and pacing, per origin (`with_ahead`).
    ahead: Arc<Ahead>,
    /// [`Timeouts::transfer`].
    transfer: Option<Duration>,
}

impl Client {
    /// A client under `policy` that trusts the system's CA store.
    /// Redirects are not followed (as curl).
    pub fn new(policy: Policy) -> Client {
        Client::build(
            policy,
            TlsConfig::builder().root_certs(RootCerts::PlatformVerifier),
            Timeouts::default(),
            ureq::Proxy::try_from_env(),
        )
    }

    /// A client under `policy` with its own [`Trust`]; fails with
    /// [`Error::CaCert`] when a CA PEM holds no readable certificate.
    pub fn with_trust(policy: Policy, trust: Trust) -> Result<Client, Error> {
        Client::with_config(policy, trust, Timeouts::default())
    }

    /// [`Client::with_trust`] with its own [`Timeouts`]; a request that
    /// runs out of time fails with [`Error::TimedOut`].
    pub fn with_config(policy: Policy, trust: Trust, timeouts: Timeouts) -> Result<Client, Error> {
        Client::with_options(
            policy,
            Options {
                trust,
                timeouts,
                proxy: None,
            },
        )
    }

    /// A client with all its [`Options`]; fails with [`Error::CaCert`] as
    /// [`Client::with_trust`] does, and with [`Error::Request`] for a proxy
    /// URL that cannot be used.
    pub fn with_options(policy: Policy, options: Options) -> Result<Client, Error> {
        let Options {
            trust,
            timeouts,
            proxy,
        } = options;
        let proxy = match proxy {
            None => ureq::Proxy::try_from_env(),
            Some(url) => {
                let url = if url.contains("://") {
                    url
                } else {
                    format!("http://{url}")
                };
                Some(
                    ureq::Proxy::new(&url)
                        .map_err(|e| Error::Request(format!("proxy {url}: {e}")))?,
                )
            }
        };
        let tls = TlsConfig::builder();
        let tls = match trust {
            Trust::System => tls.root_certs(RootCerts::PlatformVerifier),
            Trust::CaPem(pem) => {
                tls.root_certs(RootCerts::Specific(Arc::new(ca_certificates(&pem)?)))
            }
            Trust::Insecure => tls.disable_verification(true),
        };
        Ok(Client::build(policy, tls, timeouts, proxy))
    }

    fn build(
        policy: Policy,
        tls: ureq::tls::TlsConfigBuilder,
        timeouts: Timeouts,
        proxy: Option<ureq::Proxy>,
    ) -> Client {
        let recorded = Recorded::default();
        let tls = tls.provider(TlsProvider::NativeTls).build();
        let forward = proxy.as_ref().map(|p| {
            let config = Client::config(tls.clone(), timeouts, None);
            let connector = DefaultConnector::new().chain(Recorder {
                recorded: recorded.clone(),
                forward: true,
            });
            ureq::Agent::with_parts(config, connector, ToProxy::new(p.uri().clone()))
        });
        let config = Client::config(tls, timeouts, proxy);
        let connector = DefaultConnector::new().chain(Recorder {
            recorded: recorded.clone(),
            forward: false,
        });
        let agent = ureq::Agent::with_parts(config, connector, DefaultResolver::default());
        Client {
            agent,
            forward,
            gate: Arc::new(Gate::new(policy.in_flight)),
            policy,
            recorded,
            signer: None,
            ahead: Arc::new(Ahead::new()),
            transfer: timeouts.transfer,
        }
    }

    /// Shares `ahead` (solutions paid ahead, pacing) with other clients:
    /// the CLI's `--next` runs each have a client, and one store.
    pub fn with_ahead(mut self, ahead: Arc<Ahead>) -> Client {
        self.ahead = ahead;
        self
    }

    /// Its solutions paid ahead and pacing state.
    pub fn ahead(&self) -> &Arc<Ahead> {
        &self.ahead
    }

    /// Signs every request (each retry afresh) with a bot's key (Web Bot
    /// Auth, docs/bots.md); a signer [`BotSigner::when_asked`] signs once
    /// the origin asked (`Accept-Signature`), the asking answer's request
    /// sent again, signed, once.
    pub fn sign_with(mut self, signer: BotSigner) -> Client {
        self.signer = Some(signer);
        self
    }

    fn config(
        tls: TlsConfig,
        timeouts: Timeouts,
        proxy: Option<ureq::Proxy>,
    ) -> ureq::config::Config {
        ureq::Agent::config_builder()
            .proxy(proxy)
            // One connection per request: its first bytes are that
            // response's head (head.rs), as the server wrote it.
            .max_idle_connections(0)
            .timeout_connect(timeouts.connect)
            .http_status_as_error(false)
            .max_redirects(0)
            .allow_non_standard_methods(true)
            .user_agent(concat!("pow-shield/", env!("CARGO_PKG_VERSION")))
            .tls_config(tls)
            .build()
    }

    /// Sends `req`, paying challenges and waiting as the policy says, and
    /// returns the first response that is not a challenge.
    pub fn send(&self, req: &Request, events: &mut dyn FnMut(Event)) -> Result<Reply, Error> {
        self.send_or_refused(req, events).map_err(|r| r.error)
    }

    /// The per-origin gate its requests pass.
    pub fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }

    /// [`Client::send`], but a request given up on after an answer (the
    /// circuit breaker's, a challenge too dear, the retries or the time
    /// run out) comes with that answer ([`Refused::reply`]).
    pub fn send_or_refused(
        &self,
        req: &Request,
        events: &mut dyn FnMut(Event),
    ) -> Result<Reply, Refused> {
        let deadline = self.transfer.map(|limit| Instant::now() + limit);
        self.send_or_refused_until(req, events, deadline)
    }

    /// [`Client::send_or_refused`] over by `deadline` instead of
    /// [`Timeouts::transfer`] from now (`None`: no limit): the CLI's `-m`
    /// spans the redirects of one URL.
    pub fn send_or_refused_until(
        &self,
        req: &Request,
        events: &mut dyn FnMut(Event),
        deadline: Option<Instant>,
    ) -> Result<Reply, Refused> {
        let deadline = Deadline::at(deadline);
        let mut retrier = Retrier::new(self.policy.clone());
        let mut first = true;
        // Held through every send, solve and wait of this request.
        let mut pass = self.gate.enter(&req.url);
        // Pacing waits only for a reset within the time limit.
        let mut pacing = self.policy.clone();
        match deadline.left() {
            Ok(None) => {}
            Ok(Some(left)) => pacing.max_wait = pacing.max_wait.min(left),
            Err(_) => pacing.max_wait = Duration::ZERO,
        }
        let _turn = self
            .ahead
            .pace(&req.url, &pacing, |wait| events(Event::Pacing(wait)));
        let mut solution = self.ahead_for(req).and_then(Ticket::wait);
        let mut ahead = solution.is_some();
        // A signer that signs when asked resends the request once, signed.
        let mut asked = false;
        loop {
            let mut headers = headers_for(&req.headers, solution.as_ref(), first);
            let signed = match &self.signer {
                Some(signer) if signer.signs(&req.url) => {
                    signer.sign_into(&req.url, &mut headers)?;
                    true
                }
                _ => false,
            };
            if !first {
                pass.resending();
            }
            first = false;
            if let (true, Some((token, _))) = (ahead, &solution) {
                events(Event::PayingAhead(token));
            }
            events(Event::Sending {
                method: &req.method,
                url: &req.url,
                headers: &headers,
            });
            self.recorded.clear();
            let mut response = self.run(req, &headers, deadline.left()?)?;
            let status = response.status().as_u16();
            let version = format!("{:?}", response.version());
            let (status_line, got) = self
                .recorded
                .head()
                .filter(|(line, _)| line.split(' ').nth(1) == Some(status.to_string().as_str()))
                .unwrap_or_else(|| canonical_head(&response, &version));
            events(Event::Received {
                status_line: &status_line,
                status,
                headers: &got,
            });
            let lookup = |name: &str| {
                got.iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.as_str())
            };
            pass.saw(status, remaining(lookup));
            if let Some(job) = self.ahead.saw(&req.url, lookup, &self.policy) {
                job.spawn();
            }
            if !signed && !asked && self.asked_to_sign(&req.url, status, &got) {
                asked = true;
                solution = None;
                continue;
            }
            let sent_ahead = std::mem::take(&mut ahead);
            let refusal = sent_ahead && matches!(status, 400 | 403);
            let body = if refusal
                || may_be_challenge(status) && lookup(wire::HEADER_CHALLENGE).is_none()
            {
                let mut buf = Vec::new();
                response
                    .body_mut()
                    .as_reader()
                    .take(MAX_CHALLENGE_BODY)
                    .read_to_end(&mut buf)
                    .map_err(body_error)?;
                Some(buf)
            } else {
                None
            };
            if refusal && refused_ahead(status, lookup, body.as_deref()) {
                // The solution paid ahead was refused without a fresh
                // challenge: the request again without it (the 429 path).
                solution = None;
                continue;
            }
            let answer = read_answer(status, lookup, body.as_deref());
            // What was read to look for a challenge, then the rest: a body
            // longer than MAX_CHALLENGE_BODY is handed back whole.
            let reply = move || {
                let rest = response.into_body().into_reader();
                let body: Box<dyn Read + Send> = match body {
                    Some(bytes) => Box::new(std::io::Cursor::new(bytes).chain(rest)),
                    None => Box::new(rest),
                };
                Reply {
                    status,
                    version,
                    status_line,
                    headers: got,
                    body,
                }
            };
            // Given up on (the breaker, a price, the retries, the time):
            // with the answer it was given up on, for `-i` and `-w`.
            let refused = |error, reply: Reply| Refused {
                error,
                reply: Some(Box::new(reply)),
            };
            let left = match deadline.left() {
                Ok(left) => left,
                Err(error) => return Err(refused(error, reply())),
            };
            match retrier.next_within(answer, left) {
                Step::Return => return Ok(reply()),
                Step::Fail(error) => return Err(refused(error, reply())),
                Step::Wait(d) => {
                    events(Event::Waiting(d));
                    thread::sleep(d);
                    solution = None;
                }
                Step::Solve(c) => {
                    events(Event::Solving(&c));
                    let start = Instant::now();
                    let (options, cut) = match deadline.solve_options(&self.policy.solve) {
                        Ok(o) => o,
                        Err(error) => return Err(refused(error, reply())),
                    };
                    let never = std::sync::atomic::AtomicBool::new(false);
                    let proof = match solve_work_until(&c.salt, c.bits, c.work, &options, &never) {
                        Ok(proof) => proof,
                        Err(error) => return Err(refused(explain(error, cut), reply())),
                    };
                    events(Event::Solved {
                        nonce: proof.nonce,
                        elapsed: start.elapsed(),
                    });
                    solution = Some((c.token, proof));
                }
            }
        }
    }

    /// Whether an answer asks a signer that signs when asked to sign
    /// (`Accept-Signature` for a Web Bot Auth signature, docs/bots.md),
    /// and to send its request again: a 401, 403 or 429 that is no block.
    /// Any answer that asks makes the origin's later requests signed.
    fn asked_to_sign(&self, url: &str, status: u16, headers: &[(String, String)]) -> bool {
        let Some(signer) = &self.signer else {
            return false;
        };
        let field = |name: &str| {
            headers
                .iter()
                .filter(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
                .collect::<Vec<_>>()
        };
        let lines = field(pow_shield_bots::accept::HEADER);
        let newly = !lines.is_empty() && signer.asked(url, &lines);
        newly && matches!(status, 401 | 403 | 429) && field(wire::HEADER_SHIELD).is_empty()
    }

    /// A solution ahead for `req`, unless the caller brought its own.
    fn ahead_for(&self, req: &Request) -> Option<Ticket> {
        let own = req.headers.iter().any(|(k, _)| {
            k.eq_ignore_ascii_case(wire::HEADER_CHALLENGE)
                || k.eq_ignore_ascii_case(wire::HEADER_NONCE)
        });
        if own || !self.policy.pay_ahead {
            return None;
        }
        self.ahead.take(&req.url)
    }

    /// One try, within `left` (`None`: no limit) from connecting to the
    /// last byte of its body.
    fn run(
        &self,
        req: &Request,
        headers: &[(String, String)],
        left: Option<Duration>,
    ) -> Result<ureq::http::Response<ureq::Body>, Error> {
        let mut builder = ureq::http::Request::builder()
            .method(req.method.as_str())
            .uri(req.url.as_str());
        for (name, value) in headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        let agent = match &self.forward {
            Some(forward) if req.url.starts_with("http://") => forward,
            _ => &self.agent,
        };
        match &req.body {
            Some(body) => builder
                .body(body.clone())
                .map_err(|e| Error::Request(e.to_string()))
                .and_then(|r| agent.run(within(agent, r, left)).map_err(transport_error)),
            None => builder
                .body(())
                .map_err(|e| Error::Request(e.to_string()))
                .and_then(|r| agent.run(within(agent, r, left)).map_err(transport_error)),
        }
    }
}

/// `r` limited to `left` (`None`: no limit), body included.
fn within<S: ureq::AsSendBody>(
    agent: &ureq::Agent,
    r: ureq::http::Request<S>,
    left: Option<Duration>,
) -> ureq::http::Request<S> {
    agent.configure_request(r).timeout_global(left).build()
}

/// The head as the `http` types show it (lower-case names, the canonical
/// reason), when the recorded one is missing (never expected).
fn canonical_head(
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

/// The headers of one try: the caller's, with a fresh solution replacing
/// any `X-PoW-*` the caller gave (which are kept on the first try only).
fn headers_for(
    given: &[(String, String)],
    solution: Option<&(String, Proof)>,
    first: bool,
) -> Vec<(String, String)> {
    let is_pow = |name: &str| {
        name.eq_ignore_ascii_case(wire::HEADER_CHALLENGE)
            || name.eq_ignore_ascii_case(wire::HEADER_NONCE)
            || name.eq_ignore_ascii_case(wire::HEADER_SOLUTION)
    };
    let mut headers: Vec<(String, String)> = given
        .iter()
        .filter(|(k, _)| first || !is_pow(k))
        .cloned()
        .collect();
    if let Some((token, proof)) = solution {
        headers.push((wire::HEADER_CHALLENGE.to_owned(), token.clone()));
        for (name, value) in proof.headers() {
            headers.push((name.to_owned(), value));
        }
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(k: &str, v: &str) -> (String, String) {
        (k.to_owned(), v.to_owned())
    }

    #[test]
    fn caller_pow_headers_go_on_the_first_try_only() {
        let given = [
            h("X-PoW-Challenge", "old"),
            h("x-pow-nonce", "1"),
            h("A", "b"),
        ];
        assert_eq!(headers_for(&given, None, true), given.to_vec());
        assert_eq!(headers_for(&given, None, false), vec![h("A", "b")]);
        let solution = ("new".to_owned(), Proof::from(Nonce(42)));
        assert_eq!(
            headers_for(&given, Some(&solution), false),
            vec![
                h("A", "b"),
                h("X-PoW-Challenge", "new"),
                h("X-PoW-Nonce", "42")
            ]
        );
    }

    #[test]
    fn a_client_trusting_a_ca_pem_without_a_certificate_is_refused() {
        assert!(matches!(
            Client::with_trust(Policy::default(), Trust::CaPem(b"nothing".to_vec())),
            Err(Error::CaCert(_))
        ));
    }
}
