//! The exporter's HTTP endpoint: just enough HTTP/1.1 for a scraper and a curious browser.
//!
//! `GET` and `HEAD` on the telemetry path scrape (the `Accept` header picks the format,
//! [`Format::negotiate`]), `/` is a small page linking to it, any other path is 404 and any
//! other method on those two 405. One request per connection (`Connection: close`), which is
//! what Prometheus does anyway.
//!
//! Each connection is its own task, so a slow or hostile client costs one task and a file
//! descriptor, never a scrape: its request head must arrive within [`Limits::read_timeout`]
//! and fit in [`Limits::head_bytes`], and beyond [`Limits::max_connections`] new connections
//! are closed at once. The scrape itself is the caller's (the daemon serializes them).
//!
//! A hand-written server rather than hyper: the protocol needed is one request line and one
//! header, and the limits above are easier to see (and test) here than to configure there.

use std::{future::Future, sync::Arc, time::Duration};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::Semaphore,
};

use crate::views::metrics::text::Format;

/// What one connection may cost.
#[derive(Clone, Debug)]
pub struct Limits {
    /// The request line and headers together (431 beyond).
    pub head_bytes: usize,
    /// From the connection's accept to its request head's end (408 beyond).
    pub read_timeout: Duration,
    /// To write the response (the connection is dropped beyond).
    pub write_timeout: Duration,
    /// Connections served at once; more are closed unanswered.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            head_bytes: 8 << 10,
            // Prometheus' default scrape timeout: a scraper never needs longer to send a GET.
            read_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(30),
            max_connections: 64,
        }
    }
}

/// Serves `listener` until `shutdown` completes. `scrape` answers the telemetry path: the
/// exposition in the format asked for, or a one-line error (sent as a 500 and logged).
/// Connections in flight when `shutdown` completes are left to finish on their own tasks.
pub async fn serve<F, Fut>(
    listener: TcpListener,
    telemetry_path: String,
    limits: Limits,
    scrape: F,
    shutdown: impl Future<Output = ()>,
) where
    F: Fn(Format) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<String, String>> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let path: Arc<str> = telemetry_path.into();
    let limits = Arc::new(limits);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, mostly: say so and let connections close.
                    eprintln!("iosched-trace exporter: accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let (path, limits, scrape) = (path.clone(), limits.clone(), scrape.clone());
        tokio::spawn(async move {
            connection(stream, &path, &limits, scrape).await;
            drop(permit);
        });
    }
}

async fn connection<F, Fut>(mut stream: TcpStream, path: &str, limits: &Limits, scrape: F)
where
    F: Fn(Format) -> Fut,
    Fut: Future<Output = Result<String, String>>,
{
    let response = match tokio::time::timeout(
        limits.read_timeout,
        read_head(&mut stream, limits.head_bytes),
    )
    .await
    {
        Err(_) => Response::text(408, "request head not received in time\n"),
        Ok(Err(HeadError::Closed)) => return,
        Ok(Err(HeadError::TooLarge)) => Response::text(431, "request head too large\n"),
        Ok(Ok(head)) => match parse(&head) {
            None => Response::text(400, "malformed request\n"),
            Some(req) => respond(&req, path, scrape).await,
        },
    };
    let bytes = response.bytes();
    let write = async {
        stream.write_all(&bytes).await?;
        stream.shutdown().await
    };
    // A client that stopped reading loses its answer; nothing else waits on it.
    let _ = tokio::time::timeout(limits.write_timeout, write).await;
}

enum HeadError {
    Closed,
    TooLarge,
}

/// Reads up to the blank line that ends the request head (anything after, a body, is
/// ignored: no route here takes one).
async fn read_head(stream: &mut TcpStream, max: usize) -> Result<Vec<u8>, HeadError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|_| HeadError::Closed)?;
        if n == 0 {
            return Err(HeadError::Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = head_end(&buf) {
            if end > max {
                return Err(HeadError::TooLarge);
            }
            buf.truncate(end);
            return Ok(buf);
        }
        if buf.len() > max {
            return Err(HeadError::TooLarge);
        }
    }
}

/// Where the head ends: after `\r\n\r\n`, or `\n\n` from a lenient client.
fn head_end(buf: &[u8]) -> Option<usize> {
    (0..buf.len()).find_map(|i| {
        let rest = &buf[i..];
        if rest.starts_with(b"\n\n") {
            Some(i + 2)
        } else if rest.starts_with(b"\n\r\n") {
            Some(i + 3)
        } else {
            None
        }
    })
}

#[derive(Debug, PartialEq)]
struct Request {
    method: String,
    /// Without the query string.
    path: String,
    /// Every `Accept` header, joined with commas.
    accept: String,
}

fn parse(head: &[u8]) -> Option<Request> {
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let mut parts = lines.next()?.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || method.is_empty() || !version.starts_with("HTTP/1.") {
        return None;
    }
    // The absolute form (`GET http://host:9436/metrics`), which a proxy may send.
    let target = match target.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
        None => target,
    };
    if !target.starts_with('/') {
        return None;
    }
    let path = target.split(['?', '#']).next().unwrap_or(target);
    let mut accept = Vec::new();
    for line in lines.take_while(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':')?;
        if name.trim().eq_ignore_ascii_case("accept") {
            accept.push(value.trim());
        }
    }
    Some(Request {
        method: method.to_string(),
        path: path.to_string(),
        accept: accept.join(","),
    })
}

struct Response {
    status: u16,
    content_type: &'static str,
    allow: bool,
    body: Vec<u8>,
    /// HEAD: the headers of the GET, no body.
    head_only: bool,
}

impl Response {
    fn text(status: u16, body: &str) -> Self {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            allow: status == 405,
            body: body.as_bytes().to_vec(),
            head_only: false,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            408 => "Request Timeout",
            431 => "Request Header Fields Too Large",
            _ => "Internal Server Error",
        };
        let mut out = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n",
            self.status,
            self.content_type,
            self.body.len(),
            if self.allow { "Allow: GET, HEAD\r\n" } else { "" },
        )
        .into_bytes();
        if !self.head_only {
            out.extend_from_slice(&self.body);
        }
        out
    }
}

async fn respond<F, Fut>(req: &Request, telemetry_path: &str, scrape: F) -> Response
where
    F: Fn(Format) -> Fut,
    Fut: Future<Output = Result<String, String>>,
{
    let head_only = req.method == "HEAD";
    let readable = head_only || req.method == "GET";
    let mut response = if req.path == telemetry_path {
        if !readable {
            return Response::text(405, "only GET and HEAD here\n");
        }
        let format = Format::negotiate(&req.accept);
        match scrape(format).await {
            Ok(text) => Response {
                status: 200,
                content_type: format.content_type(),
                allow: false,
                body: text.into_bytes(),
                head_only: false,
            },
            Err(msg) => {
                // One line in the log and in the body, whatever the error's text holds.
                let msg = msg.replace(['\r', '\n'], " ");
                eprintln!("iosched-trace exporter: scrape failed: {msg}");
                Response::text(500, &format!("{msg}\n"))
            }
        }
    } else if req.path == "/" {
        if !readable {
            return Response::text(405, "only GET and HEAD here\n");
        }
        Response {
            status: 200,
            content_type: "text/html; charset=utf-8",
            allow: false,
            body: landing_page(telemetry_path).into_bytes(),
            head_only: false,
        }
    } else {
        Response::text(404, "not found\n")
    };
    response.head_only = head_only;
    response
}

fn landing_page(telemetry_path: &str) -> String {
    let path: String = telemetry_path
        .chars()
        .map(|c| match c {
            '&' => "&amp;".to_string(),
            '<' => "&lt;".to_string(),
            '>' => "&gt;".to_string(),
            '"' => "&quot;".to_string(),
            '\'' => "&#39;".to_string(),
            c => c.to_string(),
        })
        .collect();
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>iosched-trace exporter</title></head>\n\
         <body><h1>iosched-trace exporter</h1>\n\
         <p>Block-layer metrics for Prometheus: <a href=\"{path}\">{path}</a></p>\n\
         <p>iosched-trace {} ({})</p></body></html>\n",
        env!("CARGO_PKG_VERSION"),
        env!("IOSCHED_TRACE_COMMIT"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_heads_are_parsed_leniently_but_not_blindly() {
        let p = |s: &str| parse(s.as_bytes());
        let r =
            p("GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: text/plain\r\naccept: */*\r\n\r\n")
                .unwrap();
        assert_eq!(
            r,
            Request {
                method: "GET".into(),
                path: "/metrics".into(),
                accept: "text/plain,*/*".into()
            }
        );
        assert_eq!(p("HEAD / HTTP/1.0\n\n").unwrap().path, "/");
        assert_eq!(
            p("GET http://h:9436/metrics HTTP/1.1\r\n\r\n")
                .unwrap()
                .path,
            "/metrics"
        );
        assert_eq!(p("GET http://h:9436 HTTP/1.1\r\n\r\n").unwrap().path, "/");
        for bad in [
            "",
            "GET /metrics\r\n\r\n",
            "GET /metrics HTTP/2\r\n\r\n",
            "GET  /metrics HTTP/1.1\r\n\r\n",
            "GET metrics HTTP/1.1\r\n\r\n",
            "GET /metrics HTTP/1.1\r\nno colon\r\n\r\n",
        ] {
            assert_eq!(p(bad), None, "{bad:?}");
        }
        assert_eq!(parse(b"GET /\xff HTTP/1.1\r\n\r\n"), None);
    }

    #[test]
    fn the_head_ends_at_the_first_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\nbody"), Some(24));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\nbody"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n"), None);
    }

    #[test]
    fn the_landing_page_links_the_path_escaped() {
        let page = landing_page("/m<\"x\">");
        assert!(page.contains("href=\"/m&lt;&quot;x&quot;&gt;\""), "{page}");
        assert!(!page.contains("<\""));
    }
}
