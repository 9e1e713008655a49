//! The exporter daemon: binds, serves scrapes ([`super::http`]), turns SIGHUP into
//! [`Collect::reload`] and SIGTERM or SIGINT into a clean stop, after which the collector is
//! dropped (which detaches its programs) before [`run`] returns.
//!
//! Scrapes run one at a time: the collector sits behind an async mutex, and each collect (and
//! the encoding after it) runs on the blocking pool, so a scrape waiting for the lock or a
//! slow collect never stalls the connections being read. To every scrape the daemon adds
//! its own two families: `iosched_exporter_build_info` and
//! `iosched_exporter_scrape_duration_seconds` (how long the previous scrape's collect and
//! encoding took; absent on the first).

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use tokio::{
    net::TcpListener,
    signal::unix::{SignalKind, signal},
    sync::{Mutex, mpsc, oneshot},
};

use super::{Collect, ExporterConfig, http};
use crate::views::metrics::{
    Family, MetricType, Series, Value,
    text::{self, Format},
};

/// Serves `config`'s address until SIGTERM or SIGINT, then drops `collector` and returns.
/// A bind failure is one line naming the address.
pub fn run(config: &ExporterConfig, collector: Box<dyn Collect>) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run_async(config, collector, |addr| {
        eprintln!(
            "iosched-trace exporter: listening on http://{addr}{}",
            config.telemetry_path
        );
    }))
}

/// [`run`] on the caller's runtime; `ready` is told the bound address once the signal
/// handlers are in place and the socket listens (a test binds port 0).
pub async fn run_async(
    config: &ExporterConfig,
    collector: Box<dyn Collect>,
    ready: impl FnOnce(SocketAddr),
) -> anyhow::Result<()> {
    // Handlers first: a SIGHUP or SIGTERM from the moment we say we are up is ours.
    let mut hangup = signal(SignalKind::hangup()).context("handling SIGHUP")?;
    let mut terminate = signal(SignalKind::terminate()).context("handling SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("handling SIGINT")?;
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    ready(listener.local_addr()?);
    let (control, commands) = mpsc::channel(4);
    let signals = tokio::spawn(async move {
        loop {
            let command = tokio::select! {
                _ = hangup.recv() => Control::Reload,
                _ = terminate.recv() => Control::Stop,
                _ = interrupt.recv() => Control::Stop,
            };
            let stop = command == Control::Stop;
            if control.send(command).await.is_err() || stop {
                return;
            }
        }
    });
    let daemon = Daemon::new(collector);
    serve(listener, config, http::Limits::default(), daemon, commands).await;
    signals.abort();
    eprintln!("iosched-trace exporter: stopped");
    Ok(())
}

/// What the daemon is told from outside (signals, or a test).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    Reload,
    Stop,
}

/// Serves until `Stop` (or the sender's end), then waits for a scrape in progress and drops
/// the collector.
pub async fn serve(
    listener: TcpListener,
    config: &ExporterConfig,
    limits: http::Limits,
    daemon: Daemon,
    mut commands: mpsc::Receiver<Control>,
) {
    let (stop_http, stopped) = oneshot::channel::<()>();
    let scraper = daemon.clone();
    let server = tokio::spawn(http::serve(
        listener,
        config.telemetry_path.clone(),
        limits,
        move |format| {
            let daemon = scraper.clone();
            async move { daemon.scrape(format).await }
        },
        async {
            let _ = stopped.await;
        },
    ));
    while let Some(Control::Reload) = commands.recv().await {
        let daemon = daemon.clone();
        tokio::spawn(async move {
            match daemon.reload().await {
                Ok(()) => eprintln!("iosched-trace exporter: reloaded"),
                Err(e) => eprintln!("iosched-trace exporter: reload failed: {e}"),
            }
        });
    }
    let _ = stop_http.send(());
    let _ = server.await;
    daemon.stop().await;
}

/// The collector and what the daemon remembers between scrapes, shared by the connections.
#[derive(Clone)]
pub struct Daemon {
    state: Arc<Mutex<State>>,
}

struct State {
    /// `None` once stopped.
    collector: Option<Box<dyn Collect>>,
    /// The previous scrape's collect and encoding.
    last_scrape: Option<Duration>,
}

impl Daemon {
    pub fn new(collector: Box<dyn Collect>) -> Self {
        Daemon {
            state: Arc::new(Mutex::new(State {
                collector: Some(collector),
                last_scrape: None,
            })),
        }
    }

    /// One scrape: the collector's families and the daemon's own, encoded; or the one line
    /// saying why not.
    pub async fn scrape(&self, format: Format) -> Result<String, String> {
        let mut state = self.state.clone().lock_owned().await;
        tokio::task::spawn_blocking(move || {
            let start = Instant::now();
            let last = state.last_scrape;
            let collector = state.collector.as_mut().ok_or("the exporter is stopping")?;
            let mut families = collector
                .collect()
                .map_err(|e| format!("collecting the metrics: {e:#}"))?;
            families.extend(own_families(last));
            let text = text::encode(&families, format)
                .map_err(|e| format!("laying out the metrics: {e}"))?;
            state.last_scrape = Some(start.elapsed());
            Ok(text)
        })
        .await
        .unwrap_or_else(|_| Err("the collector panicked".to_string()))
    }

    /// SIGHUP's work, after any scrape in progress.
    pub async fn reload(&self) -> Result<(), String> {
        let mut state = self.state.clone().lock_owned().await;
        tokio::task::spawn_blocking(move || match state.collector.as_mut() {
            Some(c) => c.reload().map_err(|e| format!("{e:#}")),
            None => Err("the exporter is stopping".to_string()),
        })
        .await
        .unwrap_or_else(|_| Err("the collector panicked".to_string()))
    }

    /// Drops the collector (its programs detach), after any scrape in progress; later
    /// scrapes fail.
    pub async fn stop(&self) {
        let collector = self.state.lock().await.collector.take();
        drop(collector);
    }
}

/// The daemon's own families: what it is, and what its previous scrape cost.
fn own_families(last_scrape: Option<Duration>) -> Vec<Family> {
    let commit = env!("IOSCHED_TRACE_COMMIT");
    // build.rs says `commit 0123abcd...` or `unknown commit`; the label is the hash.
    let commit = commit.strip_prefix("commit ").unwrap_or("unknown");
    vec![
        Family {
            name: "iosched_exporter_build",
            help: "The exporter's version and the commit it was built from.",
            unit: None,
            kind: MetricType::Info,
            series: vec![Series {
                labels: vec![
                    ("version", env!("CARGO_PKG_VERSION").to_string()),
                    ("commit", commit.to_string()),
                ],
                value: Value::Info,
            }],
        },
        Family {
            name: "iosched_exporter_scrape_duration_seconds",
            help: "Time the previous scrape took to read the maps and lay them out.",
            unit: Some("seconds"),
            kind: MetricType::Gauge,
            series: last_scrape
                .map(|d| Series {
                    labels: vec![],
                    value: Value::Gauge(d.as_secs_f64()),
                })
                .into_iter()
                .collect(),
        },
    ]
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Counts what the daemon asks of it; fails on demand; says when it is dropped.
    #[derive(Clone, Default)]
    struct Probe {
        collects: Arc<AtomicUsize>,
        reloads: Arc<AtomicUsize>,
        in_collect: Arc<AtomicUsize>,
        most_in_collect: Arc<AtomicUsize>,
        dropped: Arc<AtomicBool>,
        fail: Arc<AtomicBool>,
    }

    struct Fake {
        probe: Probe,
        delay: Duration,
    }

    impl Collect for Fake {
        fn collect(&mut self) -> anyhow::Result<Vec<Family>> {
            let p = &self.probe;
            let now = p.in_collect.fetch_add(1, Ordering::SeqCst) + 1;
            p.most_in_collect.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(self.delay);
            p.in_collect.fetch_sub(1, Ordering::SeqCst);
            let n = p.collects.fetch_add(1, Ordering::SeqCst) + 1;
            anyhow::ensure!(
                !p.fail.load(Ordering::SeqCst),
                "map read failed\nsecond line"
            );
            Ok(vec![Family {
                name: "iosched_requests",
                help: "Requests completed.",
                unit: None,
                kind: MetricType::Counter,
                series: vec![Series {
                    labels: vec![("device", "sda".to_string())],
                    value: Value::Counter(n as f64),
                }],
            }])
        }

        fn reload(&mut self) -> anyhow::Result<()> {
            self.probe.reloads.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    impl Drop for Fake {
        fn drop(&mut self) {
            self.probe.dropped.store(true, Ordering::SeqCst);
        }
    }

    fn config() -> ExporterConfig {
        ExporterConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            telemetry_path: "/metrics".to_string(),
            devices: vec![],
            max_cgroups: 20,
        }
    }

    struct Running {
        addr: SocketAddr,
        control: mpsc::Sender<Control>,
        done: tokio::task::JoinHandle<()>,
    }

    async fn start(probe: &Probe, delay: Duration, limits: http::Limits) -> Running {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (control, commands) = mpsc::channel(4);
        let daemon = Daemon::new(Box::new(Fake {
            probe: probe.clone(),
            delay,
        }));
        let done = tokio::spawn(async move {
            serve(listener, &config(), limits, daemon, commands).await;
        });
        Running {
            addr,
            control,
            done,
        }
    }

    /// Sends `raw`, reads the whole response: (status, head, body).
    async fn request(addr: SocketAddr, raw: &str) -> (u16, String, String) {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(raw.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.unwrap();
        let text = String::from_utf8(out).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let status = head[9..12].parse().unwrap();
        (status, head.to_string(), body.to_string())
    }

    fn get(path: &str, accept: &str) -> String {
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\n\r\n")
    }

    const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";

    #[tokio::test]
    async fn scrapes_in_both_formats_and_answers_other_requests() {
        let probe = Probe::default();
        let d = start(&probe, Duration::ZERO, http::Limits::default()).await;
        let (status, head, body) = request(d.addr, &get("/metrics", PROMETHEUS_ACCEPT)).await;
        assert_eq!(status, 200, "{head}");
        assert!(head.contains("Content-Type: application/openmetrics-text; version=1.0.0"));
        assert!(head.contains(&format!("Content-Length: {}\r\n", body.len())));
        assert!(body.contains("# TYPE iosched_requests counter\n"));
        assert!(body.contains("iosched_requests_total{device=\"sda\"} 1\n"));
        assert!(body.contains(&format!(
            "iosched_exporter_build_info{{version=\"{}\",commit=\"",
            env!("CARGO_PKG_VERSION")
        )));
        // The first scrape has no previous one to time.
        assert!(
            !body
                .lines()
                .any(|l| l.starts_with("iosched_exporter_scrape_duration_seconds"))
        );
        assert!(body.ends_with("# EOF\n"));

        let (status, head, body) = request(d.addr, &get("/metrics?x", "text/plain")).await;
        assert_eq!(status, 200);
        assert!(head.contains("Content-Type: text/plain; version=0.0.4"));
        assert!(body.contains("# TYPE iosched_requests_total counter\n"));
        assert!(body.contains("iosched_requests_total{device=\"sda\"} 2\n"));
        assert!(body.contains("# TYPE iosched_exporter_build_info gauge\n"));
        let duration: f64 = body
            .lines()
            .find_map(|l| l.strip_prefix("iosched_exporter_scrape_duration_seconds "))
            .unwrap()
            .parse()
            .unwrap();
        assert!((0.0..1.0).contains(&duration), "{duration}");
        assert!(!body.contains("# EOF"));

        // HEAD: the headers of a GET (its length included), no body.
        let (status, head, body) = request(
            d.addr,
            "HEAD /metrics HTTP/1.1\r\nAccept: text/plain\r\n\r\n",
        )
        .await;
        assert_eq!(status, 200);
        assert!(body.is_empty());
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(len > 200, "{head}");

        let (status, _, body) = request(d.addr, &get("/", "*/*")).await;
        assert_eq!(status, 200);
        assert!(body.contains("<a href=\"/metrics\">"), "{body}");
        let (status, _, _) = request(d.addr, &get("/nothing", "*/*")).await;
        assert_eq!(status, 404);
        let (status, head, _) = request(
            d.addr,
            "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
        )
        .await;
        assert_eq!(status, 405);
        assert!(head.contains("Allow: GET, HEAD\r\n"));
        let (status, _, _) = request(d.addr, "GARBAGE\r\n\r\n").await;
        assert_eq!(status, 400);
        let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
        let (status, _, _) = request(d.addr, &huge).await;
        assert_eq!(status, 431);

        assert_eq!(probe.collects.load(Ordering::SeqCst), 3);
        d.control.send(Control::Stop).await.unwrap();
        d.done.await.unwrap();
        assert!(probe.dropped.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_collector_error_is_a_500_with_one_line() {
        let probe = Probe::default();
        probe.fail.store(true, Ordering::SeqCst);
        let d = start(&probe, Duration::ZERO, http::Limits::default()).await;
        let (status, head, body) = request(d.addr, &get("/metrics", "*/*")).await;
        assert_eq!(status, 500, "{head}");
        assert!(head.contains("Content-Type: text/plain"));
        assert!(
            body.starts_with("collecting the metrics: map read failed"),
            "{body}"
        );
        // The collector's own line break does not split the message over lines.
        assert_eq!(body.lines().count(), 1, "{body:?}");
        probe.fail.store(false, Ordering::SeqCst);
        let (status, _, _) = request(d.addr, &get("/metrics", "*/*")).await;
        assert_eq!(status, 200);
        drop(d.control);
        d.done.await.unwrap();
        assert!(probe.dropped.load(Ordering::SeqCst));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_client_does_not_block_scrapes_and_scrapes_run_one_at_a_time() {
        let probe = Probe::default();
        let limits = http::Limits {
            read_timeout: Duration::from_millis(1500),
            ..http::Limits::default()
        };
        let d = start(&probe, Duration::from_millis(100), limits).await;
        // Half a request, then nothing: held open for the whole test.
        let mut slow = tokio::net::TcpStream::connect(d.addr).await.unwrap();
        slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        let started = Instant::now();
        let scrapes: Vec<_> = (0..4)
            .map(|_| {
                let addr = d.addr;
                tokio::spawn(async move { request(addr, &get("/metrics", "text/plain")).await })
            })
            .collect();
        for s in scrapes {
            assert_eq!(s.await.unwrap().0, 200);
        }
        let took = started.elapsed();
        // Four collects of 100 ms one after the other, well before the slow client's timeout.
        assert!(
            took >= Duration::from_millis(400) && took < Duration::from_millis(1400),
            "{took:?}"
        );
        assert_eq!(probe.most_in_collect.load(Ordering::SeqCst), 1);
        // The slow client gets its 408 when its time is up, and the connection closes.
        let mut rest = Vec::new();
        slow.read_to_end(&mut rest).await.unwrap();
        assert!(rest.starts_with(b"HTTP/1.1 408 "), "{rest:?}");
        d.control.send(Control::Stop).await.unwrap();
        d.done.await.unwrap();
    }

    #[tokio::test]
    async fn reload_reaches_the_collector_and_stop_drops_it() {
        let probe = Probe::default();
        let d = start(&probe, Duration::ZERO, http::Limits::default()).await;
        d.control.send(Control::Reload).await.unwrap();
        d.control.send(Control::Reload).await.unwrap();
        for _ in 0..100 {
            if probe.reloads.load(Ordering::SeqCst) == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(probe.reloads.load(Ordering::SeqCst), 2);
        assert!(!probe.dropped.load(Ordering::SeqCst));
        d.control.send(Control::Stop).await.unwrap();
        d.done.await.unwrap();
        assert!(probe.dropped.load(Ordering::SeqCst));
        // Nothing listens any more.
        assert!(tokio::net::TcpStream::connect(d.addr).await.is_err());
    }

    /// The real signals, sent to this test process: safe because `run_async` installs its
    /// handlers before it reports ready (a signal before that would kill the test binary),
    /// and no other test here listens for them.
    #[test]
    fn sighup_reloads_and_sigterm_stops_the_real_daemon() {
        let probe = Probe::default();
        let (tx, rx) = std::sync::mpsc::channel();
        let collector = Box::new(Fake {
            probe: probe.clone(),
            delay: Duration::ZERO,
        });
        let daemon = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(run_async(&config(), collector, |addr| {
                tx.send(addr).unwrap()
            }))
        });
        let addr = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let wait_for = |what: &dyn Fn() -> bool| {
            let end = Instant::now() + Duration::from_secs(10);
            while !what() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(10));
            }
            what()
        };
        // SAFETY: kill and getpid have no preconditions; the handlers are installed.
        unsafe { libc::kill(libc::getpid(), libc::SIGHUP) };
        assert!(wait_for(&|| probe.reloads.load(Ordering::SeqCst) == 1));
        assert!(std::net::TcpStream::connect(addr).is_ok());
        unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
        assert!(wait_for(&|| daemon.is_finished()));
        daemon.join().unwrap().unwrap();
        assert!(probe.dropped.load(Ordering::SeqCst));
    }

    #[test]
    fn a_busy_address_is_one_line_naming_it() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = config();
        c.listen = taken.local_addr().unwrap();
        let probe = Probe::default();
        let err = run(
            &c,
            Box::new(Fake {
                probe: probe.clone(),
                delay: Duration::ZERO,
            }),
        )
        .unwrap_err();
        let line = format!("{err:#}");
        assert!(
            line.starts_with(&format!("cannot listen on {}: ", c.listen)),
            "{line}"
        );
        assert!(!line.contains('\n'));
        assert!(probe.dropped.load(Ordering::SeqCst));
    }
}
