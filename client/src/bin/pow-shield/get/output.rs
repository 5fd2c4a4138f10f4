//! What `pow-shield get` writes: the response head (`-i`), the body
//! (decompressed with `--compressed`) and the `-v` log.

use std::io::{self, Read, Write};

use pow_shield_client::blocking::{Event, Reply};

use super::header;

pub fn write_head(w: &mut dyn Write, reply: &Reply) -> io::Result<()> {
    write!(w, "{}\r\n", reply.status_line)?;
    for (k, v) in &reply.headers {
        write!(w, "{k}: {v}\r\n")?;
    }
    write!(w, "\r\n")
}

/// Counts the bytes read through it: `size_download` is the body as it
/// came over the wire, compressed or not (as curl's).
pub struct Counted {
    pub inner: Box<dyn Read + Send>,
    pub count: u64,
}

impl Read for Counted {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count += n as u64;
        Ok(n)
    }
}

/// Copies the body to `w`, decompressed with `--compressed`; the bytes
/// read off the wire, or the error and how many were read before it.
pub fn copy_body(
    mut body: Counted,
    reply: &Reply,
    compressed: bool,
    w: &mut dyn Write,
) -> Result<u64, (io::Error, u64)> {
    let encoding = header(reply, "Content-Encoding")
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let result = match (compressed, encoding.as_str()) {
        (true, "gzip" | "x-gzip") => io::copy(&mut flate2::read::MultiGzDecoder::new(&mut body), w),
        (true, "deflate") => io::copy(&mut flate2::read::ZlibDecoder::new(&mut body), w),
        _ => io::copy(&mut body, w),
    };
    match result {
        Ok(_) => Ok(body.count),
        Err(e) => Err((e, body.count)),
    }
}

pub fn log_event(e: &Event) {
    match e {
        Event::Sending {
            method,
            url,
            headers,
        } => {
            eprintln!("> {method} {url}");
            for (k, v) in *headers {
                eprintln!("> {k}: {v}");
            }
            eprintln!(">");
        }
        Event::Received {
            status_line,
            headers,
            ..
        } => {
            eprintln!("< {status_line}");
            for (k, v) in *headers {
                eprintln!("< {k}: {v}");
            }
            eprintln!("<");
        }
        Event::Solving(c) => eprintln!(
            "* HTTP {}: solving difficulty {} (salt {})",
            c.status, c.difficulty, c.salt
        ),
        Event::Solved { nonce, elapsed } => {
            eprintln!("* solved: nonce {nonce} in {:.3} s", elapsed.as_secs_f64())
        }
        Event::Waiting(d) => eprintln!("* waiting {} s (Retry-After)", d.as_secs()),
        Event::Pacing(d) => eprintln!(
            "* pacing: no free request left, waiting {:.3} s for the reset",
            d.as_secs_f64()
        ),
        Event::PayingAhead(token) => {
            let short: String = token.chars().take(16).collect();
            eprintln!("* paying ahead: the solution of X-PoW-Next-Challenge {short}...")
        }
    }
}
