//! A `reqwest-middleware` layer that pays challenges transparently: a
//! request that meets a 429 (or a 409/410/422 with a fresh challenge) is
//! solved on a blocking thread and sent again.
//!
//! ```no_run
//! # async fn f() -> Result<(), reqwest_middleware::Error> {
//! use pow_shield_client::{middleware::PowShield, Policy};
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(PowShield::new(Policy::default()))
//!     .build();
//! let items = client.get("http://127.0.0.1:8080/api/items").send().await?;
//! # Ok(()) }
//! ```
//!
//! Like every [`Policy`], the default gives up on a challenge it cannot
//! solve within 30 s ([`crate::DEFAULT_MAX_SOLVE_TIME`]) with
//! [`Error::Timeout`] (a hostile server's forged difficulty 12 would
//! otherwise keep every core busy for months); set
//! `policy.solve.max_solve_time = None` for no limit.
//!
//! It pays ahead: the next challenge a response carries
//! (`X-PoW-Next-Challenge`) is solved on a blocking thread while the caller
//! reads the body, and the next request to that origin takes the solution
//! with it (awaiting it, never blocking the executor, if it is not ready):
//! one round trip per paid request, no 429 ([`crate::ahead`]). With
//! `policy.pace` it waits (`tokio::time::sleep`) for the reset instead of
//! paying when the server says no free request is left.
//!
//! With [`PowShield::sign_with`] it signs as a known bot (Web Bot Auth,
//! docs/bots.md): every try afresh, or, with a signer
//! [`BotSigner::when_asked`], once the origin asks (`Accept-Signature`),
//! the asking answer's request sent again, signed, once.
//!
//! Refusals come back as `reqwest_middleware::Error::Middleware` holding a
//! [`crate::Error`] (`err.downcast_ref::<pow_shield_client::Error>()` on the
//! inner `anyhow::Error`). Requests whose body cannot be cloned (streams)
//! are sent once, unpaid.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use http::Extensions;
use reqwest::header::{HeaderName, HeaderValue};
use reqwest::{Request, Response, ResponseBuilderExt};
use reqwest_middleware::{Middleware, Next};

use crate::ahead::{is_refusal_body, may_be_refusal, Ahead, MAX_REFUSAL_BODY};
use crate::challenge::read_answer;
use crate::gate::{remaining, Gate};
use crate::retry::{Policy, Retrier, Step};
use crate::wire;
use crate::{solve_work_until, BotSigner, Error, Proof};

/// The middleware; see the module docs. Its clones share one per-origin
/// [`Gate`]: a client's concurrent requests (a `join_all` of 50) have at
/// most `policy.in_flight` (4) in flight per origin until the server's
/// `Remaining` shows room, so that they are paid, never blocked; and one
/// [`Ahead`], the solutions paid ahead (one per next challenge received,
/// each used once).
#[derive(Clone, Debug)]
pub struct PowShield {
    policy: Policy,
    gate: Arc<Gate>,
    ahead: Arc<Ahead>,
    signer: Option<Arc<BotSigner>>,
}

impl Default for PowShield {
    fn default() -> Self {
        PowShield::new(Policy::default())
    }
}

impl PowShield {
    /// Pays under `policy` (limits, waiting, retries, requests in flight).
    /// Its solver never prints progress.
    pub fn new(mut policy: Policy) -> PowShield {
        policy.solve.progress = false;
        let gate = Arc::new(Gate::new(policy.in_flight));
        PowShield {
            policy,
            gate,
            ahead: Arc::new(Ahead::new()),
            signer: None,
        }
    }

    /// Signs as a known bot (docs/bots.md): every try afresh, or where
    /// asked ([`BotSigner::when_asked`]).
    pub fn sign_with(mut self, signer: BotSigner) -> PowShield {
        self.signer = Some(Arc::new(signer));
        self
    }

    /// Signs `req` if its signer signs there now; whether it did.
    fn sign(&self, req: &mut Request) -> Result<bool, Error> {
        let Some(signer) = self.signer.as_deref() else {
            return Ok(false);
        };
        let url = req.url().as_str().to_owned();
        if !signer.signs(&url) {
            return Ok(false);
        }
        let mut headers = Vec::new();
        signer.sign_into(&url, &mut headers)?;
        let fields = req.headers_mut();
        for name in ["signature-agent", "signature-input", "signature"] {
            fields.remove(name);
        }
        for (name, value) in headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|e| Error::Request(format!("signature header: {e}")))?;
            let value = HeaderValue::from_str(&value)
                .map_err(|e| Error::Request(format!("signature header: {e}")))?;
            fields.insert(name, value);
        }
        Ok(true)
    }

    /// Whether `response` asks a signer that signs when asked to sign, and
    /// to send its request again: a 401, 403 or 429 that is no block.
    fn asked_to_sign(&self, url: &str, response: &Response) -> bool {
        let Some(signer) = self.signer.as_deref() else {
            return false;
        };
        let headers = response.headers();
        let lines: Vec<&str> = headers
            .get_all(pow_shield_bots::accept::HEADER)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        let newly = !lines.is_empty() && signer.asked(url, &lines);
        newly
            && matches!(response.status().as_u16(), 401 | 403 | 429)
            && !headers.contains_key(wire::HEADER_SHIELD)
    }

    /// Shares `ahead` (solutions paid ahead, pacing) with other clients,
    /// e.g. a `blocking::Client` of the same process.
    pub fn with_ahead(mut self, ahead: Arc<Ahead>) -> PowShield {
        self.ahead = ahead;
        self
    }

    /// Its solutions paid ahead and pacing state.
    pub fn ahead(&self) -> &Arc<Ahead> {
        &self.ahead
    }

    /// The policy it pays under.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The per-origin gate its requests pass.
    pub fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }
}

/// Stops the solver when dropped: a request future dropped while it awaits
/// the blocking task (a timeout, a cancelled caller) must not leave every
/// core searching until a solution nobody will send.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn refused(e: Error) -> reqwest_middleware::Error {
    reqwest_middleware::Error::middleware(e)
}

/// Reads a 400 or 403 to a request paid ahead: `Ok(())` when it is the
/// shield's refusal of that solution, else the response, handed back with
/// its body (read only when short and said to be JSON, as the shield's are).
async fn read_refusal(response: Response) -> reqwest_middleware::Result<Result<(), Response>> {
    let headers = response.headers();
    let json = headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.contains("json"));
    let short = response
        .content_length()
        .is_some_and(|n| n <= MAX_REFUSAL_BODY);
    if !json || !short {
        return Ok(Err(response));
    }
    let (status, version, url) = (
        response.status(),
        response.version(),
        response.url().clone(),
    );
    let headers = headers.clone();
    let body = response.bytes().await?;
    if is_refusal_body(&body) {
        return Ok(Ok(()));
    }
    let mut back = http::Response::builder()
        .status(status)
        .version(version)
        .url(url)
        .body(body)
        .map_err(|e| refused(Error::Transport(format!("response: {e}"))))?;
    *back.headers_mut() = headers;
    Ok(Err(Response::from(back)))
}

/// A copy of the original request for another try, with `solution` (or
/// without any `X-PoW-*` of the caller's).
fn retry_request(template: &Request, solution: Option<(&str, &Proof)>) -> Option<Request> {
    let mut req = template.try_clone()?;
    let headers = req.headers_mut();
    headers.remove(wire::HEADER_CHALLENGE);
    headers.remove(wire::HEADER_NONCE);
    headers.remove(wire::HEADER_SOLUTION);
    if let Some((token, proof)) = solution {
        headers.insert(wire::HEADER_CHALLENGE, HeaderValue::from_str(token).ok()?);
        for (name, value) in proof.headers() {
            headers.insert(name, HeaderValue::from_str(&value).ok()?);
        }
    }
    Some(req)
}

#[async_trait::async_trait]
impl Middleware for PowShield {
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let Some(template) = req.try_clone() else {
            let mut req = req;
            self.sign(&mut req).map_err(refused)?;
            return next.run(req, extensions).await;
        };
        let mut retrier = Retrier::new(self.policy.clone());
        let url = template.url().as_str().to_owned();
        // Held through every send, solve and wait of this request.
        let mut pass = self.gate.enter_async(&url).await;
        let _turn = self.ahead.pace_async(&url, &self.policy).await;
        let own = [wire::HEADER_CHALLENGE, wire::HEADER_NONCE]
            .iter()
            .any(|h| template.headers().contains_key(*h));
        let ticket = (self.policy.pay_ahead && !own)
            .then(|| self.ahead.take(&url))
            .flatten();
        let solution = match ticket {
            Some(t) => t.wait_async().await,
            None => None,
        };
        let mut ahead = solution.is_some();
        let mut current = match solution {
            Some((token, proof)) => retry_request(&template, Some((&token, &proof))).unwrap_or(req),
            None => req,
        };
        let mut first = true;
        // A signer that signs when asked resends the request once, signed.
        let mut asked = false;
        loop {
            if !first {
                pass.resending();
            }
            first = false;
            let signed = self.sign(&mut current).map_err(refused)?;
            let response = next.clone().run(current, extensions).await?;
            let status = response.status().as_u16();
            let headers = response.headers();
            let lookup = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
            pass.saw(status, remaining(lookup));
            if let Some(job) = self.ahead.saw(&url, lookup, &self.policy) {
                // Solved on a blocking thread while the caller reads the body.
                drop(tokio::task::spawn_blocking(move || job.run()));
            }
            if !signed && !asked && self.asked_to_sign(&url, &response) {
                asked = true;
                current = retry_request(&template, None).ok_or_else(|| {
                    refused(Error::Request("the request cannot be sent again".into()))
                })?;
                continue;
            }
            if std::mem::take(&mut ahead) && may_be_refusal(status, lookup) {
                // Perhaps the shield's refusal of the solution paid ahead:
                // its body tells (an application's own 400 or 403 is the
                // answer, handed back whole).
                let response = match read_refusal(response).await? {
                    Ok(()) => {
                        current = retry_request(&template, None).ok_or_else(|| {
                            refused(Error::Request("the request cannot be sent again".into()))
                        })?;
                        continue;
                    }
                    Err(response) => response,
                };
                return Ok(response);
            }
            let answer = read_answer(status, lookup, None);
            let solution = match retrier.next(answer) {
                Step::Return => return Ok(response),
                Step::Fail(e) => return Err(refused(e)),
                Step::Wait(d) => {
                    drop(response);
                    tokio::time::sleep(d).await;
                    None
                }
                Step::Solve(c) => {
                    drop(response);
                    let opts = self.policy.solve.clone();
                    let (salt, bits, work) = (c.salt, c.bits, c.work);
                    let stop = StopOnDrop(Arc::new(AtomicBool::new(false)));
                    let flag = Arc::clone(&stop.0);
                    // The search is CPU-bound: off the async executor.
                    let proof = tokio::task::spawn_blocking(move || {
                        solve_work_until(&salt, bits, work, &opts, &flag)
                    })
                    .await
                    .map_err(|e| refused(Error::Transport(format!("solver task: {e}"))))?
                    .map_err(refused)?;
                    drop(stop);
                    Some((c.token, proof))
                }
            };
            let solution = solution.as_ref().map(|(t, p)| (t.as_str(), p));
            current = retry_request(&template, solution).ok_or_else(|| {
                refused(Error::BadChallenge(
                    "token is not a valid header value".into(),
                ))
            })?;
        }
    }
}
